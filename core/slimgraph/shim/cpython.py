"""The shim's reach into CPython's objects: a dict's contents handed over in O(1).

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
import sys
from typing import Any

__all__ = ["dict_swap_available", "swap_dict_contents"]

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
