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

This reads the C structs of CPython's ``_pickle.Unpickler`` and ``list``.
Their layout is checked once, on a small unpickling whose memo is known,
before it is ever relied on (:func:`_probe`); where the check fails (another
interpreter, another layout) :func:`hand_over` does nothing and the
unpickler frees its memo itself, as before.
"""
from __future__ import annotations

import ctypes
import io
import pickle
import sys
from array import array
from typing import Any, NamedTuple

#: memo entries moved per step (128 KiB of pointers)
STEP = 16_384

_PTR = ctypes.sizeof(ctypes.c_void_p)


def _read_ptr(address: int) -> int:
    return ctypes.c_void_p.from_address(address).value or 0


def _buffer(address: int, n: int) -> memoryview:
    """The ``n`` bytes at ``address``, writable, as bytes."""
    return memoryview((ctypes.c_char * n).from_address(address)).cast("B")


def _read_size(address: int) -> int:
    return ctypes.c_size_t.from_address(address).value


class _Layout(NamedTuple):
    """Where the memo and a list's items are, as offsets from ``id()``."""

    memo: int
    memo_size: int
    memo_len: int
    list_items: int


def _probe() -> _Layout | None:
    """The layout, checked on a small unpickling (CPython 3.11-3.13's
    ``UnpicklerObject``: after the object header, the stack, then the memo
    array, its size and its length; a list's items after its header)."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in ((3, 11), (3, 12), (3, 13)):
        return None
    if getattr(sys, "_is_gil_enabled", lambda: True)() is False or array("Q").itemsize != _PTR:
        return None
    head = object.__basicsize__  # (refcount and type)
    layout = _Layout(head + _PTR, head + 2 * _PTR, head + 3 * _PTR, head + _PTR)
    marker = object()
    probe = [marker]
    if _read_ptr(id(probe) + layout.list_items) == 0:
        return None
    if _read_ptr(_read_ptr(id(probe) + layout.list_items)) != id(marker):
        return None
    values = [("a", 1), ("b", 2), "c" * 40, [3.5]]
    u = pickle.Unpickler(io.BytesIO(pickle.dumps(values, protocol=5)))
    u.load()
    known = u.memo.copy()  # {index: object}
    base = id(u)
    size = _read_size(base + layout.memo_size)
    length = _read_size(base + layout.memo_len)
    if not known or length != len(known) or not (length <= size < 1 << 16):
        return None
    memo = _read_ptr(base + layout.memo)
    if memo == 0:
        return None
    for i in range(size):
        want = id(known[i]) if i in known else 0
        if _read_ptr(memo + i * _PTR) != want:
            return None
    return layout


_LAYOUT = _probe()


def available() -> bool:
    """Whether :func:`hand_over` moves anything on this interpreter."""
    return _LAYOUT is not None


#: :func:`presize` only for a memo of at least this many entries (8 MB)
PRESIZE_MIN = 1 << 20

_calloc = ctypes.pythonapi.PyMem_Calloc
_calloc.argtypes = (ctypes.c_size_t, ctypes.c_size_t)
_calloc.restype = ctypes.c_void_p
_free = ctypes.pythonapi.PyMem_Free
_free.argtypes = (ctypes.c_void_p,)
_free.restype = None


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
    layout = _LAYOUT
    if layout is None or entries < PRESIZE_MIN or not isinstance(unpickler, pickle.Unpickler):
        return False
    base = id(unpickler)
    old = _read_ptr(base + layout.memo)
    size = _read_size(base + layout.memo_size)
    if old == 0 or _read_size(base + layout.memo_len) != 0 or size >= entries:
        return False
    if _buffer(old, size * _PTR).tobytes().strip(b"\0"):  # (not fresh after all)
        return False
    new = _calloc(entries, _PTR)
    if not new:
        return False
    ctypes.c_void_p.from_address(base + layout.memo).value = new
    ctypes.c_size_t.from_address(base + layout.memo_size).value = entries
    _free(old)
    return True


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
    if _LAYOUT is None or len(memoryview(data).cast("B")) < PRESIZE_MIN:
        return False
    return presize(unpickler, memoized_at_most(data))


def hand_over(unpickler: pickle.Unpickler) -> list:
    """Move ``unpickler``'s memo into lists (see the module's docstring) and
    return them; ``[]`` where the layout is not known. Call it after the
    last ``load`` (the memo is empty afterwards: a later ``load`` that
    reads an earlier object would fail)."""
    layout = _LAYOUT
    if layout is None or not isinstance(unpickler, pickle.Unpickler):
        return []
    base = id(unpickler)
    memo = _read_ptr(base + layout.memo)
    size = _read_size(base + layout.memo_size)
    if memo == 0 or size == 0:
        return []
    out = []
    for lo in range(0, size, STEP):
        k = min(STEP, size - lo)
        at = memo + lo * _PTR
        raw = ctypes.string_at(at, k * _PTR)
        if not raw.strip(b"\0"):  # (no entry here: the memo's unused tail)
            continue
        slots = array("Q")
        slots.frombytes(raw)
        filler = object()
        moved = [filler] * k
        holes = slots.count(0)  # (slots the unpickler never filled: the filler keeps them)
        i = 0
        for _ in range(holes):
            i = slots.index(0, i)
            slots[i] = id(filler)
        filled = k - holes
        # (copied through buffers, not ``ctypes.memmove``/``memset``: a
        # ctypes call gives the GIL up and takes it straight back, and a
        # step of those, over and over, kept a waiting thread from ever
        # asking for it: a 0.23 s block of the waiting thread)
        _buffer(_read_ptr(id(moved) + layout.list_items), k * _PTR)[:] = memoryview(slots).cast("B")
        _buffer(at, k * _PTR)[:] = bytes(k * _PTR)
        # the list's slots no longer hold the filler, but those the memo
        # left empty (the filler's count as it now is referenced)
        ctypes.c_ssize_t.from_address(id(filler)).value -= filled
        out.append(moved)
    return out
