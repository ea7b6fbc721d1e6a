"""Replay: a submission's initial transitions, as deltas.

Stock ends ``update_graph`` with one ``transitions()`` call: every requested
released task is recommended ``waiting``, and distributed's generic loop
(pop the most recent recommendation, transition, merge the new ones) runs to
a steady state, logging and notifying plugins on every step. For a fresh
graph nearly all of that is two transitions: released -> waiting for every
task, and, for a ready root-ish task, waiting -> processing that ends in
``queued`` because no worker can take it now.

:func:`replay` runs the same loop, visiting tasks in exactly stock's order
(which decides which roots reach a worker first), with those two
transitions inlined and everything else *noted* rather than done, the way
the worker state machine emits instructions instead of doing I/O. The
result, a :class:`Plan`, says:

- how many tasks of each group moved between states (counts to add);
- the transition-log entries, and how many there were (the counter);
- the queued root-ish tasks, in visit order and as a sorted run;
- the *hand-offs*: ready tasks that are not root-ish, in visit order, with
  their place in the log. Where they go depends on the workers at the
  moment of applying, so the applier sends each through distributed's own
  transition then. The queued root-ish tasks are assumed to find no idle
  worker; while one is idle when applying, the applier sends them to it
  instead, again through distributed's own code, in visit order;
- the new waiters of tasks the scheduler already had (persisted inputs).

The loop runs by key (:meth:`_Replay._run_keys`, any build), or, for a
brand-new compact graph with nothing outside it, by graph index
(:meth:`_Replay._run_compact`): integers in the recommendations dict
instead of tuple keys to hash, and log entries made afterwards for the
kept tail only. Both visit the same tasks in the same order and leave the
same task states and plan.

The replay assumes no idle worker and never calls distributed's transition
code, so it can run in a worker thread on a private build. A hand-off's own
consequences concern only itself (waiting -> processing, or -> queued /
no-worker), never another task's place in the visit order, which is why
deferring them keeps stock's order.

When the submission is not one the inlined transitions cover exactly
(tasks with erred dependencies, lost dependencies, a run_spec-less task to
recompute, changes to tasks the scheduler already had that the loop would
read, ``validate=True``, a transition counter limit), the plan says
*stock*: the applier publishes the build and runs distributed's own
``transitions`` over the initial recommendations, as stock does.
"""
from __future__ import annotations

import math
import operator
import time
from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from slimgraph import shim
from slimgraph.ingest.build import Build
from slimgraph.ingest.compact.graph import SHIFT
from slimgraph.instrument.records import SubmissionRecord
from slimgraph.model.containers import Edges, freeze
from slimgraph.model.queue import SharedSeq, staged_run
from slimgraph.model.taskstate import NO_RARE, sorted_by_orders, sorted_by_priority
from slimgraph.runtime import disposal

#: Extra transition-log entries kept in a plan's tail: a root-ish task sent
#: to a worker by the applier logs one entry where the replay assumed two.
LOG_SLACK = 4096

#: Marks tasks made waiting by the running replay that no dependent waits
#: on yet (an empty, falsy, distinct container: safe if anything reads it);
#: the first one to come replaces it with a list (see the replay's loop).
_PENDING = Edges()

#: The transitions the replay inlines, as plugins see them.
INLINED = (("released", "waiting"), ("waiting", "waiting"), ("waiting", "queued"))


@dataclass
class Plan:
    """A submission's initial transitions (see module docstring)."""

    #: True: nothing below; the applier runs distributed's own transitions
    stock: bool = False
    #: why (for the record), when ``stock``
    reason: str | None = None
    #: counts to add: id(group) -> [group, {(old, new): n}]
    moves: dict = field(default_factory=dict)
    #: log entries made: ``(key, start, finish, recommendations)``; the
    #: last ``maxlen`` of them (a deque), or all when ``complete`` (a list)
    entries: Any = field(default_factory=deque)
    complete: bool = False
    #: how many entries (and transitions) the replay made
    n_entries: int = 0
    #: when the entries were made (stock stamps each; one stamp here)
    now: float = 0.0
    #: the log records of the last entries (as many as the scheduler's log
    #: keeps), made here off the loop for the commit: ``(stimulus id,
    #: records)``, the records those of ``entries[-len(records):]``
    premade: Any = None
    #: queued root-ish tasks in visit order, and the log position of each
    queued: list = field(default_factory=list)
    queued_at: list = field(default_factory=list)
    #: the same, sorted for the queue; their sequence numbers start at
    #: ``seq_base`` (reserved in the scheduler's queue before the replay)
    queued_sorted: list = field(default_factory=list)
    queued_members: set = field(default_factory=set)
    #: (compact replay) the queued tasks' priority orders, in visit order,
    #: and the one queue number they were given
    queued_orders: list | None = None
    shared_seq: Any = None
    seq_base: int = 0
    seq_span: int = 0
    #: ready tasks that are not root-ish: (log position, task), visit order
    handoffs: list = field(default_factory=list)
    #: existing tasks that gain waiters: task -> [new waiters], or, for a
    #: task with no waiters set, ([new waiters], the set of them made ahead)
    outside_waiters: dict = field(default_factory=dict)
    #: whether the replay changed tasks the scheduler already had
    #: (resubmitted released tasks): then it must be applied at once
    live_writes: bool = False
    #: some queued tasks were queued here before: they are added one by one
    #: (``TaskQueue.add``), not merged as a sorted run
    requeued: bool = False
    #: where the hand-offs go, decided in the build thread
    #: (:mod:`slimgraph.ingest.dispatch`); None: one by one in the commit
    dispatch: Any = None
    #: how many hand-offs the commit published in bulk (for the record)
    dispatched: int = 0
    #: why the staged commit refused the build (None: not refused)
    refused: str | None = None
    #: the hand-offs the commit left to be sent in slices after it
    #: (:mod:`slimgraph.ingest.tail`); None: it sent them all
    tail: Any = None
    #: hand-offs held in the queue until sent (:func:`slimgraph.ingest.tail.hold`):
    #: all of them, sorted as the queue wants them; {id(group): [group, n]}
    held_members: Any = None
    held_sorted: Any = None
    held_groups: Any = None

    def temporaries(self) -> list:
        """Big containers only this plan holds (see slimgraph.runtime.disposal).
        Not the sorted run or its members: the scheduler's queue adopts them;
        not the hand-offs while a tail sends them (it frees them after)."""
        out = [self.queued, self.queued_at]
        # the log entries (a million and more when plugins listen), unless
        # the owed plugin calls took them (they free them when made)
        out += disposal.sole(self, "entries")
        if self.premade is not None:
            out.append(self.premade[1])
        if self.tail is None or self.tail.done:
            out.append(self.handoffs)
        if self.dispatch is not None:
            out += self.dispatch.temporaries()
            if self.dispatch.msg_at is not None and (self.tail is None or self.tail.done):
                out.append(self.dispatch.msg_at)
        return out


def replay(state: Any, b: Build, seq_base: int, complete_log: bool = False) -> Plan:
    """The initial transitions of build ``b`` on ``state`` (phase ``transitions``).

    ``seq_base``: the first of ``len(b.sub.index.reached)`` queue sequence
    numbers reserved for this submission (``TaskQueue.reserve``, on the
    event loop). ``complete_log``: keep every log entry, not only the tail
    (plugins that listen to transitions are told of each one when applying).
    """
    reason = stock_reason(state, b)
    if reason is not None:
        return Plan(stock=True, reason=reason)
    return _Replay(state, b, seq_base, complete_log).run()


def stock_reason(state: Any, b: Build) -> str | None:
    """Why the inlined transitions would not reproduce stock exactly for
    ``b`` (None: they do)."""
    if state.validate:
        return "validate=True"
    if state.transition_counter_max:
        return "transition counter limit"
    if b.run_specs or b.priorities or any(a == "dependencies" for _, a, _ in b.edges_of_existing):
        return "tasks the scheduler already has change"
    if len(b.new) == len(b.touched):
        # all new: released, with a run_spec and no lost dependencies; their
        # dependencies are among them (a task outside the graph would be
        # touched too), and a new task has no exception_blame
        return None
    new_tasks = b.tasks
    changed = {id(ts) for ts, _, _ in b.edges_of_existing}
    for ts in b.touched:
        for dts in ts.dependencies:
            x = dts._x
            if x.more.exception_blame:
                return "dependencies that erred"
    live = state.tasks
    seen: set = set()
    stack = [new_tasks.get(k) or live[k] for k in b.sub.keys]
    while stack:
        ts = stack.pop()
        if ts._state != "released" or id(ts) in seen:
            continue
        seen.add(id(ts))
        if ts.has_lost_dependencies or not ts.has_run_spec():
            return "lost dependencies or a task without run_spec"
        if id(ts) in changed:
            return "tasks the scheduler already has change"
        stack.extend(ts.dependencies)
    return None


def initial_recommendations(task_of: Any, keys: Any) -> dict:
    """Stock's: every requested released task -> waiting, most important
    last (the loop pops the most recent recommendation first)."""
    released = [ts for ts in map(task_of, keys) if ts._state == "released"]
    ordered = sorted_by_priority(released) if len(released) > 1000 else None
    if ordered is None:
        released.sort(key=operator.attrgetter("priority"), reverse=True)
    else:  # see sorted_by_priority: no long C-level sort in a thread
        released = ordered[::-1]
    return {ts.key: "waiting" for ts in released}


def blame(touched: list, recs: dict) -> None:
    """Stock's: a task with an erred dependency errs too."""
    for ts in touched:
        for dts in ts.dependencies:
            if dts.exception_blame:
                ts.exception_blame = dts.exception_blame
                recs[ts.key] = "erred"
                break


def _joins_waiters(dts: Any, ts: Any) -> None:
    """``ts`` waits on ``dts``, made waiting earlier by the replay: it joins
    the waiters being collected (a list), or starts them (``_PENDING``).
    Anything else would be a task known before this submission, which a
    compact replay never meets. (Rare in a top-down visit: a dependency is
    mostly still released when its dependent is visited.)"""
    w = dts.waiters
    if type(w) is list:
        w.append(ts)
    elif w is _PENDING:
        dts.waiters = [ts]
    else:  # pragma: no cover
        raise AssertionError(f"replay: {dts.key!r} gains a waiter after its waiters were final")


def _producers_by_index(graph: Any) -> bytearray:
    """``spec_data_producer`` of every task of a compact graph by index: 0
    or 1 where its segment decides it (CompactGraph.producer_flags), 2 where
    the task must be asked."""
    import numpy as np

    flags = graph.producer_flags()
    table = np.array([2 if f is None else int(f) for f in flags], dtype=np.uint8)
    codes = np.frombuffer(graph.codes, dtype=np.int64) if len(graph.codes) else np.zeros(0, dtype=np.int64)
    return bytearray(table[codes >> SHIFT].tobytes())


class _Replay:
    def __init__(self, state: Any, b: Build, seq_base: int, complete_log: bool):
        self.state = state
        self.b = b
        self.plan = Plan(seq_base=seq_base, seq_span=len(b.sub.index.reached), complete=complete_log)

    def run(self) -> Plan:
        st = self.state
        self.plan.now = time.time()
        maxlen = st.transition_log.maxlen
        if self.plan.complete:
            maxlen = None
        elif maxlen is not None:
            maxlen += LOG_SLACK
        fast = self._compact_rows(maxlen)
        out = self._run_compact(maxlen, *fast) if fast is not None else self._run_keys(maxlen)
        return self._finish(*out)

    def _run_keys(self, maxlen: int | None) -> tuple:
        """The loop, by key (any build)."""
        st = self.state
        b = self.b
        plan = self.plan
        lazy = st.slim_lazy
        new_tasks = b.tasks
        new_get = new_tasks.get
        live_get = st.tasks.get
        recs = initial_recommendations(lambda k: new_get(k) or st.tasks[k], b.sub.keys)
        entries: Any = [] if plan.complete else deque(maxlen=maxlen)
        append = entries.append
        to_waiting: list = []
        outside_waiters = plan.outside_waiters
        to_wait: dict = {}  # group -> tasks moved released -> waiting
        to_queue: dict = {}  # group -> tasks moved waiting -> queued
        queuing = not math.isinf(st.WORKER_SATURATION)
        queued = plan.queued
        queued_at = plan.queued_at
        handoffs = plan.handoffs
        n = 0
        popitem = recs.popitem
        update = recs.update
        rootish_by_group: dict = {}
        # spec_data_producer by the task's segment, where that decides it
        # (CompactGraph.producer_flags): one list read instead of four calls
        graph = b.sub.index.graph
        if graph is not None and queuing:
            flags = graph.producer_flags()
            codes = graph.codes
            handles = graph.handles
        else:
            graph = flags = codes = handles = None

        while recs:
            key, finish = popitem()
            ts = new_get(key) or live_get(key)
            if ts is None:
                continue
            start = ts._state
            if start == finish:
                continue  # distributed's transition does nothing (no entry)
            if finish == "waiting" and start == "released":
                # -- released -> waiting, inlined --
                if new_get(key) is not ts:
                    plan.live_writes = True
                ts._state = "waiting"
                tg = ts.group
                to_wait[tg] = to_wait.get(tg, 0) + 1
                new_recs = {}
                n_on = 0
                deps = ts.dependencies
                for dts in deps:
                    x = dts._x
                    if not x.who_has:
                        n_on += 1
                    ds = dts._state
                    if ds == "released":
                        new_recs[dts.key] = "waiting"
                    else:
                        w = dts.waiters
                        if type(w) is list:  # made waiting by this replay: joins its waiters
                            w.append(ts)
                        elif w is _PENDING:
                            dts.waiters = [ts]
                        else:
                            # known before this submission: it learns its new waiter
                            lst = outside_waiters.get(dts)
                            if lst is None:
                                outside_waiters[dts] = [ts]
                            else:
                                lst.append(ts)
                if n_on == len(deps):
                    if deps:
                        # stock inserts them in ``deps``' order: the very
                        # container when it is a thaw-stable Edges
                        # (a set is built by insertion, as stock's: copying a set would keep its layout)
                        ts.waiting_on = deps if lazy and type(deps) is not set else set(list(deps))
                    else:
                        ts.waiting_on = None if lazy else set()
                        new_recs[key] = "processing"
                else:
                    on = [d for d in deps if not d.who_has]
                    ts.waiting_on = (freeze(on) if on else None) if lazy else set(on)
                    if not on:
                        new_recs[key] = "processing"
                # waiters: stock makes a set of the dependents already
                # waiting (in dependents' order); each later one adds itself.
                # The insertion order decides the set's order: kept as a
                # list until the replay ends (see below).
                dependents = ts.dependents
                if not dependents:
                    ts.waiters = None if lazy else set()
                else:
                    w = [d for d in dependents if d._state == "waiting"]
                    if len(w) == len(dependents):  # final: no dependent is left to come
                        if lazy and type(dependents) is not set:
                            ts.waiters = dependents
                        else:
                            ts.waiters = set(w)
                    else:
                        ts.waiters = w if w else _PENDING
                        to_waiting.append(ts)
                append((key, "released", "waiting", new_recs))
                n += 1
                if new_recs:
                    update(new_recs)
                continue
            if finish == "processing" and start == "waiting":
                if queuing:
                    if ts._graph is graph and graph is not None:
                        h = ts._spec
                        dp = flags[codes[h if handles is None else handles[h]] >> SHIFT]
                        if dp is None:
                            dp = ts.spec_data_producer()
                    else:
                        dp = ts.spec_data_producer()
                    if self._queues(ts, dp, rootish_by_group):
                        # -- waiting -> processing -> queued, inlined --
                        ts._state = "queued"
                        tg = ts.group
                        to_queue[tg] = to_queue.get(tg, 0) + 1
                        queued_at.append(n)
                        queued.append(ts)
                        append((key, "waiting", "waiting", {key: "queued"}))
                        append((key, "waiting", "queued", {}))
                        n += 2
                        continue
                # decided when applying, where the workers are known
                handoffs.append((n, ts))
                continue
            raise AssertionError(f"replay met {start} -> {finish} for {key!r}")  # pragma: no cover
        return entries, n, to_waiting, to_wait, to_queue, rootish_by_group

    def _compact_rows(self, maxlen: int | None) -> tuple | None:
        """``(graph, off, idx)`` when the replay can run by index
        (:meth:`_run_compact`): a compact graph whose tasks are all new and
        all reached, nothing outside it, lazy containers, and a log kept to
        a bounded tail (no plugin hears every entry). None otherwise."""
        st = self.state
        b = self.b
        index = b.sub.index
        graph = index.graph
        if graph is None or not st.slim_lazy or maxlen is None or self.plan.complete:
            return None
        off = getattr(index.deps, "off", None)
        n = len(b.by_index)
        if off is None or len(off) != n + 1 or index.external or len(b.new) != n or len(b.touched) != n:
            return None
        pos = index.pos
        if not all(k in pos for k in b.sub.keys):
            return None
        return graph, off, index.deps.idx

    def _run_compact(self, maxlen: int, graph: Any, off: Any, didx: Any) -> tuple:
        """:meth:`_run_keys`' loop by graph index: the same visits, in the same
        order, with the same changes to the task states.

        Why: the loop by key spends most of its time hashing tuple keys
        (the recommendations dict, the lookups of the task states) and
        making a log entry, with its recommendations dict, per transition,
        though only the log's last ``maxlen`` entries are kept.

        It moves issue #13's update_graph target (array >= 8x stock's; 8.8x
        in the latest runs, met in 6 of the last 10). ``bench --workload
        array --tasks 1000000 --only slim``: the transitions phase's CPU
        2.7 and 3.1 s with it, 4.5 and 4.7 s with the loop by key only,
        +1.7 s on an update_graph of about 13 s (8.8x would be about 7.7x);
        the delayed tree 1.1 and 1.2 s against 1.7 s. The longest loop
        block 0.06 and 0.07 s with it, 0.11 and 0.27 s without (a busy
        machine).

        Here the recommendations dict holds graph indices (the same
        insertion and pop order, so the same visits), a task's state is also
        kept in a bytearray, a dependency's index comes from the CSR arrays
        (or its handle), and the loop records only which task each log
        position was; the kept tail of entries is made afterwards
        (:meth:`_tail_entries`), each one as the loop by key makes it."""
        st = self.state
        b = self.b
        plan = self.plan
        by_index = b.by_index
        n_tasks = len(by_index)
        pos = b.sub.index.pos
        WAIT, PROC = 0, 1
        # stock's initial recommendations, by index
        recs = {pos[k]: WAIT for k in initial_recommendations(lambda k: by_index[pos[k]], b.sub.keys)}
        state = bytearray(n_tasks)  # 0 released, 1 waiting, 2 queued
        # per log event, the task: i (one entry) or ~i (queued: two entries)
        events = array("q")
        event = events.append
        to_waiting: list = []
        to_wait: dict = {}
        to_queue: dict = {}
        queuing = not math.isinf(st.WORKER_SATURATION)
        queued = plan.queued
        queued_at = plan.queued_at
        handoffs = plan.handoffs
        # the queued tasks' queue number (one for all, see staged_run) and
        # priority orders, read here where each task is at hand; sorted at
        # the end (_order_queue_run)
        shared = plan.shared_seq = SharedSeq(plan.seq_base)
        orders = plan.queued_orders = []
        order = orders.append
        n = 0
        popitem = recs.popitem
        rootish_by_group: dict = {}
        handles = graph.handles
        if queuing:
            producer = _producers_by_index(graph)
        while recs:
            i, finish = popitem()
            s = state[i]
            if finish == WAIT:
                if s:
                    if s == 1:
                        continue  # already waiting (distributed's transition does nothing)
                    ts = by_index[i]
                    raise AssertionError(f"replay met {ts._state} -> waiting for {ts.key!r}")  # pragma: no cover
                # -- released -> waiting, inlined --
                ts = by_index[i]
                ts._state = "waiting"
                state[i] = 1
                event(i)
                tg = ts.group
                to_wait[tg] = to_wait.get(tg, 0) + 1
                deps = ts.dependencies
                lo = off[i]
                width = off[i + 1] - lo
                if width == 1:  # (the loop below, written out for the commonest row)
                    j = didx[lo]
                    if state[j]:
                        _joins_waiters(by_index[j], ts)
                    else:
                        recs[j] = WAIT
                    ts.waiting_on = deps
                elif width:
                    for dts in deps:
                        h = dts._spec
                        j = h if handles is None else handles[h]
                        if state[j]:
                            _joins_waiters(dts, ts)
                        else:
                            recs[j] = WAIT
                    ts.waiting_on = deps if type(deps) is not set else set(list(deps))
                else:
                    ts.waiting_on = None
                    recs[i] = PROC
                dependents = ts.dependents
                if not dependents:
                    ts.waiters = None
                else:
                    w = [d for d in dependents if d._state == "waiting"]
                    if len(w) == len(dependents):
                        ts.waiters = dependents if type(dependents) is not set else set(w)
                    else:
                        ts.waiters = w if w else _PENDING
                        to_waiting.append(ts)
                n += 1
                continue
            if s != 1:  # pragma: no cover
                ts = by_index[i]
                raise AssertionError(f"replay met {ts._state} -> processing for {ts.key!r}")
            ts = by_index[i]
            if queuing:
                dp = producer[i]
                if dp == 2:
                    dp = ts.spec_data_producer()
                if self._queues(ts, dp, rootish_by_group):
                    # -- waiting -> processing -> queued, inlined --
                    ts._state = "queued"
                    state[i] = 2
                    tg = ts.group
                    to_queue[tg] = to_queue.get(tg, 0) + 1
                    queued_at.append(n)
                    queued.append(ts)
                    ts._qseq = shared
                    order(ts._prio_order)
                    event(~i)
                    n += 2
                    continue
            handoffs.append((n, ts))
        entries = self._tail_entries(events, maxlen, graph, off)
        b.scratch += (events, state)
        return entries, n, to_waiting, to_wait, to_queue, rootish_by_group

    def _tail_entries(self, events: Any, maxlen: int, graph: Any, off: Any) -> deque:
        """The last ``maxlen`` log entries of :meth:`_run_compact`'s loop,
        made as :meth:`_run_keys` makes them: released -> waiting with the
        dependencies still released then (visited later) recommended
        ``waiting`` in the task's dependency order, and the task itself
        ``processing`` if it has no dependency; a queued task's two."""
        import numpy as np

        by_index = self.b.by_index
        handles = graph.handles
        # each task's log position (its released -> waiting entry)
        ev = np.frombuffer(events, dtype=np.int64) if len(events) else np.zeros(0, dtype=np.int64)
        one = ev >= 0
        width = np.where(one, 1, 2)
        visited_at = np.full(len(by_index), -1, dtype=np.int64)
        visited_at[ev[one]] = (np.cumsum(width) - width)[one]
        del ev, one, width
        picked = []
        count = 0
        for e in reversed(events):
            picked.append(e)
            count += 1 if e >= 0 else 2
            if count >= maxlen:
                break
        entries: deque = deque(maxlen=maxlen)
        append = entries.append
        for e in reversed(picked):
            if e < 0:
                key = by_index[~e].key
                append((key, "waiting", "waiting", {key: "queued"}))
                append((key, "waiting", "queued", {}))
                continue
            ts = by_index[e]
            at = int(visited_at[e])
            recs = {}
            if off[e + 1] == off[e]:
                recs[ts.key] = "processing"
            else:
                for dts in ts.dependencies:
                    h = dts._spec
                    j = h if handles is None else handles[h]
                    if visited_at[j] > at:
                        recs[dts.key] = "waiting"
            append((ts.key, "released", "waiting", recs))
        return entries

    def _finish(self, entries: Any, n: int, to_waiting: list, to_wait: dict, to_queue: dict,
                rootish_by_group: dict) -> Plan:
        st = self.state
        b = self.b
        plan = self.plan
        lazy = st.slim_lazy
        sid = b.sub.stimulus_id
        outside_waiters = plan.outside_waiters
        # waiters still being made: in stock's insertion order by now
        for ts in to_waiting:
            w = ts.waiters
            if w is _PENDING:
                ts.waiters = None if lazy else set()
            elif lazy:
                ts.waiters = freeze(w)
            else:
                ts.waiters = set(w)
        moves = plan.moves
        for moved, old, new in ((to_wait, "released", "waiting"), (to_queue, "waiting", "queued")):
            for tg, k in moved.items():
                m = moves.get(id(tg))
                if m is None:
                    moves[id(tg)] = m = [tg, {}]
                m[1][(old, new)] = m[1].get((old, new), 0) + k
        plan.entries = entries
        plan.n_entries = n
        keep = st.transition_log.maxlen
        if keep is not None and entries:
            # the commit keeps the log's last records: made here (a full
            # log's worth is a long step on the loop), the commit slices them
            # (a complete log is a list of every entry: sliced, not copied whole)
            last = entries[-keep:] if type(entries) is list else list(entries)[-keep:]
            now = plan.now
            make = shim.Transition
            plan.premade = (sid, [make(k, a, f, r, sid, now) for k, a, f, r in last])
        # an outside task with no waiters set (slim allocates it lazily)
        # gets it made here, off the commit (hashing every task of a big
        # graph on persisted inputs is a long step there), as the commit would
        # make it: by insertion. The commit adopts it while the task still
        # has none (what the build read, checked before it publishes).
        for dts, lst in outside_waiters.items():
            if dts.waiters is None:
                outside_waiters[dts] = (lst, set(lst))
        self._order_queue_run()
        b.scratch += (to_waiting, rootish_by_group)
        return plan

    def _queues(self, ts: Any, data_producer: Any, by_group: dict) -> bool:
        """Whether the ready task ``ts`` is root-ish, so queued (distributed's
        ``is_rootish``, projected). It depends on the task only through its
        restrictions and ``run_spec.data_producer``, otherwise on its group,
        which does not change during an ingestion: decided once per group
        (``by_group``) for tasks with neither."""
        more = ts._x.more
        if more is NO_RARE and not data_producer:
            tg = ts.group
            r = by_group.get(tg)
            if r is None:
                r = by_group[tg] = self.projected_rootish(ts, data_producer)
            return r
        return more._queueable and self.projected_rootish(ts, data_producer)

    def projected_rootish(self, ts: Any, data_producer: bool | None = None) -> bool:
        """``SchedulerState.is_rootish`` as it will be once the scheduler's
        own groups have counted this submission's tasks and edges
        (``data_producer``: ``ts.spec_data_producer()``, if known)."""
        if ts.resource_restrictions or ts.worker_restrictions or ts.host_restrictions:
            return False
        if ts.spec_data_producer() if data_producer is None else data_producer:
            return True
        st = self.state
        b = self.b

        def size(g: Any) -> int:
            d = b.group_delta(g)
            return shim.group_size(g) + (d.added if d is not None else 0)

        tg = ts.group
        d = b.group_delta(tg)
        deps = tg.dependencies if d is None else (tg.dependencies | d.dependencies)
        return (
            size(tg) > st.total_nthreads * 2
            and len(deps) < st.rootish_tg_threshold
            and sum(map(size, deps)) < st.rootish_tg_dependencies_threshold
        )

    def _order_queue_run(self) -> None:
        """Number the queued tasks and sort them (``staged_run``: in visit
        order, from the reserved range)."""
        plan = self.plan
        run = plan.queued
        base = plan.seq_base
        # a resubmitted task may have been queued here before: the queue's
        # own ``add`` takes those (in visit order, when applying). (Not in a
        # compact replay, whose tasks are all new, and hold its number.)
        compact = plan.queued_orders is not None
        plan.requeued = plan.live_writes and not compact and any(ts._qseq is not None for ts in run)
        if plan.requeued:
            plan.queued_members = set(run)
            return
        plan.queued_members = set(run)
        if compact and self.b.one_head is not None and len(plan.queued_orders) == len(run):
            # every queued task holds plan.shared_seq and one priority head
            # (the build's): sorted by the orders the replay read
            ordered = sorted_by_orders(run, plan.queued_orders)
            plan.queued_orders = None  # (freed here, in the build's thread)
            if ordered is not None:
                plan.queued_sorted = ordered
                return
        plan.queued_sorted = staged_run(run, base)
