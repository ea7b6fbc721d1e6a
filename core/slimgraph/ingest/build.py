"""Build: a numbered submission turned into task states, nothing published.

Stock creates each task state in the scheduler's own dict, adds every edge
through ``add_dependency``, annotates the new tasks and gives every touched
task a priority, all on the event loop. Here the same objects are made in
one pass, *privately*: new task states go into a dict of their own, new
task groups and prefixes are private objects, and every change to something
the scheduler already holds (a group that gains tasks, an existing task
that gains dependents, a run_spec or a priority) is written down as a
delta instead of being made. The result, a :class:`Build`, is a value: the
scheduler is unchanged until an applier (:mod:`slimgraph.ingest.apply`)
publishes it, and it can be made in a worker thread while the event loop
keeps serving.

What the build read from the scheduler is recorded in :class:`Reads`, so
that a staged commit can check that none of it changed in the meantime.

Costs: one ``SlimTaskState.detached`` per new task (close to the bare
CPython floor of building one slotted object, a dict entry and its links,
see ``slimgraph.bench.floor``); one group lookup per distinct *name*, not
per key; edges packed into compact containers in bulk, one container per
task.
"""
from __future__ import annotations

import logging
from array import array
from dataclasses import dataclass, field
from typing import Any

from dask.utils import parse_timedelta

from slimgraph import shim
from slimgraph.ingest import spans
from slimgraph.ingest.submission import Submission
from slimgraph.instrument.records import SubmissionRecord
from slimgraph.model.containers import Edges, freeze, thaw_stable
from slimgraph.model.keys import NameResolver
from slimgraph.model.taskstate import SlimTaskState, _prio_head, stored_annotations
from slimgraph.runtime import disposal

#: what stock reports from update_graph goes where stock reports it
stock_logger = logging.getLogger("distributed.scheduler")

#: annotations whose application reads the scheduler (worker aliases)
_ADDRESS_ANNOTATIONS = ("workers", "restrictions")


class GroupDelta:
    """What a submission changes in a task group the scheduler already has.

    The build reads the group (its size and dependencies decide whether its
    tasks are root-ish) and keeps its own changes here: tasks added, state
    moves, new dependency groups. Applying adds counts; it never sets them,
    so the group's tasks moving between states meanwhile does not matter.
    """

    __slots__ = ("group", "sizes_read", "deps_read", "added", "moves", "dependencies")

    def __init__(self, group: Any):
        self.group = group
        self.deps_read = set(group.dependencies)
        self.sizes_read = [shim.group_size(group), *map(shim.group_size, self.deps_read)]
        self.added = 0
        self.moves: dict = {}  # (old, new) -> n
        self.dependencies: set = set()

    def unchanged(self) -> bool:
        """Whether what the build read of the group still holds."""
        tg = self.group
        return tg.dependencies == self.deps_read and self.sizes_read == [
            shim.group_size(tg),
            *map(shim.group_size, self.deps_read),
        ]

    def apply(self) -> None:
        tg = self.group
        if self.added:
            shim.count_added(tg, self.added)
        for (old, new), n in self.moves.items():
            shim.count_moved(tg, old, new, n)
        self.moves.clear()
        tg.dependencies |= self.dependencies


@dataclass
class Reads:
    """What a build read from the scheduler, to be checked again at commit."""

    epoch: int
    clock: tuple
    nthreads: int
    saturation: float
    aliases: dict | None = None
    #: the submitting task and its priority (a graph submitted from a task
    #: takes its generation from there)
    submitting: tuple | None = None
    #: tasks the scheduler already had that the graph depends on (persisted
    #: data, futures), and what the build read of each: see :func:`task_read`
    outside: list = field(default_factory=list)


def task_read(ts: Any) -> tuple:
    """What a build reads of a task the scheduler already had and the new
    graph depends on: its state, whether it is in memory (which decides
    ``waiting_on``), and the containers the new edges and waiters extend."""
    deps = ts.dependents
    waiters = ts.waiters
    x = ts._x
    return (
        ts._state,
        bool(x.who_has),
        x.more.exception_blame is not None,
        id(deps),
        len(deps),
        id(waiters),
        len(waiters) if waiters else 0,
    )


@dataclass
class Build:
    """A submission's task states and deltas (see module docstring)."""

    sub: Submission
    #: the new task states by key; *seeded* (see :func:`seed`): after the
    #: scheduler's own entries as the build copied them, so that the commit
    #: can adopt this dict as the scheduler's (slimgraph.ingest.apply.add_tasks)
    tasks: dict = field(default_factory=dict)
    #: ``(keys, task states)`` of the scheduler's entries ``tasks`` began
    #: with, and the ids of those task states (None / empty: not seeded)
    seed: tuple | None = None
    seed_ids: frozenset = frozenset()
    #: the new task states, in the order they were made
    new: list = field(default_factory=list)
    #: every task the submission touches (stock's ``touched_tasks``):
    #: reached tasks, new or not, then the keys needed from outside the graph
    touched: list = field(default_factory=list)
    #: graph index -> task state (reached indices only)
    by_index: list = field(default_factory=list)
    #: task groups made by this submission, private, in order of appearance
    new_groups: list = field(default_factory=list)
    #: task prefixes made by this submission (name -> private prefix); a
    #: name the scheduler already has is folded into its prefix on publishing
    prefixes: dict = field(default_factory=dict)
    #: scheduler-owned groups the submission adds to: id(group) -> GroupDelta
    live_groups: dict = field(default_factory=dict)
    #: existing tasks that had no run_spec: [(ts, run_spec)]
    run_specs: list = field(default_factory=list)
    #: existing tasks whose edge containers change: [(ts, attribute,
    #: container)]; a list as container: add its items to the set in place
    edges_of_existing: list = field(default_factory=list)
    #: existing tasks that get their first priority: [(ts, head, order)]
    priorities: list = field(default_factory=list)
    #: tasks resubmitted with different dependencies: [(ts, spec, old, new)]
    collisions: list = field(default_factory=list)
    keys_with_annotations: set = field(default_factory=set)
    #: each group's first touched task, groups in order of appearance
    #: (new tasks only: [(group, task)])
    group_firsts: list = field(default_factory=list)
    #: the touched tasks' groups for the spans extension (None: no extension)
    span_groups: list | None = None
    #: the tasks the graph needs from outside it (in ``touched`` too)
    outside_tasks: list = field(default_factory=list)
    #: the arguments of the plugins' ``update_graph`` hooks, when a plugin
    #: listens (built here, off the event loop): keys, priorities, and the
    #: annotations by name (the spans' added when applying)
    hook_tasks: list | None = None
    hook_priority: dict | None = None
    hook_annotations: Any = None
    #: the tasks in the order distributed's GraphLayout takes them (when one listens)
    layout_stack: list | None = None
    #: the submission's generation, and ``(generation, time)`` the scheduler
    #: moves to (None: unchanged)
    generation: Any = None
    moved_generation: tuple | None = None
    #: the priority head every task of the graph was given, if they all got
    #: the same one (None otherwise; set by the priorities phase)
    one_head: Any = None
    #: touched tasks the scheduler already had (0: a brand-new graph), and
    #: how many of them are keys of the submitted graph (not only needed
    #: from outside it)
    existing: int = 0
    existing_in_graph: int = 0
    edges: int = 0
    reads: Reads | None = None
    #: big per-step scratch, freed by disposal rather than in one cascade
    scratch: list = field(default_factory=list)
    #: whether the scheduler adopted ``tasks`` itself as its task dict
    #: (slimgraph.ingest.apply.add_tasks): then it is no temporary
    adopted: bool = False

    def is_new(self, ts: Any) -> bool:
        """Whether the build made ``ts`` (not one the scheduler had)."""
        return self.tasks.get(ts.key) is ts and id(ts) not in self.seed_ids

    def new_items(self) -> Any:
        """The new tasks for ``dict.update``, in the order made."""
        return ((ts.key, ts) for ts in self.new) if self.seed is not None else self.tasks

    def temporaries(self) -> list:
        """Big containers only this build holds (see slimgraph.runtime.disposal)."""
        own = [] if self.adopted else [self.tasks]
        # the plugins' hook arguments, unless the owed calls took them (they
        # free them when made) or a plugin kept them
        hooks = disposal.sole(self, "hook_tasks", "hook_priority", "layout_stack")
        return [*own, self.by_index, self.new, self.touched, *self.scratch, *hooks]

    def group_delta(self, tg: Any) -> GroupDelta | None:
        return self.live_groups.get(id(tg)) if self.live_groups else None


def build(state: Any, sub: Submission, rec: SubmissionRecord, where: str = "event-loop") -> Build:
    """Phases ``task_states``, ``annotations`` and ``priorities``."""
    b = Build(sub=sub, by_index=[None] * len(sub.index.keys))
    b.reads = Reads(
        epoch=state.slim_epoch,
        clock=shim.generation_clock(state),
        nthreads=state.total_nthreads,
        saturation=state.WORKER_SATURATION,
    )
    with rec.phase("task_states", where=where) as p:
        if where == "offload":
            seed(state, b)
        fresh = _task_states(state, b)
        _edges(state, b, fresh)
        p.tasks = len(b.touched)
        p.edges = b.edges
    with rec.phase("annotations", where=where) as p:
        _annotations(state, b)
        p.tasks = len(b.keys_with_annotations)
    with rec.phase("priorities", where=where) as p:
        _priorities(state, b)
        p.tasks = len(b.touched)
    plugins = list(state.plugins.values())
    hooked = any(shim.listens_to_update_graph(p) for p in plugins)
    with rec.phase("plugins", where=where):
        if hooked:
            _hook_arguments(b)
            if any(type(p) is shim.GraphLayout for p in plugins):
                # the order the dashboard's graph layout takes the tasks in
                # (sorting them is most of its cost): here, off the loop
                from slimgraph.ingest.deliveries import layout_stack

                b.layout_stack = layout_stack(b.hook_tasks, b.hook_priority)
        spans_ext = state.extensions.get("spans")
        if spans_ext is not None:
            ann = (sub.annotations_by_type or {}, sub.global_annotations or {})
            out = None
            if hooked:  # the spans' annotations replace the submitted ones
                out = b.hook_annotations["span"] = {}
            b.span_groups = spans.plan(b, spans_ext, any("span" in a for a in ann), out)
    return b


def seed(state: Any, b: Build) -> None:
    """Begin the build's task dict with a copy of the scheduler's entries,
    when the build adds many times what the scheduler holds (persisted
    inputs, a second client's small graphs).

    Why. The scheduler's dict with a million new entries is a new hash table
    of ~40 MB; whoever makes it first touches it, page by page, in one C
    call that holds the GIL (page faults are slow on a busy VM). The
    build's own dict is such a table, made in this thread. The commit hands
    its contents to the scheduler's dict
    (:func:`slimgraph.ingest.apply.add_tasks`) when the scheduler holds no
    task, or (seeded) when its entries are still the ones copied here:
    stock's order (the scheduler's entries, then the new ones, as
    ``update`` leaves them), and no second table, made and grown in one
    call, as a dict merged from both would be."""
    tasks = state.tasks
    if not tasks or len(tasks) * SEED_RATIO > len(b.sub.index.reached):
        return
    b.tasks = seed_copy(state, b)


def seed_copy(state: Any, b: Build) -> dict:
    """A copy of the scheduler's task dict, recorded as ``b``'s seed (what
    the commit compares the scheduler's entries with)."""
    copied = state.tasks.copy()  # (one C call: atomic under the GIL)
    values = list(copied.values())
    b.seed = (list(copied), values)
    b.seed_ids = frozenset(map(id, values))
    return copied


#: :func:`seed` only when the build reaches this many times the tasks the
#: scheduler holds, or more
SEED_RATIO = 4


def _name_by_index(graph: Any, by_index: list) -> None:
    """Name the graph's task states made so far by their index, not their
    priority (the priorities met one twice; dask.order's never do)."""
    graph.handles = None
    for i, ts in enumerate(by_index):
        if ts is not None and ts._graph is graph:
            ts._spec = i


def _hook_arguments(b: Build) -> None:
    """What stock hands every plugin's ``update_graph`` hook (stock builds
    these on the loop for every submission; here only when a plugin
    listens, and off the loop when staged)."""
    from collections import defaultdict

    touched = b.touched
    b.hook_tasks = [ts.key for ts in touched]
    b.hook_priority = {ts.key: ts.priority for ts in touched}
    by_name: defaultdict = defaultdict(dict)
    tasks = b.tasks
    for key in b.keys_with_annotations:
        ann = tasks[key].annotations
        if ann:
            for name, value in ann.items():
                by_name[name][key] = value
    b.hook_annotations = by_name


# ---------------------------------------------------------------------------
# task states
# ---------------------------------------------------------------------------
def _task_states(state: Any, b: Build) -> list:
    """One task state per new key; existing keys checked (stock's
    ``_generate_taskstates``). Returns the graph indices whose edges must
    be made."""
    sub = b.sub
    idx = sub.index
    graph = idx.graph
    dsk = idx.dsk
    live = state.tasks
    live_groups = state.task_groups
    groups: dict = {}
    prefixes = b.prefixes

    def make_group(group_key: str, prefix_key: str) -> Any:
        tg = groups.get(group_key)
        if tg is None:
            tg = live_groups.get(group_key)
            if tg is not None:  # the scheduler's own: read now, changed on publishing
                b.live_groups[id(tg)] = GroupDelta(tg)
            else:
                tp = prefixes.get(prefix_key)
                if tp is None:
                    prefixes[prefix_key] = tp = shim.TaskPrefix(prefix_key)
                tg = shim.TaskGroup(group_key, tp)
                b.new_groups.append(tg)
            groups[group_key] = tg
        return tg

    resolver = NameResolver(make_group)
    resolve = resolver.group_of
    by_name = resolver._by_name
    by_index = b.by_index
    keys = idx.keys
    tasks = b.tasks
    new = b.new
    touched = b.touched
    fresh: list = []  # graph indices whose edges must be made
    per_group: dict = {}
    firsts: dict = {}  # id(group) -> (group, its first new task)
    detached = SlimTaskState.detached
    # New tasks of a compact graph are named there by their priority int
    # (CompactGraph.index_of): the object their priority holds anyway, in
    # place of an int of their own for the index
    prios = sub.priorities
    handles = None
    if graph is not None and type(prios) is list and prios:
        handles = graph.handles = array("l", [-1]) * len(prios)
    known = b.live_groups  # id(group) -> delta: the scheduler's own groups met so far
    for i in idx.reached:
        k = keys[i]
        tg = by_name.get(k[0] if type(k) is tuple else k)
        # a group this build made has no task on the scheduler (a task's
        # group stays in task_groups until its last task is forgotten):
        # no lookup by key for its tasks (hashing a tuple key each time)
        ts = None if tg is not None and id(tg) not in known else live.get(k)
        if ts is None:
            if tg is None:
                tg = resolve(k)
            if graph is None:
                ts = detached(k, dsk[k], tg)
            elif handles is None:  # the run_spec stays in the graph until read
                ts = detached(k, i, tg, graph)
            else:
                h = prios[i]
                if h < 0 or handles[h] != -1:  # not distinct: by index
                    handles = _name_by_index(graph, by_index)
                    h = i
                else:
                    handles[h] = i
                ts = detached(k, h, tg, graph)
            c = per_group.get(id(tg))
            if c is None:
                per_group[id(tg)] = [tg, 1]
                firsts[id(tg)] = (tg, ts)
            else:
                c[1] += 1
            tasks[k] = ts
            new.append(ts)
            fresh.append(i)
        else:
            b.existing += 1
            b.existing_in_graph += 1
            # a task made before its run_spec was known (a Variable's
            # client_desires_keys, scatter): it gets this one
            if ts._graph is None and ts._spec is None:
                b.run_specs.append((ts, idx.node(i)))
                fresh.append(i)
            else:
                lhs = {d.key for d in ts.dependencies}
                if lhs != idx.dependency_keys(i):
                    spec = idx.node(i)
                    b.collisions.append((ts, spec, lhs, spec.dependencies))
        by_index[i] = ts
        touched.append(ts)
    if idx.outside:
        # stock's order: each outside key where the walk met it
        merged: list = []
        r = 0
        for k, at in zip(idx.outside, idx.outside_at):
            merged.extend(touched[r:at])
            r = at
            ts = live[k]
            merged.append(ts)
            b.outside_tasks.append(ts)
            b.reads.outside.append((ts, task_read(ts)))
            b.existing += 1
        merged.extend(touched[r:])
        b.touched = touched = merged
    b.group_firsts = [(tg, first) for tg, first in firsts.values()]
    for gid, (tg, n) in per_group.items():
        delta = b.live_groups.get(gid)
        if delta is not None:
            delta.added += n
        else:
            shim.count_added(tg, n)  # a private group (and prefix)
    return fresh


def _edges(state: Any, b: Build, fresh: list) -> None:
    """Edges, in bulk, for the tasks at graph indices ``fresh``.

    Each new task's dependencies become one compact container, added in
    the order stock adds them (the graph's dependency frozenset order).
    Dependents are collected in graph order, as stock's ``add_dependency``
    loop over the graph does, and packed once per task. A task the
    scheduler already has gets its new container on publishing.
    """
    lazy = state.slim_lazy
    live = state.tasks
    new_tasks = b.tasks
    by_index = b.by_index
    new = b.new
    changed: dict = {}  # id(existing ts) -> [ts, {attribute: container}]

    def lookup(key: Any) -> Any:
        ts = new_tasks.get(key)
        return live[key] if ts is None else ts

    is_new = b.is_new

    def set_edges(ts: Any, attr: str, value: Any) -> None:
        if is_new(ts):
            setattr(ts, attr, value)
        else:
            entry = changed.get(id(ts))
            if entry is None:
                changed[id(ts)] = entry = [ts, {}]
            entry[1][attr] = value

    def current(ts: Any, attr: str) -> Any:
        entry = changed.get(id(ts))
        if entry is not None and attr in entry[1]:
            return entry[1][attr]
        return getattr(ts, attr)

    run_spec_of = {id(ts): spec for ts, spec in b.run_specs}
    fresh = _in_index_order(fresh, len(by_index))
    index = b.sub.index
    graph = index.graph
    outside = index.external
    # a compact graph's dependencies as its two CSR arrays, read in place
    # (slimgraph.ingest.compact.graph.Deps: ``off``, ``idx``)
    off = getattr(index.deps, "off", None) if graph is not None else None
    didx = index.deps.idx if off is not None else None
    dependents: dict = {}
    # a brand-new compact graph's dependents come from its CSR arrays at
    # once (_csr_dependents), not collected edge by edge below
    by_csr = (lazy and off is not None and not b.run_specs and not outside
              and len(fresh) == len(by_index) and len(off) == len(by_index) + 1)
    n_edges = 0
    for i in fresh:
        ts = by_index[i]
        spec = run_spec_of.get(id(ts)) if b.run_specs else None
        if graph is not None and spec is None and i not in outside:
            # a compact graph's integers: the dependencies' task states in
            # the order of the frozenset stock's node holds, no key lookups
            if off is not None:
                lo, hi = off[i], off[i + 1]
                row = didx[lo:hi] if hi > lo else ()
            else:
                row = index.deps[i]
            if not row:
                if not lazy:
                    ts.dependencies = set()
                continue
            spec_ts = [by_index[j] for j in row]
            spec_deps = None
        else:
            spec_deps = (ts.run_spec if spec is None else spec).dependencies
            if not spec_deps:
                if not lazy and spec is None:
                    ts.dependencies = set()
                continue
            spec_ts = [lookup(d) for d in spec_deps]
        # stock adds the frozenset's keys one by one to an empty set; a set
        # of the task states built the same way iterates in that order (task
        # states hash like their keys).
        stable = True
        if len(spec_ts) == 1:
            dl = spec_ts
        elif spec_deps is None:
            dl = list(set(spec_ts))
            stable = thaw_stable(dl)
        else:
            # (of the keys, hashed in C, when the keys are at hand)
            order = list(set(list(spec_deps)))
            stable = thaw_stable(order)
            dl = [lookup(d) for d in order]
        if not by_csr:
            for dts in dl:
                lst = dependents.get(id(dts))
                if lst is None:
                    dependents[id(dts)] = [dts, ts]
                else:
                    lst.append(ts)
        # (a task without a run_spec of its own here is one this build made:
        # no edges yet, its own to set)
        old = current(ts, "dependencies") if spec is not None else None
        if old:  # a run_spec-less task that already had edges
            dl = [*old, *(d for d in dl if d not in old)]
        n_edges += len(dl)
        if lazy and stable and not old:
            if spec is None:
                ts.dependencies = Edges(dl)
            else:
                set_edges(ts, "dependencies", Edges(dl))
        elif lazy and not old:
            # not thaw-stable (see slimgraph.model.containers): stock's own set
            set_edges(ts, "dependencies", set(spec_ts))
        elif lazy:
            set_edges(ts, "dependencies", freeze(dl))
        elif type(old) is set:
            # stock adds to the existing set, in spec order (in place, on publishing)
            set_edges(ts, "dependencies", spec_ts)
        elif old:
            set_edges(ts, "dependencies", set(dl))
        else:
            # stock's insertion sequence (the spec's frozenset order): a set
            # built from another set's iteration order may iterate
            # differently where keys collide
            set_edges(ts, "dependencies", set(spec_ts))
        tg0 = ts.group
        delta = b.group_delta(tg0)
        tgd = tg0.dependencies if delta is None else delta.dependencies
        last = None
        for dts in dl:
            g = dts.group
            if g is not last:
                tgd.add(g)
                last = g
    # A task with one dependent shares that container with its siblings
    # (immutable, thawed before any change): in a reduction most tasks have
    # one dependent, shared by all inputs of the same reducer.
    single: dict = {}
    if by_csr:
        b.scratch += _csr_dependents(by_index, off, didx, single)
    for lst in dependents.values():
        dts = lst[0]
        # a task of this build's compact graph is one it made: no dependents
        # yet, its own to set (no lookup by key)
        made = graph is not None and dts._graph is graph
        if lazy and len(lst) == 2 and (made or not current(dts, "dependents")):
            t = lst[1]
            e = single.get(id(t))
            if e is None:
                e = single[id(t)] = Edges((t,))
            if made:
                dts.dependents = e
            else:
                set_edges(dts, "dependents", e)
        else:
            set_edges(dts, "dependents", _grown_dependents(current(dts, "dependents"), lst[1:], lazy))
    if not lazy:
        for ts in new:
            if type(ts.dependents) is not set:
                ts.dependents = set(ts.dependents)
            if type(ts.dependencies) is not set:
                ts.dependencies = set(ts.dependencies)
    for ts, attrs in changed.values():
        for attr, value in attrs.items():
            b.edges_of_existing.append((ts, attr, value))
    b.edges = n_edges
    b.scratch += (dependents, single, fresh)


def _csr_dependents(by_index: list, off: array, idx: array, single: dict) -> tuple:
    """Every task's dependents, for a compact graph whose tasks are all new
    (lazy containers): what :func:`_edges` collects edge by edge otherwise,
    made from the dependency CSR arrays (``off``, ``idx``) at once.

    A task's dependents in graph order are the rows that name it, in row
    order: a stable sort of the edges by their dependency (numpy, without
    the GIL) gives them all. Rows are distinct (a frozenset's keys), as
    the edge-by-edge collection assumes. Each task with one dependent
    shares that dependent's container (``single``: index -> container), as
    there. Returns the big temporaries, for disposal."""
    import numpy as np

    n = len(by_index)
    dep = np.frombuffer(idx, dtype=np.int32) if len(idx) else np.zeros(0, dtype=np.int32)
    rows = np.repeat(np.arange(n, dtype=np.int32), np.diff(np.frombuffer(off, dtype=np.int32)))
    rev = array("i", rows[np.argsort(dep, kind="stable")].tobytes())
    counts = array("i", np.bincount(dep, minlength=n).astype(np.int32).tobytes())
    del dep, rows
    pos = 0
    j = 0
    for c in counts:
        if c == 1:
            t = rev[pos]
            e = single.get(t)
            if e is None:
                e = single[t] = Edges((by_index[t],))
            by_index[j].dependents = e
        elif c:
            by_index[j].dependents = _grown_dependents(None, [by_index[t] for t in rev[pos : pos + c]], True)
        pos += c
        j += 1
    return rev, counts


def _grown_dependents(old: Any, lst: list, lazy: bool) -> Any:
    """``old`` dependents plus ``lst`` (new ones, in graph order), packed as
    stock's set grows: its own set, then each new dependent added."""
    if lazy and not old and len(lst) == 1:
        return Edges(lst)
    if old:
        grown = set(old)  # (copying a set keeps its layout)
        for t in lst:
            grown.add(t)
        return freeze(list(grown)) if lazy and thaw_stable(tuple(grown)) else grown
    if not lazy:
        return set(lst)
    # set-iteration order, hashing keys in C (see _edges)
    by_key = {t.key: t for t in lst}
    order = list(set(list(by_key)))
    if thaw_stable(order):
        return Edges([by_key[k] for k in order])
    return set(lst)  # stock's own set (see slimgraph.model.containers)


def _in_index_order(indices: list, n: int) -> Any:
    """``sorted(indices)`` for distinct indices below ``n``, without one long
    C-level sort (it holds the GIL for the whole sort, a stall for the
    event loop even when a worker thread sorts)."""
    if len(indices) == n:
        return range(n)
    mask = bytearray(n)
    for i in indices:
        mask[i] = 1
    return [i for i in range(n) if mask[i]]


def warn_collisions(collisions: list) -> None:
    """Stock's warning for a key resubmitted with other dependencies, word
    for word, once per task group (the rest at debug level), on stock's
    logger."""
    bad_groups: set = set()
    for ts, spec, lhs, rhs in collisions:
        head = (
            f"Detected different `run_spec` for key {ts.key!r} between "
            "two consecutive calls to `update_graph`."
        )
        if ts.group in bad_groups:
            stock_logger.debug(head)
            continue
        bad_groups.add(ts.group)
        details = "\n".join([
            "",
            "Debugging information",
            "---------------------",
            f"old task state: {ts.state}",
            f"old run_spec: {ts.run_spec!r}",
            f"new run_spec: {spec!r}",
            f"old dependencies: {lhs}",
            f"new dependencies: {rhs}",
            "",
        ])
        stock_logger.warning(
            head + " This can cause failures and deadlocks down the line. "
            "Please ensure unique key names. If you are using a standard dask "
            "collections, consider releasing all the data before resubmitting "
            "another computation. More details and help can be found at "
            "https://github.com/dask/dask/issues/9888. " + details
        )


# ---------------------------------------------------------------------------
# annotations and priorities
# ---------------------------------------------------------------------------
def _annotations(state: Any, b: Build) -> None:
    sub = b.sub
    if not sub.annotations_by_type and not sub.global_annotations:
        return
    if any(a in (sub.annotations_by_type or {}) or a in (sub.global_annotations or {})
           for a in _ADDRESS_ANNOTATIONS):
        # worker addresses are resolved through the scheduler's aliases
        b.reads.aliases = dict(state.aliases)
    # Stock's own method, on the new tasks only (as stock): it is per task
    # only when there are annotations.
    b.keys_with_annotations = shim.apply_annotations(
        state, b.new, sub.annotations_by_type, sub.global_annotations
    )


def generation(state: Any, sub: Submission) -> tuple:
    """The generation this submission's priorities get, and the
    ``(generation, time)`` the scheduler moves to (None: unchanged), as
    stock's ``_set_priorities`` decides them. Reads the state only."""
    fifo = parse_timedelta(sub.fifo_timeout)
    gen, last_time = shim.generation_clock(state)
    if sub.submitting_task:
        sts = state.tasks.get(sub.submitting_task)
        if sts is not None:
            assert sts.priority
            return sts.priority[0] - 0.01, None
        return gen, None
    if last_time + fifo < sub.start:
        return gen + 1, (gen + 1, sub.start)
    return gen, None


def _priorities(state: Any, b: Build) -> None:
    sub = b.sub
    if sub.submitting_task:
        sts = state.tasks.get(sub.submitting_task)
        b.reads.submitting = (sts, None if sts is None else sts.priority)
    gen, moved = generation(state, sub)
    b.generation = gen
    b.moved_generation = moved
    up = sub.user_priority
    up_dict = up if isinstance(up, dict) else None
    prios = sub.priorities
    by_index = b.by_index
    if isinstance(prios, dict):
        pos = sub.index.pos
        prio_of = [None] * len(by_index)
        for k, p in prios.items():
            i = pos.get(k)
            if i is not None:
                prio_of[i] = p
    else:
        prio_of = prios
    default_head = _prio_head(-(0 if up_dict is not None else up), gen)
    one_head = True
    for i in sub.index.reached:
        ts = by_index[i]
        if ts._prio_head is not None:
            one_head = False
            continue
        p = prio_of[i]
        if p is None:
            one_head = False
            continue
        ann = stored_annotations(ts)
        if up_dict is None and not ann:
            head = default_head
        else:
            task_user = up_dict.get(ts.key, 0) if up_dict is not None else up
            if ann:
                task_user = ann.get("priority", task_user)
            head = _prio_head(-task_user, gen)
            if head is not default_head:
                one_head = False
        if b.existing and not b.is_new(ts):
            b.priorities.append((ts, head, p))
            one_head = False
        else:
            ts._prio_head = head
            ts._prio_order = p
    b.one_head = default_head if one_head else None
