"""Event-loop block monitor: how long did the scheduler's loop not run a callback?

A :class:`LoopMonitor` schedules a tiny callback on the scheduler's event loop
every ``interval`` seconds (default 10 ms). Each run stores ``perf_counter()``;
when a run comes late, the loop was busy (blocked) for the lateness. A
background watchdog thread (optional, on by default, one wake-up every
``watch_interval``) notices a block *while it lasts*, so a loop that never
comes back is still reported (``current_block_s()``) and long blocks are
logged with the loop thread's stack.

Accuracy: a completed block of length ``B`` is reported as ``gap - interval``
where ``gap`` is the time between two callback runs, i.e. a value in
``[B - interval, B]`` (a lower bound, off by at most one interval, plus
the timer's jitter). Blocks shorter than ``interval`` may be reported as 0.
:meth:`longest_since` also includes the block in progress at the moment it
is called (``now - last tick - interval``, same bounds), which is what an
``update_graph`` wrapper needs: its synchronous section is still running
when it reads the monitor.

Causes: with ``blame=True`` (the default) the watchdog wakes every
``sample_interval`` and, while a block lasts, attributes it
(:mod:`slimgraph.instrument.blame`): the ingestion's own code, slimgraph's
instruments, another handler (a dashboard page, a heartbeat) or another
thread holding the GIL. Blocks of at least ``blame_after`` are kept with
their cause (:meth:`causes_since`), so a record can say which of its blocks
were the engine's and which were other users'.

Cost: one tiny timer callback per interval plus the watchdog thread waking
every 10 ms (a per-thread CPU clock read each time; stacks only while a
block lasts): a small fraction of a core, cheap enough to keep on in
production.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
import traceback
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from slimgraph.instrument import blame as _blame
from slimgraph.shim import cpython

logger = logging.getLogger(__name__)


@dataclass
class BlockCause:
    """One attributed block: how long, and what it was spent on."""

    #: ``perf_counter()`` and ``time.time()`` at the block's end
    end: float
    wall_end: float
    seconds: float
    #: the cause that took most of it (see :data:`slimgraph.instrument.blame.CAUSES`)
    cause: str
    #: what that cause was doing most of the time (package: function > function)
    label: str
    #: seconds sampled per cause
    parts: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["end"]
        return d


def _stretch(parts: list, a: float, b: float, key: tuple) -> None:
    """Add the stretch ``a..b`` spent on ``key``; joined to the last one
    when it continues it (a long block stays a few entries)."""
    if parts and parts[-1][2] == key and parts[-1][1] >= a - 1e-9:
        parts[-1] = (parts[-1][0], b, key)
    else:
        parts.append((a, b, key))


def longest_by_cause(causes: Any) -> dict:
    """``{cause: {"seconds", "label"}}``: the longest block of each cause."""
    out: dict = {}
    for c in causes:
        best = out.get(c.cause)
        if best is None or c.seconds > best["seconds"]:
            out[c.cause] = {"seconds": c.seconds, "label": c.label}
    return out


class LoopMonitor:
    """Measure event-loop blocks of one asyncio loop.

    Usage (on the loop)::

        mon = LoopMonitor()
        mon.start()                 # binds to the running loop
        mark = mon.mark()
        ...                         # work, possibly blocking
        mon.longest_since(mark)     # seconds, lower bound (see module doc)
        mon.stop()
    """

    def __init__(
        self,
        interval: float = 0.010,
        *,
        watchdog: bool = True,
        watch_interval: float = 0.1,
        warn_after: float = 5.0,
        keep: int = 16384,
        blame: bool = True,
        sample_interval: float = 0.010,
        blame_after: float = 0.050,
    ):
        self.interval = interval
        # (no causes where this interpreter's stacks may not or cannot be read)
        self.blame = blame and watchdog and _blame.snapshot_works()
        self.watch_interval = sample_interval if self.blame else watch_interval
        self.blame_after = blame_after
        #: Blocks of at least ``blame_after``, with their cause, newest last.
        self.causes: deque[BlockCause] = deque(maxlen=4096)
        # start tick of a block -> its end (perf_counter), for the watchdog
        self._block_end: dict[float, float] = {}
        # garbage collections of >= 5 ms: (start, end, generation, thread name)
        self._gcs: deque = deque(maxlen=256)
        self._gc_t0 = 0.0
        self.warn_after = warn_after
        self.last_tick = time.perf_counter()
        #: Completed blocks (end time, seconds), newest last, bounded.
        self.blocks: deque[tuple[float, float]] = deque(maxlen=keep)
        #: Longest completed block since start (seconds).
        self.max_block_s = 0.0
        #: Number of timer callbacks run (for overhead checks).
        self.ticks = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id: int | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._want_watchdog = watchdog
        self._watchdog: threading.Thread | None = None
        self._stop_evt = threading.Event()
        self._warned_for: float | None = None
        self.running = False

    # -- life cycle -------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> "LoopMonitor":
        if self.running:
            return self
        self._loop = loop or asyncio.get_running_loop()
        self._loop_thread_id = threading.get_ident() if loop is None else None
        self.running = True
        self.last_tick = time.perf_counter()
        self._handle = self._loop.call_later(self.interval, self._tick)
        if self.blame and self._gc_cb not in gc.callbacks:
            gc.callbacks.append(self._gc_cb)
        if self._want_watchdog:
            self._stop_evt.clear()
            self._watchdog = threading.Thread(
                target=self._watch, name="slimgraph-loop-watchdog", daemon=True
            )
            self._watchdog.start()
        return self

    def stop(self) -> None:
        self.running = False
        if self._gc_cb in gc.callbacks:
            gc.callbacks.remove(self._gc_cb)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._stop_evt.set()
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join(timeout=1)
        self._watchdog = None

    # -- on the loop ------------------------------------------------------
    def _tick(self) -> None:
        now = time.perf_counter()
        if self._loop_thread_id is None:
            self._loop_thread_id = threading.get_ident()
        block = now - self.last_tick - self.interval
        if block > 0.001:
            self.blocks.append((now, block))
            if block > self.max_block_s:
                self.max_block_s = block
            if self.blame and block >= self.blame_after:
                if len(self._block_end) > 1024:  # the watchdog is not reading
                    self._block_end.clear()
                self._block_end[self.last_tick] = now
        self.last_tick = now
        self.ticks += 1
        if self.running:
            self._handle = self._loop.call_later(self.interval, self._tick)  # type: ignore[union-attr]

    # -- queries (any thread) -----------------------------------------------
    def mark(self) -> float:
        """A point in time to pass to :meth:`longest_since`."""
        return time.perf_counter()

    def current_block_s(self) -> float:
        """How long the loop has been blocked right now (0 if it is idle)."""
        if not self.running:
            return 0.0
        return max(0.0, time.perf_counter() - self.last_tick - self.interval)

    def longest_since(self, mark: float) -> float:
        """Longest block that ended after ``mark``, including one in progress.

        The part of a block that happened before ``mark`` is excluded.
        """
        best = 0.0
        for end, dur in reversed(self.blocks):
            if end <= mark:
                break
            dur = min(dur, end - mark)
            if dur > best:
                best = dur
        if self.running:
            now = time.perf_counter()
            start = max(self.last_tick + self.interval, mark)
            cur = now - start
            if cur > best:
                best = cur
        return best

    def causes_since(self, mark: float) -> list[BlockCause]:
        """Attributed blocks that ended after ``mark`` (a :meth:`mark`)."""
        out = []
        for c in reversed(self.causes):
            if c.end <= mark:
                break
            out.append(c)
        out.reverse()
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval,
            "ticks": self.ticks,
            "max_block_s": self.max_block_s,
            "current_block_s": self.current_block_s(),
            "recent_blocks": len(self.blocks),
        }

    # -- watchdog thread --------------------------------------------------
    def _watch(self) -> None:
        me = threading.get_ident()
        prev_t = time.perf_counter()
        runq = _blame.RunQueueClocks() if self.blame else None
        if self.blame:
            _blame._dump_fd()
        prev_cpu = _blame.thread_cpu() if self.blame else {}
        prev_waits = runq.read(self._loop_thread_id, _blame.WAITED_FOR) if runq is not None else {}
        window: deque = deque()        # recent (time, CPU clocks, run-queue clocks): the shares' baseline
        tracked: float | None = None   # start tick of the block being sampled
        parts: list = []               # its (from, to, (cause, label)) stretches
        seen: tuple | None = None      # what a snapshot of it last saw the loop run
        while not self._stop_evt.wait(self.watch_interval):
            cur = self.current_block_s()
            if cur >= self.warn_after and self._warned_for != self.last_tick:
                self._warned_for = self.last_tick
                stack = ""
                tid = self._loop_thread_id
                if tid is not None:
                    frame = cpython.thread_frame(tid)
                    if frame is not None:
                        stack = "".join(traceback.format_stack(frame, limit=12))
                    del frame
                logger.warning(
                    "slimgraph: event loop blocked for %.1f s so far\n%s", cur, stack
                )
            if not self.blame:
                continue
            # the loop's run-queue clock first: reading it lets the GIL go
            # (a system call), and nothing may come between the CPU clocks
            # and the stacks, which must show the threads where the clocks saw them
            waits = runq.read(self._loop_thread_id, _blame.WAITED_FOR)
            # the last tick before the clock: a block that ended by then
            # ended at or before that tick, so it is among ``ended`` below
            tick = self.last_tick
            now = time.perf_counter()
            names: dict = {}
            cpu = _blame.thread_cpu(names)
            in_block = self.running and now - tick - self.interval > 0.002
            cause = now_runs = None
            # the blocks that had ended when the clocks were read: the
            # watchdog may wait for the GIL between two lines of its own
            # (for as long as a block), and one that ends meanwhile is not what
            # this snapshot shows; the next wake-up takes it
            ended = {a: b for a, b in list(self._block_end.items()) if b <= now}
            sampling = in_block or tracked is not None or bool(ended)
            frames = _blame.snapshot() if sampling else None
            # the shares are read over at least SHARE_WINDOW: the latest
            # earlier wake-up that far back is the baseline
            window.append((prev_t, prev_cpu, prev_waits))
            while len(window) > 1 and window[1][0] <= now - _blame.SHARE_WINDOW:
                window.popleft()
            base_t, base_cpu, base_waits = window[0]
            if frames is not None:
                delta = {t: c - base_cpu.get(t, 0.0) for t, c in cpu.items()}  # new: all its CPU
                waited = {t: w - base_waits[t] for t, w in waits.items() if t in base_waits}
                # the part of the stretch in which the loop had work: its blocks
                spans = [(a + self.interval, b) for a, b in ended.items()]
                if in_block:
                    spans.append((tick + self.interval, now))
                busy = sum(max(0.0, min(b, now) - max(a, base_t)) for a, b in spans)
                try:
                    cause = _blame.classify(frames, self._loop_thread_id, delta,
                                            now - base_t, skip=(me,), waits=waited, names=names,
                                            loop_busy=busy, loop_seen=seen)
                    now_runs = _blame.loop_runs(frames, self._loop_thread_id) if in_block else None
                except Exception:  # never let attribution break the monitor
                    cause = ("unknown", "attribution failed")
                del frames
            if tracked is not None and tick != tracked:
                # the block we sampled has ended; the stretch up to its end
                # since the last wake-up (a whole stall, if the watchdog
                # could not run) goes to what this snapshot shows
                end = ended.pop(tracked, None)
                if end is not None:
                    self._block_end.pop(tracked, None)  # (the loop may have cleared it)
                if end is not None and end > prev_t and cause is not None:
                    _stretch(parts, prev_t, end, cause)
                self._close(tracked, end, parts)
                tracked, parts, seen = None, [], None
            for start_tick in [t for t in ended if t != tick]:
                # a block that began and ended between two wake-ups: one
                # stall in which the watchdog could not run at all
                end = ended.pop(start_tick)
                self._block_end.pop(start_tick, None)
                if end is not None and cause is not None:
                    self._close(start_tick, end, [(start_tick + self.interval, end, cause)])
            if in_block and cause is not None:
                start = tick + self.interval
                _stretch(parts, max(prev_t, start), now, cause)
                tracked = tick
                if now_runs is not None:
                    seen = now_runs
            prev_t, prev_cpu, prev_waits = now, cpu, waits
        if runq is not None:
            runq.close()

    def _gc_cb(self, phase: str, info: dict) -> None:
        """gc callback: remember collections long enough to matter (a
        collection is one C call: no snapshot can see it, its callback can)."""
        if phase == "start":
            self._gc_t0 = time.perf_counter()
            return
        t0 = self._gc_t0
        now = time.perf_counter()
        if now - t0 >= 0.005:
            self._gcs.append((t0, now, info.get("generation"), threading.current_thread().name))

    def _close(self, start_tick: float, end: float | None, parts: list) -> None:
        """Keep a finished block with its cause (if it was long enough).
        Garbage collections inside the block are their own cause: what the
        snapshots said of those stretches is replaced."""
        if end is None or not parts:
            return
        seconds = end - start_tick - self.interval
        if seconds < self.blame_after:
            return
        begin = start_tick + self.interval
        gcs = [(max(a, begin), min(b, end), f"gen {gen} collection in {thread}")
               for a, b, gen, thread in list(self._gcs) if a < end and b > begin]
        weights: dict = {}
        for a, b, key in parts:
            w = b - a
            for ga, gb, _ in gcs:
                w -= max(0.0, min(b, gb) - max(a, ga))
            if w > 0:
                weights[key] = weights.get(key, 0.0) + w
        for ga, gb, what in gcs:
            key = ("garbage collection", what)
            weights[key] = weights.get(key, 0.0) + gb - ga
        if not weights:
            return
        by_cause: dict = {}
        for (cause, _), w in weights.items():
            by_cause[cause] = by_cause.get(cause, 0.0) + w
        main = max(by_cause, key=by_cause.__getitem__)
        label = max((k for k in weights if k[0] == main), key=weights.__getitem__)[1]
        wall_end = time.time() - (time.perf_counter() - end)
        self.causes.append(BlockCause(end, wall_end, seconds, main, label,
                                      {c: round(w, 4) for c, w in by_cause.items()}))
