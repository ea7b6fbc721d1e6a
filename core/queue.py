"""The queue of runnable root-ish tasks, without per-entry objects.

Stock keeps ``Scheduler.queued`` in a ``HeapSet`` whose heap holds, per
queued task, a 3-tuple ``(priority, counter, weakref)``: with the counter int,
the weakref and (for slim tasks) the priority tuple that is about 330 bytes
per queued task. In a large array graph most tasks are roots, and most roots
sit in this queue right after submission.

:class:`TaskQueue` has the same API and the same order (priority, then
insertion order), but its heap holds the task states themselves: they
compare by ``(priority, queue sequence number)`` (see
``SlimTaskState.__lt__``). Per queued task that is one heap slot, one set
entry and one int.

Like HeapSet, removal is lazy: ``discard`` only forgets the task in
``_data``; stale heap entries are dropped when they reach the top. A task
re-added while a stale entry of it may still be in the heap gets a new
sequence number, which changes that entry's place: the heap is marked dirty
and re-heapified before it is next read (rare: a queued task released and
queued again).
"""
from __future__ import annotations

import heapq
import itertools
from typing import Any, Iterator


class TaskQueue:
    __slots__ = ("_data", "_heap", "_seq", "_sorted", "_dirty", "_pending")

    def __init__(self) -> None:
        self._data: set = set()
        self._heap: list = []
        self._seq = itertools.count()
        self._sorted = True
        self._dirty = False
        self._pending: list = []

    def add_deferred(self, ts: Any) -> None:
        """Add now (membership, sequence number), place in the heap later.

        Bulk ingestion queues many tasks in an order unrelated to their
        priority; pushing each would cost log(n) Python-level comparisons.
        Pending tasks are sorted once, with C-level tuple comparisons, when
        the heap is next read (see :meth:`_clean`).
        """
        if ts in self._data:
            return
        if ts._qseq is not None:
            self._dirty = True
        ts._qseq = next(self._seq)
        self._data.add(ts)
        self._pending.append(ts)

    def __contains__(self, value: object) -> bool:
        return value in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __bool__(self) -> bool:
        return bool(self._data)

    def __repr__(self) -> str:
        return f"<TaskQueue: {len(self)} items>"

    def add(self, ts: Any) -> None:
        if ts in self._data:
            return
        if ts._qseq is not None:
            self._dirty = True  # a stale entry of ts may sit in the heap
        ts._qseq = next(self._seq)
        self._data.add(ts)
        heapq.heappush(self._heap, ts)
        self._sorted = False

    def _clean(self) -> None:
        if self._pending:
            pending = self._pending
            self._pending = []
            pending.sort(key=_sort_key)
            if not self._heap:
                self._heap = pending  # a sorted list is a heap
            else:
                self._heap.extend(pending)
                self._dirty = True
            self._sorted = False
        if self._dirty:
            heapq.heapify(self._heap)
            self._dirty = False
            self._sorted = False

    def discard(self, ts: Any) -> None:
        self._data.discard(ts)
        if not self._data:
            self.clear()

    def remove(self, ts: Any) -> None:
        if ts not in self._data:
            raise KeyError(ts)
        self.discard(ts)

    def peek(self) -> Any:
        if not self._data:
            raise KeyError("peek into empty set")
        self._clean()
        heap = self._heap
        data = self._data
        while True:
            ts = heap[0]
            if ts in data:
                return ts
            heapq.heappop(heap)
            self._sorted = False

    def peekn(self, n: int) -> Iterator[Any]:
        if n <= 0 or not self._data:
            return
        if n == 1:
            yield self.peek()
        else:
            yield from itertools.islice(self.sorted(), n)

    def pop(self) -> Any:
        if not self._data:
            raise KeyError("pop from an empty set")
        self._clean()
        heap = self._heap
        data = self._data
        while True:
            ts = heapq.heappop(heap)
            self._sorted = False
            if ts in data:
                data.discard(ts)
                if not data:
                    self.clear()
                return ts

    def peekright(self) -> Any:
        if not self._data:
            raise KeyError("peek into empty set")
        self._clean()
        while True:
            ts = self._heap[-1]
            if ts in self._data:
                return ts
            del self._heap[-1]

    def popright(self) -> Any:
        if not self._data:
            raise KeyError("pop from an empty set")
        self._clean()
        while True:
            ts = self._heap.pop()
            if ts in self._data:
                self._data.discard(ts)
                if not self._data:
                    self.clear()
                return ts

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def sorted(self) -> Iterator[Any]:
        self._clean()
        if not self._sorted:
            self._heap.sort()
            self._sorted = True
        seen: set = set()
        for ts in self._heap:
            if ts in self._data and ts not in seen:
                seen.add(ts)
                yield ts

    def clear(self) -> None:
        self._data.clear()
        self._heap.clear()
        self._pending.clear()
        self._sorted = True
        self._dirty = False


def _sort_key(ts: Any) -> tuple:
    """The order ``SlimTaskState.__lt__`` defines, as a C-comparable tuple."""
    return (ts.priority, ts._qseq)
