"""The ``slimgraph`` scheduler extension: where records live on a scheduler.

Both schedulers keep their :class:`~slimgraph.instrument.records.History` at
``scheduler.extensions["slimgraph"].history``. The slim engine fills it
itself; :mod:`slimgraph.instrument.stock` fills it for a stock scheduler.
:func:`get_history` works for both and creates the extension if missing.

The extension also owns the event-loop :class:`LoopMonitor`, the memray
"armed" slot, and registers the scheduler RPC handlers that
:mod:`slimgraph.instrument.client` calls.

For the slim engine (or anything else that times its own update_graph),
:meth:`SlimgraphExtension.begin` / :meth:`SlimgraphExtension.finish` fill the
common fields of a :class:`SubmissionRecord` (RSS before/after, total wall
time, the longest event-loop block, status) and append it to the history::

    ext = get_extension(scheduler)
    rec = SubmissionRecord(scheduler="slim")
    tok = ext.begin(rec)
    try:
        with rec.phase("task_states"):
            ...
    except Exception as e:
        ext.finish(rec, tok, status="error", error=repr(e)); raise
    else:
        ext.finish(rec, tok)
"""
from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from slimgraph.instrument.loopmon import LoopMonitor
from slimgraph.instrument.records import History, SubmissionRecord, rss_bytes

EXTENSION_NAME = "slimgraph"

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


_statm: tuple[int, int] | None = None  # (pid, fd)


def fast_rss() -> int:
    """Resident set size in bytes.

    ``pread`` of a kept-open ``/proc/self/statm`` (~5 us; opening the file
    each time costs ~30 us and psutil ~60 us here), else
    :func:`slimgraph.instrument.records.rss_bytes`.
    """
    global _statm
    try:
        pid = os.getpid()
        if _statm is None or _statm[0] != pid:
            _statm = (pid, os.open("/proc/self/statm", os.O_RDONLY))
        return int(os.pread(_statm[1], 128, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError, AttributeError):
        return rss_bytes()


class SlimgraphExtension:
    """Per-scheduler holder of the update_graph history and the loop monitor."""

    def __init__(self, scheduler: Any, *, history: History | None = None,
                 loop_interval: float = 0.010, register_handlers: bool = True):
        self.scheduler = scheduler
        self.history = history if history is not None else History()
        self.loop_monitor = LoopMonitor(interval=loop_interval)
        #: A pending :class:`slimgraph.instrument.memray_capture.MemrayCapture`
        #: waiting for the next update_graph, or None.
        self.memray_armed: Any = None
        #: Finished memray captures (newest last).
        self.memray_done: list = []
        #: The installed stock/slim update_graph hooks (see stock.install).
        self.hooks: Any = None
        #: Lazy-container time series sampler, if started.
        self.lazyset_sampler: Any = None
        if register_handlers:
            self.register_handlers()
        self.ensure_monitor()

    # -- loop monitor -----------------------------------------------------
    def ensure_monitor(self) -> None:
        """Start the loop monitor on the scheduler's loop, if it runs."""
        if self.loop_monitor.running:
            return
        sl = getattr(self.scheduler, "loop", None)
        aloop = getattr(sl, "asyncio_loop", None)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if aloop is not None and running is not aloop:
            # Called from another thread or loop (e.g. a notebook cell):
            # start the monitor on the scheduler's own loop, never on ours.
            if aloop.is_running():
                aloop.call_soon_threadsafe(self.ensure_monitor)
            return
        if running is None:
            return
        self.loop_monitor.start()

    # -- record helpers ---------------------------------------------------
    def begin(self, record: SubmissionRecord) -> tuple[float, float]:
        """Fill the "before" fields of ``record``; returns a token for finish."""
        record.rss_before = fast_rss()
        record.start = time.time()
        self.ensure_monitor()
        return (time.perf_counter(), self.loop_monitor.mark())

    def finish(self, record: SubmissionRecord, token: tuple[float, float], *,
               status: str | None = None, error: str | None = None,
               append: bool = True) -> SubmissionRecord:
        t0, mark = token
        record.total_s = time.perf_counter() - t0
        mon = self.loop_monitor
        if mon.running:
            record.longest_block_s = mon.longest_since(mark)
            blocks = [b for b in mon.blocks if b[0] > mark]
            now = time.perf_counter()
            blocks.append((now, max(0.0, now - mon.last_tick - mon.interval)))  # in progress
            for p in record.phases:
                p.longest_block_s = p.longest_overlap(blocks)
        record.rss_after = fast_rss()
        if status is not None:
            record.status = status
        elif record.status == "running":
            record.status = "OK"
        if error is not None:
            record.error = error
        if append:
            self.history.append(record)
        return record

    # -- RPC handlers -----------------------------------------------------
    def register_handlers(self) -> None:
        h = getattr(self.scheduler, "handlers", None)
        if h is None:
            return
        h.setdefault("slimgraph_records", self._h_records)
        h.setdefault("slimgraph_memory_tree", self._h_memory_tree)
        h.setdefault("slimgraph_lazysets", self._h_lazysets)
        h.setdefault("slimgraph_lazysets_series", self._h_lazysets_series)
        h.setdefault("slimgraph_install", self._h_install)
        h.setdefault("slimgraph_memray_arm", self._h_memray_arm)
        h.setdefault("slimgraph_memray_results", self._h_memray_results)
        h.setdefault("slimgraph_loop", self._h_loop)

    def _h_records(self, since: int = 0) -> list[dict]:
        return [r.to_dict() for r in self.history.since(since)]

    async def _h_memory_tree(self, sample: int | None | str = "auto",
                             budget_s: float = 0.02) -> dict:
        from slimgraph.instrument.memory import memory_tree_async

        tree = await memory_tree_async(self.scheduler, sample=sample, budget_s=budget_s)
        return tree.to_dict()

    async def _h_lazysets(self) -> list[dict]:
        from slimgraph.instrument.lazysets import census_async

        res = await census_async(self.scheduler)
        return res.to_records()

    def _h_lazysets_series(self, start: bool | None = None, interval: float = 0.5) -> list[dict]:
        from slimgraph.instrument.lazysets import LazySetSampler

        if start and self.lazyset_sampler is None:
            self.lazyset_sampler = LazySetSampler(self.scheduler, interval=interval).start()
        elif start is False and self.lazyset_sampler is not None:
            self.lazyset_sampler.stop()
        s = self.lazyset_sampler
        return [] if s is None else s.to_records()

    def _h_install(self, record_phases: Any = "auto") -> str:
        from slimgraph.instrument.stock import install

        hooks = install(self.scheduler, record_phases=record_phases)
        return "phases" if hooks.record_phases else "hook-only"

    def _h_memray_arm(self, directory: str | None = None, native_traces: bool = False) -> str:
        from slimgraph.instrument.memray_capture import arm

        return str(arm(self.scheduler, directory=directory, native_traces=native_traces).path)

    async def _h_memray_results(self, top: int = 20, flamegraph: bool = True) -> list[dict]:
        out = []
        for cap in list(self.memray_done):
            # reading the capture and rendering HTML take seconds: off the loop
            summ = await asyncio.to_thread(cap.summary, top=top, flamegraph=flamegraph)
            out.append(summ.to_dict())
        return out

    def _h_loop(self) -> dict:
        return self.loop_monitor.summary()

    # -- scheduler life cycle --------------------------------------------
    def teardown(self) -> None:
        self.loop_monitor.stop()
        if self.lazyset_sampler is not None:
            self.lazyset_sampler.stop()
        if self.hooks is not None:
            self.hooks.uninstall()


def get_extension(scheduler: Any) -> SlimgraphExtension:
    """The scheduler's ``slimgraph`` extension, created if missing."""
    ext = scheduler.extensions.get(EXTENSION_NAME)
    if ext is None:
        ext = SlimgraphExtension(scheduler)
        scheduler.extensions[EXTENSION_NAME] = ext
    return ext


def get_history(scheduler: Any) -> History:
    """The update_graph :class:`History` of a stock or slim scheduler."""
    return get_extension(scheduler).history
