"""A staged commit's ready tasks beyond its first slice, dispatched in
slices on the event loop after it.

Why. A staged commit publishes the whole graph at once, and used to send
every ready task to a worker in the same block. Even in bulk
(:mod:`slimgraph.ingest.dispatch`, a few microseconds a task) that is one
block per submission that grows with it: on inputs persisted beforehand,
a 1M-task array has 745k ready tasks, and the commit blocked the loop for
9 s (``bench --mode client --real-use``).

What. A submission with at least ``slimgraph-switches.dispatch-slice-min-tasks``
ready tasks (*hand-offs*: ready, not root-ish, no restrictions) has them
*held* in the scheduler's queue (:func:`hold`, in the build thread). The
commit sends those it can within ``slimgraph-switches.dispatch-slice`` and puts the
others in the queue. A :class:`Tail` then sends them, in the replay's
order, one slice per turn of the scheduler's executor
(:mod:`slimgraph.runtime.loopwork`; at most ``dispatch-slice`` and the
executor's budget): each slice takes the workers as they are now,
runs distributed's own worker choice on a shadow of them for its tasks
(:func:`slimgraph.ingest.dispatch.shadow`, here on the loop) and publishes
them in bulk; where the shadow cannot decide (inputs on several
workers) distributed's own transition sends them one by one. A slice's
length adapts to stay near ``dispatch-slice``.

The state in between. A held task is ``queued``: in ``scheduler.queued``,
its inputs in memory, no restrictions. That is a state stock's own tasks
are in (a queued task stays queued when its group stops being root-ish),
``validate_state`` accepts it, and distributed's own code treats it as any
queued task: a worker with a free slot may take it (then the tail passes
over it), a client releasing it releases it. A task that is not waiting
on anything else but is ``waiting`` would not do: ``validate_waiting``
requires ``waiting_on``. Holding is not a transition: no log entry, no
plugin call, no ``state_counts``; the group's state counts do say
``queued``, so dask's dashboard shows the held tasks as queued. When its
slice comes, a task leaves the queue and makes stock's own
``waiting -> processing`` transition, logged and told as stock's.

What differs from stock is when a ready task is sent: other handlers (a
second client's small submission, a worker's result) may run between two
slices. Where nothing runs in between (the differential tests), every task
ends on stock's worker, with stock's messages in stock's order.

Plugins still hear stock's sequence of calls. The commit's owed
transition calls (:mod:`slimgraph.ingest.deliveries`) list the replay's
transitions with the hand-offs' spliced in at their place; the list waits
(:data:`slimgraph.ingest.deliveries.WAIT`) at the first hand-off the tail
has not sent yet, so every call is made at or after its transition, in
stock's order. The transition log gets the tail's entries as they happen:
per key, stock's transitions.

One tail runs at a time per scheduler, in commit order (:class:`Tails`):
a commit made while one runs leaves all of its ready tasks to its own
tail, behind, so that the ready tasks of two graphs go out in stock's
order.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from time import perf_counter
from types import SimpleNamespace
from typing import Any

from dask.utils import parse_timedelta

from slimgraph import shim, switches
from slimgraph.ingest import dispatch, pacing
from slimgraph.runtime import disposal, loopwork

logger = logging.getLogger("distributed.scheduler")

#: hand-offs in the first slice shadowed; later ones adapt to the time
FIRST_BATCH = 1000

_NO_BUILD = SimpleNamespace(prefixes={}, sub=SimpleNamespace(actors=None))


def slice_seconds() -> float:
    """The ``dispatch-slice`` switch in seconds (0: no tail)."""
    v = switches.get("dispatch-slice")
    if not v:
        return 0.0
    return float(parse_timedelta(v, default="s"))


def wanted(state: Any, b: Any, plan: Any) -> bool:
    """Whether a commit of ``plan`` sends its ready tasks in slices: many of
    them, none queued as root-ish, none with restrictions or an actor."""
    if not slice_seconds() or plan.queued or state.validate or b.sub.actors or plan.stock:
        return False
    if len(plan.handoffs) < int(switches.get("dispatch-slice-min-tasks")):
        return False
    return all(dispatch._qualifies(ts) for _, ts in plan.handoffs)


def hold(state: Any, b: Any, plan: Any) -> None:
    """Hold ``plan``'s hand-offs in the queue until sent (in the build
    thread, on the build's own tasks; see the module docstring): their
    state, their order in the queue (priority, then the submission's
    reserved sequence numbers, as :meth:`TaskQueue.merge_staged` wants),
    the group counts to move when publishing."""
    from slimgraph.model.queue import staged_run

    if not wanted(state, b, plan):
        return
    run = [ts for _, ts in plan.handoffs]
    groups: dict = {}
    for ts in run:
        ts._state = "queued"
        g = groups.get(id(ts.group))
        if g is None:
            groups[id(ts.group)] = [ts.group, 1]
        else:
            g[1] += 1
    plan.held_members = set(run)
    plan.held_sorted = staged_run(run, plan.seq_base)
    plan.held_groups = groups


def release_held(tasks: list) -> None:
    """Held tasks (just taken out of the queue) back in ``waiting``, their
    slice about to send them."""
    groups: dict = {}
    for ts in tasks:
        ts._state = "waiting"
        tg = ts.group
        groups[tg] = groups.get(tg, 0) + 1
    for tg, n in groups.items():
        shim.count_held(tg, "queued", "waiting", n)


def tails(state: Any) -> "Tails":
    """The scheduler's tails (made on first use)."""
    t = state.slim_tails
    if t is None:
        t = state.slim_tails = Tails()
    return t


class Tail:
    """A committed plan's hand-offs from ``plan.handoffs[ni]`` on.

    ``told_later``: plugins kept from hearing the transitions as they
    happen (id -> plugin); ``made``: where their records go, for the owed
    calls (``(log position, 0, records)``, in order)."""

    def __init__(self, state: Any, plan: Any, sid: str, ni: int, told_later: dict, made: list | None):
        self.state = state
        self.plan = plan
        self.sid = sid
        self.ni = ni
        self.told_later = told_later
        self.made = made
        self.batch = FIRST_BATCH
        self.gate_open = False
        self.done = ni >= len(plan.handoffs)
        #: the build thread's shadow: its messages are taken where still right
        self.reuse = plan.dispatch if plan.dispatch is not None and plan.dispatch.msg_at is not None else None
        #: figures for the record: slices, tasks sent (in bulk), longest slice
        self.slices = 0
        self.sent = 0
        self.bulk = 0
        self.longest = 0.0
        self.started = perf_counter()
        self._record: Any = None

    def retire(self) -> None:
        """Sent to the end: the plan no longer points back at its tail.

        The plan and its tail hold each other (``plan.tail``, ``tail.plan``),
        and the plan holds the build thread's shadow, whose runs list task
        states: a cycle that reference counting cannot free. Left to the
        cyclic collector, it kept every task state of those runs alive after
        the graph was released, until a full collection (1M delayed tree:
        187,500 task states and 375,000 sets; after a big ingestion's freeze,
        a collection that held the loop 5.9 s once the scheduler was idle)."""
        if self.plan.tail is self:
            self.plan.tail = None

    def report_to(self, record: Any) -> None:
        """Keep ``record.sent_in_slices`` up to date, and its
        ``longest_block_s`` counting the longest slice (other handlers'
        blocks meanwhile are theirs, not this submission's)."""
        self._record = record
        self._report()

    def _report(self) -> None:
        record = self._record
        if record is None:
            return
        record.sent_in_slices = {
            "tasks": self.sent,
            "in_bulk": self.bulk,
            "slices": self.slices,
            "seconds": perf_counter() - self.started,
            "longest_slice_s": self.longest,
            "done": self.done,
        }
        if record.longest_block_s is not None:
            record.longest_block_s = max(record.longest_block_s, self.longest)
        causes = record.block_causes
        if causes is not None and self.longest >= 0.05:  # (causes keep blocks >= 50 ms)
            own = causes.get("ingestion")
            if own is None or self.longest > own["seconds"]:
                causes["ingestion"] = {"seconds": self.longest, "label": "slimgraph: a slice of ready tasks"}

    def open_gate(self) -> None:
        """Owed calls stop waiting for this tail (a flush: see
        :meth:`slimgraph.ingest.deliveries.Deliveries.flush`); from now on
        plugins hear of its transitions as they happen."""
        self.gate_open = True
        self.told_later = {}
        self.made = None

    @property
    def next_pos(self) -> int | None:
        """Log position of the first hand-off not sent yet (None: all are)."""
        if self.done:
            return None
        return self.plan.handoffs[self.ni][0]

    def gone(self, ts: Any) -> bool:
        """No longer held: released, forgotten, or taken from the queue by
        distributed itself meanwhile (each changes its state: a ``queued``
        task is in the queue, as ``validate_state`` checks)."""
        return ts._state != "queued" or self.state.tasks.get(ts.key) is not ts

    def unhold(self, tasks: list) -> None:
        """Take held ``tasks`` out of the queue, ready to be sent now."""
        discard = self.state.queued.discard
        for ts in tasks:
            discard(ts)
        release_held(tasks)

    def step(self, seconds: float) -> None:
        """Send one slice of about ``seconds``."""
        state = self.state
        plan = self.plan
        handoffs = plan.handoffs
        sid = self.sid
        t0 = perf_counter()
        deadline = t0 + seconds
        client_msgs: dict = {}
        worker_msgs: dict = {}
        made: list = []
        told_later = self.told_later
        owed = state.slim_deliveries if told_later else None
        log = state.transition_log
        # the owed-to plugins hear of this slice's transitions through the
        # commit's owed calls, in place; the log gets its entries in order
        with contextlib.ExitStack() as stack:
            if owed is not None:
                stack.enter_context(owed.told_by_caller())
            entries = stack.enter_context(shim.own_step(state, told_later))
            while self.ni < len(handoffs):
                n = self.batch
                t = perf_counter()
                view = dispatch.take_view(state)
                d = None
                if view is not None:
                    d = dispatch.shadow(
                        state, _NO_BUILD, plan, view, start=self.ni, limit=n, skip=self.gone, reuse=self.reuse
                    )
                if d is not None and d.holds(state):
                    before = len(made)
                    _, self.ni = dispatch.publish(
                        state, d, plan, sid, worker_msgs, None, made, None, None, unhold=self.unhold
                    )
                    sent = len(made) - before
                    self.bulk += sent
                    state.slim_dispatched += sent
                else:
                    end = min(len(handoffs), self.ni + n)
                    sent = 0
                    while self.ni < end:
                        pos, ts = handoffs[self.ni]
                        self.ni += 1
                        if self.gone(ts):
                            continue
                        self.unhold([ts])
                        shim.transitions(state, {ts.key: "processing"}, client_msgs, worker_msgs, sid)
                        made.append((pos, 0, entries.take()))
                        sent += 1
                self.sent += sent
                took = perf_counter() - t
                # the next batch: a quarter of a slice at this pace (at most
                # twice the last: the pace varies with the tasks and the GIL)
                per = took / max(n, 1)
                fit = seconds / 4 / per if per > 0 else float("inf")
                self.batch = max(20, 2 * n if fit >= 2 * n else int(fit))
                if perf_counter() + per * self.batch > deadline:
                    break
        for _, _, records in made:
            log.extend(records)
        if told_later and self.made is not None:
            self.made.extend(made)
        self.done = self.ni >= len(handoffs)
        pacing.send_all(state, client_msgs, worker_msgs)
        self.slices += 1
        self.longest = max(self.longest, perf_counter() - t0)
        self._report()


class Tails:
    """The tails a scheduler still sends, oldest first: one background job
    on the scheduler's executor (:meth:`slimgraph.runtime.loopwork.LoopWork.spawn`),
    a slice of the oldest tail per turn."""

    def __init__(self) -> None:
        self.queue: deque[Tail] = deque()
        self._job: Any = None
        #: slices sent so far, and the tasks they sent (all tails)
        self.slices = 0
        self.sent = 0

    def __bool__(self) -> bool:
        return bool(self.queue)

    def add(self, tail: Tail) -> None:
        if tail.done:
            tail.retire()
            return
        self.queue.append(tail)
        if self._job is None:
            self._job = self._run()
            loopwork.of(tail.state).spawn(self._job)

    def _step(self, seconds: float) -> None:
        tail = self.queue[0]
        slices, sent = tail.slices, tail.sent
        try:
            tail.step(seconds)
        except Exception:
            # the rest still has to go: distributed's transitions, now
            logger.exception("slimgraph: a slice of ready tasks failed; sending the rest one by one")
            with switches.set(bulk_dispatch=False):
                tail.step(float("inf"))
        self.slices += tail.slices - slices
        self.sent += tail.sent - sent
        if tail.done:
            self.queue.popleft()
            tail.retire()
            # its hand-off list (a tuple per task) and messages: freed in
            # a thread, in steps
            garbage = [tail.plan.handoffs]
            if tail.reuse is not None:
                garbage.append(tail.reuse.msg_at)
            tail.reuse = None
            disposal.free_later(garbage)

    def _run(self) -> Any:
        """The job: a slice of the oldest tail per turn of the executor."""
        try:
            while self.queue:
                tail = self.queue[0]
                if getattr(getattr(tail.state, "status", None), "name", "running") in ("closing", "closed", "failed"):
                    for t in self.queue:
                        t.retire()
                    self.queue.clear()
                    return
                work = loopwork.of(tail.state)
                self._step(min(slice_seconds() or 0.05, max(work.budget.left(), 0.001)))
                yield
        finally:
            self._job = None

    def finish_now(self) -> None:
        """Send everything still owed, now (a plugin is being removed)."""
        while self.queue:
            self._step(float("inf"))

    async def wait(self) -> None:
        """Until every tail is sent (tests)."""
        while self.queue or self._job is not None:
            await asyncio.sleep(0.005)
