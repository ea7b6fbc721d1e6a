"""The dashboard's chart kits built ahead of page loads (``slimgraph.dashboard.shelf``).

On a real Tornado loop: a kit is built a step per loop turn (other
callbacks run between its steps), handed out once, and a page built from a
kit holds the same charts as one built at once.
"""
from __future__ import annotations

import logging
import time

import pytest
from tornado.ioloop import IOLoop

from slimgraph.dashboard.shelf import Shelf, run_to_end


def _steps(log: list, n: int = 3, fail_at: int | None = None):
    for i in range(n):
        if i == fail_at:
            raise RuntimeError("boom")
        log.append(f"step {i}")
        yield
    return {"steps": n}


def _run_until(loop: IOLoop, done, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout

    async def wait() -> None:
        import asyncio

        while not done():
            assert time.monotonic() < deadline, "the shelf never finished"
            await asyncio.sleep(0.005)

    loop.run_sync(wait)


def test_a_kit_is_built_across_loop_turns_and_handed_out_once():
    loop = IOLoop(make_current=False)
    try:
        log: list = []
        shelf = Shelf(lambda key: _steps(log), pause=0.001)
        assert shelf.take("k") is None and shelf.missed == 1
        assert shelf.stock("k", loop) is True
        assert shelf.stock("k", loop) is False  # one build per key at a time
        assert log == [] and not shelf.ready("k")  # nothing built before the loop runs

        # other callbacks get turns between the kit's steps
        def tick() -> None:
            log.append("other")
            if not shelf.ready("k"):
                loop.call_later(0.0005, tick)

        loop.add_callback(tick)
        _run_until(loop, lambda: shelf.ready("k"))
        steps = [i for i, x in enumerate(log) if x.startswith("step")]
        assert len(steps) == 3
        assert any(x == "other" for x in log[steps[0]:steps[-1]]), log
        assert shelf.stock("k", loop) is False  # already on the shelf
        kit = shelf.take("k")
        assert kit == {"steps": 3}
        assert shelf.take("k") is None and shelf.taken == 1 and shelf.missed == 2
    finally:
        loop.close()


def test_a_failing_build_leaves_the_shelf_empty_and_can_start_again(caplog):
    loop = IOLoop(make_current=False)
    try:
        log: list = []
        calls = []

        def make(key):
            calls.append(key)
            return _steps(log, fail_at=1 if len(calls) == 1 else None)

        shelf = Shelf(make, pause=0.001)
        with caplog.at_level(logging.WARNING, logger="slimgraph.dashboard.shelf"):
            shelf.stock("k", loop)
            _run_until(loop, lambda: "k" not in shelf._building)
        assert not shelf.ready("k") and "building a chart kit ahead failed" in caplog.text
        assert shelf.stock("k", loop) is True
        _run_until(loop, lambda: shelf.ready("k"))
        assert shelf.take("k") is not None and calls == ["k", "k"]
    finally:
        loop.close()


def _named(*figures) -> set:
    from bokeh.document import Document
    from bokeh.models import Row

    doc = Document()
    doc.add_root(Row(*figures))
    return {m.name for m in doc.models if m.name}


def test_a_kit_holds_the_charts_a_page_builds_at_once():
    pytest.importorskip("panel")
    from slimgraph.dashboard.app import RssView, chart_kit
    from slimgraph.views.figures import Views

    kinds = ("stock", "slim")
    steps = chart_kit(kinds)
    n = 0
    while True:  # a figure per step
        try:
            next(steps)
            n += 1
        except StopIteration as stop:
            views, rss, blocks = stop.value
            break
    assert n >= 2 * 4 + 1
    direct = Views(kinds=kinds, sizing_mode="stretch_width", rss=False)
    direct_rss = RssView(kinds)

    def figs(v):
        return [f.figure for k in kinds for f in (v.timing[k], v.memory[k], v.lazy[k], v.lazy_attrs[k])]

    names = _named(*figs(views), rss.figure, blocks.figure)
    assert names == _named(*figs(direct), direct_rss.figure) | {"sg-blocks"}
    assert {"sg-timing-stock", "sg-timing-slim", "sg-rss-stock", "sg-rss-slim"} <= names
    assert blocks.figure.x_range is rss.figure.x_range
    assert views.timing["stock"].figure.y_range is views.timing["slim"].figure.y_range
    assert views.timing["stock"].figure.title.text == "stock: update_graph phases per job (s)"


def test_a_kit_built_a_while_ago_shows_the_last_minute_from_now():
    pytest.importorskip("panel")
    from slimgraph.dashboard.app import chart_kit

    views, _, _ = run_to_end(chart_kit(("stock", "slim")))
    lazy = views.lazy["slim"]
    lazy.figure.x_range.start, lazy.figure.x_range.end = 0, 60_000  # built long ago
    views.restart_clocks()
    now = time.time() * 1000
    assert abs(lazy.figure.x_range.end - now) < 5_000
    assert lazy.figure.x_range.end - lazy.figure.x_range.start == 60_000
    # a chart with data keeps the span of its data
    lazy.extend([{c: 1.0 for c in lazy.source.data} | {"time": 1000.0}])
    start = lazy.figure.x_range.start
    views.restart_clocks()
    assert lazy.figure.x_range.start == start
