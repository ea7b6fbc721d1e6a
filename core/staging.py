"""Staged ingestion: build a submission off the event loop, publish it at once.

Why
------------------------------------------------------------------------------
Stock ``update_graph`` creates and transitions every task on the event loop:
for a million tasks the scheduler answers nobody (heartbeats, dashboards,
other clients) for tens of seconds (distributed issue 7980). Ingestion must
still look atomic: no handler may ever see half a graph.

How
------------------------------------------------------------------------------
Most of a large submission is *new*: keys the scheduler has never seen,
task groups that do not exist yet. Task states for them can be built, linked,
given priorities and moved released -> waiting -> queued without touching
anything another handler can see, because nothing refers to them yet. So:

1. ``build`` (a worker thread, while the loop keeps serving): the slim
   engine's own phases run on a private ``tasks`` dict, private task groups
   and private copies of the task prefixes. The transitions are replayed as
   the synchronous path replays them, assuming no idle worker: root-ish
   ready tasks end up queued (in a private, sorted queue run), transition
   log entries are made for the log's tail. Ready tasks that are not
   root-ish are only *noted*, in visit order: where they go depends on the
   workers at the moment of publishing.
2. ``commit`` (on the loop, one short block): check that nothing the build
   read has changed (new keys or groups, generation, thread count, plugins,
   configuration); if anything has, give up and let the synchronous path
   ingest the submission instead. Otherwise publish: groups and prefixes,
   one ``dict.update`` of the tasks, who_wants, spans, the noted ready tasks
   through distributed's own transitions in their visit order (and, while
   workers are idle, the first queued root-ish tasks too, exactly as the
   synchronous replay would have sent them), the queue run merged into
   ``Scheduler.queued``, the log tail and the counters.

The result is the state the synchronous path produces, which is the state
stock produces (the differential tests run both). The commit's cost does not
grow with the number of tasks except for two C-level bulk operations (the
dict and set merges).

What is not staged (it takes the synchronous path): submissions that touch
existing keys or task groups, have dependencies outside the graph, span
annotations, actors, a submitting task, plugins that listen to
``update_graph`` or to these transitions, ``validate=True``, a transition
counter limit, or queuing turned off (``worker-saturation: inf``). Setting:
``slimgraph.staging``.
"""
from __future__ import annotations

import math
from typing import Any

from distributed.scheduler import Computation, TaskGroup, TaskPrefix

from slimgraph.ingest import Ingestion, NotStageable, Submission, _interested_plugins, joins_last_computation
from slimgraph.keys import NameResolver
from slimgraph.phases import SubmissionRecord
from slimgraph.queue import TaskQueue, _sort_key
from slimgraph.taskstate import SlimTaskState, count_into_groups, sorted_by_priority, stored_annotations

#: Extra transition-log entries kept by a build: a root-ish task sent to a
#: worker by the commit logs one entry where the build assumed two.
LOG_SLACK = 4096


def refusal(state: Any, sub: Submission) -> str | None:
    """Why ``sub`` cannot be staged on ``state`` now (None: it can)."""
    if state.validate:
        return "validate=True"
    if state.transition_counter_max:
        return "transition counter limit"
    if math.isinf(state.WORKER_SATURATION):
        return "queuing disabled"
    if sub.submitting_task:
        return "submitted from a task"
    if sub.actors:
        return "actors"
    if sub.index.outside:
        return "dependencies outside the graph"
    if "span" in (sub.annotations_by_type or {}) or "span" in (sub.global_annotations or {}):
        return "span annotations"
    if _listeners(state):
        return "plugins listen to update_graph or to these transitions"
    if not isinstance(state.queued, TaskQueue):
        return "queue is not a TaskQueue"
    return None


def _listeners(state: Any) -> bool:
    from distributed.diagnostics.plugin import SchedulerPlugin

    for p in state.plugins.values():
        if getattr(type(p), "update_graph", None) is not SchedulerPlugin.update_graph:
            return True
    return any(
        _interested_plugins(state, a, b)
        for a, b in (("released", "waiting"), ("waiting", "waiting"), ("waiting", "queued"))
    )


class StagedIngestion(Ingestion):
    """Phases 4-7 built privately (:meth:`build`), then published (:meth:`commit`)."""

    def __init__(self, state: Any, sub: Submission, record: SubmissionRecord):
        super().__init__(state, sub, record)
        self.tasks = {}
        self.staged = True
        self.log_slack = LOG_SLACK
        self.new_groups: list = []  # in order of first appearance
        self.prefixes: dict = {}  # name -> private TaskPrefix
        self.moved_generation = None
        self.queued_in_visit_order: list = []
        self.queued_at_entry: list = []  # log position of each, same order
        self.stock_candidates: list = []  # (log position, task), visit order
        # what the build reads from the scheduler, checked again at commit
        self.epoch = state.slim_epoch
        self.generation_read = (state.generation, state._last_time)
        self.nthreads_read = state.total_nthreads
        self.saturation_read = state.WORKER_SATURATION
        # queue sequence numbers, reserved on the loop before the build
        self.seq_base = state.queued.reserve(len(sub.index.reached))

    def temporaries(self) -> list:
        # not queued_sorted / queued_members / log_tail: the scheduler's queue
        # and log may have adopted them
        out = super().temporaries()
        return [*out, self.tasks, self.queued_in_visit_order, self.queued_at_entry, self.stock_candidates]

    # -- off the event loop ----------------------------------------------
    def build(self) -> bool:
        """Runs in a worker thread. False: not stageable after all."""
        rec = self.record
        try:
            with rec.phase("task_states", where="offload") as p:
                self._task_states()
                p.tasks = len(self.new)
                p.edges = self.edges
            with rec.phase("annotations", where="offload") as p:
                self.annotations()
                p.tasks = len(self.keys_with_annotations)
            with rec.phase("priorities", where="offload") as p:
                self.priorities()
                p.tasks = len(self.new)
            with rec.phase("transitions", where="offload") as p:
                self._replay(self.initial_recommendations(), {}, {})
                self._order_queue_run()
                p.tasks = len(self.new)
        except NotStageable:
            return False
        return True

    def _task_states(self) -> None:
        st = self.state
        idx = self.sub.index
        dsk = idx.dsk
        live = st.tasks
        live_groups = st.task_groups
        tasks = self.tasks
        groups: dict = {}

        def make_group(group_key: str, prefix_key: str):
            tg = groups.get(group_key)
            if tg is None:
                tg = live_groups.get(group_key)
                if tg is not None:
                    # the scheduler's own: read now, changed by the commit
                    groups[group_key] = tg
                    self.live[id(tg)] = LiveGroup(tg)
                    return tg
                tp = self.prefixes.get(prefix_key)
                if tp is None:
                    self.prefixes[prefix_key] = tp = TaskPrefix(prefix_key)
                groups[group_key] = tg = TaskGroup(group_key, tp)
                self.new_groups.append(tg)
            return tg

        resolver = NameResolver(make_group)
        resolve = resolver.group_of
        by_name = resolver._by_name
        by_index = self.by_index
        keys = idx.keys
        new = self.new
        per_group: dict = {}
        detached = SlimTaskState.detached
        for i in idx.reached:
            k = keys[i]
            if k in live:
                raise NotStageable(f"key {k!r} exists")
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
            by_index[i] = ts
        self.touched = new
        live = self.live
        for key in [k for k in per_group if k in live]:
            live[key].add(per_group.pop(key)[1])
        count_into_groups(per_group)  # private groups and prefixes
        self._build_edges(idx.reached)  # read only: no copy

    def projected_rootish(self, ts: SlimTaskState) -> bool:
        """``SchedulerState.is_rootish`` as it will be once the scheduler's
        own groups have counted this submission's tasks and edges."""
        if ts.resource_restrictions or ts.worker_restrictions or ts.host_restrictions:
            return False
        if ts.run_spec and ts.run_spec.data_producer:
            return True
        st = self.state
        live = self.live

        def size(g: Any) -> int:
            lg = live.get(id(g))
            return len(g) + (lg.added if lg is not None else 0)

        tg = ts.group
        lg = live.get(id(tg))
        deps = tg.dependencies if lg is None else (tg.dependencies | lg.dependencies)
        return (
            size(tg) > st.total_nthreads * 2
            and len(deps) < st.rootish_tg_threshold
            and sum(map(size, deps)) < st.rootish_tg_dependencies_threshold
        )

    def _order_queue_run(self) -> None:
        """Number the queued tasks and sort them.

        Sequence numbers only break ties between equal priorities. Within
        one submission priorities are normally distinct, so all its queued
        tasks share one number (one int object instead of one per task);
        if some tie, each gets its own, in visit order, from the reserved
        range.
        """
        run = self.queued_in_visit_order
        base = self.seq_base
        for ts in run:
            ts._qseq = base
        ordered = sorted_by_priority(run)
        if ordered is None:
            for i, ts in enumerate(run):
                ts._qseq = base + i
            ordered = sorted(run, key=_sort_key)
        self.queued_members = set(run)
        self.queued_sorted = ordered

    # -- on the event loop -------------------------------------------------
    def still_valid(self) -> bool:
        """Whether everything the build read is as it was."""
        st = self.state
        if (st.generation, st._last_time) != self.generation_read:
            return False
        if st.total_nthreads != self.nthreads_read or st.WORKER_SATURATION != self.saturation_read:
            return False
        if st.validate or st.transition_counter_max or _listeners(st):
            return False
        if st.slim_epoch != self.epoch:
            if not st.tasks.keys().isdisjoint(self.tasks):
                return False
            if any(tg.name in st.task_groups for tg in self.new_groups):
                return False
        groups = st.task_groups
        return all(groups.get(lg.group.name) is lg.group and lg.unchanged() for lg in self.live.values())

    def commit(self, client_msgs: dict, worker_msgs: dict) -> None:
        """Publish everything in one synchronous block (see module docstring)."""
        st = self.state
        sub = self.sub
        st.slim_epoch += 1
        if self.moved_generation is not None:
            st.generation, st._last_time = self.moved_generation
        # computation, groups, prefixes
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
        for tg in self.new_groups:
            st.task_groups[tg.name] = tg
            computation.groups.add(tg)
        for name, tp in self.prefixes.items():
            real = st.task_prefixes.get(name)
            if real is None:
                st.task_prefixes[name] = tp
            else:
                _merge_prefix(real, tp)
        for lg in self.live.values():
            lg.apply()
        st.tasks.update(self.tasks)
        self.who_wants()
        spans_ext = st.extensions.get("spans")
        if spans_ext:
            self._spans(spans_ext)
        self._publish_transitions(client_msgs, worker_msgs)

    def _spans(self, spans_ext: Any) -> None:
        """``observe_spans`` for a staged graph. No task has a span
        annotation, so a task's span is its group's, or for a new group the
        default span; only spans with an annotation of their own (a group
        made by ``with span(...)`` earlier) mark each task."""
        sub = self.sub
        spans: list = []
        for lg in self.live.values():
            tg = lg.group
            if tg.span_id:
                span = spans_ext.spans[tg.span_id]
            else:
                span = spans_ext._ensure_default_span()
                tg.span_id = span.id
                span.groups.add(tg)
            spans.append(span)
            ann = span.annotation
            if ann:
                for ts in self.new:
                    if ts.group is tg:
                        annotations = stored_annotations(ts)
                        if annotations is None:
                            ts.annotations = annotations = {}
                        annotations["span"] = ann
        if self.new_groups:
            span = spans_ext._ensure_default_span()
            for tg in self.new_groups:
                tg.span_id = span.id
                span.groups.add(tg)
            spans.append(span)
        for span in dict.fromkeys(spans):
            if sub.code:
                span._code[sub.code] = None
            if sub.span_metadata:
                span.add_metadata(sub.span_metadata)

    def _publish_transitions(self, client_msgs: dict, worker_msgs: dict) -> None:
        st = self.state
        sid = self.sub.stimulus_id
        queued = self.queued_in_visit_order
        at = self.queued_at_entry
        members = self.queued_members
        others = self.stock_candidates
        # Ready tasks, in the order the synchronous replay visits them: the
        # noted ones always go through distributed's transition; queued
        # root-ish ones do too while a worker is idle (it takes them).
        # the log's tail as the build made it covers entries [start, n_entries)
        tail = self.log_tail
        start = self.n_entries - len(tail)
        captured: list = []  # in the tail: (log position, entries assumed, entries made)
        assumed_total = 0  # entries the build counted for tasks sent here instead
        log = st.transition_log
        st.transition_log = capture = []
        try:
            qi = ni = 0
            while True:
                nxt_other = others[ni][0] if ni < len(others) else None
                take_queued = qi < len(queued) and st.idle_task_count
                if take_queued and (nxt_other is None or at[qi] < nxt_other):
                    ts = queued[qi]
                    pos, assumed = at[qi], 2
                    qi += 1
                    members.discard(ts)
                    _unqueue_count(ts.group)
                    ts._state = "waiting"
                elif nxt_other is not None:
                    pos, ts = others[ni]
                    assumed = 0
                    ni += 1
                else:
                    break
                st._transitions({ts.key: "processing"}, client_msgs, worker_msgs, sid)
                assumed_total += assumed
                if pos >= start:
                    captured.append((pos, assumed, capture[:]))
                capture.clear()
        finally:
            st.transition_log = log
        st.queued.merge_staged(members, self.queued_sorted, self.seq_base, len(self.sub.index.reached))
        # the log: the build's tail with the entries of the tasks above
        if not captured:
            log.extend(tail)
        else:
            items = list(tail)
            out: list = []
            cur = start
            for pos, assumed, made in captured:
                out.extend(items[cur - start : pos - start])
                out.extend(made)
                cur = pos + assumed
            out.extend(items[cur - start :])
            log.extend(out)
        st.transition_counter += self.n_entries - assumed_total


class LiveGroup:
    """A scheduler-owned task group a staged submission adds tasks to.

    The build reads it and keeps its own changes here (task count, state
    moves, new dependency groups); the commit checks that the group is as
    it was read and then applies them.
    """

    __slots__ = ("group", "sizes_read", "deps_read", "added", "moves", "dependencies")

    def __init__(self, group: TaskGroup):
        self.group = group
        # what is_rootish reads: its size, its dependency groups and theirs
        # (its tasks moving between states meanwhile does not matter: the
        # commit adds counts, it does not set them)
        self.deps_read = set(group.dependencies)
        self.sizes_read = [len(group), *map(len, self.deps_read)]
        self.added = 0
        self.moves: list = []  # (old, new, n)
        self.dependencies: set = set()

    def add(self, n: int) -> None:
        self.added += n

    def move(self, old: str, new: str, n: int) -> None:
        self.moves.append((old, new, n))

    def unchanged(self) -> bool:
        tg = self.group
        return tg.dependencies == self.deps_read and self.sizes_read == [len(tg), *map(len, self.deps_read)]

    def apply(self) -> None:
        tg = self.group
        tp = tg.prefix
        n = self.added
        tg.states["released"] += n
        tg._size += n
        tp.states["released"] += n
        tp._size += n
        for old, new, k in self.moves:
            tg.states[old] -= k
            tg.states[new] += k
            tp.states[old] -= k
            tp.states[new] += k
            tp.state_counts[new] += k
        tg.dependencies |= self.dependencies


def _unqueue_count(tg: Any) -> None:
    """Undo the build's waiting -> queued count of one task (it goes to a
    worker instead): back to waiting in its group and prefix, and out of the
    prefix's cumulative ``state_counts``."""
    tg.states["queued"] -= 1
    tg.states["waiting"] += 1
    tp = tg.prefix
    tp.states["queued"] -= 1
    tp.states["waiting"] += 1
    tp.state_counts["queued"] -= 1


def _merge_prefix(real: TaskPrefix, private: TaskPrefix) -> None:
    """Fold a private prefix (fresh, counts only) into the scheduler's."""
    for s, n in private.states.items():
        real.states[s] += n
    for s, n in private.state_counts.items():
        real.state_counts[s] += n
    real._size += private._size
    for tg in list(private._groups):
        tg.prefix = real
        real.add_group(tg)
