"""The views' palette, sizing and readability, on real Bokeh models.

Figures are built as the app, the scheduler tab and its individual pages
build them; what a user would see (colours, ranges, axis formatters, the
sizing of a page) is read from the Bokeh models themselves. Pages opened on
real schedulers are in ``test_dashboard.py`` and ``test_dashboard_browser.py``.
"""
from __future__ import annotations

import itertools

import pytest

from slimgraph.instrument.records import PHASES
from slimgraph.views import palette, transforms
from slimgraph.views.figures import Views


def _renderers(fig):
    """A figure's glyph renderers, in drawing order."""
    from bokeh.models import GlyphRenderer

    return [r for r in fig.renderers if isinstance(r, GlyphRenderer)]


def _colors(glyph) -> set[str]:
    out = set()
    for attr in ("fill_color", "line_color"):
        v = getattr(glyph, attr, None)
        if isinstance(v, str):
            out.add(v.upper())
    return out


# -- the palette ---------------------------------------------------------------------
def test_every_phase_has_one_colour_and_a_hatch():
    assert tuple(palette.PHASE_COLORS) == transforms.STACK == (*PHASES, "other")
    colours = list(palette.PHASE_COLORS.values())
    assert len(set(colours)) == len(colours)
    assert set(palette.PHASE_HATCHES) == set(palette.PHASE_COLORS)


def test_engine_colours_are_no_phase_colour_and_far_from_every_phase():
    engines = palette.ENGINE_COLORS
    assert set(engines) == {"stock", "slim"}
    assert not set(engines.values()) & set(palette.PHASE_COLORS.values())
    for phase, c in palette.PHASE_COLORS.items():
        for kind, e in engines.items():
            assert palette.worst_distance(c, e) >= 13, (phase, kind)
    assert palette.worst_distance(engines["stock"], engines["slim"]) > 40


def test_stage_shades_are_pale_apart_and_no_phase_or_engine_colour():
    from slimgraph.instrument.stages import STAGES

    stages = palette.STAGE_COLORS
    assert tuple(stages) == STAGES
    taken = {c.upper() for c in (*palette.PHASE_COLORS.values(), *palette.ENGINE_COLORS.values())}
    assert not {c.upper() for c in stages.values()} & taken
    for i, a in enumerate(STAGES):
        # (light: the engines' lines are drawn over them)
        assert palette._lab(stages[a])[0] > 80, a
        for b in STAGES[i + 1:]:
            assert palette.worst_distance(stages[a], stages[b]) >= 5, (a, b)


def test_close_phase_colours_differ_in_hatch():
    """Under any simulated colour-vision deficiency, two phases whose colours
    come closer than 15 ΔE are told apart by their hatch patterns."""
    close = []
    for a, b in itertools.combinations(palette.PHASE_COLORS, 2):
        d = palette.worst_distance(palette.PHASE_COLORS[a], palette.PHASE_COLORS[b])
        assert d > 10, (a, b, d)
        if d < 15:
            close.append((a, b))
            assert palette.PHASE_HATCHES[a] != palette.PHASE_HATCHES[b], (a, b, d)
    assert close, "no close pair: the hatch rule is not exercised"


def test_colour_vision_simulation():
    """The checker itself: red and green, far apart for normal vision, come
    close for a deuteranope; black and white stay ~100 ΔE apart for everyone."""
    red, green = "#FF0000", "#00AA00"
    assert palette.distance(red, red) == 0
    assert palette.distance(red, green) > 80
    assert palette.distance(red, green, "deuteranopia") < palette.distance(red, green) / 2
    for vision in palette.VISIONS:
        assert palette.distance("#000000", "#FFFFFF", vision) == pytest.approx(100, abs=1)


def test_engine_tints_are_light_and_keep_the_engines_apart():
    for kind in palette.ENGINE_COLORS:
        for i in range(8):
            t = palette.engine_tint(kind, i)
            assert palette.distance(t, "#000000") > 50, (kind, i, t)  # dark labels read on it
    for i, j in itertools.product(range(8), repeat=2):
        assert palette.engine_tint("stock", i) != palette.engine_tint("slim", j)


def test_figures_use_the_palette():
    """Every phase bar in its phase's colour and hatch, in every engine's
    chart; the RSS lines and per-engine charts in engine colours; no other
    glyph takes a phase's colour."""
    views = Views(kinds=("stock", "slim"))
    # the bars per task are made when first shown
    assert not any((r.name or "").startswith("sg-pertask-") for k in views.kinds
                   for r in _renderers(views.timing[k].figure))  # fmt: skip
    views.set_bar_unit("us")
    views.set_bar_unit("s")
    phase_colours = {c.upper() for c in palette.PHASE_COLORS.values()}
    seen_phases = {k: [] for k in views.kinds}
    for kind in views.kinds:
        for r in _renderers(views.timing[kind].figure):  # (in seconds, then per task)
            name = r.name or ""
            if r is views.timing[kind]._swatch:  # the legend's, before the first bar
                assert r.glyph.fill_color == "color" or r.glyph.fill_color.get("field") == "color"
                continue
            prefix = next(p for p in ("sg-phase-", "sg-pertask-") if name.startswith(p))
            phase = name[len(prefix): -len(kind) - 1]
            assert r.glyph.fill_color.upper() == palette.PHASE_COLORS[phase].upper()
            assert r.glyph.hatch_pattern == palette.PHASE_HATCHES[phase]
            seen_phases[kind].append(phase)
    assert seen_phases == {k: list(transforms.STACK) * 2 for k in views.kinds}
    rss = {r.glyph.line_color.upper() for r in _renderers(views.rss.figure)
           if type(r.glyph).__name__ == "Line"}  # fmt: skip
    assert rss == {c.upper() for c in palette.ENGINE_COLORS.values()}
    others = [views.rss.figure, *(f.figure for f in views.lazy.values()),
              *(f.figure for f in views.lazy_attrs.values()),
              *(f.figure for f in views.memory.values())]  # fmt: skip
    for fig in others:
        for r in _renderers(fig):
            assert not _colors(r.glyph) & phase_colours, (fig.title.text, _colors(r.glyph))
    for kind in views.kinds:
        held = [r for r in _renderers(views.lazy[kind].figure) if r.glyph.__class__.__name__ == "Line"]
        assert palette.engine_color(kind).upper() in {r.glyph.line_color.upper() for r in held}


def test_icicle_branches_are_tints_of_the_engine():
    rows = [
        {"path": "state", "parent": None, "name": "state", "bytes": 100, "count": 1, "bytes_per_task": 1},
        {"path": "state/a", "parent": "state", "name": "a", "bytes": 60, "count": 1, "bytes_per_task": 1},
        {"path": "state/b", "parent": "state", "name": "b", "bytes": 40, "count": 1, "bytes_per_task": 1},
    ]
    for kind in ("stock", "slim"):
        out = transforms.icicle(rows, kind=kind)
        assert out["color"][0] == transforms.ROOT_COLOR
        assert out["color"][1:] == [palette.engine_tint(kind, 0), palette.engine_tint(kind, 1)]


# -- pages of a real scheduler's dashboard, opened late ----------------------------------
async def _open_page(scheduler, path: str):
    """A real Bokeh server session of ``path`` on ``scheduler``'s dashboard
    (what a browser's request makes), on the scheduler's loop; its document."""
    from bokeh.server.tornado import BokehTornado
    from bokeh.util.token import generate_session_id

    app = next(a for a in scheduler.http_application.applications if isinstance(a, BokehTornado))
    session = await app.applications[path].create_session_if_needed(generate_session_id())
    return session.document


def _data(doc, name: str) -> dict:
    src = doc.get_model_by_name(name)
    assert src is not None, name
    return src.data


async def _until(cond, timeout: float = 30.0) -> None:
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.2)


@pytest.mark.cluster
@pytest.mark.parametrize("preload", ["slimgraph.views.tab", "slimgraph.distributed"])
def test_pages_opened_late_show_history_and_fill_their_pane(preload):
    """A LocalCluster (worker processes) whose scheduler has the tab; graphs
    run first, then the pages are opened: the timing page holds every
    record the scheduler has, the RSS chart their before/after marks, and a
    page opened after another one starts with the series that one measured.
    Individual pages stretch both ways with no fixed height."""
    import asyncio

    import dask.array as da
    from bokeh.models import LayoutDOM, Plot
    from distributed import Client, LocalCluster

    from slimgraph.instrument.recorder import get_history

    async def main():
        async with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                asynchronous=True, dashboard_address="127.0.0.1:0",
                                scheduler_kwargs={"preload": [preload]}) as lc:  # fmt: skip
            s = lc.scheduler
            kind = "slim" if preload == "slimgraph.distributed" else "stock"
            async with Client(lc, asynchronous=True) as c:
                for n in (100, 200):
                    x = (da.ones((n, n), chunks=10) + 1).sum()
                    assert await c.compute(x) == 2 * n * n
            held = [r for r in get_history(s) if r.status != "running"]
            assert len(held) >= 2 and all(r.scheduler == kind for r in held)

            timing = await _open_page(s, "/individual-slimgraph-timing")
            await _until(lambda: len(_data(timing, f"sg-timing-{kind}")["submission_id"]) >= len(held))
            rows = _data(timing, f"sg-timing-{kind}")
            assert list(rows["submission_id"]) == [r.submission_id for r in held]
            assert list(rows["tasks"]) == [r.tasks for r in held]

            memory = await _open_page(s, "/individual-slimgraph-memory")
            await _until(lambda: len(_data(memory, "sg-rss-marks")["time"]) == 2 * len(held)
                         and len(_data(memory, "sg-rss")["time"]) >= 2
                         and len(_data(memory, f"sg-memory-{kind}")["path"]) > 1)
            marks = _data(memory, "sg-rss-marks")
            assert sorted(marks["mb"]) == pytest.approx(
                sorted(v / 2**20 for r in held for v in (r.rss_before, r.rss_after)))
            await _until(lambda: len(_data(memory, f"sg-memory-{kind}")["path"]) > 1)

            # opened later: starts with what the first page measured (before any tick of its own)
            lazy = await _open_page(s, "/individual-slimgraph-lazy-sets")
            await _until(lambda: len(_data(memory, "sg-rss")["time"]) >= 3)
            late = await _open_page(s, "/individual-slimgraph-memory")
            n_rss = len(_data(late, "sg-rss")["time"])
            assert n_rss >= 3
            assert list(_data(late, "sg-rss")["time"])[:3] == list(_data(memory, "sg-rss")["time"])[:3]
            assert len(_data(late, f"sg-memory-{kind}")["path"]) > 1  # the last walk, at once
            await _until(lambda: len(_data(lazy, f"sg-lazy-{kind}")["time"]) >= 1)

            for doc in (timing, memory, lazy):
                (root,) = doc.roots
                assert root.sizing_mode == "stretch_both"
                for m in doc.models:
                    if isinstance(m, Plot):
                        assert m.sizing_mode == "stretch_both", m
                    elif isinstance(m, LayoutDOM):
                        assert m.sizing_mode in ("stretch_both", "stretch_width"), m

    asyncio.run(main())


# -- readability --------------------------------------------------------------------------
def test_empty_charts_have_finite_ranges_from_zero():
    """Before any data: every range is finite (BokehJS warns "could not set
    initial ranges" and draws no axes otherwise), amounts start at 0, and
    each chart says what it waits for."""
    from bokeh.models import DataRange1d, FactorRange, Range1d

    views = Views(kinds=("stock", "slim"))
    figs = [views.rss.figure, *(f.figure for f in views.timing.values()),
            *(f.figure for f in views.lazy.values()), *(f.figure for f in views.memory.values()),
            *(f.figure for f in views.lazy_attrs.values())]  # fmt: skip
    for fig in figs:
        for r in (fig.x_range, fig.y_range):
            if isinstance(r, Range1d):
                assert r.start < r.end, fig.title.text
            elif isinstance(r, FactorRange):
                assert len(r.factors) > 0, fig.title.text
            else:
                assert isinstance(r, DataRange1d) and r.start == 0, fig.title.text
    for fig in [views.rss.figure, *(f.figure for f in views.lazy.values())]:
        assert fig.y_range.start == 0  # RSS/MiB axes never zoom to a tiny span
    for f in [*views.timing.values(), *views.memory.values(), *views.lazy.values()]:
        assert f.empty.visible and f.empty.text


def test_time_axes_have_few_short_ticks():
    views = Views(kinds=("stock",))
    for fig in (views.rss.figure, views.lazy["stock"].figure):
        (axis,) = fig.xaxis
        assert axis.ticker.desired_num_ticks <= 5
        fmt = axis.formatter
        for unit in ("milliseconds", "seconds", "minsec", "minutes"):
            label = getattr(fmt, unit)
            assert "%3N" not in label and len(label) <= 8, (unit, label)
        assert fig.xaxis.axis_label and fig.yaxis.axis_label


def test_lazy_container_bars_are_bytes():
    from slimgraph.instrument.lazysets import AttrCensus, Census

    views = Views(kinds=("slim",))
    fig = views.lazy_attrs["slim"]
    fields = [r.glyph.right.expr.fields if hasattr(r.glyph.right, "expr") else r.glyph.right
              for r in _renderers(fig.figure)]  # fmt: skip
    assert "held_bytes" in str(fields) and "saved_drawn" in str(fields)
    assert fig.figure.xaxis.axis_label == "bytes"
    census = Census(time=0.0, ntasks=10, attrs={
        "dependencies": AttrCensus("dependencies", tasks=10, none=4, singleton=1, allocated=5,
                                   empty_allocated=1, shared=2, held_bytes=1080, eager_bytes=2160),
        "waiters": AttrCensus("waiters", tasks=10, none=0, singleton=0, allocated=10,
                              empty_allocated=0, shared=0, held_bytes=3000, eager_bytes=2160),
    })  # fmt: skip
    point, attrs = transforms.lazy_summary(census)
    fig.show(attrs)
    data = fig.source.data
    assert data["held_bytes"] == [1080.0, 3000.0]
    assert data["saved_drawn"] == [1080.0, 0.0]  # held more than eager: no negative bar
    assert point["saved_top_mb"] == pytest.approx(4320 / 2**20)  # max(held 4080, eager 4320)
    assert not fig.empty.visible


def _tree(total, containers):
    """A memory tree of ``total`` bytes, ``containers`` of them in its one part."""
    return [{"path": "state", "parent": None, "name": "state", "bytes": total, "count": 1,
             "bytes_per_task": 1},
            {"path": "state/containers", "parent": "state", "name": "containers",
             "bytes": containers, "count": 1, "bytes_per_task": 1}]  # fmt: skip


def test_memory_trees_share_one_byte_scale():
    def tree(total):
        return _tree(total, total / 2)

    views = Views(kinds=("stock", "slim"))
    stock, slim = views.memory["stock"], views.memory["slim"]
    assert stock.figure.x_range is slim.figure.x_range
    slim.show(transforms.icicle(tree(271 * 2**20), kind="slim"), 1000, None)
    stock.show(transforms.icicle(tree(488 * 2**20), kind="stock"), 1000, None)
    assert stock.figure.x_range.end == 488 * 2**20
    assert max(slim.source.data["x1"]) == 271 * 2**20  # narrower: the same bytes per pixel
    assert "271.0 MiB" in slim.figure.title.text and "488.0 MiB" in stock.figure.title.text


def test_a_fitted_tree_is_drawn_at_its_own_extent():
    """The "fit" toggle: one tree on an x range of its own, ending at its
    own total (its labels get the room); the other stays on the shared
    byte scale, which still follows the largest tree; unfitted, the tree is
    back on the shared range."""
    def tree(total):
        return _tree(total, total / 5)

    views = Views(kinds=("stock", "slim"))
    stock, slim = views.memory["stock"], views.memory["slim"]
    shared = stock.figure.x_range
    stock.show(transforms.icicle(tree(400 * 2**20), kind="stock"), 1000, None)
    slim.show(transforms.icicle(tree(20 * 2**20), kind="slim"), 1000, None)
    narrow = dict(zip(slim.source.data["name"], slim.source.data["label"]))["containers"]
    slim.set_fit(True)
    assert slim.figure.x_range is not shared and stock.figure.x_range is shared
    assert (slim.figure.x_range.start, slim.figure.x_range.end) == (0, 20 * 2**20)
    assert shared.end == 400 * 2**20
    assert "own scale" in slim.figure.xaxis[0].axis_label and "same scale" in stock.figure.xaxis[0].axis_label
    # (a box a fifth of the plot wide has room for its whole name)
    assert dict(zip(slim.source.data["name"], slim.source.data["label"]))["containers"] == "containers" != narrow
    slim.show(transforms.icicle(tree(30 * 2**20), kind="slim"), 1000, None)  # a new walk, still fitted
    assert slim.figure.x_range.end == 30 * 2**20 and shared.end == 400 * 2**20
    slim.set_fit(False)
    assert slim.figure.x_range is shared and shared.end == 400 * 2**20
    assert "same scale" in slim.figure.xaxis[0].axis_label


def test_labels_fit_their_boxes():
    assert transforms.fit_label("containers", 0.5, chars=100) == "containers"
    cut = transforms.fit_label("scheduler collections", 0.1, chars=100)
    assert cut.endswith("\u2026") and len(cut) <= 9
    assert transforms.fit_label("dependencies", 0.02, chars=100) == ""
    assert [transforms.short_count(n) for n in (999, 1600, 1_234_567)] == ["999", "1.6k", "1.2M"]


def test_timing_bars_are_labelled_and_scaled_together():
    from slimgraph.instrument.records import PhaseRecord, SubmissionRecord

    views = Views(kinds=("stock", "slim"))
    recs = {"stock": (SubmissionRecord(scheduler="stock", submission_id=4, tasks=1600, total_s=2.0,
                                       status="OK", phases=[PhaseRecord("order", wall_s=2.0)])),
            "slim": (SubmissionRecord(scheduler="slim", submission_id=1, tasks=1600, total_s=0.5,
                                      status="OK", phases=[PhaseRecord("order", wall_s=0.5)]))}  # fmt: skip
    for kind, rec in recs.items():
        views.timing[kind].append([transforms.timing_row(rec, 1)], 100)
    stock, slim = views.timing["stock"].figure, views.timing["slim"].figure
    assert stock.y_range is slim.y_range and stock.y_range.end == pytest.approx(2.0 * 1.08)
    assert stock.xaxis.ticker.ticks == [1]
    assert stock.xaxis.major_label_overrides[1] == "#4\n1.6k tasks"
    assert not views.timing["stock"].empty.visible


def test_timing_bars_in_seconds_or_us_per_task():
    """One switch shows every phase chart per task: a big job's long bar no
    longer flattens a small one's; the shared axis fits the tallest bar."""
    from slimgraph.instrument.records import PhaseRecord, SubmissionRecord

    views = Views(kinds=("stock", "slim"))
    big = SubmissionRecord(scheduler="stock", submission_id=1, tasks=1_000_000, total_s=100.0, status="OK",
                           phases=[PhaseRecord("order", wall_s=100.0)])  # 100 us/task
    small = SubmissionRecord(scheduler="slim", submission_id=2, tasks=1_000, total_s=0.3, status="OK",
                             phases=[PhaseRecord("order", wall_s=0.3)])  # 300 us/task
    views.timing["stock"].append([transforms.timing_row(big, 1)], 100)
    views.timing["slim"].append([transforms.timing_row(small, 1)], 100)
    fig = views.timing["stock"].figure
    shown = lambda t: {r.name for r in _renderers(t.figure) if r.visible and r.name.startswith(("sg-phase", "sg-pertask"))}  # noqa: E731
    assert fig.y_range.end == pytest.approx(100.0 * 1.08) and "sg-phase-order-stock" in shown(views.timing["stock"])
    views.set_bar_unit("us")
    assert fig.y_range.end == pytest.approx(300.0 * 1.08) and fig.yaxis[0].axis_label == "us per task"
    assert "sg-pertask-order-stock" in shown(views.timing["stock"])
    assert not any(n.startswith("sg-phase-order") for n in shown(views.timing["slim"]))
    legend = views.timing["stock"]._legend  # it drives the shown set only
    assert [item.renderers for item in legend.items] == [[r] for r in views.timing["stock"]._renderers["us"]]
    views.set_bar_unit("s")
    views.timing["stock"]._renderers["s"][0].visible = False  # a phase hidden from the legend ...
    views.set_bar_unit("us")
    assert not views.timing["stock"]._renderers["us"][0].visible  # ... stays hidden per task
    assert views.timing["stock"]._renderers["us"][1].visible
    views.set_bar_unit("s")
    assert fig.y_range.end == pytest.approx(100.0 * 1.08) and fig.yaxis[0].axis_label == "seconds"
    with pytest.raises(ValueError, match="unit"):
        views.set_bar_unit("ms")


def test_phase_legend_has_its_colours_before_the_first_bar():
    """Bokeh draws a legend swatch from its renderer's data: before any bar,
    a legend of swatches is shown, each item drawing its own row of the
    swatch renderer (the phase's colour and hatch, never drawn in the plot);
    with the first bar the bars' own legend takes its place (a click hides a
    phase), in one change to the figure."""
    import math

    from slimgraph.instrument.records import PhaseRecord, SubmissionRecord
    from slimgraph.views.palette import PHASE_COLORS, PHASE_HATCHES

    STACK = transforms.STACK
    views = Views(kinds=("stock", "slim"))
    tf = views.timing["stock"]
    shown, swatch, own = tf._swatch_legend, tf._swatch, tf._legend
    fig = tf.figure
    assert shown in fig.right and own not in fig.right
    data = swatch.data_source.data
    assert [item.label["value"] for item in shown.items] == list(STACK) == [i.label["value"] for i in own.items]
    assert [(item.renderers, item.index) for item in shown.items] == [([swatch], i) for i in range(len(STACK))]
    assert data["color"] == [PHASE_COLORS[p] for p in STACK] and data["hatch"] == [PHASE_HATCHES[p] for p in STACK]
    # the same look as each phase's bars
    bars = tf._renderers["s"]
    assert [r.glyph.fill_color for r in bars] == data["color"]
    assert [r.glyph.hatch_pattern for r in bars] == data["hatch"]
    assert all(math.isnan(v) for v in data["x"] + data["top"])  # nothing drawn in the plot
    assert shown.click_policy == "none" and own.click_policy == "hide"
    views.set_bar_unit("us")  # (before the first bar: the bars' legend follows, unseen)
    assert [item.renderers for item in own.items] == [[r] for r in tf._renderers["us"]]
    views.set_bar_unit("s")
    rec = SubmissionRecord(scheduler="stock", submission_id=1, tasks=10, total_s=1.0, status="OK",
                           phases=[PhaseRecord("order", wall_s=1.0)])  # fmt: skip
    tf.append([transforms.timing_row(rec, 1)], 100)
    assert own in fig.right and shown not in fig.right and tf._swatch_legend is None
    assert [item.renderers for item in own.items] == [[r] for r in bars]
    # the other chart still has no bar
    assert views.timing["slim"]._swatch_legend in views.timing["slim"].figure.right


def test_memory_trees_as_one_table():
    """The icicles' table: parts joined by path, largest first, each followed
    by its own parts; per-task bytes of each engine and their difference."""
    st = {"path": ["state", "state/run_spec", "state/run_spec/Task", "state/containers", "state/a/b/c"],
          "depth": [0, 1, 2, 1, 3], "bytes_per_task": [1000.0, 600.0, 400.0, 300.0, 10.0]}
    sl = {"path": ["state", "state/run_spec", "state/keys"], "depth": [0, 1, 1], "bytes_per_task": [300.0, 100.0, 50.0]}
    t = transforms.tree_table({"stock": st, "slim": sl})
    assert t["part"] == ["run_spec", "\u2514 Task", "containers", "keys"]  # depth 3 and the root left out
    assert t["stock B/task"] == [600.0, 400.0, 300.0, None]
    assert t["slim B/task"] == [100.0, None, None, 50.0]
    assert t["stock - slim B/task"] == [500.0, 400.0, 300.0, -50.0]
    only = transforms.tree_table({"slim": sl}, kinds=("slim",))
    assert only["part"] == ["run_spec", "keys"] and "stock - slim B/task" not in only
    # trees of different graphs: each engine's bytes, no difference
    apart = transforms.tree_table({"stock": st, "slim": sl}, compare=False)
    assert apart["stock B/task"] == t["stock B/task"] and "stock - slim B/task" not in apart


def test_many_job_labels_turn_upright_and_thin_out():
    """A few bars: two-line labels; more than ``CROWDED``: one line, upright,
    every bar; far more: every n-th bar, the latest always labelled."""
    import math

    from slimgraph.views.figures import TimingFigure

    fig = TimingFigure("stock")
    few = {x: f"job {x}\narray 10k" for x in range(1, 4)}
    fig.relabel(few)
    axis = fig.figure.xaxis[0]
    assert axis.major_label_orientation == "horizontal" and axis.ticker.ticks == [1, 2, 3]
    assert axis.major_label_overrides == few
    many = {x: f"job {x}\narray 10k" for x in range(1, 21)}
    fig.relabel(many)
    assert axis.major_label_orientation == math.pi / 2 and axis.ticker.ticks == list(range(1, 21))
    assert axis.major_label_overrides[20] == "job 20"
    lots = {x: f"job {x}\narray 10k" for x in range(1, 101)}
    fig.relabel(lots)
    ticks = axis.ticker.ticks
    assert ticks[-1] == 100 and len(ticks) < 50 and set(ticks) <= set(lots)
