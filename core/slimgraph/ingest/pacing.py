"""A big commit's worker messages, handed to distributed's streams in slices.

Why. A staged commit publishes a graph's ready tasks at once, as stock's
``update_graph`` does, and so gives a worker's ``BatchedSend`` hundreds of
thousands of ``compute-task`` messages in one go. distributed serializes a
batch on the event loop (the scheduler never offloads its writes:
``Scheduler.rpc.allow_offload = False``; a stream's ``comm.write`` pickles
every ``run_spec`` and packs every message there), about 35-90 us a
message. Measured with ``bench --mode client --real-use`` at 1M tasks (an
array on persisted inputs: 745k tasks ready at once): one 67 s block in
``protocol.dumps`` right after a 5 s commit, the longest of the run. Stock
pays the same after its own ``update_graph``.

How. When a commit gives a worker more than ``slimgraph-switches.pace-messages``
messages, a :class:`Pacer` holds them and hands them to the worker's stream
in slices of that many, as a background job of the scheduler's executor
(:mod:`slimgraph.runtime.loopwork`): a slice is handed to the
``BatchedSend`` once its buffer is empty (the previous slice taken for
writing), so each write serializes one slice and the loop runs in
between; the write of a slice counts as the step's time in the executor's
rest (:class:`~slimgraph.runtime.loopwork.Spent`). Every message sent to
that worker meanwhile, from any handler (another submission, work
stealing, a ``free-keys``), joins the queue behind them: the stream is a
:class:`slimgraph.shim.PacedStream`, whose ``send`` goes to its pacer
while it holds messages. The worker receives exactly the messages stock
would have sent, in the same order, only spread over time. Closing the
stream (``close``) flushes what is still queued first, as closing flushes a
buffer; aborting it drops them, as aborting drops a buffer.

The scheduler's state is not touched: the tasks are ``processing`` on
their workers at the commit, as on stock, whose messages also reach the
wire only after its ``update_graph`` has returned.
"""
from __future__ import annotations

from collections import deque
from time import perf_counter
from typing import Any

from slimgraph import shim, switches
from slimgraph.runtime import loopwork

__all__ = ["send_all", "Pacer"]


def send_all(state: Any, client_msgs: dict, worker_msgs: dict) -> None:
    """``state.send_all``, with big per-worker lists paced (see the module
    docstring)."""
    n = switches.get("pace-messages")
    streams = getattr(state, "stream_comms", None)
    if n and streams:
        rest = {}
        for address, msgs in worker_msgs.items():
            bs = streams.get(address)
            if (
                len(msgs) > n
                and isinstance(bs, shim.PacedStream)
                and bs.pacer is None  # (else its send queues them)
                and not bs.closed()
            ):
                Pacer(bs, msgs, n).start(loopwork.of(state))
            else:
                rest[address] = msgs
        worker_msgs = rest
    state.send_all(client_msgs, worker_msgs)


class Pacer:
    """Holds one stream's messages and hands them over in slices, a job of
    the scheduler's executor; while it holds any, the stream's ``send``,
    ``close`` and ``abort`` come here (:class:`slimgraph.shim.PacedStream`)."""

    #: slices handed over by all pacers (tests, diagnostics)
    slices_handed = 0

    def __init__(self, bs: Any, msgs: list, slice_size: int):
        self.bs = bs
        self.pending: deque = deque(msgs)
        self.slice_size = slice_size

    def start(self, work: Any) -> None:
        self.bs.pacer = self
        work.spawn(self._steps())

    def _done(self) -> None:
        if self.bs.pacer is self:
            self.bs.pacer = None

    # -- the stream's methods while messages are queued -------------------
    def send(self, *msgs: Any) -> None:
        if not self.pending:
            return shim.stream_send(self.bs, *msgs)
        comm = self.bs.comm
        if comm is not None and comm.closed():
            from distributed.comm.core import CommClosedError

            raise CommClosedError(f"Comm {comm!r} already closed.")
        self.pending.extend(msgs)

    def flush(self) -> None:
        """The stream closes: what is queued goes into its buffer first."""
        if self.pending:
            shim.stream_requeue(self.bs, self.pending)
            self.pending.clear()
        self._done()

    def drop(self) -> None:
        """The stream is aborted: what is queued is dropped, as its buffer."""
        self.pending.clear()
        self._done()

    # -- handing over: the executor's job ------------------------------------
    def _steps(self) -> loopwork.Job:
        bs = self.bs
        pending = self.pending
        try:
            while pending:
                if shim.stream_stopping(bs):
                    break
                if shim.stream_buffered(bs):  # the previous slice is not taken yet
                    yield loopwork.WAITING
                    continue
                n = min(self.slice_size, len(pending))
                batches = shim.stream_batches(bs)
                shim.stream_send(bs, *[pending.popleft() for _ in range(n)])
                Pacer.slices_handed += 1
                if not pending:
                    break
                # distributed serializes the slice on the loop in the turn
                # its writer takes it: that turn is this step's cost too,
                # bounded by the last look before it and the look after
                seen = perf_counter()
                while shim.stream_batches(bs) == batches and not shim.stream_stopping(bs):
                    seen = perf_counter()
                    yield loopwork.WAITING
                yield loopwork.Spent(perf_counter() - seen)
        finally:
            if pending and not shim.stream_stopping(bs):
                # (the job ended early, e.g. the loop is closing): the rest at once
                shim.stream_requeue(bs, pending)
            pending.clear()  # (a closed stream drops them, as its buffer)
            self._done()
