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
from time import perf_counter
from typing import Iterator

__all__ = ["hold", "release", "paused", "holds", "shield", "unshield"]

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
# collection then cleans). ``gc.unfreeze()`` is all or nothing: what else
# was frozen (an application's own ``gc.freeze()``; the immortal objects
# CPython 3.12's collections move into the permanent generation) is
# unfrozen too. Those objects stay alive and full collections traverse
# them again: a cost, never a change of behaviour.

#
# While the freeze lasts, the scheduler keeps making long-lived objects: a
# big graph's ready tasks going out after the commit, results coming back
# (who_has sets, processing entries, log records). They reach the oldest
# generation unfrozen, and each full collection traverses all of them: in
# the tail of a 1M-task array ingestion, full collections grew from 0.24 s
# to 2.1 s, each one a block of the event loop. So while frozen, a full
# collection that follows one that took longer than
# ``slimgraph-switches.gc-full-max`` freezes first (in the collector's "start"
# callback, below): what survived two young collections joins the freeze,
# until the scheduler is idle. Young collections run as ever, and collect
# young garbage; a full one stays short.

_frozen = False
#: ``slimgraph-switches.gc-full-max`` in seconds, read when a freeze begins
_full_max = float("inf")
#: how long the last full collection took, and when the current one began
_last_full = 0.0
_full_began = 0.0
#: full collections that froze first, since the import (for diagnostics)
refreezes = 0


def freeze_until_idle(full_max: float = float("inf")) -> None:
    """Freeze every tracked object until a slim scheduler goes idle; until
    then, keep full collections under about ``full_max`` seconds."""
    global _frozen, _full_max
    with _lock:
        gc.freeze()
        _frozen = True
        _full_max = full_max


def on_idle() -> None:
    """A slim scheduler holds no tasks any more: end a freeze, if any."""
    global _frozen, _full_max, _last_full
    with _lock:
        if _frozen and _depth == 0:
            gc.unfreeze()
            _frozen = False
            _full_max = float("inf")
            _last_full = 0.0


def frozen() -> bool:
    return _frozen


# -- explicit collections during a big ingestion ------------------------------
#
# A paused collector does not stop an explicit ``gc.collect()``, and other
# code in the scheduler's process makes them: Bokeh's ``Document.destroy``
# collects once per discarded dashboard session (a user reloading dask's
# Status page, an unused session expiring). During a big ingestion each one
# traverses everything the ingestion has built so far, on the event loop:
# measured (``bench --mode client --real-use``, a gc callback timing every
# collection) 1.2-1.8 s per call at 200k tasks and 3-7 s at 1M, several
# times per ingestion. While a big ingestion is shielded (see
# ``slimgraph.runtime.gcpolicy.shield``), a collection is therefore preceded
# by a freeze (in the collector's "start" callback, an O(1) move): it finds
# nothing to traverse. The price is the freeze's own: cyclic garbage of that
# moment (e.g. the discarded session's document) is kept until the freeze
# ends: with the last shield, or, if the ingestion is frozen itself, when
# the scheduler is idle.

_shields = 0
_shielded = False


def _before_collection(phase: str, info: dict) -> None:
    global _shielded, _full_began, _last_full, refreezes
    full = info.get("generation") == 2
    if phase == "start":
        if _shields:
            gc.freeze()
            _shielded = True
        elif full and _frozen and _last_full > _full_max:
            gc.freeze()
            refreezes += 1
        if full:
            _full_began = perf_counter()
    elif full:
        _last_full = perf_counter() - _full_began


gc.callbacks.append(_before_collection)


def shield() -> None:
    """Until the matching :func:`unshield`, freeze before every collection."""
    global _shields
    with _lock:
        _shields += 1


def unshield() -> None:
    """End one :func:`shield`. The last one ends a freeze it caused unless a
    :func:`freeze_until_idle` keeps it."""
    global _shields, _shielded
    with _lock:
        if _shields <= 0:
            raise RuntimeError("slimgraph.runtime.gcpause.unshield() without shield()")
        _shields -= 1
        if _shields == 0 and _shielded:
            _shielded = False
            if not _frozen:
                gc.unfreeze()


def shields() -> int:
    return _shields
