"""An unpickler's memo, handed over to lists that are freed in steps.

Why. CPython's C ``Unpickler`` keeps a reference to every object it
memoized (1.6M for the bench's 1M-task delayed submission) in a C array it
frees when the unpickler goes: one ``Py_DECREF`` per entry, in one C call
that holds the GIL. The objects live on in the graph, so nothing is freed,
but each decref reads an object somewhere in a heap of a GB: 185-230 ms in
an idle process, the longest block of the event loop an engine-mode
delayed submission had (``bench --workload delayed``, 0.19 s) although it
ran in the ingestion's thread.

What. :func:`hand_over` moves the memo's references, a slice at a time,
into new lists (its pointers copied into a list made for the purpose,
the memo's slots set to NULL), so that the unpickler's own cleanup finds
nothing left to release, and returns the lists for
:func:`slimgraph.runtime.disposal.drain`, which releases them in steps.
Every reference the memo held is held by exactly one list slot: none is
added or lost (a slot of the memo that was empty gets the list's filler,
whose count is kept exact).

The memo is reached through :mod:`slimgraph.shim.cpython`, which checks
its layout on the running interpreter at import; where the check fails
(another interpreter, another layout) :func:`hand_over` and :func:`presize`
do nothing and the unpickler grows and frees its memo itself, as before.

What it keeps: the longest event-loop block of a 1M-task delayed
submission a third as long, and so within its target (<= 0.2 s) with room:
without it, ``bench --workload delayed --tasks 1000000 --only slim``
blocked 0.164-0.214 s (in the unpickler's cleanup) against 0.050 s with
it (benchmarks/LOG.md, 2026-12-07, fifth session).
"""
from __future__ import annotations

import pickle
from typing import Any

from slimgraph.shim import cpython

#: memo entries moved per step (128 KiB of pointers)
STEP = 16_384


def available() -> bool:
    """Whether :func:`hand_over` moves anything on this interpreter."""
    return cpython.unpickler_memo_available()


#: :func:`presize` only for a memo of at least this many entries (8 MB)
PRESIZE_MIN = 1 << 20


def presize(unpickler: pickle.Unpickler, entries: int) -> bool:
    """Give a fresh ``unpickler`` a memo of ``entries`` slots before its
    ``load``; returns whether it did.

    Why. The unpickler doubles its memo as it fills, and each doubling
    zeroes the new half in one call: 67 MB of fresh pages at the last one
    for the bench's 1M delayed submission (9.6M entries), 34 ms in an idle
    process and several times that under load, with the GIL held. A memo
    made by ``PyMem_Calloc`` (what the unpickler's own allocation is) gets
    its zero pages from the kernel as they are first written, one at a
    time, during the load. ``entries`` is an upper bound the caller
    counts (protocol 4 and 5 memoize with a one-byte opcode); a memo that
    turns out too small grows as before."""
    if entries < PRESIZE_MIN:
        return False
    return cpython.presize_unpickler_memo(unpickler, entries)


#: bytes of a stream counted per call (:func:`memoized_at_most`)
_COUNT_STEP = 1 << 20


def memoized_at_most(data: Any) -> int:
    """How many objects a protocol 4-5 pickle can memoize at most: its
    ``MEMOIZE`` opcode bytes and any byte equal to it, counted a MiB at a
    time."""
    mv = memoryview(data).cast("B")
    op = pickle.MEMOIZE[0]
    return sum(bytes(mv[lo : lo + _COUNT_STEP]).count(op) for lo in range(0, len(mv), _COUNT_STEP))


def presize_for(unpickler: pickle.Unpickler, data: Any) -> bool:
    """:func:`presize` for the stream ``data`` (counted only where a memo
    could be presized: the layout is known and the stream is long enough)."""
    if not available() or len(memoryview(data).cast("B")) < PRESIZE_MIN:
        return False
    return presize(unpickler, memoized_at_most(data))


def hand_over(unpickler: pickle.Unpickler) -> list:
    """Move ``unpickler``'s memo into lists (see the module's docstring) and
    return them; ``[]`` where the layout is not known. Call it after the
    last ``load`` (the memo is empty afterwards: a later ``load`` that
    reads an earlier object would fail)."""
    return cpython.take_unpickler_memo(unpickler, STEP)
