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
``_data``; stale heap entries are dropped when they reach the top. Like
HeapSet, every ``add`` pushes an entry with a new sequence number, and a
task is where its smallest live entry is: a task released and queued again
while its old entry is still in the heap comes out at its old place (as on
stock). Its first entry is the task itself (its ``_qseq`` never changes);
later ones are small :class:`_Entry` objects (rare: a queued task released
and queued again).
"""
from __future__ import annotations

import heapq
import itertools
from typing import Any, Iterator

from slimgraph.runtime import disposal


class _Entry:
    """A further heap entry of a task queued again (see module docstring):
    it sorts like the task would with this sequence number."""

    __slots__ = ("ts", "_qseq")

    def __init__(self, ts: Any, seq: int):
        self.ts = ts
        self._qseq = seq

    @property
    def priority(self) -> Any:
        return self.ts.priority

    @property
    def _prio_head(self) -> Any:
        return self.ts._prio_head

    @property
    def _prio_order(self) -> Any:
        return self.ts._prio_order

    def __lt__(self, other: Any) -> bool:
        return (self.ts.priority, self._qseq) < (other.priority, other._qseq)

    def __hash__(self) -> int:
        return hash(self.ts)

    def __eq__(self, other: object) -> bool:
        return other is self.ts or other is self


def _task(x: Any) -> Any:
    return x.ts if type(x) is _Entry else x


class TaskQueue:
    __slots__ = ("_data", "_heap", "_runs", "_next", "_sorted", "_pending")

    def __init__(self) -> None:
        self._data: set = set()
        self._heap: list = []
        #: sorted runs beside the heap, each ``[list, position of its head]``
        #: (a staged ingestion's queued tasks arrive as one run; merging them
        #: into the heap would cost a Python comparison per task). A sorted
        #: list would be a valid heap too, but each pop from a heap costs
        #: ~2 log n Python comparisons (``SlimTaskState.__lt__``: 14 per
        #: queued task sent, for 37k queued tasks), and one from a run none
        self._runs: list = []
        self._next = 0  # the next sequence number
        self._sorted = True
        self._pending: list = []

    def add_deferred(self, ts: Any) -> None:
        """Add now (membership, sequence number), place in the heap later.

        Bulk ingestion queues many tasks in an order unrelated to their
        priority; pushing each would cost log(n) Python-level comparisons.
        Pending tasks are sorted once, with C-level tuple comparisons, when
        the queue is next read (see :meth:`_clean`).
        """
        if ts in self._data:
            return
        self._data.add(ts)
        self._pending.append(self._entry(ts))

    def reserve(self, n: int) -> int:
        """Reserve ``n`` sequence numbers for a staged ingestion (see
        :meth:`merge_staged`); returns the first."""
        base = self._next
        self._next += n
        return base

    def merge_staged(self, members: set, ordered: list, base: int, n: int) -> None:
        """Add tasks queued by a staged ingestion in one step.

        ``members`` holds them, ``ordered`` holds them sorted by
        ``(priority, _qseq)``, their ``_qseq`` lie in ``[base, base + n)``
        reserved by :meth:`reserve`, and none of them was ever queued here
        before (tasks queued again go through :meth:`add`). If anything was
        queued since the reservation, that task was queued first and must
        win ties: the staged tasks are renumbered after it (same relative
        order).
        """
        if not members:
            return
        if self._next != base + n:
            shift = self._next - base
            shared = ordered[0]._qseq
            if type(shared) is SharedSeq:
                # every task of the run holds this one number (staged_run):
                # moved for all at once (renumbering every held task one by
                # one would be a long block of the event loop, and a second
                # client's tasks may queue during any build)
                shared.value += shift
            else:
                for ts in ordered:
                    ts._qseq += shift
            self._next += n
        if not self._data:
            self.clear()
            self._data = members
            self._add_run(ordered)
            return
        # C-level, reusing the stored hashes; the smaller set goes into the
        # larger one (a union costs a step per element added: a million
        # staged tasks into the few a second client queued meanwhile, or
        # those few into the staged set). ``members`` is the build's own
        # set, handed over (as when the queue is empty).
        if len(members) > len(self._data):
            members |= self._data
            self._data = members
        else:
            self._data |= members
        self._add_run(ordered)

    def _add_run(self, run: list) -> None:
        self._runs.append([run, 0])
        self._sorted = False
        if len(self._runs) > 4:
            # many runs make every peek slower: fold them into the heap
            rest = [ts for r, i in self._runs for ts in r[i:]]
            self._runs = []
            self._heap.extend(rest)
            self._heap.sort(key=sort_key)

    def __contains__(self, value: object) -> bool:
        return value in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __bool__(self) -> bool:
        return bool(self._data)

    def __repr__(self) -> str:
        return f"<TaskQueue: {len(self)} items>"

    def _entry(self, ts: Any) -> Any:
        """A new entry for ``ts``: the task itself the first time, else an
        :class:`_Entry` (its ``_qseq`` belongs to its first entry)."""
        seq = self._next
        self._next += 1
        if ts._qseq is None:
            ts._qseq = seq
            return ts
        return _Entry(ts, seq)

    def add(self, ts: Any) -> None:
        if ts in self._data:
            return
        self._data.add(ts)
        heapq.heappush(self._heap, self._entry(ts))
        self._sorted = False

    def _clean(self) -> None:
        if self._pending:
            pending = self._pending
            self._pending = []
            pending.sort(key=sort_key)
            self._add_run(pending)
            self._sorted = False

    def _head(self) -> tuple:
        """The smallest member and where it is: (task, run or None)."""
        self._clean()
        data = self._data
        heap = self._heap
        while heap and heap[0] not in data:
            heapq.heappop(heap)
            self._sorted = False
        best = heap[0] if heap else None
        where = None
        for run in self._runs:
            lst, i = run
            while i < len(lst) and lst[i] not in data:
                i += 1
            run[1] = i
            if i < len(lst) and (best is None or lst[i] < best):
                best = lst[i]
                where = run
        self._runs = [r for r in self._runs if r[1] < len(r[0])]
        return (None if best is None else _task(best)), where

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
        return self._head()[0]

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
        ts, run = self._head()
        if run is None:
            heapq.heappop(self._heap)
            self._sorted = False
        else:
            i = run[1] = run[1] + 1
            if i > 1024 and 2 * i > len(run[0]):
                del run[0][:i]  # let go of what was taken (amortised O(1))
                run[1] = 0
        data = self._data
        data.discard(ts)
        if not data:
            self.clear()
        return ts

    def _right(self, pop: bool) -> Any:
        """One of the largest members: the larger of the heap's last entry
        and each run's last (HeapSet promises no more)."""
        self._clean()
        data = self._data
        heap = self._heap
        while heap and heap[-1] not in data:
            del heap[-1]
        best = heap[-1] if heap else None
        where = None
        for run in self._runs:
            lst = run[0]
            while len(lst) > run[1] and lst[-1] not in data:
                del lst[-1]
            if len(lst) > run[1] and (best is None or best < lst[-1]):
                best = lst[-1]
                where = run
        self._runs = [r for r in self._runs if r[1] < len(r[0])]
        best = None if best is None else _task(best)
        if pop:
            if where is None:
                del heap[-1]
            else:
                del where[0][-1]
            data.discard(best)
            if not data:
                self.clear()
        return best

    def peekright(self) -> Any:
        if not self._data:
            raise KeyError("peek into empty set")
        return self._right(pop=False)

    def popright(self) -> Any:
        if not self._data:
            raise KeyError("pop from an empty set")
        return self._right(pop=True)

    def __iter__(self) -> Iterator[Any]:  # members, in no order (as HeapSet)
        return iter(self._data)

    def sorted(self) -> Iterator[Any]:
        self._clean()
        if not self._sorted:
            self._heap.sort()
            self._sorted = True
        data = self._data
        seen: set = set()
        merged = heapq.merge(self._heap, *(lst[i:] for lst, i in self._runs)) if self._runs else self._heap
        for x in merged:
            ts = _task(x)
            if ts in data and ts not in seen:
                seen.add(ts)
                yield ts

    def clear(self) -> None:
        # Removal is lazy: the heap and the runs still hold every task
        # discarded since they were built, forgotten ones too. A released
        # million-task graph empties the queue with its last queued task,
        # and freeing those tasks here was one block of 0.3-0.5 s of the
        # event loop: they go in steps in a worker thread instead.
        box = [self._heap, self._pending, *(run[0] for run in self._runs)]
        self._heap, self._pending, self._runs = [], [], []
        self._data.clear()
        self._sorted = True
        disposal.free_later(disposal.big(*disposal.take_sole(box)))


class SharedSeq:
    """One queue sequence number held by every task of a staged run
    (:func:`staged_run`), so that :meth:`TaskQueue.merge_staged` moves it
    for all of them in one step. Compares with ints and with other shared
    numbers by its value; it is only compared when priorities tie."""

    __slots__ = ("value",)

    def __init__(self, value: int):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return self.value == _seq(other)

    def __ne__(self, other: object) -> bool:
        return self.value != _seq(other)

    def __lt__(self, other: Any) -> bool:
        return self.value < _seq(other)

    def __le__(self, other: Any) -> bool:
        return self.value <= _seq(other)

    def __gt__(self, other: Any) -> bool:
        return self.value > _seq(other)

    def __ge__(self, other: Any) -> bool:
        return self.value >= _seq(other)

    __hash__ = None  # type: ignore[assignment]  (its value moves)

    def __repr__(self) -> str:
        return f"SharedSeq({self.value})"


def _seq(x: Any) -> Any:
    return x.value if type(x) is SharedSeq else x


def sort_key(ts: Any) -> tuple:
    """The order ``SlimTaskState.__lt__`` defines, as a C-comparable tuple."""
    return (ts.priority, ts._qseq)


def staged_run(run: list, base: int) -> list:
    """Number a staged ingestion's queued tasks from ``base`` (reserved by
    :meth:`TaskQueue.reserve`) and return them sorted for
    :meth:`TaskQueue.merge_staged`.

    Sequence numbers only break ties between equal priorities. Within one
    submission priorities are normally distinct, so all its tasks share
    one number, a :class:`SharedSeq` (one object instead of an int per
    task, and moved in one step); if some tie, each gets its own int, in
    ``run``'s order."""
    from slimgraph.model.taskstate import sorted_by_priority

    ordered = sorted_by_priority(run, qseq=SharedSeq(base))
    if ordered is None:
        for i, ts in enumerate(run):
            ts._qseq = base + i
        ordered = sorted(run, key=sort_key)
    return ordered
