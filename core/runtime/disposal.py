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
"""
from __future__ import annotations

from typing import Any

#: Entries freed per step (about a millisecond of work).
STEP = 20_000


def drain(containers: list) -> None:
    """Empty every list, dict, set or deque in ``containers``, in steps,
    then drop them. Meant for a worker thread (``offload``)."""
    while containers:
        c = containers.pop()
        if isinstance(c, list):
            while c:
                del c[-STEP:]
        elif isinstance(c, dict):
            popitem = c.popitem
            while c:
                for _ in range(min(STEP, len(c))):
                    popitem()
        elif isinstance(c, set):
            pop = c.pop
            while c:
                for _ in range(min(STEP, len(c))):
                    pop()
        del c


def big(*containers: Any, at_least: int = 10_000) -> list:
    """The containers worth draining (others go with their owner)."""
    return [c for c in containers if c is not None and hasattr(c, "__len__") and len(c) >= at_least]
