"""update_graph as explicit, timed phases.

Stock ``Scheduler.update_graph`` interleaves its work: it walks the whole
graph three times by key (cull, lost dependencies, task states), builds a
TaskState and two sets per task, a second pass adds every edge through
``add_dependency``, priorities become a fresh 3-tuple per task, and one
``transitions()`` call pushes a recommendation per task through the generic
state machine, logging and notifying plugins on every step.

Here the same outcome is produced in phases, each a function of (state,
submission) that returns nothing but fills a :class:`PhaseRecord`:

1. ``index``  (no scheduler state; may run off the event loop) — optional
   cull, then one pass that numbers the graph's tasks and turns every
   dependency into an integer. Reachability from the requested keys and the
   keys the graph needs from outside are found in the same pass.
2. ``order`` — priorities from :mod:`slimgraph.order` on the integer edges
   (or ``dask.order.order`` when ``slimgraph.ordering: dask``).
3. ``lost_dependencies`` — only the keys from outside the graph are looked
   up in the scheduler.
4. ``task_states`` — one slim task state per new key; edges packed into
   compact containers in bulk; groups and prefixes resolved once per name.
5. ``annotations`` / ``priorities`` / ``who_wants`` — as stock, in bulk
   where the outcome is the same for every task.
6. ``plugins`` — spans and every plugin's ``update_graph`` hook.
7. ``transitions`` — released -> waiting for every newly needed task in one
   sweep (waiting_on / waiters shared with the edges), then the ready tasks,
   most important first: root-ish tasks that no worker can take go straight
   to ``queued``; everything else goes through distributed's own
   transitions. Transition log entries, counters and plugin notifications
   are produced as stock produces them.

Anything unusual (tasks with erred dependencies, lost dependencies on
released tasks, pure-data tasks to recompute, ``validate=True``) makes phase
7 hand the recommendations to distributed's ``_transitions`` unchanged, so
the bulk path only ever covers cases it reproduces exactly.

Phases 4-7 run either here, synchronously on the scheduler's state, or
*staged* (:mod:`slimgraph.staging`): on private task states in a worker
thread, published afterwards in one short commit.

Atomicity: phases 1-2 read only the submitted graph. Phase 3 can refuse the
submission; from phase 4 on nothing can fail on user input, because every
check (keys, cycles, missing dependencies) has already run.
"""
from __future__ import annotations

import logging
import operator
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import dask.config
from distributed.scheduler import Computation, Transition, _cull
from dask.utils import parse_timedelta

from slimgraph.containers import NO_EDGES, Edges, freeze
from slimgraph.errors import CycleError, InvalidKeyError
from slimgraph.keys import NameResolver, validate_key_type
from slimgraph.phases import SubmissionRecord
from slimgraph.taskstate import (
    SlimTaskState,
    _prio_head,
    count_into_groups,
    sorted_by_priority,
    stored_annotations,
)

logger = logging.getLogger("slimgraph.ingest")
#: what stock reports from update_graph goes where stock reports it
stock_logger = logging.getLogger("distributed.scheduler")


@dataclass
class GraphIndex:
    """The submitted graph, numbered. Built without touching the scheduler."""

    dsk: dict
    keys: list  # keys[i]: the i-th task of dsk
    pos: dict  # key -> i
    deps: list  # deps[i]: tuple of dependency indices inside dsk
    external: dict  # i -> [keys of dependencies not in dsk]
    reached: list  # indices reachable from the requested keys
    outside: list  # requested/needed keys that are not in dsk
    edges: int = 0

    def temporaries(self) -> list:
        """Its big containers, which nothing outlives it (see slimgraph.disposal)."""
        return [self.dsk, self.keys, self.pos, self.deps, self.external, self.reached]


def index_graph(dsk: dict, wanted: Any, cull: bool) -> GraphIndex:
    """Number the graph and find what the requested keys reach.

    Raises InvalidKeyError for keys of a type dask does not accept.
    """
    if cull:
        # distributed's own cull: the culled dict's order (set-pop order) is
        # the order stock adds dependents in, and what dask.order sees.
        dsk = _cull(dsk, wanted if isinstance(wanted, set) else set(wanted))

    keys = list(dsk)
    pos = {k: i for i, k in enumerate(keys)}
    if len(pos) != len(keys):  # pragma: no cover - dict keys are unique
        raise InvalidKeyError("duplicate keys")
    deps: list = [()] * len(keys)
    external: dict = {}
    get = pos.get
    n_edges = 0
    bad = None
    for i, k in enumerate(keys):
        node = dsk[k]
        nd = node.dependencies
        if nd:
            idx = []
            for d in nd:
                j = get(d)
                if j is None:
                    external.setdefault(i, []).append(d)
                else:
                    idx.append(j)
            n_edges += len(nd)
            deps[i] = tuple(idx)
        t = type(k)
        if t is tuple:
            if bad is None and not (type(k[0]) is str and _all_ints(k)) and not validate_key_type(k):
                bad = k
        elif t is not str and bad is None and not validate_key_type(k):
            bad = k
    if bad is not None:
        raise InvalidKeyError(
            f"Invalid key {bad!r} of type {type(bad).__name__}: keys must be str, "
            "bytes, int, float or tuples of those"
        )

    # Reachability from the requested keys (stock only creates those tasks).
    seen = bytearray(len(keys))
    reached = []
    outside_seen: set = set()
    outside = []
    stack = []
    for k in wanted:
        j = get(k)
        if j is None:
            if k not in outside_seen:
                outside_seen.add(k)
                outside.append(k)
        else:
            stack.append(j)
    while stack:
        j = stack.pop()
        if seen[j]:
            continue
        seen[j] = 1
        reached.append(j)
        for d in deps[j]:
            if not seen[d]:
                stack.append(d)
        ext = external.get(j)
        if ext:
            for k in ext:
                if k not in outside_seen:
                    outside_seen.add(k)
                    outside.append(k)
    return GraphIndex(dsk, keys, pos, deps, external, reached, outside, n_edges)


def _in_index_order(indices: list, n: int) -> Any:
    """``sorted(indices)`` for distinct indices below ``n``, without one long
    C-level sort (it holds the GIL: 0.2 s for a million, a stall for the
    event loop even when a worker thread sorts)."""
    if len(indices) == n:
        return range(n)
    mask = bytearray(n)
    for i in indices:
        mask[i] = 1
    return [i for i in range(n) if mask[i]]


def _all_ints(k: tuple) -> bool:
    for x in k[1:]:
        if type(x) is not int:
            return False
    return True


def compute_order(index: GraphIndex) -> list | dict:
    """Priorities: a list by index (fast ordering) or dask.order's dict."""
    from slimgraph import config

    if config.get("ordering") == "fast":
        from slimgraph.order import order, order_numbered

        dsk = index.dsk
        if not index.external and dsk:
            # The graph is numbered already (phase 1): hand that to the
            # ordering instead of letting it number the graph again. Graphs
            # with outside keys (dask turns them into stand-in data nodes)
            # or legacy values go through order(), which handles them.
            prio = order_numbered(index.keys, index.deps, list(dsk.values()), index.pos)
            if prio is not None:
                return prio
        return order(dsk)
    import dask.order

    return dask.order.order(dsk=index.dsk)


@dataclass
class Submission:
    """Everything update_graph was asked to do, after materialization."""

    client: str
    keys: set
    stimulus_id: str
    start: float
    index: GraphIndex
    priorities: Any  # list by index, or dict key -> int
    annotations_by_type: dict = field(default_factory=dict)
    global_annotations: dict | None = None
    user_priority: Any = 0
    submitting_task: Any = None
    actors: Any = None
    fifo_timeout: Any = 0.0
    code: tuple = ()
    span_metadata: Any = None
    #: whether the scheduler had unfinished work when the submission arrived,
    #: which decides whether it joins the latest Computation (None: decide
    #: at ingestion)
    busy: bool | None = None
    #: the Ingestion that took it (its temporaries are freed afterwards)
    ingestion: Any = None


def joins_last_computation(state: Any, sub: Submission) -> bool:
    """Stock adds a submission to the latest Computation unless the scheduler
    is idle when it looks: after deserializing on the loop and one offloaded
    materialization, a moment after the submission arrived. The slim path
    gets to its task states several offloaded steps later, by when quick
    earlier submissions have often finished (ten quick ``submit`` calls then
    make several Computations where stock makes one); so it looks on arrival
    (``sub.busy``), the moment closest to stock's that comes no later."""
    busy = (not state.is_idle) if sub.busy is None else sub.busy
    return busy and bool(state.computations)


def lost_keys(state: Any, index: GraphIndex) -> list:
    """Keys the graph needs that neither the graph nor the scheduler has."""
    tasks = state.tasks
    return [k for k in index.outside if k not in tasks]


class Ingestion:
    """Phases 4-7 for one submission on one SlimSchedulerState."""

    def __init__(self, state: Any, sub: Submission, record: SubmissionRecord):
        self.state = state
        self.sub = sub
        self.record = record
        #: where new task states go: the scheduler's dict, or (staged) a
        #: private one published by the commit
        self.tasks: dict = state.tasks
        self.staged = False
        #: (staged) scheduler-owned task groups this submission adds tasks
        #: to: id -> LiveGroup, whose changes wait for the commit
        self.live: dict = {}
        self.touched: list[SlimTaskState] = []
        self.new: list[SlimTaskState] = []
        self.by_index: list = [None] * len(sub.index.keys)
        self.collisions = 0
        self.keys_with_annotations: set = set()
        # big per-phase scratch, kept until disposal rather than freed in
        # one cascade when the phase returns
        self.scratch: list = []

    def temporaries(self) -> list:
        """Big containers only this ingestion holds (see slimgraph.disposal)."""
        return [self.by_index, self.new, self.touched, *self.scratch]

    # -- phase 4 -----------------------------------------------------------
    def task_states(self) -> None:
        st = self.state
        sub = self.sub
        idx = sub.index
        dsk = idx.dsk
        tasks = st.tasks
        lazy = st.slim_lazy
        if joins_last_computation(st, sub):
            computation = st.computations[-1]
        else:
            computation = Computation()
            st.computations.append(computation)
        if sub.code:
            computation.code.add(sub.code)
        if sub.global_annotations:
            computation.annotations.update(sub.global_annotations)
        self.computation = computation

        groups = st.task_groups

        def make_group(group_key: str, prefix_key: str):
            created = group_key not in groups
            tg = st._get_or_create_group(group_key, prefix_key)
            if created:
                computation.groups.add(tg)
            return tg

        resolver = NameResolver(make_group)
        resolve = resolver.group_of
        by_name = resolver._by_name
        by_index = self.by_index
        keys = idx.keys
        touched = self.touched
        new = self.new
        fresh_spec = []  # indices whose edges must be added
        bad_groups: set = set()
        per_group: dict = {}
        detached = SlimTaskState.detached
        for i in idx.reached:
            k = keys[i]
            ts = tasks.get(k)
            if ts is None:
                tg = by_name.get(k[0] if type(k) is tuple else k)
                if tg is None:
                    tg = resolve(k)
                ts = detached(k, dsk[k], tg)
                c = per_group.get(id(tg))
                if c is None:
                    per_group[id(tg)] = [tg, 1]
                else:
                    c[1] += 1
                tasks[k] = ts
                new.append(ts)
                fresh_spec.append(i)
            elif ts.run_spec is None:
                ts.run_spec = dsk[k]
                fresh_spec.append(i)
            else:
                lhs = {d.key for d in ts.dependencies}
                rhs = dsk[k].dependencies
                if lhs != rhs:
                    self.collisions += 1
                    self._warn_collision(ts, dsk[k], lhs, rhs, bad_groups)
            by_index[i] = ts
            touched.append(ts)
        count_into_groups(per_group)
        for k in idx.outside:
            ts = tasks[k]
            touched.append(ts)

        st.slim_epoch += 1  # new keys and groups: a staged ingestion re-checks
        self._build_edges(fresh_spec)

    def _build_edges(self, fresh_spec: list) -> None:
        """Edges, in bulk, for the tasks at ``fresh_spec`` (graph indices)."""
        tasks = self.tasks
        lazy = self.state.slim_lazy
        by_index = self.by_index
        new = self.new
        live = self.live
        fresh_spec = _in_index_order(fresh_spec, len(by_index))
        # Edges, in bulk: each new task's dependencies become one compact
        # container, added in the order stock adds them (the graph's
        # dependency frozenset order); dependents are collected in graph
        # order, as stock's ``add_dependency`` loop over the graph does, and
        # packed once per task.
        dependents: dict = {}
        n_edges = 0
        for i in fresh_spec:
            ts = by_index[i]
            spec_deps = ts.run_spec.dependencies
            if not spec_deps:
                if not lazy:
                    ts.dependencies = set()
                continue
            # stock adds the frozenset's keys one by one to an empty set;
            # a set of the keys built the same way iterates in that order
            # (task states hash like their keys) without Python-level hashing.
            if len(spec_deps) == 1:
                dl = [tasks[d] for d in spec_deps]
            else:
                dl = [tasks[d] for d in set(list(spec_deps))]
            for dts in dl:
                lst = dependents.get(id(dts))
                if lst is None:
                    dependents[id(dts)] = [dts, ts]
                else:
                    lst.append(ts)
            old = ts.dependencies
            if old:  # a run_spec-less task that already had edges
                dl = [*old, *(d for d in dl if d not in old)]
            n_edges += len(dl)
            if lazy:
                ts.dependencies = Edges(dl)
            elif type(old) is set:
                for d in spec_deps:  # stock adds to the existing set, spec order
                    old.add(tasks[d])
            elif old:
                ts.dependencies = set(dl)
            else:
                # stock's insertion sequence (the spec's frozenset order): a
                # set built from another set's iteration order may iterate
                # differently where keys collide
                ts.dependencies = {tasks[d] for d in spec_deps}
            tg0 = ts.group
            lg = live.get(id(tg0)) if live else None
            tgd = tg0.dependencies if lg is None else lg.dependencies
            last = None
            for dts in dl:
                g = dts.group
                if g is not last:
                    tgd.add(g)
                    last = g
        # A task with one dependent shares that container with its siblings
        # (immutable, thawed before any change): in a reduction most tasks
        # have one dependent, shared by all inputs of the same reducer.
        single: dict = {}
        for lst in dependents.values():
            dts = lst[0]
            if lazy and len(lst) == 2 and not dts.dependents:
                t = lst[1]
                e = single.get(id(t))
                if e is None:
                    e = single[id(t)] = Edges((t,))
                dts.dependents = e
            else:
                self._add_dependents(dts, lst[1:], lazy)
        if not lazy:
            for ts in new:
                if type(ts.dependents) is not set:
                    ts.dependents = set(ts.dependents)
                if type(ts.dependencies) is not set:
                    ts.dependencies = set(ts.dependencies)
        self.edges = n_edges
        self.scratch += (dependents, single, fresh_spec)

    @staticmethod
    def _add_dependents(dts: SlimTaskState, lst: list, lazy: bool) -> None:
        old = dts.dependents
        if lazy and not old and len(lst) == 1:
            dts.dependents = Edges(lst)
            return
        if old:
            have = old if type(old) is set else set(old)
            lst = [*have, *(t for t in lst if t not in have)]
        if not lazy:
            dts.dependents = set(lst)
        elif len(lst) == 1:
            dts.dependents = Edges(lst)
        else:
            # set-iteration order, hashing keys in C (see task_states)
            by_key = {t.key: t for t in lst}
            dts.dependents = Edges([by_key[k] for k in set(list(by_key))])

    def _warn_collision(self, ts, spec, lhs, rhs, bad_groups) -> None:
        """Stock's warning, word for word, once per task group (the rest at
        debug level), on stock's logger."""
        head = (
            f"Detected different `run_spec` for key {ts.key!r} between "
            "two consecutive calls to `update_graph`."
        )
        if ts.group in bad_groups:
            stock_logger.debug(head)
            return
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

    # -- phase 5 -----------------------------------------------------------
    def annotations(self) -> None:
        sub = self.sub
        if not sub.annotations_by_type and not sub.global_annotations:
            return
        # Stock's own method: it is per task only when there are annotations.
        self.keys_with_annotations = self.state._apply_annotations(
            tasks=self.new,
            annotations_by_type=sub.annotations_by_type,
            global_annotations=sub.global_annotations,
        )

    def generation(self) -> tuple:
        """The generation this submission's priorities get, and the
        ``(generation, _last_time)`` the scheduler moves to (None: unchanged).
        Reads the state only; :meth:`priorities` (or a staged commit) applies it."""
        st = self.state
        sub = self.sub
        fifo = parse_timedelta(sub.fifo_timeout)
        if sub.submitting_task:
            sts = st.tasks.get(sub.submitting_task)
            if sts is not None:
                assert sts.priority
                return sts.priority[0] - 0.01, None
            return st.generation, None
        if st._last_time + fifo < sub.start:
            return st.generation + 1, (st.generation + 1, sub.start)
        return st.generation, None

    def priorities(self) -> None:
        st = self.state
        sub = self.sub
        generation, moved = self.generation()
        if moved is not None:
            if self.staged:
                self.moved_generation = moved
            else:
                st.generation, st._last_time = moved

        up = sub.user_priority
        up_dict = up if isinstance(up, dict) else None
        prios = sub.priorities
        by_index = self.by_index
        if isinstance(prios, dict):
            pos = sub.index.pos
            items = ((pos.get(k), p) for k, p in prios.items())
            prio_of = [None] * len(by_index)
            for i, p in items:
                if i is not None:
                    prio_of[i] = p
        else:
            prio_of = prios
        default_head = _prio_head(-(0 if up_dict is not None else up), generation)
        for i in self.sub.index.reached:
            ts = by_index[i]
            if ts._prio_head is not None:
                continue
            p = prio_of[i]
            if p is None:
                continue
            ann = stored_annotations(ts)
            if up_dict is None and not ann:
                ts._prio_head = default_head
                ts._prio_order = p
                continue
            task_user = up_dict.get(ts.key, 0) if up_dict is not None else up
            if ann:
                task_user = ann.get("priority", task_user)
            ts._prio_head = _prio_head(-task_user, generation)
            ts._prio_order = p

    def who_wants(self) -> None:
        st = self.state
        sub = self.sub
        st.client_desires_keys(keys=sub.keys, client=sub.client)
        actors = sub.actors
        if actors is True:
            actors = list(sub.keys)
        for k in actors or ():
            st.tasks[k].actor = True

    # -- phase 6 -----------------------------------------------------------
    def plugins(self) -> None:
        st = self.state
        sub = self.sub
        annotations_for_plugin: defaultdict = defaultdict(dict)
        for key in self.keys_with_annotations:
            ts = st.tasks[key]
            if ts.annotations:
                for annot, value in ts.annotations.items():
                    annotations_for_plugin[annot][key] = value
        spans_ext = st.extensions.get("spans")
        if spans_ext:
            span_ann = observe_spans(spans_ext, self.touched, sub.span_metadata, sub.code)
            if span_ann:
                annotations_for_plugin["span"] = span_ann
            else:
                annotations_for_plugin.pop("span", None)
        from distributed.diagnostics.plugin import SchedulerPlugin

        hooked = [
            p for p in list(st.plugins.values())
            if getattr(type(p), "update_graph", None) is not SchedulerPlugin.update_graph
        ]
        if hooked:
            # Only built when some plugin listens: stock builds them always.
            tasks_for_plugin = [ts.key for ts in self.touched]
            priorities_for_plugin = {ts.key: ts.priority for ts in self.touched}
            for plugin in hooked:
                try:
                    plugin.update_graph(
                        st,
                        client=sub.client,
                        tasks=tasks_for_plugin,
                        keys=sub.keys,
                        annotations=annotations_for_plugin,
                        priority=priorities_for_plugin,
                        stimulus_id=sub.stimulus_id,
                    )
                except Exception as e:
                    logger.exception(e)

    # -- phase 7 -----------------------------------------------------------
    def initial_recommendations(self) -> dict:
        recs = {}
        released = [ts for ts in map(self.tasks.__getitem__, self.sub.keys) if ts._state == "released"]
        ordered = sorted_by_priority(released) if len(released) > 1000 else None
        if ordered is None:
            released.sort(key=operator.attrgetter("priority"), reverse=True)
        else:  # see sorted_by_priority: no long C-level sort in a thread
            released = ordered[::-1]
        for ts in released:
            recs[ts.key] = "waiting"
        self.blamed = False
        for ts in self.touched:
            for dts in ts.dependencies:
                if dts.exception_blame:
                    ts.exception_blame = dts.exception_blame
                    recs[ts.key] = "erred"
                    self.blamed = True
                    break
        return recs

    def transitions(self, client_msgs: dict, worker_msgs: dict) -> None:
        """Run the initial recommendations to a steady state.

        This is distributed's ``_transitions`` loop (pop the most recent
        recommendation, transition, merge the new recommendations), with the
        two transitions that make up nearly all of an ingestion inlined:
        released -> waiting, and waiting -> processing for a root-ish task
        that no worker can take now (-> queued). Visiting tasks in exactly
        stock's order keeps every choice (which roots reach a worker first)
        the same as stock's. Every other transition is distributed's own.
        """
        st = self.state
        recs = self.initial_recommendations()
        sid = self.sub.stimulus_id
        if self.blamed or st.validate or st.transition_counter_max or not self._bulk_safe(recs):
            st._transitions(recs, client_msgs, worker_msgs, sid)
            return
        self._replay(recs, client_msgs, worker_msgs)

    def _bulk_safe(self, recs: dict) -> bool:
        """The inlined transitions cover these tasks exactly (else: stock)."""
        if len(self.new) == len(self.touched):
            # Only new tasks: all released, with a run_spec, no lost deps,
            # and their dependencies are new too.
            return True
        tasks = self.state.tasks
        seen: set = set()
        stack = [tasks[k] for k in recs]
        while stack:
            ts = stack.pop()
            if ts._state != "released" or id(ts) in seen:
                continue
            seen.add(id(ts))
            if (ts._x is not None and ts.has_lost_dependencies) or not ts.run_spec:
                return False
            stack.extend(ts.dependencies)
        return True

    def _replay(self, recs: dict, client_msgs: dict, worker_msgs: dict) -> None:
        import math

        st = self.state
        lazy = st.slim_lazy
        sid = self.sub.stimulus_id
        tasks = self.tasks
        staged = self.staged
        self._now = time.time()
        maxlen = st.transition_log.maxlen
        if staged and maxlen is not None:
            maxlen += self.log_slack
        tail: deque = deque(maxlen=maxlen)
        to_waiting: list = []
        outside_waiters: dict = {}
        to_wait: dict = {}  # group -> tasks moved released -> waiting (not yet counted)
        to_queue: dict = {}  # group -> tasks moved waiting -> queued (not yet counted)
        queuing = not math.isinf(st.WORKER_SATURATION)
        if staged:
            queue_add = self.queued_in_visit_order.append
            queued_at = self.queued_at_entry.append
            stock_cands = self.stock_candidates
        else:
            queue_add = getattr(st.queued, "add_deferred", st.queued.add)
        p_rw = _interested_plugins(st, "released", "waiting")
        p_ww = _interested_plugins(st, "waiting", "waiting")
        p_wq = _interested_plugins(st, "waiting", "queued")
        n_fast = 0
        popitem = recs.popitem
        update = recs.update
        append = tail.append
        rootish_by_group: dict = {}
        is_rootish = self.projected_rootish if self.live else st.is_rootish

        while recs:
            key, finish = popitem()
            ts = tasks.get(key)
            if ts is None:
                continue
            start = ts._state
            if finish == "waiting" and start == "released":
                # -- released -> waiting, inlined --
                ts._state = "waiting"
                tg = ts.group
                to_wait[tg] = to_wait.get(tg, 0) + 1
                new_recs = {}
                n_on = 0
                deps = ts.dependencies
                for dts in deps:
                    x = dts._x
                    if x is None or not x.who_has:
                        n_on += 1
                    ds = dts._state
                    if ds == "released":
                        new_recs[dts.key] = "waiting"
                    elif dts.waiters is not _PENDING:
                        # known before this submission: it learns its new waiter
                        lst = outside_waiters.get(dts)
                        if lst is None:
                            outside_waiters[dts] = [ts]
                        else:
                            lst.append(ts)
                if n_on == len(deps):
                    if deps:
                        ts.waiting_on = deps if lazy else set(deps)
                    else:
                        ts.waiting_on = None if lazy else set()
                        new_recs[key] = "processing"
                else:
                    on = [d for d in deps if not d.who_has]
                    ts.waiting_on = (freeze(on) if on else None) if lazy else set(on)
                    if not on:
                        new_recs[key] = "processing"
                ts.waiters = _PENDING  # final value once every dependent is waiting
                to_waiting.append(ts)
                n_fast += 1
                append((key, "released", "waiting", new_recs))
                for p in p_rw:
                    _notify(p, key, "released", "waiting", sid)
                if new_recs:
                    update(new_recs)
                continue
            if finish == "processing" and start == "waiting" and queuing and (staged or not st.idle_task_count):
                # is_rootish depends on the task only through restrictions and
                # run_spec.data_producer, otherwise on its group, which does
                # not change during an ingestion.
                x = ts._x
                if x is None and not getattr(ts.run_spec, "data_producer", False):
                    tg = ts.group
                    r = rootish_by_group.get(tg)
                    if r is None:
                        r = rootish_by_group[tg] = is_rootish(ts)
                else:
                    r = (x is None or x._queueable) and is_rootish(ts)
                if r:
                    # -- waiting -> processing -> queued, inlined --
                    ts._state = "queued"
                    tg = ts.group
                    to_queue[tg] = to_queue.get(tg, 0) + 1
                    if staged:
                        queued_at(n_fast)
                    queue_add(ts)
                    n_fast += 2
                    append((key, "waiting", "waiting", {key: "queued"}))
                    for p in p_ww:
                        _notify(p, key, "waiting", "waiting", sid)
                    append((key, "waiting", "queued", {}))
                    for p in p_wq:
                        _notify(p, key, "waiting", "queued", sid)
                    continue
            if staged:
                if finish == "processing" and start == "waiting":
                    # decided by the commit, where the workers are known
                    stock_cands.append((n_fast, ts))
                    continue
                raise NotStageable(f"{start} -> {finish} in a fresh graph")
            # -- anything else: distributed's own transition --
            self._flush(to_wait, to_queue, tail, n_fast)
            n_fast = 0
            new_recs, new_cmsgs, new_wmsgs = st._transition(key, finish, sid)
            update(new_recs)
            for c, msgs in new_cmsgs.items():
                client_msgs.setdefault(c, []).extend(msgs)
            for w, msgs in new_wmsgs.items():
                worker_msgs.setdefault(w, []).extend(msgs)
        self._flush(to_wait, to_queue, tail, n_fast)
        # waiters: every dependent that is waiting on the task by now (stock
        # builds this set from the dependents already waiting, and each
        # later dependent adds itself when it becomes waiting).
        for ts in to_waiting:
            dependents = ts.dependents
            if not dependents:
                ts.waiters = None if lazy else set()
                continue
            w = [d for d in dependents if d._state == "waiting"]
            if len(w) == len(dependents):
                ts.waiters = dependents if lazy else set(dependents)
            else:
                ts.waiters = (freeze(w) if w else None) if lazy else set(w)
        for dts, lst in outside_waiters.items():
            w = dts.waiters
            if w is None or type(w) is not set or w is dts.dependents:
                w = set(w or ())
            w.update(lst)
            dts.waiters = w

    def _flush(self, to_wait: dict, to_queue: dict, tail: deque, n_fast: int) -> None:
        """Make group/prefix counts, the log and the counter current before
        distributed's own code looks at them."""
        st = self.state
        live = self.live
        for moved, old, new in ((to_wait, "released", "waiting"), (to_queue, "waiting", "queued")):
            for tg, n in moved.items():
                lg = live.get(id(tg)) if live else None
                if lg is not None:
                    lg.move(old, new, n)
                    continue
                tg.states[old] -= n
                tg.states[new] += n
                tp = tg.prefix
                tp.states[old] -= n
                tp.states[new] += n
                tp.state_counts[new] += n
            moved.clear()
        sid = self.sub.stimulus_id
        now = self._now
        if self.staged:
            self.n_entries = n_fast
            self.log_tail = deque(
                (Transition(key, start, finish, r, sid, now) for key, start, finish, r in tail),
                maxlen=tail.maxlen,
            )
            tail.clear()
            return
        st.transition_counter += n_fast
        log = st.transition_log
        for key, start, finish, r in tail:
            log.append(Transition(key, start, finish, r, sid, now))
        tail.clear()

    def report(self) -> None:
        st = self.state
        for ts in self.touched:
            if ts._state in ("memory", "erred"):
                st.report_on_key(ts=ts, client=self.sub.client)


class NotStageable(Exception):
    """A staged ingestion met something only the synchronous path covers."""


#: Marks tasks made waiting by the running ingestion until their waiters are
#: known (an empty, falsy, distinct container: safe if anything reads it).
_PENDING = Edges()


def _notify(plugin: Any, key: Any, start: str, finish: str, sid: str) -> None:
    try:
        plugin.transition(key, start, finish, stimulus_id=sid)
    except Exception:
        logger.info("Plugin failed with exception", exc_info=True)


def _interested_plugins(st: Any, start: str, finish: str) -> list:
    """Plugins that may act on a ``start -> finish`` transition.

    A plugin that keeps SchedulerPlugin's no-op ``transition`` is skipped, and
    so are distributed's own work-stealing and P2P-shuffle plugins for the
    transitions their ``transition`` methods return from without acting on
    (stealing acts on transitions into or out of ``processing``; shuffle on
    ``released``, ``erred`` and ``forgotten``). Every other plugin is called
    for every transition, exactly as stock does.
    """
    from distributed.diagnostics.plugin import SchedulerPlugin
    from distributed.shuffle._scheduler_plugin import ShuffleSchedulerPlugin
    from distributed.stealing import WorkStealing

    out = []
    for p in list(st.plugins.values()):
        fn = getattr(type(p), "transition", None)
        if fn is SchedulerPlugin.transition:
            continue
        if type(p) is WorkStealing and "processing" not in (start, finish):
            continue
        if type(p) is ShuffleSchedulerPlugin and finish not in ("released", "erred", "forgotten"):
            continue
        out.append(p)
    return out


def observe_spans(spans_ext: Any, touched: list, span_metadata: Any, code: tuple) -> dict:
    """Attach tasks to spans like ``SpansSchedulerExtension.observe_tasks``.

    Stock gives every task an empty ``annotations`` dict on the way (64 B per
    task, plus our side object). Here a task only gets a dict when it
    actually carries a span annotation; the spans, groups, code and
    metadata end up the same.
    """
    out: dict = {}
    default_span = None
    metadata_added: set = set()
    code_added: set = set()
    for ts in touched:
        own = stored_annotations(ts)
        tg = ts.group
        if tg.span_id:
            span = spans_ext.spans[tg.span_id]
        else:
            ann = own.get("span") if own else None
            if ann:
                span = spans_ext._ensure_span(ann["name"], ann["ids"])
            else:
                if not default_span:
                    default_span = spans_ext._ensure_default_span()
                span = default_span
            tg.span_id = span.id
            span.groups.add(tg)
        if code and span not in code_added:
            code_added.add(span)
            span._code[code] = None
        if span_metadata and span not in metadata_added:
            metadata_added.add(span)
            span.add_metadata(span_metadata)
        ann = span.annotation
        if ann:
            if own is None:
                ts.annotations = own = {}
            own["span"] = out[ts.key] = ann
        elif own:
            own.pop("span", None)
    return out
