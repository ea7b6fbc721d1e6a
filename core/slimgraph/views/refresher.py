"""Moves measurements from feeds into views, never blocking a scheduler's loop.

:meth:`Refresher.tick` is called periodically on the document's loop (a
Panel session's, a notebook's, or the scheduler's own for its tab).

- Every tick (cheap): the records after the last one seen
  (``History.since``) and the scheduler's status (RSS).
- Every few seconds per kind, in a task of its own that never overlaps
  itself: the lazy-container census, then the memory tree. Both run on the
  scheduler's loop in slices of at most :data:`SLICE_S` (the census and the
  incremental ``memory_tree_async``), so a refresh costs the scheduler's
  loop little at a time however big its state (a whole refresh < 50 ms,
  measured by tests/test_dashboard.py).

Everything measured goes into a :class:`SeriesLog` first (RSS points,
census points and bars, memory trees), and from there into the views. Views
opened later start from the log, so **every view shows history on open**:
the scheduler tab keeps one log per scheduler, shared by all its pages
(the tab and each individual page: a page opened after graphs ran draws
the series measured so far, and the pages share one walk instead of each
walking the scheduler). Timing bars need no log: each page reads the
scheduler's own history of records from the first.

Results are applied to the document in next-tick callbacks (Bokeh models
may only change under the document's lock), or by the ``post`` function a
notebook passes (it applies and pushes them at once). A feed that fails
(a closed scheduler, a missing extension) leaves a note under its views
instead of raising.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from functools import partial
from typing import Any, Callable

from slimgraph.instrument.feed import Feed
from slimgraph.views.figures import Views
from slimgraph.views.transforms import icicle, lazy_summary, rss_marks, timing_row, tree_rows

#: Longest slice of scheduler-loop time a walk may take (the target for a
#: whole refresh is 50 ms; GC pauses and one walk step come on top).
SLICE_S = 0.01

#: Above this many tasks the memory tree walks a random sample of
#: ``MEMORY_SAMPLE`` tasks and scales the per-task nodes (within ~5 %, see
#: slimgraph.instrument.memory): a dashboard refresh must stay cheap at 1M tasks.
MEMORY_SAMPLE = 2000


class Series:
    """A bounded series with a running count, so readers can ask for what
    they have not seen yet (``since(cursor)``)."""

    def __init__(self, maxlen: int):
        self.items: deque = deque(maxlen=maxlen)
        self.count = 0

    def append(self, item: Any) -> None:
        self.items.append(item)
        self.count += 1

    def since(self, cursor: int) -> tuple[list, int]:
        """(items appended after ``cursor`` that are still held, new cursor)."""
        n = min(self.count - cursor, len(self.items))
        return (list(self.items)[len(self.items) - n:] if n > 0 else []), self.count

    @property
    def last(self) -> Any:
        return self.items[-1] if self.items else None


class SeriesLog:
    """What refreshers measured, for every view that shows it now or later.

    ``rss``: points ``{"time", "<kind>_mb"...}``; per kind ``lazy`` (census
    points), ``lazy_attrs`` and ``memory`` (the latest bars and icicle, as
    one-item series). ``walks`` holds the running walk per kind, so
    refreshers sharing a log never walk the same scheduler twice at once.
    """

    def __init__(self, maxlen: int = 2000):
        self.rss = Series(maxlen)
        self.lazy: dict[str, Series] = {}
        self.lazy_attrs: dict[str, Series] = {}
        self.memory: dict[str, Series] = {}
        self.walks: dict[str, asyncio.Future] = {}
        self.last_walk: dict[str, float] = {}
        self.ntasks: dict[str, int] = {}
        self._maxlen = maxlen

    def of(self, name: str, kind: str) -> Series:
        table = getattr(self, name)
        if kind not in table:
            table[kind] = Series(self._maxlen if name == "lazy" else 1)
        return table[kind]


class Refresher:
    """Feeds (one per kind) -> :class:`Views`, through a :class:`SeriesLog`
    (its own unless ``log`` is shared)."""

    def __init__(self, views: Views, feeds: dict[str, Feed], doc, slow_interval: float = 2.0,
                 rollover: int = 500, post: Callable | None = None,
                 log: SeriesLog | None = None, rss_min_interval: float = 0.5):  # fmt: skip
        #: How document changes are applied: ``doc.add_next_tick_callback``
        #: in a server; a notebook passes a function that applies them now.
        self.post = post
        self.views = views
        self.feeds = dict(feeds)
        self.doc = doc
        self.slow_interval = slow_interval
        self.rollover = rollover
        self._cursor = {k: 0 for k in views.kinds}
        self._x = {k: 0 for k in views.kinds}
        self._seen: dict[str, set] = {k: set() for k in views.kinds}
        self._slow_tasks: dict[str, asyncio.Task] = {}
        self._slow_took: dict[str, float] = {}
        self.max_interval = 10.0
        self._busy = False
        self.errors: dict[str, str] = {}
        self._own_log = log is None
        self.log = log if log is not None else SeriesLog(maxlen=max(rollover, 2000))
        #: RSS is sampled at most this often into a shared log (several
        #: pages' ticks share a point)
        self.rss_min_interval = rss_min_interval
        #: per series: how much of the log this refresher's views show
        self._log_cursor: dict[tuple[str, str], int] = {}

    def set_feed(self, kind: str, feed: Feed) -> None:
        self.feeds[kind] = feed

    def _post(self, fn: Callable, *args) -> None:
        try:
            if self.post is not None:
                self.post(partial(fn, *args))
            else:
                self.doc.add_next_tick_callback(partial(fn, *args))
        except Exception:  # document closed
            pass

    def _note(self, kind: str, key: str, err: Exception | str | None) -> None:
        if err is None:
            self.errors.pop(f"{kind}:{key}", None)
        else:
            self.errors[f"{kind}:{key}"] = f"{key}: {err}"
        text = "<br>".join(v for k, v in sorted(self.errors.items()) if k.startswith(kind + ":"))
        self._post(self._set_note, kind, text)

    def _set_note(self, kind: str, text: str) -> None:
        note = self.views.notes.get(kind)
        if note is not None and note.text != text:
            note.text = text

    async def tick(self) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            await self.refresh_fast()
        finally:
            self._busy = False
        now = time.monotonic()
        for kind in self.views.kinds:
            if self.feeds.get(kind) is None:
                continue
            task = self.log.walks.get(kind)
            if task is not None and not task.done():
                continue
            if now - self.log.last_walk.get(kind, 0.0) >= self._interval(kind):
                self.log.last_walk[kind] = now
                self.log.walks[kind] = self._slow_tasks[kind] = asyncio.ensure_future(
                    self._slow(kind))
        self.show_log()

    def _interval(self, kind: str) -> float:
        # The walks run in slices on the scheduler's loop and cost it loop
        # time in proportion to its tasks: space them out on big graphs
        # (2 s up to ~100k tasks, ~9 s at 1M), so they take < ~20 % of it.
        # (Wall time is no guide: on a busy loop the slices wait their turn.)
        n = self.log.ntasks.get(kind, 0)
        return min(self.max_interval, self.slow_interval + n / 150_000)

    async def refresh_fast(self) -> None:
        """New records (one bar each) and every scheduler's RSS."""
        rss_point: dict[str, float] = {"time": time.time() * 1000}
        last = self.log.rss.last
        fresh = last is not None and rss_point["time"] - last["time"] < self.rss_min_interval * 1000
        any_rss = False
        for kind in self.views.kinds:
            feed = self.feeds.get(kind)
            rss_point[f"{kind}_mb"] = float("nan")
            if feed is None:
                continue
            try:
                recs = await feed.records(self._cursor[kind])
                self._note(kind, "phases", None)
            except Exception as e:  # noqa: BLE001  (a closed scheduler, ...)
                self._note(kind, "phases", repr(e))
                recs = []
            new, marks = [], []
            for rec in sorted(recs, key=lambda r: r.submission_id):
                if rec.submission_id in self._seen[kind]:
                    continue
                if rec.status == "running":
                    break  # wait for it; keep the cursor before it
                self._seen[kind].add(rec.submission_id)
                self._cursor[kind] = max(self._cursor[kind], rec.submission_id)
                self._x[kind] += 1
                new.append(timing_row(rec, self._x[kind]))
                marks += rss_marks(rec)
            if new:
                self._post(self.views.timing[kind].append, new, self.rollover)
            if marks:
                self._post(self.views.rss.mark, marks, self.rollover)
            if fresh:
                continue  # another page of the same log sampled it just now
            try:
                rss_point[f"{kind}_mb"] = (await feed.status())["rss"] / 2**20
                any_rss = True
            except Exception:  # noqa: BLE001
                pass
        if any_rss:
            self.log.rss.append(rss_point)
        self.show_log()

    async def _slow(self, kind: str) -> None:
        t0 = time.monotonic()
        try:
            # the census first: it is the time series that must catch a running graph
            await self.refresh_lazy(kind)
            await self.refresh_memory(kind)
        finally:
            self._slow_took[kind] = time.monotonic() - t0

    async def refresh_lazy(self, kind: str) -> None:
        """A census of ``kind``'s task containers: one time-series point and the bars."""
        feed = self.feeds.get(kind)
        if feed is None:
            return
        try:
            census = await feed.lazysets(budget_s=SLICE_S)
            self._note(kind, "lazy sets", None)
        except Exception as e:  # noqa: BLE001
            self._note(kind, "lazy sets", repr(e))
            return
        point, attrs = lazy_summary(census)
        self.log.ntasks[kind] = census.ntasks
        self.log.of("lazy", kind).append(point)
        self.log.of("lazy_attrs", kind).append(attrs)
        self.show_log()

    async def refresh_memory(self, kind: str) -> None:
        """``kind``'s memory tree (sampled above :data:`MEMORY_SAMPLE` tasks)."""
        feed = self.feeds.get(kind)
        if feed is None:
            return
        try:
            tree = await feed.memory_tree(sample=MEMORY_SAMPLE, budget_s=SLICE_S)
            self._note(kind, "memory", None)
        except Exception as e:  # noqa: BLE001
            self._note(kind, "memory", repr(e))
            return
        self.log.of("memory", kind).append((icicle(tree_rows(tree), kind=kind), tree.ntasks,
                                            tree.sample))  # fmt: skip
        self.show_log()

    def _new(self, name: str, kind: str = "") -> list:
        series = self.log.rss if name == "rss" else self.log.of(name, kind)
        items, self._log_cursor[name, kind] = series.since(self._log_cursor.get((name, kind), 0))
        return items

    def show_log(self, now: bool = False) -> None:
        """Post what the log holds and these views do not show yet (all of
        it the first time: the history); ``now``: apply it at once (a
        document being built, not yet sent)."""
        post = (lambda fn, *args: fn(*args)) if now else self._post
        points = self._new("rss")
        if points:
            post(self.views.rss.extend, points, self.log.rss.items.maxlen)
        for kind in self.views.kinds:
            lazy = self._new("lazy", kind)
            if lazy:
                post(self.views.lazy[kind].extend, lazy, self.log.of("lazy", kind).items.maxlen)
            attrs = self._new("lazy_attrs", kind)
            if attrs:
                post(self.views.lazy_attrs[kind].show, attrs[-1])
            tree = self._new("memory", kind)
            if tree:
                post(self.views.memory[kind].show, *tree[-1])

    def stop(self) -> None:
        if not self._own_log:
            return  # the walks serve the other views of the shared log
        for task in self._slow_tasks.values():
            if not task.done():
                task.cancel()
