"""Conversions over a million items, in steps that let the event loop in.

Why. The heavy phases of an ingestion run in a worker thread so that the
event loop keeps answering. But a single C call (``ndarray.tolist``,
``np.asarray`` of a list, ``list(map(f, seq))`` with a C ``f``,
``np.fromiter``) never gives the GIL up, however long it runs: over a
million items one takes 30-90 ms in-process, and in a scheduler process
whose two cores it shares with busy workers 5-13x that (an ordering's
``tolist`` showed as a 0.53 s block of the loop in a real-use 1M array
run). Cut into steps of :data:`STEP` items, each call is short and the
interpreter can switch threads between them; the result is the same
object, built the same way.

What cannot be cut this way: growing a dict or a set of a million entries
(each resize rehashes everything into a new table in one call), and
numpy's own sorts.
"""
from __future__ import annotations

from array import array
from itertools import islice
from typing import Any, Callable, Iterable, Sequence

#: items per step (~1-3 ms of C work each)
STEP = 65_536

#: items per step where each item is a lookup or an insertion in a dict of
#: a million entries: each one a cache miss, a 65k step of them took 24-44
#: ms in an idle process (a 1M delayed tree's positions), 5-10x that in a
#: busy scheduler process
RANDOM_ACCESS_STEP = 16_384


def each_step(seq: Any, take: Callable, step: int | None = None) -> None:
    """``take(part)`` for consecutive parts of ``seq`` of at most ``step``
    items (default :data:`STEP`; ``seq`` itself when it is that short)."""
    if step is None:
        step = STEP
    n = len(seq)
    if n <= step:
        take(seq)
        return
    for lo in range(0, n, step):
        take(seq[lo : lo + step])


def tolist(a: Any) -> list:
    """``a.tolist()`` of a 1-d numpy array."""
    if len(a) <= STEP:
        return a.tolist()
    out: list = []
    each_step(a, lambda part: out.extend(part.tolist()))
    return out


def int_array(seq: Sequence, np: Any) -> Any:
    """``np.asarray(seq, dtype=np.int64)`` of a list of ints."""
    n = len(seq)
    if n <= STEP:
        return np.asarray(seq, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    for lo in range(0, n, STEP):
        out[lo : lo + STEP] = seq[lo : lo + STEP]
    return out


def int64_array(seq: Sequence) -> Any:
    """A list of ints as a numpy int64 array viewing an ``array('q')``
    filled a step at a time (``array('q', seq)`` is one call: 0.23 s over
    ten million ints in order, longer scattered). TypeError or
    OverflowError where an item is not a 64-bit int."""
    import numpy as np

    out = array("q")
    each_step(seq, out.extend)
    return np.frombuffer(out, dtype=np.int64)


def list_of(items: Iterable) -> list:
    """``list(items)`` of an iterable (a dict's keys or values: walking a
    dict of 812k entries is 11-13 ms of cache misses in one call)."""
    out: list = []
    it = iter(items)
    while True:
        part = list(islice(it, STEP))
        if not part:
            return out
        out += part


def list_map(fn: Callable, seq: Sequence, step: int | None = None) -> list:
    """``list(map(fn, seq))``."""
    out: list = []
    each_step(seq, lambda part: out.extend(map(fn, part)), step)
    return out


def int64s(fn: Callable, seq: Sequence, step: int | None = None) -> Any:
    """``fn(item)`` of each item, ints, as a numpy int64 array.

    Filled into an ``array('q')`` a step at a time and viewed by numpy at
    the end, not assigned into a numpy array per step: numpy gives the GIL
    up around such a copy and takes it straight back, and CPython's waiting
    thread asks for the GIL only after an interval with no switch, so a
    loop of them kept the event loop waiting until the whole loop ended
    (50 ms for 199 steps of 0.4 ms)."""
    import numpy as np

    out = array("q")
    each_step(seq, lambda part: out.extend(map(fn, part)), step)
    return np.frombuffer(out, dtype=np.int64)


def types_of(seq: Sequence) -> set:
    """``set(map(type, seq))``."""
    out: set = set()
    each_step(seq, lambda part: out.update(map(type, part)))
    return out


def distinct(seq: Sequence) -> set:
    """``set(seq)``, for a sequence of few distinct values."""
    out: set = set()
    each_step(seq, out.update)
    return out
