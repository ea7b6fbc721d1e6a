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
``[B - interval, B]`` (a lower bound, off by at most one interval; timer
jitter adds ~0.1 ms). Blocks shorter than ``interval`` may be reported as 0.
:meth:`longest_since` also includes the block in progress at the moment it
is called (``now - last tick - interval``, same bounds), which is what an
``update_graph`` wrapper needs: its synchronous section is still running
when it reads the monitor.

Cost: one timer callback per interval (~3-5 us each, i.e. <0.1 % of a core
at 10 ms) plus the watchdog thread waking every 100 ms; cheap enough to keep
on in production.
"""
from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections import deque
from typing import Any

logger = logging.getLogger(__name__)


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
    ):
        self.interval = interval
        self.watch_interval = watch_interval
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
        if self._want_watchdog:
            self._stop_evt.clear()
            self._watchdog = threading.Thread(
                target=self._watch, name="slimgraph-loop-watchdog", daemon=True
            )
            self._watchdog.start()
        return self

    def stop(self) -> None:
        self.running = False
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
        while not self._stop_evt.wait(self.watch_interval):
            cur = self.current_block_s()
            if cur >= self.warn_after and self._warned_for != self.last_tick:
                self._warned_for = self.last_tick
                stack = ""
                tid = self._loop_thread_id
                if tid is not None:
                    frame = sys._current_frames().get(tid)
                    if frame is not None:
                        stack = "".join(traceback.format_stack(frame, limit=12))
                logger.warning(
                    "slimgraph: event loop blocked for %.1f s so far\n%s", cur, stack
                )
