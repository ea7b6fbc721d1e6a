"""The ``slimgraph`` scheduler extension: where records live on a scheduler.

Both schedulers keep their :class:`~slimgraph.instrument.records.History` at
``scheduler.extensions["slimgraph"].history``. The slim engine fills it
itself; :mod:`slimgraph.instrument.stock_recorder` fills it for a stock scheduler.
:func:`get_history` works for both and creates the extension if missing.

The extension also owns the event-loop :class:`LoopMonitor`, the memray
"armed" slot, and is the only scheduler-side surface of the measurements:
its methods listed in :attr:`SlimgraphExtension.HANDLERS` are registered as
the scheduler RPC handlers ``slimgraph_<method>``, and they return plain
data in the records' own serialization (``SubmissionRecord.to_dict``,
``MemoryTree.to_dict``, ``Census.to_records``). Everything that reads a
scheduler (:mod:`slimgraph.instrument.feed`, hence the client helpers, the
dashboard, the scheduler tab and the notebooks) goes through them.

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
from pathlib import Path
from typing import Any

from slimgraph.instrument.loopmon import LoopMonitor, longest_by_cause
from slimgraph.instrument.records import History, SubmissionRecord, rss_bytes

EXTENSION_NAME = "slimgraph"
#: Every scheduler RPC handler of the extension is named ``slimgraph_<method>``.
HANDLER_PREFIX = "slimgraph_"

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


_statm: tuple[int, int] | None = None  # (pid, fd)


def fast_rss() -> int:
    """Resident set size in bytes.

    ``pread`` of a kept-open ``/proc/self/statm`` (several times cheaper
    than opening the file each time, or psutil), else
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
        #: The records of the update_graph calls running now (begun, not
        #: finished): what ``status`` says of an ingestion in progress.
        self.running: list[SubmissionRecord] = []
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
        self.running.append(record)
        self.ensure_monitor()
        return (time.perf_counter(), self.loop_monitor.mark())

    def finish(self, record: SubmissionRecord, token: tuple[float, float], *,
               status: str | None = None, error: str | None = None,
               append: bool = True) -> SubmissionRecord:
        t0, mark = token
        record.total_s = time.perf_counter() - t0
        if record in self.running:
            self.running.remove(record)
        mon = self.loop_monitor
        if mon.running:
            record.longest_block_s = mon.longest_since(mark)
            blocks = [b for b in mon.blocks if b[0] > mark]
            now = time.perf_counter()
            blocks.append((now, max(0.0, now - mon.last_tick - mon.interval)))  # in progress
            for p in record.phases:
                p.longest_block_s = p.longest_overlap(blocks)
            if mon.blame:
                causes = longest_by_cause(mon.causes_since(mark))
                running = blocks[-1][1]
                own = causes.get("ingestion")
                if running >= mon.blame_after and (own is None or running > own["seconds"]):
                    causes["ingestion"] = {"seconds": running, "label": "update_graph's last step"}
                record.block_causes = causes
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

    # -- the scheduler-side surface: one handler per method -------------------
    #: ``scheduler.handlers["slimgraph_<name>"]`` -> the method ``<name>``.
    #: Remote readers call them through a Client
    #: (:class:`slimgraph.instrument.feed.RemoteFeed`), in-process readers call
    #: the methods on the scheduler's loop (:class:`~slimgraph.instrument.feed.LocalFeed`);
    #: both get the same plain data (the records' own ``to_dict`` and friends).
    #: None of them answers ``None``: that is what distributed answers for a
    #: handler it does not have, which is how a client tells that a scheduler
    #: has no extension.
    HANDLERS = (
        "status",
        "records",
        "memory_tree",
        "lazysets",
        "lazysets_series",
        "install",
        "set_lazy",
        "memray_arm",
        "memray_results",
        "memray_flamegraph",
        "loop_summary",
        "loop_blocks",
    )

    def register_handlers(self) -> None:
        h = getattr(self.scheduler, "handlers", None)
        if h is None:
            return
        for name in self.HANDLERS:
            h.setdefault(HANDLER_PREFIX + name, getattr(self, name))

    def status(self) -> dict:
        """What a dashboard polls every second: cheap (O(task groups)).

        ``kind`` (``"slim"``/``"stock"``), ``rss`` (bytes), ``tasks`` (held
        now), ``states`` (task counts by state over the task groups, including
        tasks already forgotten), ``latest`` (id of the newest record, 0 if
        none), ``recording`` (whether submissions get phase records) and
        ``running``: per update_graph in progress, ``{"submission_id",
        "elapsed_s", "phase" (the phase begun last, None before the first),
        "tasks" (0 until known)}``.
        """
        s = self.scheduler
        states: dict[str, int] = {}
        # list(...) copies in one C-level step: safe from another thread too
        # (LocalFeed reads the status off the scheduler's loop)
        for tg in list(getattr(s, "task_groups", {}).values()):
            for state, n in list(tg.states.items()):
                if n:
                    states[state] = states.get(state, 0) + n
        latest = self.history.latest()
        return {
            "kind": scheduler_kind(s),
            "rss": fast_rss(),
            "tasks": len(s.tasks),
            "states": states,
            "latest": latest.submission_id if latest is not None else 0,
            "recording": self.recording(),
            "running": [
                {"submission_id": r.submission_id, "elapsed_s": time.time() - r.start,
                 "phase": r.phases[-1].name if r.phases else None, "tasks": r.tasks}
                for r in list(self.running)
            ],
        }

    def recording(self) -> bool:
        """True when this scheduler's submissions are recorded: it records
        its own (slim), or the stock phase hooks are installed."""
        from slimgraph.instrument.stock_recorder import records_own_phases

        if records_own_phases(self.scheduler):
            return True
        return bool(self.hooks is not None and self.hooks.installed and self.hooks.record_phases)

    def records(self, since: int = 0) -> list[dict]:
        """``SubmissionRecord.to_dict()`` of the records after ``since``."""
        return [r.to_dict() for r in self.history.since(since)]

    async def memory_tree(self, sample: int | None | str = "auto",
                          budget_s: float = 0.02) -> dict:
        """``MemoryTree.to_dict()``, walked in slices of ``budget_s``.

        ``sample``: ``"auto"`` (exact up to 50k tasks), ``None`` (exact) or a
        number of tasks; a number at least the task count walks exactly.
        """
        from slimgraph.instrument.memory import memory_tree_async

        if isinstance(sample, int) and len(self.scheduler.tasks) <= sample:
            sample = None
        tree = await memory_tree_async(self.scheduler, sample=sample, budget_s=budget_s)
        return tree.to_dict()

    async def lazysets(self, budget_s: float = 0.02) -> list[dict]:
        """``Census.to_records()`` of a census in slices of ``budget_s``."""
        from slimgraph.instrument.lazysets import census_async

        res = await census_async(self.scheduler, budget_s=budget_s)
        return res.to_records()

    def lazysets_series(self, start: bool | None = None, interval: float = 0.5) -> list[dict]:
        """The sampler's censuses (``to_records`` rows); ``start=True`` starts
        the sampler, ``start=False`` stops it."""
        from slimgraph.instrument.lazysets import LazySetSampler

        if start and self.lazyset_sampler is None:
            self.lazyset_sampler = LazySetSampler(self.scheduler, interval=interval).start()
        elif start is False and self.lazyset_sampler is not None:
            self.lazyset_sampler.stop()
        s = self.lazyset_sampler
        return [] if s is None else s.to_records()

    def install(self, record_phases: Any = "auto") -> str:
        """Hook update_graph (:func:`slimgraph.instrument.stock_recorder.install`):
        ``"phases"`` when stock phases are timed, ``"hook-only"`` for a
        scheduler that records its own."""
        from slimgraph.instrument.stock_recorder import install

        hooks = install(self.scheduler, record_phases=record_phases)
        return "phases" if hooks.record_phases else "hook-only"

    def set_lazy(self, flag: bool) -> bool:
        """The ``lazy-containers`` switch (:mod:`slimgraph.switches`) for the
        next submissions: the switch (global in the scheduler's process) and,
        since a SlimScheduler reads it once at start, its ``slim_lazy``
        attribute. Returns the switch's value."""
        from slimgraph import switches

        switches.set(lazy_containers=bool(flag))
        if hasattr(self.scheduler, "slim_lazy"):
            self.scheduler.slim_lazy = bool(flag)
        return bool(switches.get("lazy-containers"))

    def memray_arm(self, directory: str | None = None, native_traces: bool = False) -> str:
        """Capture the next update_graph with memray; returns the capture's path."""
        from slimgraph.instrument.memray_capture import arm

        return str(arm(self.scheduler, directory=directory, native_traces=native_traces).path)

    async def memray_results(self, top: int = 20, flamegraph: bool = True,
                             path: str | None = None) -> list[dict]:
        """``MemraySummary.to_dict()`` of the finished captures (oldest first),
        or only of the one written to ``path``."""
        out = []
        for cap in list(self.memray_done):
            if path is not None and str(cap.path) != str(path):
                continue
            # reading the capture and rendering HTML take seconds: off the loop
            summ = await asyncio.to_thread(cap.summary, top=top, flamegraph=flamegraph)
            out.append(summ.to_dict())
        return out

    async def memray_flamegraph(self, path: str) -> dict:
        """``{"path", "html"}``: the HTML flamegraph of the finished capture at
        ``path`` (rendered on first request, in a thread); ``html`` is None
        while the capture has not run, or when memray could not render it."""
        html = None
        for cap in reversed(list(self.memray_done)):
            if str(cap.path) == str(path):
                summ = await asyncio.to_thread(cap.summary, top=10, flamegraph=True)
                if summ.flamegraph:
                    html = await asyncio.to_thread(Path(summ.flamegraph).read_text,
                                                   encoding="utf-8")
                break
        return {"path": str(path), "html": html}

    def loop_summary(self) -> dict:
        """:meth:`LoopMonitor.summary` of the scheduler's event loop."""
        return self.loop_monitor.summary()

    def loop_blocks(self, since: float = 0.0) -> list:
        """The event loop's blocks of at least 50 ms that ended after
        ``since`` (``time.time()``), each with its cause
        (:class:`slimgraph.instrument.loopmon.BlockCause` as a dict)."""
        return [c.to_dict() for c in list(self.loop_monitor.causes) if c.wall_end > since]

    # -- scheduler life cycle --------------------------------------------
    def teardown(self) -> None:
        self.loop_monitor.stop()
        if self.lazyset_sampler is not None:
            self.lazyset_sampler.stop()
        if self.hooks is not None:
            self.hooks.uninstall()


def scheduler_kind(scheduler: Any) -> str:
    """``"slim"`` for a scheduler on the slim engine, else ``"stock"``.

    By class name along the MRO (``SlimSchedulerState``): the drop-in's
    ``SlimScheduler`` answers to the name ``Scheduler``, and this module must
    not import the engine.
    """
    for cls in type(scheduler).__mro__:
        if "slim" in cls.__qualname__.lower():
            return "slim"
    return "stock"


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
