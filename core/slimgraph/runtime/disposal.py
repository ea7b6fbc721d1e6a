"""Freeing an ingestion's big temporaries off the event loop, in steps.

A million-task ingestion leaves behind containers with a million entries
each: the numbered graph (key list, position dict, dependency tuples), the
ordering's result, the staged task dict and visit lists. Whoever drops the
last reference frees them, element by element, in one C-level cascade
that holds the GIL: a few hundred milliseconds at the end of
``update_graph``, on the event loop.

:func:`drain` empties such containers in a worker thread instead, a slice
at a time, so the interpreter can switch to the event loop between slices.
Only containers that nothing else holds may be passed (the scheduler's own
structures, e.g. a queue that adopted a staged list, must not be).

Freed is not returned: glibc keeps the freed heap mapped, and the process's
RSS stays where the ingestion's peak left it. :func:`give_back` (after a
drain, ``slimgraph-switches.trim-heap``) asks glibc to return it (``malloc_trim``,
a few ms in the worker thread). What it keeps: the scheduler's RSS growth
per task within its target (<= 750 B): without it, ``bench --workload
array|delayed --tasks 1000000 --only slim`` grew 916 and 849 B/task against
659 and 700 with it (benchmarks/LOG.md, 2026-12-07, fifth session).
"""
from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import sys
from collections import deque
from time import perf_counter
from typing import Any

from slimgraph import switches
from slimgraph.runtime import threads

#: Most entries freed per step, and the time a step should take: a step is
#: one C call (``del lst[-n:]``) and frees what its entries alone hold, so
#: its size follows how heavy the entries turn out to be. Entries that are
#: whole structures (a dispatch run holding 500 messages with their
#: run_specs) made 20,000-entry steps of one 1.25 s cascade, seen as a
#: block of the event loop (slimgraph.instrument.blame) at 1M tasks.
STEP = 20_000
STEP_SECONDS = 0.001


def drain(containers: list) -> float:
    """Empty every list, dict, set or deque in ``containers``, in steps,
    then drop them. Meant for a worker thread (``offload``). Returns the
    longest step (seconds; for dicts, sets and deques, 256 entries, each
    its own C call): about the longest the event loop waited for the GIL."""
    longest = 0.0
    while containers:
        c = containers.pop()
        if isinstance(c, list):
            longest = max(longest, _drain_list(c))
        elif isinstance(c, (dict, set, deque)):
            # one entry per C call; timed per 256 (an upper bound per step)
            take = c.popitem if isinstance(c, dict) else c.pop
            while c:
                t = perf_counter()
                for _ in range(min(256, len(c))):
                    take()
                longest = max(longest, perf_counter() - t)
        del c
    return longest


def _drain_list(c: list) -> float:
    """Empty a list from its end, in steps that grow while they stay under
    ``STEP_SECONDS`` and shrink when they do not."""
    longest = 0.0
    step = 16
    while c:
        t = perf_counter()
        del c[-step:]
        took = perf_counter() - t
        longest = max(longest, took)
        if took < STEP_SECONDS / 2 and step < STEP:
            step *= 2
        elif took > STEP_SECONDS and step > 1:
            step //= 2
    return longest


def big(*containers: Any, at_least: int = 10_000) -> list:
    """The containers worth draining (others go with their owner)."""
    return [c for c in containers if c is not None and hasattr(c, "__len__") and len(c) >= at_least]


def sole(owner: Any, *names: str) -> list:
    """Those of ``owner``'s attributes ``names`` that nothing but ``owner``
    holds: safe to drain. A container that anything else still reads (a
    batch of owed plugin calls, a plugin that kept the list it was given)
    is left alone; it goes with its last holder."""
    out = []
    for name in names:
        c = getattr(owner, name, None)
        # the references: owner's attribute, ``c``, getrefcount's argument
        if c is not None and sys.getrefcount(c) == 3:
            out.append(c)
    return out


def take_sole(box: list) -> list:
    """Empty ``box`` (containers put there by their last user, who kept no
    other reference); returns those that nothing else holds either."""
    out = []
    while box:
        c = box.pop()
        # the references: ``c``, getrefcount's argument
        if c is not None and sys.getrefcount(c) == 2:
            out.append(c)
    return out


_TRIM: Any = None  # glibc's malloc_trim, or False where there is none


def give_back() -> bool:
    """Return the free heap at the top of every malloc arena, and whole free
    pages inside them, to the operating system (glibc's ``malloc_trim(0)``;
    ctypes lets the GIL go during the call). False where the C library has
    no such call (not glibc)."""
    global _TRIM
    if _TRIM is None:
        try:
            _TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
            _TRIM.argtypes, _TRIM.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):
            _TRIM = False
    if _TRIM is False:
        return False
    _TRIM(0)
    return True


def drain_and_give_back(containers: list, trim: bool) -> float:
    """:func:`drain`, then (``trim``) :func:`give_back`: one trip to the
    worker thread."""
    longest = drain(containers)
    if trim:
        give_back()
    return longest


_freeing: set = set()


def free_later(containers: list) -> None:
    """Free ``containers`` (nothing else may hold them) in steps in a worker
    thread (:func:`drain_and_give_back`), not in one cascade on the event
    loop where their last holder lets go. Off an event loop: dropped here."""
    if not containers:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        containers.clear()
        return
    task = loop.create_task(_drain_off_loop(containers))
    _freeing.add(task)
    task.add_done_callback(_freeing.discard)


async def _drain_off_loop(containers: list) -> None:
    try:
        await threads.offload(drain_and_give_back, containers, bool(switches.get("trim-heap")))
    except RuntimeError:  # the offload thread is gone (the interpreter exits)
        containers.clear()
