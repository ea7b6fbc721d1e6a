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

How. When a commit gives a worker more than ``slimgraph.pace-messages``
messages, its stream gets them in slices of that many: a slice is handed
to the ``BatchedSend`` once its buffer is empty (the previous slice taken
for writing), so each write serializes one slice and the loop runs in
between. Every message sent to that worker meanwhile, from any handler
(another submission, work stealing, a ``free-keys``), joins the queue
behind them: the worker receives exactly the messages stock would have
sent, in the same order, only spread over time. Closing the stream
(``close``) flushes what is still queued first, as closing flushes a
buffer; aborting it drops them, as aborting drops a buffer.

The scheduler's state is not touched: the tasks are ``processing`` on
their workers at the commit, as on stock, whose messages also reach the
wire only after its ``update_graph`` has returned.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

from slimgraph import config, shim
from slimgraph.runtime import loopshare

__all__ = ["send_all", "Pacer"]


def send_all(state: Any, client_msgs: dict, worker_msgs: dict) -> None:
    """``state.send_all``, with big per-worker lists paced (see the module
    docstring)."""
    n = config.get("pace-messages")
    streams = getattr(state, "stream_comms", None)
    if n and streams:
        rest = {}
        for address, msgs in worker_msgs.items():
            bs = streams.get(address)
            if (
                len(msgs) > n
                and bs is not None
                and getattr(bs, "slim_pacer", None) is None  # (else its send queues them)
                and shim.is_batched_send(bs)
                and not bs.closed()
            ):
                Pacer(bs, msgs, n).start()
            else:
                rest[address] = msgs
        worker_msgs = rest
    state.send_all(client_msgs, worker_msgs)


class Pacer:
    """Holds one ``BatchedSend``'s messages and hands them over in slices.
    While it has any, the stream's ``send``, ``close`` and ``abort`` are
    its own (instance attributes, removed when it is done)."""

    #: slices handed over by all pacers (tests, diagnostics)
    slices_handed = 0

    def __init__(self, bs: Any, msgs: list, slice_size: int):
        self.bs = bs
        self.pending: deque = deque(msgs)
        self.slice_size = slice_size
        self._task: asyncio.Task | None = None  # (the loop keeps tasks weakly)

    def start(self) -> None:
        bs = self.bs
        bs.slim_pacer = self
        bs.send = self.send
        bs.close = self.close
        bs.abort = self.abort
        self._task = asyncio.get_running_loop().create_task(self._hand_over())

    def _done(self) -> None:
        bs = self.bs
        if getattr(bs, "slim_pacer", None) is self:
            for name in ("slim_pacer", "send", "close", "abort"):
                bs.__dict__.pop(name, None)

    # -- the stream's methods while messages are queued -------------------
    def send(self, *msgs: Any) -> None:
        if not self.pending:
            return type(self.bs).send(self.bs, *msgs)
        comm = self.bs.comm
        if comm is not None and comm.closed():
            from distributed.comm.core import CommClosedError

            raise CommClosedError(f"Comm {comm!r} already closed.")
        self.pending.extend(msgs)

    def close(self, timeout: Any = None) -> Any:
        bs = self.bs
        if self.pending:
            shim.stream_requeue(bs, self.pending)
            self.pending.clear()
        self._done()
        return type(bs).close(bs, timeout=timeout)

    def abort(self) -> None:
        self.pending.clear()
        self._done()
        return type(self.bs).abort(self.bs)

    # -- handing over ------------------------------------------------------
    async def _written(self, batches: int) -> float:
        """Seconds of the turn in which the stream took the batch after
        ``batches`` for writing (0 if the stream stops first). distributed
        serializes a batch in the step that takes it, before the write's
        first wait: the last poll here (every millisecond) before the batch
        was seen taken and the poll that saw it bound that step (and
        whatever else ran then)."""
        bs = self.bs
        last = time.perf_counter()
        while shim.stream_batches(bs) == batches:
            if shim.stream_stopping(bs):
                return 0.0
            last = time.perf_counter()
            await asyncio.sleep(0.001)
        return time.perf_counter() - last

    async def _hand_over(self) -> None:
        bs = self.bs
        pending = self.pending
        send = type(bs).send
        try:
            while pending:
                if shim.stream_stopping(bs):
                    break
                if shim.stream_buffered(bs):  # the previous slice is not taken yet
                    await asyncio.sleep(0.001)
                    continue
                n = min(self.slice_size, len(pending))
                batches = shim.stream_batches(bs)
                send(bs, *[pending.popleft() for _ in range(n)])
                Pacer.slices_handed += 1
                if pending and loopshare.ratio():
                    # distributed serializes the batch on the loop when it
                    # writes it: the loop to others for as long again
                    # (slimgraph.runtime.loopshare)
                    await asyncio.sleep(loopshare.rest_after(await self._written(batches)))
                await asyncio.sleep(0)
        finally:
            if pending and not shim.stream_stopping(bs):
                # (cancelled, e.g. the loop is closing): the rest at once
                shim.stream_requeue(bs, pending)
            pending.clear()  # (a closed stream drops them, as its buffer)
            self._done()
