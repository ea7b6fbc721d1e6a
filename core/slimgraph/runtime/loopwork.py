"""Work on the event loop in slices, and the stimuli that wait behind it.

What. A :class:`LoopWork` (one per slim scheduler, ``scheduler.slim_work``)
runs *jobs*: generators that do a stimulus' work a step at a time and
yield when their slice's :class:`Budget` is spent (``budget.over()``), at a
point where what they did so far is consistent (messages sent). The first
slice runs inside the handler that started the job, so work that fits in
one slice (almost every stimulus) runs as stock's does, at once. What is
left runs in later slices, one per turn of the loop, each followed by a
rest as long as itself where the turn in between found others' work
ready (the policy: :func:`rest_after`), cut short as soon as others
stop using the loop (:func:`_rest`); on a loop with nothing else to do,
the slices follow each other.

Invariant. While a job is unfinished, no other stimulus reaches the
scheduler's state: the scheduler's handler tables (:class:`Handlers`) hand
out a *holding* version of every handler but :data:`PASS`. A held stream
message waits in :attr:`LoopWork.held` and is handled, in arrival order,
when the jobs are done; a held RPC call (and a coroutine stream handler,
which ``handle_stream`` awaits, so that its comm's later messages wait
too) waits for :meth:`LoopWork.idle`. So every stimulus meets the state
stock's would: the job's stimulus had been handled whole before it. A job
started by a held stimulus (when it is replayed) runs before the stimuli
held behind it. What still runs between two slices reads the state (the
dashboards, :data:`PASS`'s handlers, periodic callbacks such as work
stealing's balance): stock's own state between two transitions of one
call (see :mod:`slimgraph.life.release`).

*Background* jobs (:meth:`LoopWork.spawn`) share the same slices and the
same rests but hold nothing: each of their steps leaves a state that
stock's own could be in, so other stimuli run between their slices. They
are the work a staged commit leaves for after it: its ready tasks sent in
slices (:mod:`slimgraph.ingest.tail`), the plugin calls it owes
(:mod:`slimgraph.ingest.deliveries`) and each worker's paced messages
(:mod:`slimgraph.ingest.pacing`). Holding jobs go first; background
jobs take turns, in the order they were spawned, within one slice. A
background job that can do nothing yet (owed calls waiting for a task a
tail has not sent) yields :data:`WAITING`; when all of them wait, the
executor looks again a few milliseconds later. A step whose work goes on
outside its slice (a paced slice of messages, which distributed serializes
on the loop when its stream writes it) yields :class:`Spent` once that work
is seen done: it counts in the rest after the slice as the slice's own.

Used by :mod:`slimgraph.life.release` (a client's release or cancel of a
big graph), :mod:`slimgraph.ingest.tail`, :mod:`slimgraph.ingest.deliveries`
and :mod:`slimgraph.ingest.pacing`: every step slimgraph runs on the loop
after a commit.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections import deque
from time import perf_counter, thread_time
from typing import Any, Callable, Generator

from slimgraph import config
from slimgraph.runtime import gcpause

logger = logging.getLogger("distributed.scheduler")

#: Seconds a slice of a job may take (the slice ends at the job's next
#: consistent point after it: one transition later, for a release).
SLICE = 0.02

#: A turn of the loop that used more of the loop thread's CPU than this
#: (seconds) had others' work in it. CPU, not wall time: on a machine whose
#: cores are busy elsewhere the process is preempted in an empty turn too,
#: and a rest after every slice then made a release several times longer
#: than stock's (108 s against 23 s for a 1M array, the machine loaded)
OTHERS = 0.0002

#: Handlers that never wait behind a job: they only read the state or touch
#: what no job touches (a worker's heartbeat keeps it alive; a client's keeps
#: its connection; ``identity`` is what a ping asks). Names starting with
#: ``slimgraph_`` (the instruments) pass too.
PASS = frozenset({"keep-alive", "heartbeat-client", "heartbeat_worker", "identity"})

Job = Generator[Any, None, None]

#: What a background job yields when its next step must wait for another
#: job's (see the module docstring)
WAITING = object()
#: How long the executor sleeps when every background job is waiting (seconds)
RECHECK = 0.005


class Spent:
    """What a background job yields when work its earlier step caused ran on
    the loop outside the job's slices (``seconds`` of it): the rest after
    this slice counts it (see the module docstring)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = max(0.0, seconds)


def rest_after(seconds: float) -> float:
    """How long the loop is left to others after a step of ``seconds``:
    that times ``slimgraph.background-rest`` (0: no rest). Why: another
    client's round trip needs a few turns of the loop (the read, the
    handler, the write); with a step of ours in every turn, it paid for one
    in each (benchmarks/LOG.md has the pings with and without)."""
    r = float(config.get("background-rest") or 0.0)
    if r < 0:
        raise ValueError(f"slimgraph.background-rest must be >= 0, got {r!r}")
    return max(0.0, seconds) * r


#: The rest after a slice is taken in steps of this many seconds; a step in
#: which others used no more than :data:`OTHERS` of the loop thread's CPU
#: ends it. Why: a turn that found others' work is most often one of
#: distributed's periodic callbacks, done within the turn; a full rest
#: after each left a 1M graph's release idle for ~2 s of its ~21 s
#: (benchmarks/LOG.md). A round trip in progress (a client's message read
#: chunk by chunk, a dashboard's update) keeps using the loop in every
#: step and gets the whole rest.
REST_STEP = 0.002


async def _rest(seconds: float) -> None:
    """Leave the loop to others for up to ``seconds``, in steps of
    :data:`REST_STEP`, until a step finds nothing of theirs to run."""
    end = perf_counter() + seconds
    while True:
        left = end - perf_counter()
        if left <= 0:
            return
        t1 = thread_time()
        await asyncio.sleep(min(REST_STEP, left))
        if thread_time() - t1 <= OTHERS:
            return


class Budget:
    """A slice's deadline, which a job checks at its consistent points."""

    __slots__ = ("deadline",)

    def __init__(self) -> None:
        self.deadline = 0.0

    def start(self) -> None:
        self.deadline = perf_counter() + SLICE

    def over(self) -> bool:
        return perf_counter() > self.deadline

    def left(self) -> float:
        """Seconds left in this slice (never negative)."""
        return max(0.0, self.deadline - perf_counter())


class LoopWork:
    """A scheduler's jobs in progress, and the stimuli held behind them."""

    def __init__(self) -> None:
        self.budget = Budget()
        self.jobs: deque = deque()
        self.held: deque = deque()
        #: background jobs (:meth:`spawn`), oldest first
        self.background: deque = deque()
        self._waiters: list = []
        self._task: Any = None
        self._running = False
        self._shielded = False
        #: called between two slices (tests: validating the state)
        self.between: Callable[[], None] | None = None
        #: the recommendations a job's transitions still have to make
        #: (:func:`slimgraph.life.release.transitions`), between its slices
        self.pending: dict | None = None
        #: slices run so far, and the longest (seconds)
        self.slices = 0
        self.longest = 0.0
        #: seconds the background jobs' steps reported as spent outside
        #: this slice (:class:`Spent`)
        self._spent = 0.0

    @property
    def busy(self) -> bool:
        return bool(self.jobs or self.held)

    def holds(self) -> bool:
        """Whether a stimulus arriving now must wait (jobs or held stimuli
        pending, and it is not one of them being run)."""
        return self.busy and not self._running

    def run(self, job: Job) -> None:
        """Start ``job``: its first slice now, the rest on the loop."""
        if self._running or self.busy:
            # a held stimulus replayed (or anything called by a job's step)
            # starting another: it runs after the work before it
            self.jobs.append(job)
            return
        self.jobs.append(job)
        self._slice(first=True)
        if self.busy:
            if not self._shielded and config.get("gc") != "stock":
                # a collection while a job runs on would traverse what the
                # scheduler holds (0.37 s of a slice at 1M tasks): frozen
                # first instead, until the jobs end (runtime.gcpause.shield)
                gcpause.shield()
                self._shielded = True
            self._start()

    def spawn(self, job: Job) -> None:
        """Run ``job`` in the background: slices on the loop, after the
        holding jobs, nothing held meanwhile (see the module docstring)."""
        self.background.append(job)
        self._start()

    def finish_now(self) -> None:
        """Run every job and held stimulus to the end, now (before something
        that must find their work done, such as a plugin's removal)."""
        while self.busy:
            self._slice(first=False, budget=False)

    def _background_slice(self) -> bool:
        """One slice of the background jobs, each in turn while the budget
        lasts. Whether any of them did something (False: all waiting)."""
        self.budget.start()
        jobs = self.background
        did = False
        for _ in range(len(jobs)):
            job = jobs[0]
            try:
                got = next(job)
            except StopIteration:
                jobs.popleft()
                did = True
                continue
            except Exception:
                jobs.popleft()
                logger.exception("slimgraph: a background job on the event loop failed")
                continue
            jobs.rotate(-1)
            if got is not WAITING:
                did = True
                if type(got) is Spent:
                    self._spent += got.seconds
            if self.budget.over():
                break
        return did

    # ------------------------------------------------------------------
    def _slice(self, first: bool, budget: bool = True) -> None:
        t0 = perf_counter()
        if budget:
            self.budget.start()
        else:
            self.budget.deadline = float("inf")
        self._running = True
        try:
            while self.jobs or self.held:
                if self.jobs:
                    job = self.jobs[0]
                    try:
                        next(job)
                    except StopIteration:
                        self.jobs.popleft()
                    except BaseException:
                        self.jobs.popleft()
                        if first:
                            raise  # the handler's caller gets stock's error
                        logger.exception("slimgraph: a job on the event loop failed")
                    else:
                        return  # its slice is spent
                else:
                    fn, args, kwargs = self.held.popleft()
                    try:
                        fn(*args, **kwargs)
                    except Exception:
                        logger.exception("slimgraph: a held stimulus failed")
                first = False
                if budget and self.budget.over():
                    return
        finally:
            self._running = False
            self.slices += 1
            self.longest = max(self.longest, perf_counter() - t0)
            if not self.busy:
                if self._shielded:
                    self._shielded = False
                    gcpause.unshield()
                self._wake()

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self.busy or self.background:
            t0 = perf_counter()
            if self.busy:
                if self.between is not None:
                    self.between()
                self._slice(first=False)
            elif not self._background_slice():
                await asyncio.sleep(RECHECK)
                continue
            took = perf_counter() - t0
            spent, self._spent = self._spent, 0.0
            # one turn of the loop to whatever is ready; where something was
            # (a round trip needs a few turns), a rest as long as the slice
            # while they go on using the loop; after work of ours outside the
            # slice (a paced write), the whole rest
            t1 = thread_time()
            await asyncio.sleep(0)
            if spent:
                await asyncio.sleep(rest_after(took + spent))
            elif thread_time() - t1 > OTHERS:
                await _rest(rest_after(took))

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def idle(self) -> None:
        """Until no job runs and nothing is held."""
        while self.busy:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            await fut

    # ------------------------------------------------------------------
    # handlers that wait behind the jobs
    def holding_stream(self, fn: Callable) -> Callable:
        """A stream handler that waits while jobs run (see the module)."""
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def waits(*args: Any, **kwargs: Any) -> Any:
                await self.idle()
                return await fn(*args, **kwargs)

            return waits

        @functools.wraps(fn)
        def held(*args: Any, **kwargs: Any) -> None:
            if self.holds():
                self.held.append((fn, args, kwargs))
            else:
                fn(*args, **kwargs)

        return held

    def holding_rpc(self, fn: Callable) -> Callable:
        """An RPC handler that waits while jobs run (its result, awaited by
        distributed's ``handle_comm``, is a coroutine)."""

        @functools.wraps(fn)
        def waits(*args: Any, **kwargs: Any) -> Any:
            return self._after_idle(fn, args, kwargs)

        return waits

    async def _after_idle(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        await self.idle()
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result


class Handlers(dict):
    """A scheduler's handler table (``handlers`` or ``stream_handlers``)
    that hands out the holding version of a handler while jobs run.

    distributed looks a handler up by ``table[op]`` for every message it
    reads; with nothing running, that is the handler itself."""

    __slots__ = ("work", "rpc")

    def __init__(self, table: dict, work: LoopWork, rpc: bool):
        super().__init__(table)
        self.work = work
        self.rpc = rpc

    def __getitem__(self, op: Any) -> Any:
        fn = dict.__getitem__(self, op)
        work = self.work
        if not work.holds() or op in PASS or (isinstance(op, str) and op.startswith("slimgraph_")):
            return fn
        return work.holding_rpc(fn) if self.rpc else work.holding_stream(fn)


def of(state: Any) -> LoopWork:
    """``state``'s executor: a slim scheduler's ``slim_work``; a state
    without handler tables (an offline scheduler, the state machine's
    bench) gets one on first use, holding nothing since nothing reaches it
    through a table."""
    work = getattr(state, "slim_work", None)
    if work is None:
        work = state.slim_work = LoopWork()
    return work


def attach(scheduler: Any) -> LoopWork:
    """Give ``scheduler`` its :class:`LoopWork` and holding handler tables
    (once; handlers added later, by extensions, are held too)."""
    work = of(scheduler)
    if not isinstance(scheduler.handlers, Handlers):
        scheduler.handlers = Handlers(scheduler.handlers, work, rpc=True)
    if not isinstance(scheduler.stream_handlers, Handlers):
        scheduler.stream_handlers = Handlers(scheduler.stream_handlers, work, rpc=False)
    return work
