"""The one home of slimgraph's reach into CPython's private parts.

Each mechanism here reads or writes what CPython does not promise (a
struct's layout, a table's size arithmetic, an underscore name of ``sys``)
to save the event loop a long block. So each checks itself once, at
import, on the running interpreter, and says whether it may be used; where
the check fails the callers take the plain path, which gives the same
result, only without the saving. What each check answers on each supported
CPython, and what each saves there, is in docs/interpreters.md.

- :func:`swap_dict_contents`: two dicts' contents exchanged in O(1)
  (:func:`dict_swap_available`; plain path: ``update``);
- :func:`dict_room`: how many entries a dict takes before it grows, read
  from its ``sys.getsizeof`` (None where the sizes are not understood;
  plain path: the dict grows where it fills);
- the C unpickler's memo made at its final size and handed over to lists
  (:func:`unpickler_memo_available`, :func:`presize_unpickler_memo`,
  :func:`take_unpickler_memo`; plain path: the unpickler grows and frees
  its memo itself);
- the frame a thread runs and a caller's frame (:func:`thread_frame`,
  :func:`caller_frame`; None where the interpreter gives none).

Swapping dict contents
----------------------
Why. The scheduler's task dict must stay the object it is for the
scheduler's life: distributed's ``wait_for_state`` and plugins that keep
``self.tasks = scheduler.tasks`` hold it. A big ingestion builds its new
task dict in a worker thread (the table of a million entries is allocated
and touched there, not on the event loop); publishing it with
``tasks.update(new)`` on the loop would allocate and fault a second table of
the same size there (0.49 s at 1M tasks). :func:`swap_dict_contents` instead
exchanges the two dicts' tables: the scheduler's dict then holds the
prepared entries, and the build's dict the old ones, to be freed off the
loop.

How. A CPython dict is a header (``ma_used``, a version tag, ``ma_keys``,
``ma_values``) pointing at its table. The swap exchanges ``ma_used``,
``ma_keys`` and ``ma_values`` of two combined-table dicts with one
``memmove`` call each, made through a ``PYFUNCTYPE`` prototype: such a call
keeps the GIL, so no other thread sees a header half written. The version
tags (with the dict watchers' bits since 3.12) stay with their objects.

Invariant: the swap is used only where :func:`dict_swap_available` says it
checked itself on this interpreter at import (the field offsets read back
as ``len`` and a swap of probe dicts behaved as a clear-and-update). Where
the check fails (another layout, a debug or free-threaded build), callers
take the plain path, ``update``.
"""
from __future__ import annotations

import ctypes
import gc
import io
import pickle
import sys
import threading
from array import array
from types import FrameType
from typing import Any, NamedTuple

__all__ = [
    "caller_frame",
    "dict_room",
    "dict_swap_available",
    "presize_unpickler_memo",
    "swap_dict_contents",
    "take_unpickler_memo",
    "thread_frame",
    "unpickler_memo_available",
    "unpickler_memo_size",
]

_WORD = ctypes.sizeof(ctypes.c_void_p)
#: offset of ``ma_used`` (after the object header: refcount and type)
_USED = 2 * _WORD
#: ``ma_used``, the version tag (8 bytes), ``ma_keys``, ``ma_values``
_KEYS = _USED + ctypes.sizeof(ctypes.c_ssize_t) + 8
_VALUES = _KEYS + _WORD

# memmove that holds the GIL (ctypes' own ``memmove`` releases it)
_move = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)(
    ctypes.cast(ctypes.memmove, ctypes.c_void_p).value
)


def _word(address: int) -> int:
    return ctypes.c_ssize_t.from_address(address).value


def _combined(d: dict) -> bool:
    """A combined table, or the shared empty one (3.10's empty dicts point
    ``ma_values`` at a static empty array)."""
    return _word(id(d) + _VALUES) == 0 or (not d and _word(id(d) + _KEYS) == _EMPTY_KEYS)


_EMPTY_KEYS = _word(id({}) + _KEYS) if dict.__basicsize__ == _VALUES + _WORD else -1


def _exchange(a: dict, b: dict) -> None:
    """Exchange the (used, keys, values) fields; the version tags stay."""
    tmp = (ctypes.c_char * (_VALUES + _WORD))()
    pa, pb, pt = id(a), id(b), ctypes.addressof(tmp)
    for off, size in ((_USED, _WORD), (_KEYS, 2 * _WORD)):
        _move(pt, pa + off, size)
        _move(pa + off, pb + off, size)
        _move(pb + off, pt, size)


def _retrack(d: dict) -> None:
    """A dict with no tracked value may be untracked by the collector; after a
    swap it may hold tracked ones: storing an entry again makes CPython
    track it (as any store of a tracked value does)."""
    if d and not gc.is_tracked(d):
        k = next(reversed(d))
        d[k] = d[k]


def swap_dict_contents(a: dict, b: dict) -> None:
    """Give ``a`` the entries (and order) of ``b`` and ``b`` those of ``a``,
    without touching either table. Both must be exact, combined-table dicts;
    call only when :func:`dict_swap_available`."""
    if type(a) is not dict or type(b) is not dict or not (_combined(a) and _combined(b)):
        raise TypeError("swap_dict_contents takes two plain dicts")
    _exchange(a, b)
    _retrack(a)
    _retrack(b)


def _check() -> bool:
    if sys.implementation.name != "cpython" or dict.__basicsize__ != _VALUES + _WORD:
        return False
    if getattr(sys, "_is_gil_enabled", lambda: True)() is False:
        return False
    try:
        probes = [{}, {1: 2}, {i: [i] for i in range(1000)}]
        if any(_word(id(d) + _USED) != len(d) or not _combined(d) for d in probes):
            return False
        empty, small, big = probes
        want_small, want_big = dict(small), dict(big)
        swap_dict_contents(empty, big)
        if empty != want_big or list(empty) != list(want_big) or big or len(big) != 0:
            return False
        if not gc.is_tracked(empty):
            return False
        swap_dict_contents(small, empty)
        if small != want_big or empty != want_small:
            return False
        small[1000] = [0]  # the adopted table grows and shrinks as its own
        del small[0]
        empty.update(want_big)
        return len(small) == 1000 and 0 not in small and small[1000] == [0] and empty == {**want_small, **want_big}
    except Exception:
        return False


_AVAILABLE = _check()


def dict_swap_available() -> bool:
    """Whether :func:`swap_dict_contents` checked itself on this interpreter."""
    return _AVAILABLE


# ---------------------------------------------------------------------------
# A dict's room before it grows
#
# ``sys.getsizeof`` of a dict that owns its table is a fixed part plus the
# table: an index array of ``2**log2`` slots (1, 2, 4 or 8 bytes each, by
# the table's size) and entries for two thirds of the slots. An entry is a
# (hash, key, value) of three words; since 3.11 a table whose keys are all
# str has (key, value) entries of two. The fixed part differs by release
# (3.10's table header is a word longer). Both are read off probe dicts at
# import, and the arithmetic is then checked against dicts filled one key
# at a time (:func:`_room_predicts_growth`).


def _table_bytes(log2: int, entry: int) -> int:
    """The bytes of a dict's own table of ``2**log2`` slots with entries of
    ``entry`` bytes, less the fixed part."""
    n = 1 << log2
    index = 1 if log2 < 8 else 2 if log2 < 16 else 4 if log2 < 32 else 8
    return n * index + (2 * n // 3) * entry


def _capacities() -> tuple[int, dict] | None:
    """``(fixed part, {table bytes: entries it holds before it grows})`` of
    this interpreter's dicts, or None where no entry size fits."""
    general = 3 * _WORD
    ints = {i: i for i in range(6)}  # (a table of 16 slots, general entries)
    fixed = sys.getsizeof(ints) - _table_bytes(4, general)
    words = {str(i): i for i in range(6)}  # (16 slots, str keys)
    kinds = [e for e in (2 * _WORD, general) if sys.getsizeof(words) - _table_bytes(4, e) == fixed]
    if not kinds:
        return None
    sizes = {_table_bytes(log2, e): 2 * (1 << log2) // 3 for log2 in range(3, 40) for e in {kinds[0], general}}
    return fixed, sizes


_SIZES = _capacities()


def dict_room(d: dict) -> int | None:
    """How many more entries ``d`` takes before it grows (an upper bound: a
    removed entry keeps its place until the table is made anew), from the
    size of its table; None where that size is not one the arithmetic above
    gives on this interpreter, or where its check failed."""
    sizes = _SIZES
    if sizes is None:
        return None
    capacity = sizes[1].get(sys.getsizeof(d) - sizes[0])
    return None if capacity is None else capacity - len(d)


def _room_predicts_growth() -> bool:
    """Whether :func:`dict_room` says 0 exactly before each insertion that
    makes a dict grow, for dicts of both kinds of keys filled one at a time."""
    for make in (lambda i: ("k", i), str):
        d: dict = {}
        for i in range(3000):
            before, room = sys.getsizeof(d), dict_room(d)
            d[make(i)] = i
            if i and (room is None or (sys.getsizeof(d) != before) != (room == 0)):
                return False  # (an empty dict shares one table of no size: skipped)
    return True


if _SIZES is not None and not _room_predicts_growth():
    _SIZES = None


# ---------------------------------------------------------------------------
# The C unpickler's memo
#
# CPython's ``_pickle.Unpickler`` object is, after its object header, a
# pointer to its stack, then its memo: a C array of object pointers, its
# size and its length (3.10 to 3.13 alike); a list's item array pointer
# follows its header and length. The offsets are read back on a small
# unpickling whose memo is known before anything is written
# (:func:`_memo_layout`). Why the memo is presized and handed over:
# :mod:`slimgraph.ingest.memo`.

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


#: the releases whose ``UnpicklerObject`` starts as described above: only
#: there is the probe's first read (a pointer it then follows) safe to make
_MEMO_RELEASES = ((3, 10), (3, 11), (3, 12), (3, 13))


def _memo_layout() -> _Layout | None:
    """The layout, checked on a small unpickling: the list's item pointer
    leads to its item, the memo's length is the Python memo's, and every
    slot holds the object the Python memo names for it (or NULL)."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in _MEMO_RELEASES:
        return None
    if getattr(sys, "_is_gil_enabled", lambda: True)() is False or array("Q").itemsize != _PTR:
        return None
    head = object.__basicsize__  # (refcount and type)
    layout = _Layout(head + _PTR, head + 2 * _PTR, head + 3 * _PTR, head + _PTR)
    marker = object()
    probe = [marker]
    items = _read_ptr(id(probe) + layout.list_items)
    if items == 0 or _read_ptr(items) != id(marker):
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


_LAYOUT = _memo_layout()


def unpickler_memo_available() -> bool:
    """Whether the memo functions below act on this interpreter."""
    return _LAYOUT is not None


def unpickler_memo_size(unpickler: pickle.Unpickler) -> int | None:
    """The slots of ``unpickler``'s memo (None where the layout is unknown)."""
    if _LAYOUT is None or not isinstance(unpickler, pickle.Unpickler):
        return None
    return _read_size(id(unpickler) + _LAYOUT.memo_size)


_calloc = ctypes.pythonapi.PyMem_Calloc
_calloc.argtypes = (ctypes.c_size_t, ctypes.c_size_t)
_calloc.restype = ctypes.c_void_p
_free = ctypes.pythonapi.PyMem_Free
_free.argtypes = (ctypes.c_void_p,)
_free.restype = None


def presize_unpickler_memo(unpickler: pickle.Unpickler, entries: int) -> bool:
    """Give a fresh ``unpickler`` (no ``load`` yet) a memo of ``entries``
    zeroed slots, made by ``PyMem_Calloc`` as its own is, and free the one it
    had; returns whether it did. A memo that turns out too small grows as
    before."""
    layout = _LAYOUT
    if layout is None or not isinstance(unpickler, pickle.Unpickler):
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


def take_unpickler_memo(unpickler: pickle.Unpickler, step: int) -> list:
    """Move ``unpickler``'s memo, ``step`` slots at a time, into new lists
    and return them (``[]`` where the layout is unknown); the memo's slots
    are left NULL, so the unpickler's own cleanup releases nothing.

    Invariant: every reference the memo held is held by exactly one list
    slot, none added or lost; a slot the memo left empty holds the step's
    filler object, whose reference count is kept exact."""
    layout = _LAYOUT
    if layout is None or not isinstance(unpickler, pickle.Unpickler):
        return []
    base = id(unpickler)
    memo = _read_ptr(base + layout.memo)
    size = _read_size(base + layout.memo_size)
    if memo == 0 or size == 0:
        return []
    out = []
    for lo in range(0, size, step):
        moved = _take_slots(memo + lo * _PTR, min(step, size - lo), layout)
        if moved is not None:
            out.append(moved)
    return out


def _take_slots(at: int, k: int, layout: _Layout) -> list | None:
    """The ``k`` memo slots at ``at`` moved into a new list (None when they
    are all empty: the memo's unused tail)."""
    raw = ctypes.string_at(at, k * _PTR)
    if not raw.strip(b"\0"):
        return None
    slots = array("Q")
    slots.frombytes(raw)
    filler = object()
    moved = [filler] * k
    holes = slots.count(0)  # (slots the unpickler never filled: the filler keeps them)
    i = 0
    for _ in range(holes):
        i = slots.index(0, i)
        slots[i] = id(filler)
    # (copied through buffers, not ``ctypes.memmove``/``memset``: a ctypes
    # call gives the GIL up and takes it straight back, and a step of those,
    # over and over, kept a waiting thread from ever asking for it)
    _buffer(_read_ptr(id(moved) + layout.list_items), k * _PTR)[:] = memoryview(slots).cast("B")
    _buffer(at, k * _PTR)[:] = bytes(k * _PTR)
    # the list's slots no longer hold the filler, but those the memo left
    # empty (the filler's count as it now is referenced)
    ctypes.c_ssize_t.from_address(id(filler)).value -= k - holes
    return moved


# ---------------------------------------------------------------------------
# Frames
#
# ``sys._current_frames`` and ``sys._getframe`` are CPython's (the
# underscore: other interpreters need not have them, or may answer
# differently). Each is checked at import on the calling thread's own frame.


def _own_frame_found() -> tuple[bool, bool]:
    """Whether ``sys._current_frames`` and ``sys._getframe`` give this very
    call's frame."""
    code = _own_frame_found.__code__
    try:
        current = sys._current_frames().get(threading.get_ident())
        by_thread = current is not None and current.f_code is code
        del current
    except Exception:
        by_thread = False
    try:
        by_depth = sys._getframe(0).f_code is code
    except Exception:
        by_depth = False
    return by_thread, by_depth


_FRAMES_BY_THREAD, _FRAMES_BY_DEPTH = _own_frame_found()


def thread_frame(thread_id: int) -> FrameType | None:
    """The frame the thread ``thread_id`` runs now (None where it is not
    known, or its check failed). Hold it briefly: a frame keeps its locals."""
    if not _FRAMES_BY_THREAD:
        return None
    return sys._current_frames().get(thread_id)


def caller_frame() -> FrameType | None:
    """The frame that called the function calling this (None where its
    check failed, or there is none)."""
    if not _FRAMES_BY_DEPTH:
        return None
    try:
        return sys._getframe(2)
    except ValueError:
        return None
