"""memray capture of ONE update_graph, on demand, for stock and slim schedulers.

:func:`arm` hooks the scheduler's ``update_graph`` coroutine (the same
instance-level wrapper :mod:`slimgraph.instrument.stock_recorder` installs; for slim
schedulers only that hook, no phase wrappers) and leaves a
:class:`MemrayCapture` in ``scheduler.extensions["slimgraph"].memray_armed``.
The next ``update_graph`` on that scheduler runs entirely under
``memray.Tracker(FileDestination(path), trace_python_allocators=True)``; the
capture then moves to ``.memray_done`` and its ``done`` event is set.

Caveats: memray tracks the whole process, so while update_graph awaits its
offloaded steps, whatever else the event loop runs meanwhile is captured too
(on an otherwise idle scheduler: heartbeats, little else). Only one tracker
can run per process: a capture that finds another one active runs the
update_graph uncaptured and reports ``error``. Tracking slows update_graph
down several times over (python allocators traced).

:meth:`MemrayCapture.summary` reads the capture file: top allocation sites
(``function file:line``) by bytes and by count at the high-water mark and
for memory still held when update_graph returned (what the new task states
retain), and writes an HTML flamegraph with ``python -m memray flamegraph``.
"""
from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

_tracker_lock = threading.Lock()
_seq = itertools.count(1)
_tracker_active = False


@dataclass
class Site:
    function: str
    file: str
    line: int
    bytes: int
    count: int

    @property
    def location(self) -> str:
        return f"{self.function} {self.file}:{self.line}"


@dataclass
class MemraySummary:
    path: str
    peak_bytes: int = 0
    total_allocations: int = 0
    duration_s: float = 0.0
    top_by_bytes: list[Site] = field(default_factory=list)
    top_by_count: list[Site] = field(default_factory=list)
    retained_by_bytes: list[Site] = field(default_factory=list)
    retained_bytes: int = 0
    flamegraph: str | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def render(self, n: int = 10) -> str:
        lines = [f"memray capture {self.path}: peak {self.peak_bytes:,} B, "
                 f"{self.total_allocations:,} allocations, retained {self.retained_bytes:,} B"]
        for title, sites, key in (("top sites by bytes (at peak)", self.top_by_bytes, "bytes"),
                                  ("top sites by count (at peak)", self.top_by_count, "count"),
                                  ("retained after update_graph", self.retained_by_bytes, "bytes")):
            lines.append(title + ":")
            for s in sites[:n]:
                lines.append(f"  {getattr(s, key):>14,}  {s.function} {s.file}:{s.line}")
        if self.flamegraph:
            lines.append(f"flamegraph: {self.flamegraph}")
        return "\n".join(lines)


def _site_key(record) -> tuple[str, str, int]:
    try:
        st = record.stack_trace(max_stacks=1)
    except Exception:  # pragma: no cover
        st = []
    if not st:
        return ("<unknown>", "<unknown>", 0)
    fn, file, line = st[0][:3]
    return (fn, file, int(line))


def _aggregate(records) -> list[Site]:
    agg: dict[tuple[str, str, int], list[int]] = {}
    for r in records:
        k = _site_key(r)
        a = agg.get(k)
        if a is None:
            a = agg[k] = [0, 0]
        a[0] += r.size
        a[1] += r.n_allocations
    return [Site(k[0], k[1], k[2], v[0], v[1]) for k, v in agg.items()]


class MemrayCapture:
    """One armed/finished capture of a single update_graph."""

    def __init__(self, path: str | os.PathLike, *, native_traces: bool = False,
                 trace_python_allocators: bool = True):
        self.path = Path(path)
        self.native_traces = native_traces
        self.trace_python_allocators = trace_python_allocators
        self.started: float | None = None
        self.finished: float | None = None
        self.error: str | None = None
        self.done = threading.Event()
        self._summary: MemraySummary | None = None
        self._ext: Any = None

    async def run(self, coro_fn: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``coro_fn()`` (the update_graph) under a memray tracker."""
        import memray

        global _tracker_active
        with _tracker_lock:
            busy = _tracker_active
            if not busy:
                _tracker_active = True
        if busy:
            self.error = "another memray tracker is active in this process"
            try:
                return await coro_fn()
            finally:
                self._finish()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tracker = memray.Tracker(
                destination=memray.FileDestination(str(self.path), overwrite=True),
                native_traces=self.native_traces,
                trace_python_allocators=self.trace_python_allocators,
            )
            self.started = time.time()
            with tracker:
                return await coro_fn()
        except Exception as e:
            if self.error is None and self.started is None:
                self.error = f"{type(e).__name__}: {e}"
            raise
        finally:
            with _tracker_lock:
                _tracker_active = False
            self._finish()

    def _finish(self) -> None:
        self.finished = time.time()
        if self._ext is not None:
            self._ext.memray_done.append(self)
        self.done.set()

    async def wait(self, timeout: float | None = None) -> "MemrayCapture":
        t0 = time.monotonic()
        while not self.done.is_set():
            if timeout is not None and time.monotonic() - t0 > timeout:
                raise TimeoutError("no update_graph was captured in time")
            await asyncio.sleep(0.02)
        return self

    def summary(self, top: int = 20, flamegraph: bool = True,
                flamegraph_path: str | os.PathLike | None = None) -> MemraySummary:
        """Read the capture (cached); optionally write the HTML flamegraph."""
        if self._summary is not None and (not flamegraph or self._summary.flamegraph):
            return self._summary
        import memray

        s = MemraySummary(path=str(self.path), error=self.error)
        if not self.path.exists():
            s.error = s.error or "no capture file"
            return s
        with memray.FileReader(str(self.path)) as reader:
            md = reader.metadata
            s.peak_bytes = int(md.peak_memory)
            s.total_allocations = int(md.total_allocations)
            try:
                s.duration_s = (md.end_time - md.start_time).total_seconds()
            except Exception:  # pragma: no cover
                pass
            peak = _aggregate(reader.get_high_watermark_allocation_records(merge_threads=True))
            s.top_by_bytes = sorted(peak, key=lambda x: -x.bytes)[:top]
            s.top_by_count = sorted(peak, key=lambda x: -x.count)[:top]
            leaked = _aggregate(reader.get_leaked_allocation_records(merge_threads=True))
            s.retained_bytes = sum(x.bytes for x in leaked)
            s.retained_by_bytes = sorted(leaked, key=lambda x: -x.bytes)[:top]
        if flamegraph:
            out = Path(flamegraph_path) if flamegraph_path else self.path.with_suffix(".html")
            proc = subprocess.run(
                [sys.executable, "-m", "memray", "flamegraph", "--force", "-o", str(out),
                 str(self.path)],
                capture_output=True, text=True, timeout=300,
            )
            if proc.returncode == 0 and out.exists():
                # inline the libraries it loads from CDNs: it works offline
                from slimgraph.instrument.offline_html import self_contained

                out.write_text(self_contained(out.read_text(encoding="utf-8")), encoding="utf-8")
                s.flamegraph = str(out)
            else:
                s.error = (s.error or "") + f" flamegraph failed: {proc.stderr[-500:]}"
        self._summary = s
        return s


def arm(scheduler: Any, path: str | os.PathLike | None = None, *,
        directory: str | os.PathLike | None = None, native_traces: bool = False,
        trace_python_allocators: bool = True) -> MemrayCapture:
    """Capture the next update_graph of ``scheduler`` with memray.

    Call on the scheduler's event loop (or before it starts). Returns the
    :class:`MemrayCapture`; ``await cap.wait()`` then ``cap.summary()``.
    """
    from slimgraph.instrument.recorder import get_extension
    from slimgraph.instrument.stock_recorder import install

    ext = get_extension(scheduler)
    hooks = getattr(ext, "hooks", None)
    if hooks is None or not hooks.installed:
        install(scheduler)
    if path is None:
        d = Path(directory) if directory else Path(tempfile.gettempdir()) / "slimgraph-memray"
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"update_graph-{os.getpid()}-{time.strftime('%Y%m%d-%H%M%S')}-{next(_seq)}.bin"
    cap = MemrayCapture(path, native_traces=native_traces,
                        trace_python_allocators=trace_python_allocators)
    cap._ext = ext
    ext.memray_armed = cap
    return cap
