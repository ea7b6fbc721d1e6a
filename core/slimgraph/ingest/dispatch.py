"""Bulk dispatch: a staged submission's ready tasks sent to workers in a few
container operations, with distributed's own choice of workers.

Why. A staged commit publishes the graph at once, but its *hand-offs* (ready
tasks that are not root-ish, such as the leaves of a delayed tree, which
share a task group with their chains) each went through distributed's own
``waiting -> processing`` transition inside the commit: pick a worker, add
the task to its ``processing``, recount the worker's occupancy and idleness,
build a ``compute-task`` message, log the transition, tell work stealing.
All of it on the event loop, so the commit's block grew with the number of
hand-offs: seconds for the leaves of a big delayed tree.

How. The choice of a worker for a task without dependencies or restrictions
depends only on a few numbers per worker (tasks processing, the task-prefix
counts that make its occupancy, idleness) and on the scheduler's
``n_tasks``; choosing changes exactly those numbers. So:

1. On the event loop, once the build and replay are done,
   :func:`take_view` copies those numbers (a tuple per worker; microseconds).
2. In a worker thread, :func:`shadow` runs
   distributed's own ``decide_worker_non_rootish`` (and, for queued
   root-ish tasks taken while a worker is idle,
   ``decide_worker_rootish_queuing_enabled``) and ``check_idle_saturated``
   on a *shadow* of the workers (``shim.ShadowState``), task after task in
   the order the commit would send them, noting each choice, every change
   to the ``idle``, ``idle_task_count`` and ``saturated`` containers in the
   order it happens, and distributed's own ``compute-task`` message for the
   task. Tasks without restrictions or actors qualify, and of those with
   dependencies, the ones whose dependencies are all held by one and the
   same worker, and only there (data persisted or scattered beforehand:
   ``x = x.persist(); (x + 1).sum().compute()``): distributed's
   ``decide_worker`` then has that single candidate and takes it without
   comparing workers, and the task needs no replica. Otherwise there is no
   shadow and the commit goes one by one.
3. In the commit (:func:`publish`), if :meth:`Dispatch.holds` (the view
   taken now equals the one the shadow started from, the prefix durations
   it read are unchanged, no plugin but work stealing listens to these
   transitions), each run of hand-offs is published with a few container
   operations: ``processing_on``, run ids and the per-commit message fields
   set per task; ``processing`` sets updated per worker in order; group,
   prefix and occupancy counts added once; the container changes replayed
   in the same order (so every set iterates as stock's); messages appended
   per worker in order; work stealing told in bulk; transition-log entries
   only for the log's tail (and for plugins told later). Queued root-ish
   tasks between runs still go through distributed's own transition, and
   the worker it picks is checked against the shadow's.

The shadow's window is short (it runs in the thread, once), but a
busy cluster (tasks finishing, a second client's submissions) changes the
workers all the time: if they changed while the shadow ran, the pipeline
takes the view and runs the shadow again (a few times).

Whenever an assumption fails (the workers changed since the shadow, a
queued task went elsewhere, another plugin listens, ``validate=True``,
which is never staged) the commit falls back to distributed's transitions
one by one from that point: the state up to there is stock's.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from time import monotonic, perf_counter, time
from typing import Any

import dask
from sortedcontainers import SortedDict

from slimgraph import shim, switches
from slimgraph.model.messages import compute_task_msg
from slimgraph.model.taskstate import NO_EXTRA

#: where :func:`take_view` puts the scheduler's ``n_tasks``
_N_TASKS = 5

#: most hand-offs published as one run: a commit that dispatches only
#: its first slice stops at a run's end
RUN_MAX = 500

# container names in the recorded changes
_IDLE, _IDLE_TASK_COUNT, _SATURATED = 0, 1, 2


def take_view(state: Any) -> tuple | None:
    """What the shadow starts from (on the event loop); None when bulk
    dispatch is off."""
    if not switches.get("bulk-dispatch"):
        return None
    workers = list(state.workers.values())
    running = state.running
    return (
        tuple(shim.worker_view(ws) for ws in workers),
        tuple(ws in running for ws in workers),
        tuple(state.idle),
        tuple(ws.address for ws in state.idle_task_count),
        frozenset(ws.address for ws in state.saturated),
        state.n_tasks,
        state.total_nthreads,
        state.WORKER_SATURATION,
        shim.occupancy_view(state),
        # copies of the sets themselves: the shadow's iterate as they do
        # (``set.copy`` keeps a set's layout), which breaks ties between
        # equally busy workers as distributed's ``min`` over them does
        state.idle_task_count.copy(),
        state.saturated.copy(),
    )


@dataclass
class Run:
    """Consecutive hand-offs ``steps[start:end]``, published together."""

    start: int
    end: int
    #: group -> tasks going processing / no-worker
    to_processing: dict = field(default_factory=dict)
    to_no_worker: dict = field(default_factory=dict)
    #: worker index -> tasks, in order; and their messages
    tasks: dict = field(default_factory=dict)
    msgs: dict = field(default_factory=dict)
    #: worker index -> {prefix name: n}
    prefix_counts: dict = field(default_factory=dict)
    #: whether some of its tasks have dependencies (work stealing files
    #: those by their dependencies' size, not by prefix alone)
    with_deps: bool = False
    #: tasks going processing, in order; their messages and worker indexes
    order: list = field(default_factory=list)
    order_msgs: list = field(default_factory=list)
    order_workers: list = field(default_factory=list)
    no_worker: list = field(default_factory=list)


@dataclass
class Dispatch:
    """What the shadow decided (see module docstring)."""

    view: tuple
    #: the real WorkerStates, by the index the steps use
    workers: list
    #: ``(kind, i, w)``: kind 0 hand-off ``plan.handoffs[i]``, kind 1 queued
    #: ``plan.queued[i]``; ``w`` the worker index, -1: no worker
    steps: list
    runs: list
    #: ``(step, container, added, worker index)``: effective changes of the
    #: idle / idle_task_count / saturated containers, in order
    changes: list
    #: prefix name -> duration inputs the shadow read
    durations: dict
    #: message keys the commit fills in
    has_span_id: bool = False
    #: dependency -> (its one holder, its nbytes), as the shadow read them
    holders: dict = field(default_factory=dict)
    #: pool sizes ``m`` of the choices whose worker depends on the
    #: scheduler's ``n_tasks`` (distributed's round-robin reads it modulo
    #: the pool's size): a commit needs ``n_tasks`` moved by a multiple of
    #: each, else unchanged; empty: any move (it only adds its own count)
    n_tasks_moduli: frozenset = frozenset()
    #: the hand-offs it covers: ``plan.handoffs[start:end]`` (those a
    #: slice passed over included)
    start: int = 0
    end: int = 0
    #: the message made for each hand-off, by index (a whole-plan shadow;
    #: None elsewhere): slices after the commit take them (:func:`shadow`)
    msg_at: list | None = None
    #: its messages carry priorities of an older generation: the build was
    #: moved to a new one after they were made (slimgraph.ingest.apply.rehead),
    #: and publishing writes each task's priority into its message
    stale_priorities: bool = False

    def current(self, state: Any, b: Any = None) -> bool:
        """Whether the workers and the prefix durations are as the shadow
        saw them (``b``: before its new prefixes are published)."""
        now = take_view(state)
        if now is not None and all((now[_N_TASKS] - self.view[_N_TASKS]) % m == 0 for m in self.n_tasks_moduli):
            now = now[:_N_TASKS] + self.view[_N_TASKS:_N_TASKS + 1] + now[_N_TASKS + 1:]
        if now != self.view:
            return False
        for dts, (ws, nbytes) in self.holders.items():
            wh = dts.who_has
            if dts.state != "memory" or not wh or len(wh) != 1 or ws not in wh or dts.nbytes != nbytes:
                return False
        prefixes = state.task_prefixes
        private = {} if b is None else b.prefixes
        for name, inputs in self.durations.items():
            tp = prefixes.get(name) or private.get(name)
            if tp is None or shim.prefix_duration_inputs(tp) != inputs:
                return False
        return True

    def holds(self, state: Any) -> bool:
        """Whether the shadow's assumptions hold on ``state`` now (in the
        commit, with the plugins told later taken out)."""
        if state.validate or not self.current(state):
            return False
        any_processing = any(r.order for r in self.runs)
        any_no_worker = any(r.no_worker for r in self.runs)
        for p in state.plugins.values():
            if shim.work_stealing(p):
                continue
            if any_processing and shim.listens_to_transition(p, "waiting", "processing"):
                return False
            if any_no_worker and (
                shim.listens_to_transition(p, "waiting", "waiting")
                or shim.listens_to_transition(p, "waiting", "no-worker")
            ):
                return False
        return True

    def temporaries(self) -> list:
        return [self.steps, self.runs, self.changes]


class _Prefixes:
    """The prefixes the shadow's occupancy arithmetic looks up: the
    scheduler's, else the build's new ones; notes what it read."""

    def __init__(self, live: dict, private: dict):
        self.live = live
        self.private = private
        self.read: dict = {}

    def __getitem__(self, name: str) -> Any:
        tp = self.live.get(name)
        if tp is None:
            tp = self.private[name]
        if name not in self.read:
            self.read[name] = shim.prefix_duration_inputs(tp)
        return tp


class _Changes:
    """Notes effective changes of one shadow container."""

    def __init__(self, log: list, which: int, shadow: Any):
        self.log = log
        self.which = which
        self.shadow = shadow

    def note(self, added: bool, sw: Any) -> None:
        self.log.append((self.shadow.step, self.which, added, sw.index))


class _WorkerSet:
    """A shadow of one of the scheduler's sets of workers: a copy of the
    real set (same layout: iterates in the same order after the same
    changes) that yields and takes shadow workers."""

    def __init__(self, real_copy: set, shadow_of: dict, changes: _Changes):
        self.real = real_copy
        self.shadow_of = shadow_of
        self.changes = changes

    def __iter__(self) -> Any:
        shadow_of = self.shadow_of
        return (shadow_of[ws] for ws in self.real)

    def __len__(self) -> int:
        return len(self.real)

    def __contains__(self, sw: Any) -> bool:
        return sw.real in self.real

    def add(self, sw: Any) -> None:
        if sw.real not in self.real:
            self.changes.note(True, sw)
            self.real.add(sw.real)

    def discard(self, sw: Any) -> None:
        if sw.real in self.real:
            self.changes.note(False, sw)
            self.real.discard(sw.real)


class _Idle(SortedDict):
    changes: _Changes

    def __setitem__(self, key: Any, value: Any) -> None:
        if key not in self:
            self.changes.note(True, value)
        super().__setitem__(key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            self.changes.note(False, self[key])
        return super().pop(key, *default)


def _qualifies(ts: Any) -> bool:
    """A task without restrictions or actor: its worker depends only on the
    shadowed numbers, or (with dependencies) on their one holder, which
    :func:`shadow` finds as it goes (:func:`_holder`)."""
    x = ts._x
    if x is NO_EXTRA:
        return True
    m = x.more
    return not (m.worker_restrictions or m.host_restrictions or m.resource_restrictions or m.actor or x.who_has)


def _holder(ts: Any) -> Any:
    """The one worker that holds every dependency of ``ts``, and is the only
    one holding any (None: there is no such worker). Read in the build's
    thread: a container the loop changes meanwhile gives None here, and the
    commit checks what was read (:attr:`Dispatch.holders`)."""
    holder = None
    try:
        for dts in ts.dependencies:
            wh = dts.who_has
            if dts.state != "memory" or not wh or len(wh) != 1:
                return None
            ws = next(iter(wh))
            if holder is None:
                holder = ws
            elif ws is not holder:
                return None
    except RuntimeError:  # changed size during iteration
        return None
    return holder


def shadow(
    state: Any,
    b: Any,
    plan: Any,
    view: tuple | None,
    start: int = 0,
    limit: int | None = None,
    skip: Any = None,
    reuse: Dispatch | None = None,
) -> Dispatch | None:
    """Decide where the commit will send ``plan``'s ready tasks (in the
    build's worker thread). None: the commit goes one by one.

    A slice after the commit (:mod:`slimgraph.ingest.tail`, on the event
    loop) shadows hand-offs from ``plan.handoffs[start]`` on, at most
    ``limit`` of them, passing over those ``skip(ts)`` says are no longer
    ready to go, and takes the ``compute-task`` messages ``reuse`` (the
    build thread's shadow) made where they are still what distributed
    would make (a message does not depend on the worker chosen, only on
    the task and where its inputs are: those must be unchanged)."""
    if view is None or not plan.handoffs or b.sub.actors:
        return None
    wviews, running, idle, _, _, n_tasks, nthreads, saturation, occupancy, itc, saturated = view
    if sum(running) != len(wviews):
        return None  # some workers not running: choices need more than the shadow has
    handoffs = plan.handoffs
    stop = len(handoffs) if limit is None else min(len(handoffs), start + limit)
    if not all(_qualifies(ts) for _, ts in handoffs[start:stop]):
        return None
    workers = [v[0] for v in wviews]
    prefixes = _Prefixes(state.task_prefixes, b.prefixes)
    sh = shim.ShadowState(occupancy, prefixes)
    sh.n_tasks = n_tasks
    sh.total_nthreads = nthreads
    sh.WORKER_SATURATION = saturation
    sh.step = 0
    shadows = [shim.ShadowWorker(i, v, sh) for i, v in enumerate(wviews)]
    by_address = {s.address: s for s in shadows}
    shadow_of = {s.real: s for s in shadows}
    changes: list = []
    sh.workers = SortedDict((s.address, s) for s in shadows)
    sh.running = set(shadows)
    sh.idle = _Idle((a, by_address[a]) for a in idle)
    sh.idle.changes = _Changes(changes, _IDLE, sh)
    sh.idle_task_count = _WorkerSet(itc.copy(), shadow_of, _Changes(changes, _IDLE_TASK_COUNT, sh))
    sh.saturated = _WorkerSet(saturated.copy(), shadow_of, _Changes(changes, _SATURATED, sh))

    queued = plan.queued
    at = plan.queued_at
    steps: list = []
    runs: list = []
    run: Run | None = None
    qi, ni = 0, start
    holders: dict = {}
    moduli: set = set()
    msg_at = [None] * len(handoffs) if limit is None else None
    old_msgs = reuse.msg_at if reuse is not None else None
    old_holders = reuse.holders if reuse is not None else None
    terminate = None
    while True:
        nxt = handoffs[ni][0] if ni < stop else None
        sh.step = len(steps)
        if qi < len(queued) and sh.idle_task_count and (nxt is None or at[qi] < nxt):
            ts = queued[qi]
            sw = sh.decide_worker_rootish_queuing_enabled()
            steps.append((1, qi, sw.index))
            qi += 1
            run = None
            _added(sh, sw, ts)
            continue
        if nxt is None:
            break
        ts = handoffs[ni][1]
        if skip is not None and skip(ts):
            ni += 1
            continue
        deps = ts.dependencies
        if deps:
            # distributed's decide_worker: a single candidate is taken as is
            ws = _holder(ts)
            sw = shadow_of.get(ws)
            if sw is None:
                return None  # no single holder: distributed compares workers
            if ws.memory_limit:
                # _add_to_processing errs a task whose inputs exceed the
                # worker's memory: that one goes through distributed's code
                if terminate is None:
                    terminate = bool(dask.config.get("distributed.worker.memory.terminate"))
                if terminate and sum(dts.nbytes for dts in deps) > ws.memory_limit:
                    return None
            for dts in deps:
                if dts not in holders:  # (inputs are shared by many tasks)
                    holders[dts] = (ws, dts.nbytes)
        else:
            sh.n_tasks_read = False
            sw = sh.decide_worker_non_rootish(ts)
            if sh.n_tasks_read:
                _note_round_robin(sh, ts, sw, moduli)
        if run is None or run.end - run.start >= RUN_MAX:
            run = Run(start=len(steps), end=len(steps))
            runs.append(run)
        tg = ts.group
        if sw is None:
            steps.append((0, ni, -1))
            run.to_no_worker[tg] = run.to_no_worker.get(tg, 0) + 1
            run.no_worker.append(ts)
        else:
            w = sw.index
            steps.append((0, ni, w))
            run.to_processing[tg] = run.to_processing.get(tg, 0) + 1
            name = tg.prefix.name
            counts = run.prefix_counts.get(w)
            if counts is None:
                counts = run.prefix_counts[w] = {}
                run.tasks[w] = []
                run.msgs[w] = []
            counts[name] = counts.get(name, 0) + 1
            run.tasks[w].append(ts)
            if deps:
                run.with_deps = True
            _added(sh, sw, ts)
            msg = old_msgs[ni] if old_msgs is not None else None
            if msg is not None and deps:
                for dts in deps:
                    if old_holders.get(dts) != (ws, dts.nbytes):
                        msg = None
                        break
            if msg is None:
                msg = compute_task_msg(sh, ts)
            if msg_at is not None:
                msg_at[ni] = msg
            run.msgs[w].append(msg)
            run.order.append(ts)
            run.order_msgs.append(msg)
            run.order_workers.append(w)
        run.end = len(steps)
        ni += 1
    has_span_id = any("span_id" in m for r in runs for ms in r.msgs.values() for m in ms[:1])
    return Dispatch(
        view=view,
        workers=workers,
        steps=steps,
        runs=runs,
        changes=changes,
        durations=prefixes.read,
        has_span_id=has_span_id,
        holders=holders,
        n_tasks_moduli=frozenset(moduli),
        start=start,
        end=ni,
        msg_at=msg_at,
        stale_priorities=old_msgs is not None and reuse.stale_priorities,
    )


def _note_round_robin(sh: Any, ts: Any, sw: Any, moduli: set) -> None:
    """A choice read ``n_tasks`` (distributed's round-robin over a pool of
    workers, by ``n_tasks`` modulo the pool's size): if another ``n_tasks``
    would have chosen another worker, the pool's size goes into
    ``moduli``. (Choosing has no side effects: it is asked again.)"""
    m = len(sh.idle or sh.workers)
    if m in moduli or m < 2:
        return
    # (reading n_tasks notes a read: the choice asked again reads it anyway,
    # and the caller comes here only when the first choice read it)
    n = sh.n_tasks
    try:
        for k in range(1, m):
            sh.n_tasks = n + k
            if sh.decide_worker_non_rootish(ts) is not sw:
                moduli.add(m)
                return
    finally:
        sh.n_tasks = n


def _added(sh: Any, sw: Any, ts: Any) -> None:
    """``_add_to_processing``'s effects on the shadow (a task without
    restrictions or actor, whose dependencies, if any, are all on its
    worker: it needs no replica)."""
    sw.add_task(ts.group.prefix.name)
    sh.check_idle_saturated(sw)
    sh.count_sent()


def publish(
    state: Any,
    d: Dispatch,
    plan: Any,
    sid: str,
    worker_msgs: dict,
    keep_from: int | None,
    made: list,
    one: Any,
    unqueue: Any,
    deadline: float | None = None,
    unhold: Any = None,
) -> tuple[int, int]:
    """Publish ``d`` on ``state`` (the commit; :meth:`Dispatch.holds` was
    checked). ``one(ts, pos, assumed)`` sends a queued root-ish task through
    distributed's own transition, ``unqueue(ts)`` first takes it out of the
    plan's queue run. ``keep_from``: the first log position whose entries
    are kept (None: all are, for plugins told later).

    Appends ``(pos, 0, records)`` to ``made`` for the hand-offs' kept log
    entries (``one`` appends those of queued tasks, in between). Returns
    ``(queued taken, next hand-off)``: where one-by-one dispatch continues
    (all of it done, unless a queued task went to another worker than the
    shadow's, or ``deadline`` (``time.perf_counter``) passed: then it stops
    at the end of a run). ``unhold(tasks)``: called with each run's tasks
    before it is published, when they were held in the queue
    (:mod:`slimgraph.ingest.tail`).
    """
    steps = d.steps
    handoffs = plan.handoffs
    queued = plan.queued
    at = plan.queued_at
    workers = d.workers
    runs = iter(d.runs)
    changes = d.changes
    ci = 0
    qi, ni = 0, d.start
    s = 0
    n = len(steps)
    while s < n:
        if deadline is not None and perf_counter() > deadline:
            return qi, ni
        kind, i, w = steps[s]
        if kind == 1:
            ts = queued[i]
            unqueue(ts)
            one(ts, at[i], 2)
            qi += 1
            # (its container changes were distributed's own)
            while ci < len(changes) and changes[ci][0] == s:
                ci += 1
            if ts.processing_on is not workers[w]:
                return qi, ni  # the shadow was wrong from here on
            s += 1
            continue
        run = next(runs)
        assert run.start == s
        if unhold is not None:
            unhold([handoffs[steps[k][1]][1] for k in range(run.start, run.end)])
        ci = _publish_run(state, d, run, plan, sid, worker_msgs, keep_from, made, ci)
        ni = steps[run.end - 1][1] + 1
        s = run.end
    return qi, d.end


def _publish_run(
    state: Any, d: Dispatch, run: Run, plan: Any, sid: str, worker_msgs: dict, keep_from: int | None, made: list, ci: int
) -> int:
    workers = d.workers
    steps = d.steps
    handoffs = plan.handoffs
    now = time()
    stimulus = f"compute-task-{now}"
    next_run_id = shim.next_run_id
    span = d.has_span_id
    stale = d.stale_priorities
    # per task, in the order stock sends them: where it runs, its run id,
    # the message fields only known now
    for ts, msg, w in zip(run.order, run.order_msgs, run.order_workers):
        if stale and "priority" in msg:
            msg["priority"] = ts.priority
        x = ts._x
        x.processing_on = workers[w]
        x.run_id = msg["run_id"] = next_run_id()
        msg["stimulus_id"] = stimulus
        msg["annotations"] = x.more.annotations or {}  # (as stored; none: an empty dict, as stock's)
        if span:
            msg["span_id"] = ts.group.span_id
        ts._state = "processing"
    for ts in run.no_worker:
        ts._state = "no-worker"
    # counts
    for tg, k in run.to_processing.items():
        shim.count_moved(tg, "waiting", "processing", k)
    for tg, k in run.to_no_worker.items():
        shim.count_moved(tg, "waiting", "no-worker", k)
    for w, counts in run.prefix_counts.items():
        ws = workers[w]
        for name, k in counts.items():
            shim.count_processing(state, ws, name, k)
        ws.processing.update(run.tasks[w])
    state.n_tasks += len(run.order)
    if run.no_worker:
        state.unrunnable.update(dict.fromkeys(run.no_worker, monotonic()))
    # idle / idle_task_count / saturated: the same changes, in the same order
    changes = d.changes
    while ci < len(changes) and changes[ci][0] < run.end:
        _, which, added, w = changes[ci]
        ws = workers[w]
        if which == _IDLE:
            if added:
                state.idle[ws.address] = ws
            else:
                state.idle.pop(ws.address, None)
        else:
            target = state.idle_task_count if which == _IDLE_TASK_COUNT else state.saturated
            if added:
                target.add(ws)
            else:
                target.discard(ws)
        ci += 1
    for w, msgs in run.msgs.items():
        address = workers[w].address
        out = worker_msgs.get(address)
        if out is None:
            worker_msgs[address] = list(msgs)
        else:
            out.extend(msgs)
    if run.order:
        for p in list(state.plugins.values()):
            if not shim.work_stealing(p):
                continue
            if len(run.to_processing) == 1 and not run.with_deps:  # one group, so one prefix
                addresses = [workers[w].address for w in run.order_workers]
                by_address = {workers[w].address: tasks for w, tasks in run.tasks.items()}
                shim.stealing_put_one_prefix(p, state, run.order, addresses, by_address)
            else:
                shim.stealing_put(p, state, run.order)
    # the log: what distributed's transitions would have logged, made only
    # for the hand-offs whose entries are kept (log positions increase)
    Transition = shim.Transition
    entries = len(run.order) + 2 * len(run.no_worker)
    lo = run.start
    if keep_from is not None:
        lo = bisect.bisect_left(range(run.start, run.end), keep_from, key=lambda k: handoffs[steps[k][1]][0])
        lo += run.start
    for k in range(lo, run.end):
        _, i, w = steps[k]
        pos, ts = handoffs[i]
        key = ts.key
        if w >= 0:
            records = [Transition(key, "waiting", "processing", {}, sid, now)]
        else:
            records = [
                Transition(key, "waiting", "waiting", {key: "no-worker"}, sid, now),
                Transition(key, "waiting", "no-worker", {}, sid, now),
            ]
        made.append((pos, 0, records))
    state.transition_counter += entries
    return ci
