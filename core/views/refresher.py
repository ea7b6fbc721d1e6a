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

Results are applied to the document in next-tick callbacks (Bokeh models
may only change under the document's lock), or by the ``post`` function a
notebook passes (it applies and pushes them at once). A feed that fails
(a closed scheduler, a missing extension) leaves a note under its views
instead of raising.
"""
from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Callable

from slimgraph.instrument.feed import Feed
from slimgraph.views.figures import Views
from slimgraph.views.transforms import icicle, lazy_summary, timing_row, tree_rows

#: Longest slice of scheduler-loop time a walk may take (the target for a
#: whole refresh is 50 ms; GC pauses and one walk step come on top).
SLICE_S = 0.01

#: Above this many tasks the memory tree walks a random sample of
#: ``MEMORY_SAMPLE`` tasks and scales the per-task nodes (within ~5 %, see
#: slimgraph.instrument.memory): a dashboard refresh must stay cheap at 1M tasks.
MEMORY_SAMPLE = 2000


class Refresher:
    """Feeds (one per kind) -> :class:`Views`."""

    def __init__(self, views: Views, feeds: dict[str, Feed], doc, slow_interval: float = 2.0,
                 rollover: int = 500, post: Callable | None = None):  # fmt: skip
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
        self._last_slow: dict[str, float] = {}
        self._slow_took: dict[str, float] = {}
        self._ntasks: dict[str, int] = {}
        self.max_interval = 10.0
        self._busy = False
        self.errors: dict[str, str] = {}

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
            task = self._slow_tasks.get(kind)
            if task is not None and not task.done():
                continue
            if now - self._last_slow.get(kind, 0.0) >= self._interval(kind):
                self._last_slow[kind] = now
                self._slow_tasks[kind] = asyncio.ensure_future(self._slow(kind))

    def _interval(self, kind: str) -> float:
        # The walks run in slices on the scheduler's loop and cost it about
        # 1.5 s of loop time per million tasks: space them out on big graphs
        # (2 s up to ~100k tasks, ~9 s at 1M), so they take < ~20 % of it.
        # (Wall time is no guide: on a busy loop the slices wait their turn.)
        n = self._ntasks.get(kind, 0)
        return min(self.max_interval, self.slow_interval + n / 150_000)

    async def refresh_fast(self) -> None:
        """New records (one bar each) and every scheduler's RSS."""
        rss_point: dict[str, float] = {"time": time.time() * 1000}
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
            new = []
            for rec in sorted(recs, key=lambda r: r.submission_id):
                if rec.submission_id in self._seen[kind]:
                    continue
                if rec.status == "running":
                    break  # wait for it; keep the cursor before it
                self._seen[kind].add(rec.submission_id)
                self._cursor[kind] = max(self._cursor[kind], rec.submission_id)
                self._x[kind] += 1
                new.append(timing_row(rec, self._x[kind]))
            if new:
                self._post(self.views.timing[kind].append, new, self.rollover)
            try:
                rss_point[f"{kind}_mb"] = (await feed.status())["rss"] / 2**20
                any_rss = True
            except Exception:  # noqa: BLE001
                pass
        if any_rss:
            self._post(self.views.rss.append, rss_point)

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
        self._ntasks[kind] = census.ntasks
        self._post(self._set_lazy, kind, point, attrs)

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
        self._post(self.views.memory[kind].show, icicle(tree_rows(tree), kind=kind), tree.ntasks, tree.sample)

    def _set_lazy(self, kind: str, point: dict, attrs: dict) -> None:
        self.views.lazy[kind].append(point)
        self.views.lazy_attrs[kind].show(attrs)

    def stop(self) -> None:
        for task in self._slow_tasks.values():
            if not task.done():
                task.cancel()
