"""One process-wide switch for pausing the cyclic garbage collector.

Several parts of slimgraph keep the collector off for a while: an ingestion
(``slimgraph.gc: pause``), the ordering in the offload thread, and the
census and memory tree while they hold a snapshot of every task state.
These overlap in time, on two threads and across ``await``s, so the usual
"remember ``gc.isenabled()``, disable, restore" pattern is not safe: if B
starts while A holds the collector off and A finishes first, B later
"restores" the disabled state and the collector stays off for good.

Here holds are counted: the first hold records whether the collector was
on and turns it off, the last release turns it back on if it was on. The
collector is never left off by an interleaving.
"""
from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

__all__ = ["hold", "release", "paused", "holds"]

_lock = threading.Lock()
_depth = 0
_was_enabled = False


def hold() -> None:
    """Keep the cyclic GC off until the matching :func:`release`."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1


def release() -> None:
    """End one :func:`hold`; the last one turns the collector back on if it
    was on when the first began."""
    global _depth
    with _lock:
        if _depth <= 0:
            raise RuntimeError("slimgraph.runtime.gcpause.release() without hold()")
        _depth -= 1
        if _depth == 0 and _was_enabled:
            gc.enable()


def holds() -> int:
    """How many holds are active (for tests and diagnostics)."""
    return _depth


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """``with paused():`` the collector is off inside the block."""
    hold()
    try:
        yield
    finally:
        release()


# -- ``slimgraph.gc: freeze`` -------------------------------------------------
#
# After a big ingestion every new object is still in the youngest generation
# (the collector was paused), and the next collection traverses all of them
# on the event loop: seconds at a million tasks. ``gc.freeze()`` moves every
# tracked object to the permanent generation instead, which no collection
# traverses. The price: reference cycles that are garbage at that moment are
# kept too. So the freeze lasts only while slim schedulers hold tasks: when
# one has forgotten its last task, :func:`on_idle` unfreezes (an O(1) move
# of the frozen objects into the oldest generation, which the next full
# collection then cleans).

_frozen = False


def freeze_until_idle() -> None:
    """Freeze every tracked object until a slim scheduler goes idle."""
    global _frozen
    with _lock:
        gc.freeze()
        _frozen = True


def on_idle() -> None:
    """A slim scheduler holds no tasks any more: end a freeze, if any."""
    global _frozen
    with _lock:
        if _frozen and _depth == 0:
            gc.unfreeze()
            _frozen = False


def frozen() -> bool:
    return _frozen
