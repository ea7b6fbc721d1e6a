"""A shorter GIL switch interval while an ingestion works in a thread.

The heavy phases of a slim ingestion run in a worker thread, so that the
event loop stays free. But the loop thread still needs the GIL for every
step it takes, and each time it gives the GIL up for a system call (a
socket read, psutil reading ``/proc`` for the system monitor) it waits for
the busy thread to hand it back: up to ``sys.getswitchinterval()`` (5 ms)
per call. A callback making forty system calls then takes 200 ms (the
"convoy effect"). While an ingestion is in flight, the interval is
lowered to ``slimgraph-switches.switch-interval`` (0.5 ms) and restored after the
last one ends; the busy thread loses well under one percent to the extra
switches.

Holds are counted, like :mod:`slimgraph.runtime.gcpause`, because ingestions
overlap.

What it keeps: the longest event-loop block of a 1M-task ingestion within
its target (<= 0.2 s). Without it (``slimgraph-switches.switch-interval: null``),
``bench --workload array|delayed --tasks 1000000 --only slim``: 0.150 and
0.189 s against 0.064 and 0.050 s with it (benchmarks/LOG.md, 2026-12-07,
fifth session).
"""
from __future__ import annotations

import sys
import threading

_lock = threading.Lock()
_depth = 0
_saved = 0.005


def hold(interval: float | None) -> None:
    """Use ``interval`` (None: leave it alone) until the matching release."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = sys.getswitchinterval()
            if interval:
                sys.setswitchinterval(min(interval, _saved))
        _depth += 1


def release() -> None:
    global _depth
    with _lock:
        if _depth <= 0:
            raise RuntimeError("slimgraph.runtime.switching.release() without hold()")
        _depth -= 1
        if _depth == 0:
            sys.setswitchinterval(_saved)


def holds() -> int:
    return _depth
