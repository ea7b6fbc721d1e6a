"""Lazy-container census: what the task states' containers hold and cost.

For each container attribute (``dependencies``, ``dependents``,
``waiting_on``, ``waiters``, ``who_has``, ``who_wants``) :func:`census`
counts, over all tasks:

- ``none``: tasks with no container (``None``)
- ``singleton``: tasks holding a free singleton (``()``, ``frozenset()``,
  the slim engine's shared empty ``NO_EDGES``)
- ``allocated``: tasks holding a real container object
- ``empty_allocated``: of those, empty ones (memory spent on nothing)
- ``shared``: of those, containers also referenced from elsewhere (another
  attribute or task: copy-on-write sharing; found by reference count, so a
  container someone else holds temporarily also counts)
- ``items``: total number of elements
- ``held_bytes``: ``sys.getsizeof`` of the distinct containers held now
  (a shared container is counted once)
- ``eager_bytes``: what stock's eager allocation would cost for the same
  contents: a ``set`` built by ``add()`` for every task that stock gives one
  (216 B for 0-4 items, 472 B for 5-18, ...). Stock model:
  ``dependencies``/``dependents`` for every task; ``waiters`` for tasks in
  ``waiting``, ``queued``, ``no-worker``, ``processing`` or ``memory``
  (allocated at released->waiting, even when empty); ``waiting_on`` for
  such tasks that have at least one dependency (stock allocates it when a
  dependency is not in memory yet and keeps it, emptied, afterwards);
  ``who_has``/``who_wants`` when non-empty. A model: stock's exact choice
  depends on the order events happened in.
- ``saved_bytes = eager_bytes - held_bytes``

:class:`LazySetSampler` records the census as a time series while graphs run
(a periodic callback on the scheduler's loop; the census itself runs in
slices of at most ``budget_s`` of loop time).
"""
from __future__ import annotations

import asyncio
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Iterator

from slimgraph.runtime import gcpause
from slimgraph.model.containers import NO_EDGES

ATTRS = ("dependencies", "dependents", "waiting_on", "waiters", "who_has", "who_wants")
STOCK_ACTIVE_STATES = frozenset({"waiting", "queued", "no-worker", "processing", "memory"})
_SINGLETONS = frozenset(id(x) for x in ((), frozenset(), "", NO_EDGES))

_set_bytes_cache: dict[int, int] = {}


def eager_set_bytes(n: int) -> int:
    """``sys.getsizeof`` of a set grown by ``add()`` to ``n`` items."""
    b = _set_bytes_cache.get(n)
    if b is None:
        s: set = set()
        for i in range(n):
            s.add(i)
        b = _set_bytes_cache[n] = sys.getsizeof(s)
    return b


def _calibrate() -> int:
    holder = [[]]
    v = holder[0]
    return sys.getrefcount(v)


_BASE = _calibrate()


@dataclass
class AttrCensus:
    attr: str
    tasks: int = 0
    none: int = 0
    singleton: int = 0
    allocated: int = 0
    empty_allocated: int = 0
    shared: int = 0
    items: int = 0
    held_bytes: int = 0
    eager_bytes: int = 0

    @property
    def saved_bytes(self) -> int:
        return self.eager_bytes - self.held_bytes

    def to_dict(self) -> dict:
        d = asdict(self)
        d["saved_bytes"] = self.saved_bytes
        return d


@dataclass
class Census:
    time: float
    ntasks: int
    attrs: dict[str, AttrCensus]
    elapsed_s: float = 0.0
    max_slice_s: float = 0.0

    @property
    def held_bytes(self) -> int:
        return sum(a.held_bytes for a in self.attrs.values())

    @property
    def eager_bytes(self) -> int:
        return sum(a.eager_bytes for a in self.attrs.values())

    def to_records(self) -> list[dict]:
        """One row per attribute: ``time``, ``ntasks`` and the
        :class:`AttrCensus` fields (plus ``saved_bytes``). The wire format of
        the ``slimgraph_lazysets`` handler."""
        return [{"time": self.time, "ntasks": self.ntasks, **a.to_dict()}
                for a in self.attrs.values()]

    @classmethod
    def from_records(cls, rows: list[dict]) -> "Census":
        """Inverse of :meth:`to_records` (``elapsed_s``/``max_slice_s`` are
        not part of the rows)."""
        attrs: dict[str, AttrCensus] = {}
        when, ntasks = 0.0, 0
        for row in rows:
            row = dict(row)
            when, ntasks = row.pop("time"), row.pop("ntasks")
            row.pop("saved_bytes")  # derived
            a = AttrCensus(**row)
            attrs[a.attr] = a
        return cls(time=when, ntasks=ntasks, attrs=attrs)

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.to_records())

    def render(self) -> str:
        lines = [f"{'attribute':<13}{'none':>9}{'alloc':>9}{'empty':>9}{'shared':>9}"
                 f"{'held':>12}{'eager':>12}{'saved':>12}"]
        for a in self.attrs.values():
            lines.append(f"{a.attr:<13}{a.none:>9,}{a.allocated:>9,}{a.empty_allocated:>9,}"
                         f"{a.shared:>9,}{a.held_bytes:>12,}{a.eager_bytes:>12,}"
                         f"{a.saved_bytes:>12,}")
        lines.append(f"{'total':<13}{'':>36}{self.held_bytes:>12,}{self.eager_bytes:>12,}"
                     f"{self.eager_bytes - self.held_bytes:>12,}")
        return "\n".join(lines)

    __str__ = render


def _census_gen(scheduler: Any, budget_s: float, attrs: tuple[str, ...] = ATTRS
                ) -> Iterator[Census | None]:
    t_start = time.perf_counter()
    slice_t0 = t_start
    max_slice = 0.0
    res = {a: AttrCensus(a) for a in attrs}
    seen: dict[int, Any] = {}
    base = _BASE
    getrefcount = sys.getrefcount
    getsizeof = sys.getsizeof
    tss = list(scheduler.tasks.values())
    n = len(tss)
    yield None
    slice_t0 = time.perf_counter()
    # Popped from the end, so that the snapshot is released as we go: freeing
    # a million-entry list in one go touches every task state's refcount,
    # scattered in memory, in one call. Counts do not depend on
    # the order.
    pop = tss.pop
    i = 0
    while tss:
        ts = pop()
        i += 1
        state = getattr(ts, "state", None)
        active = state in STOCK_ACTIVE_STATES
        deps = getattr(ts, "dependencies", None)
        has_deps = bool(deps)
        deps = None
        vals = [getattr(ts, a, None) for a in attrs]
        ids = list(map(id, vals))
        for j, a in enumerate(attrs):
            r = res[a]
            r.tasks += 1
            v = vals[j]
            if v is None:
                r.none += 1
                k = 0
            elif id(v) in _SINGLETONS:
                r.singleton += 1
                k = 0
            else:
                r.allocated += 1
                k = len(v)
                r.items += k
                if k == 0:
                    r.empty_allocated += 1
                # m references from this task's attributes, m from ``vals``
                m = ids.count(ids[j])
                first = ids.index(ids[j]) == j
                if getrefcount(v) > base + 2 * m - 1:
                    # held from outside this task too: count its bytes once
                    # overall. Only these go into ``seen``: sharing between
                    # a task's own attributes (copy-on-write waiting_on)
                    # would put a million entries there, and growing or
                    # freeing that dict would block the loop.
                    r.shared += 1
                    if id(v) not in seen:
                        seen[id(v)] = v
                        r.held_bytes += getsizeof(v)
                else:
                    if m > 1:
                        r.shared += 1
                    if first:
                        r.held_bytes += getsizeof(v)
            v = None
            if a in ("dependencies", "dependents"):
                r.eager_bytes += eager_set_bytes(k)
            elif a == "waiters":
                if active or k:
                    r.eager_bytes += eager_set_bytes(k)
            elif a == "waiting_on":
                if (active and has_deps) or k:
                    r.eager_bytes += eager_set_bytes(k)
            elif k:
                r.eager_bytes += eager_set_bytes(k)
        ts = vals = ids = None
        if not (i & 255) and time.perf_counter() - slice_t0 >= budget_s:
            max_slice = max(max_slice, time.perf_counter() - slice_t0)
            yield None
            slice_t0 = time.perf_counter()
    max_slice = max(max_slice, time.perf_counter() - slice_t0)
    yield Census(time.time(), n, res, time.perf_counter() - t_start, max_slice)


def census(scheduler: Any, attrs: tuple[str, ...] = ATTRS) -> Census:
    """Synchronous census of all tasks (blocks the loop for the whole walk)."""
    out = None
    for out in _census_gen(scheduler, float("inf"), attrs):
        pass
    assert out is not None
    return out


async def census_async(scheduler: Any, attrs: tuple[str, ...] = ATTRS,
                       budget_s: float = 0.02) -> Census:
    """Census in slices of at most ``budget_s`` of event-loop time."""
    gen = _census_gen(scheduler, budget_s, attrs)
    # The cyclic GC stays off until the census is over: the snapshot of
    # every task state is a fresh million-entry list in the young
    # generation, and each young collection would traverse it, on the
    # loop. Collections are deferred, not skipped.
    with gcpause.paused():
        while True:
            out = next(gen)
            if out is not None:
                return out
            # a timer, not sleep(0): sleep(0) queues our next slice ahead
            # of timers and I/O callbacks that became due meanwhile, so they
            # would wait two slices; after a 1 ms timer they run first
            await asyncio.sleep(0.001)


class LazySetSampler:
    """Record :func:`census_async` every ``interval`` seconds (time series).

    Start on the scheduler's loop (``start()`` inside a coroutine or handler).
    A census still running when the next one is due is not overlapped.
    """

    def __init__(self, scheduler: Any, interval: float = 0.5, maxlen: int = 10_000,
                 budget_s: float = 0.02):
        self.scheduler = scheduler
        self.interval = interval
        self.budget_s = budget_s
        self.samples: deque[Census] = deque(maxlen=maxlen)
        self._task: asyncio.Task | None = None

    def start(self) -> "LazySetSampler":
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            t0 = time.perf_counter()
            try:
                self.samples.append(await census_async(self.scheduler, budget_s=self.budget_s))
            except asyncio.CancelledError:
                raise
            except Exception:  # pragma: no cover - state changed under us
                pass
            await asyncio.sleep(max(0.0, self.interval - (time.perf_counter() - t0)))

    async def sample_now(self) -> Census:
        c = await census_async(self.scheduler, budget_s=self.budget_s)
        self.samples.append(c)
        return c

    def to_records(self) -> list[dict]:
        return [row for c in list(self.samples) for row in c.to_records()]

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.to_records())
