"""The Bokeh figures: one class per figure, one named data source each.

Every figure reads a ColumnDataSource with a fixed name, so a browser test
(or a user at the browser console) can read what is drawn:
``Bokeh.documents[0].get_model_by_name("sg-timing-stock").data``.

==========================  =================================  ==========================
figure                      source                             columns
==========================  =================================  ==========================
:class:`TimingFigure`       ``sg-timing-<kind>``               :func:`~.transforms.timing_row`
:class:`MemoryIcicle`       ``sg-memory-<kind>``               :data:`~.transforms.TREE_COLUMNS`
:class:`LazySeriesFigure`   ``sg-lazy-<kind>``                 :data:`~.transforms.LAZY_SERIES_COLUMNS`
:class:`LazyAttrsFigure`    ``sg-lazyattrs-<kind>``            :data:`~.transforms.LAZY_ATTR_COLUMNS`
:class:`RssFigure`          ``sg-rss``                         ``time``, ``<kind>_mb``
==========================  =================================  ==========================

:class:`Views` holds the figures for one or more scheduler kinds and lays
them out (the app, the scheduler tab and its individual pages use the same
layouts). Bokeh is imported when a figure is built, never at import: the
scheduler tab's module is imported by a preload.
"""
from __future__ import annotations

from typing import Any

from slimgraph.views.palette import (
    EAGER_COLOR,
    MUTED,
    PHASE_COLORS,
    PHASE_HATCHES,
    engine_color,
    engine_tint,
)
from slimgraph.views.transforms import (
    fit_label,
    fmt_bytes,
    short_count,
    LAZY_ATTR_COLUMNS,
    LAZY_SERIES_COLUMNS,
    OTHER,
    RSS_MARK_COLUMNS,
    STACK,
    TREE_COLUMNS,
    empty_timing,
    lazy_summary,
)

KINDS = ("stock", "slim")



def _figure(sizing_mode: str | None, width: int, **kw: Any):
    """A figure ``width`` wide (or following ``sizing_mode``); with
    ``stretch_both`` it fills its container both ways, as dask's own
    individual pages do (no fixed height: only a minimum)."""
    from bokeh.models import Title
    from bokeh.plotting import figure

    if isinstance(kw.get("title"), str):
        # a Title, not a string for bokeh to convert: bokeh skips that
        # conversion while its process-wide validation flag is off, which
        # distributed's dashboard turns off and on from the scheduler's
        # thread (an in-process scheduler), and ``title.text`` then fails
        kw["title"] = Title(text=kw["title"])
    height = kw.pop("height", 300)
    if sizing_mode == "stretch_both":
        kw["sizing_mode"] = sizing_mode
        kw.setdefault("min_height", min(height, 200))
        kw.setdefault("min_width", 240)
    elif sizing_mode:
        kw["sizing_mode"] = sizing_mode
        kw["height"] = height
    else:
        kw["height"] = height
        kw.setdefault("width", width)
    kw.setdefault("toolbar_location", "above")
    kw.setdefault("tools", "pan,wheel_zoom,box_zoom,reset,save")
    return figure(**kw)


def stacked_vbars(fig: Any, source: Any, fields: list, names: list, colors: list, hatches: list,
                  visible: bool = True) -> list:
    """What ``fig.vbar_stack(fields, x="x", width=0.8, ...)`` draws (one bar
    layer per field, stacked in order, filled and outlined in its colour,
    hatched), with fewer Bokeh models: no unselected/muted glyph copies (see
    :func:`lean`) and one ``Stack`` per boundary, shared by the layer below
    and the layer above it (``vbar_stack`` makes two per layer). The phase
    charts draw 13 layers each; made by ``vbar_stack`` their models would
    outnumber the rest of a page's."""
    from bokeh.models import GlyphRenderer, Stack, VBar

    bounds = [Stack(fields=list(fields[:i])) for i in range(len(fields) + 1)]
    out = []
    for i, (name, color, hatch) in enumerate(zip(names, colors, hatches)):
        glyph = VBar(x="x", width=0.8, bottom={"expr": bounds[i]}, top={"expr": bounds[i + 1]},
                     fill_color=color, line_color=color, hatch_pattern=hatch, hatch_color="#333333",
                     hatch_alpha=0.45, hatch_scale=8)  # fmt: skip
        r = GlyphRenderer(data_source=source, glyph=glyph, name=name, visible=visible)
        fig.renderers.append(r)
        out.append(r)
    return out


def lean(fig: Any) -> Any:
    """Drop the glyph copies Bokeh makes for each renderer's unselected and
    muted look, leaving Bokeh's automatic ones: these figures have no
    selection tool and hide (not mute) from their legends, so the copies are
    never drawn, and they would be a large share of a page's models (each a
    model to build, serialize and send per page load). Returns ``fig``."""
    from bokeh.models import GlyphRenderer
    from bokeh.models.glyph import Glyph

    for r in fig.renderers:
        if isinstance(r, GlyphRenderer):
            if isinstance(r.nonselection_glyph, Glyph):
                r.nonselection_glyph = "auto"
            if isinstance(r.muted_glyph, Glyph):
                r.muted_glyph = "auto"
    return fig


def _time_formatter():
    from bokeh.models import DatetimeTickFormatter

    # one short label per tick (no milliseconds: ticks are seconds apart)
    return DatetimeTickFormatter(
        milliseconds="%H:%M:%S", seconds="%H:%M:%S", minsec="%H:%M:%S",
        minutes="%H:%M", hourmin="%H:%M", hours="%H:%M", days="%b %d",
    )  # fmt: skip


def _time_axis(fig) -> None:
    """Readable time ticks: a few short labels, never run together."""
    fig.xaxis.formatter = _time_formatter()
    fig.xaxis.ticker.desired_num_ticks = 4
    fig.xaxis.major_label_orientation = 0


def _empty_ranges(time_x: bool = False, y_span: float = 1.0) -> dict:
    """Explicit ranges that are finite before any data (no "could not set
    initial ranges", no -1..1 axes): y from 0; a time x axis spans the last
    minute until data arrives (:func:`_follow_time`)."""
    import time

    from bokeh.models import DataRange1d, Range1d

    out = {"y_range": DataRange1d(start=0, default_span=y_span, range_padding=0.08)}
    if time_x:
        now = time.time() * 1000
        out["x_range"] = Range1d(now - 60_000, now)
    return out


def _follow_time(fig, *sources) -> None:
    """A time chart's x range spans its data (at least a minute). Set by
    hand: a range that starts explicit cannot be turned automatic without
    replacing it, a costly change to the document."""
    times = [t for src in sources for t in (src.data["time"][:1] + src.data["time"][-1:])]
    if not times:
        return
    t0, t1 = min(times), max(times)
    span = max(t1 - t0, 60_000)
    start, end = t1 - span - span * 0.02, t1 + span * 0.02
    if (fig.x_range.start, fig.x_range.end) != (start, end):
        fig.x_range.start, fig.x_range.end = start, end


def _inner_width(fig) -> int | None:
    """The plot area's width in pixels as the browser last reported it
    (unset before a browser has drawn the figure)."""
    try:
        return fig.inner_width
    except ValueError:  # bokeh's UnsetValueError
        return None


def waiting_label(fig, text: str):
    """A note in the middle of an empty chart (hidden once data arrives)."""
    from bokeh.models import Label

    label = Label(x=60, y=40, x_units="screen", y_units="screen", text=text,
                  text_color=MUTED, text_font_size="11pt")  # fmt: skip
    fig.add_layout(label)
    return label


class TimingFigure:
    """Stacked bars, one per update_graph: seconds per phase (hover: us/task)."""

    def __init__(self, kind: str, sizing_mode: str | None = None, width: int = 560,
                 y_range: Any = None, peers: list | None = None):  # fmt: skip
        from bokeh.models import (
            ColumnDataSource,
            FixedTicker,
            GlyphRenderer,
            HoverTool,
            Legend,
            LegendItem,
            Range1d,
            VBar,
        )

        self.kind = kind
        self.source = ColumnDataSource(empty_timing(), name=f"sg-timing-{kind}")
        #: the charts sharing ``y_range`` (the tallest bar of all sets its end)
        self.peers = peers if peers is not None else [self]
        self.tallest = 0.0
        #: {x: label} set by an owner that knows better names for the bars
        #: (the app's jobs); None: each bar is labelled by its submission
        self.labels: dict[int, str] | None = None
        # explicit ranges, set as bars arrive: Bokeh's automatic ranges end
        # at -inf over empty stacked bars (no axes drawn at all)
        fig = _figure(sizing_mode, width, title=f"update_graph phases: {kind}",
                      x_axis_label="update_graph submissions (id, tasks)",
                      y_axis_label="seconds", x_range=Range1d(0.5, 5.5),
                      y_range=y_range if y_range is not None else Range1d(0, 1))  # fmt: skip
        def stack(fields: list, prefix: str, visible: bool = True) -> list:
            return stacked_vbars(fig, self.source, fields, [f"{prefix}{p}-{kind}" for p in STACK],
                                 [PHASE_COLORS[p] for p in STACK], [PHASE_HATCHES[p] for p in STACK],
                                 visible=visible)  # fmt: skip

        renderers = stack(list(STACK), "sg-phase-")
        # the same bars in us per task, made when first asked for
        # (``set_unit("us")``): a 1M-task bar of two minutes flattens every
        # 10k bar in seconds. (Made up front they would add as many Bokeh
        # models again to every page, and a page load's time is its models.)
        self._stack = stack
        self._renderers = {"s": renderers}
        self.unit = "s"
        self._hovers = []
        for p, r in zip(STACK, renderers):
            self._hovers.append(
                HoverTool(
                    renderers=[r],
                    tooltips=[
                        ("submission", "#@submission_id"),
                        ("phase", p),
                        ("seconds", f"@{{{p}}}{{0.000}}"),
                        ("us/task", f"@{{{p}_us}}{{0.0}}"),
                        ("tasks", "@tasks{0,0}"),
                        ("total", "@total_s{0.000} s (@us_per_task{0.0} us/task)"),
                    ],
                )
            )
        fig.add_tools(*self._hovers)
        # Bokeh draws a legend swatch from its renderer's data, so the bars'
        # own legend has no colours before the first bar. Until then a
        # legend of swatches stands in for it: each item draws its row of a
        # swatch renderer (a row per phase, never drawn in the plot: no
        # coordinates), and clicks do nothing. With the first bar the bars'
        # own legend takes its place (one change to the figure, not one per
        # item: an open page is sent each change).
        self._swatch = GlyphRenderer(
            data_source=ColumnDataSource({
                "x": [float("nan")] * len(STACK), "top": [float("nan")] * len(STACK),
                "color": [PHASE_COLORS[p] for p in STACK], "hatch": [PHASE_HATCHES[p] for p in STACK],
            }),
            glyph=VBar(x="x", width=0.8, top="top", bottom=0, fill_color="color", line_color="color",
                       hatch_pattern="hatch", hatch_color="#333333", hatch_alpha=0.45, hatch_scale=8),
            name=f"sg-legend-swatches-{kind}",
        )  # fmt: skip
        fig.renderers.append(self._swatch)
        style = {
            "label_text_font_size": "8pt",
            "spacing": 0,
            "padding": 2,
            # 13 rows of Bokeh's default 20 px ran past the plot's bottom
            "label_height": 14,
            "glyph_height": 12,
            "glyph_width": 16,
        }
        #: shown until the first bar (None from then on)
        self._swatch_legend: Any = Legend(
            items=[LegendItem(label=p, renderers=[self._swatch], index=i) for i, p in enumerate(STACK)],
            click_policy="none", **style,
        )  # fmt: skip
        #: the bars' own legend, shown from the first bar on
        self._legend = Legend(items=[LegendItem(label=p, renderers=[r]) for p, r in zip(STACK, renderers)],
                              click_policy="hide", **style)  # fmt: skip
        fig.add_layout(self._swatch_legend, "right")
        fig.xaxis.minor_tick_line_color = None
        fig.xaxis.ticker = FixedTicker(ticks=[])  # one tick per bar (as bars arrive)
        fig.xgrid.grid_line_color = None
        self.empty = waiting_label(fig, "no update_graph recorded yet")
        self.figure = lean(fig)

    def append(self, rows: list[dict], rollover: int) -> None:
        """Stream :func:`~.transforms.timing_row` rows (a document callback)."""
        if rows:
            self.source.stream({c: [r[c] for r in rows] for c in rows[0]}, rollover)
            data = self.source.data
            xr, yr = self.figure.x_range, self.figure.y_range
            xr.start, xr.end = data["x"][0] - 0.5, max(data["x"][-1] + 0.5, data["x"][0] + 2.5)
            self.empty.visible = False
            self._legend_from_bars()
            self._fit_height()
            self._label_ticks()

    def _legend_from_bars(self) -> None:
        """Once bars exist, the bars' own legend replaces the swatches'."""
        if self._swatch_legend is not None:
            fig = self.figure
            fig.right = [self._legend if m is self._swatch_legend else m for m in fig.right]
            self._swatch_legend = None

    def set_unit(self, unit: str) -> None:
        """Show the bars in seconds (``"s"``) or in microseconds per task
        (``"us"``); the charts sharing the y range follow."""
        if unit not in ("s", "us"):
            raise ValueError(f"unit must be 's' or 'us', not {unit!r}")
        if unit not in self._renderers:
            per_task = self._stack([f"{p}_us" for p in STACK], "sg-pertask-", visible=False)
            for hover, r in zip(self._hovers, per_task):
                hover.renderers = [*hover.renderers, r]
            self._renderers[unit] = per_task
        if unit != self.unit:
            # the legend drives the shown set, and a phase hidden from it
            # (a click) stays hidden in the other unit
            for item, old, new in zip(self._legend.items, self._renderers[self.unit], self._renderers[unit]):
                new.visible = old.visible
                old.visible = False
                item.renderers = [new]
        self.unit = unit
        self.figure.yaxis.axis_label = "seconds" if unit == "s" else "us per task"
        title = self.figure.title.text
        for suffix in (" (s)", " (us per task)"):
            if title.endswith(suffix):
                self.figure.title.text = title[: -len(suffix)] + (" (s)" if unit == "s" else " (us per task)")
        self._fit_height()

    def _fit_height(self) -> None:
        data = self.source.data
        column = data["total_s"] if self.unit == "s" else data["us_per_task"]
        self.tallest = max((v for v in column if v is not None), default=0.0)
        self.figure.y_range.start = 0
        self.figure.y_range.end = max(p.tallest for p in self.peers) * 1.08 or 1

    def relabel(self, labels: dict[int, str]) -> None:
        """Label the bars ``{x: label}`` from now on (bars streamed later too)."""
        if labels != self.labels:
            self.labels = dict(labels)
            self._label_ticks()

    #: above this many labelled bars, labels are one line, turned upright
    #: (two-line labels of ~20 jobs ran into each other); above four times
    #: as many, every n-th bar is labelled, the latest always
    CROWDED = 10

    def _label_ticks(self) -> None:
        import math

        axis = self.figure.xaxis
        if self.labels:
            xs = sorted(self.labels)
            if len(xs) <= self.CROWDED:
                axis.major_label_orientation = "horizontal"
                axis.ticker.ticks = xs
                axis.major_label_overrides = dict(self.labels)
                return
            every = 1 + len(xs) // (4 * self.CROWDED)
            axis.major_label_orientation = math.pi / 2
            axis.ticker.ticks = xs[::-1][::every][::-1]
            axis.major_label_overrides = {x: lab.split("\n")[0] for x, lab in self.labels.items()}
            return
        data = self.source.data
        every = 1 + len(data["x"]) // 16  # at most ~16 labelled bars
        axis.ticker.ticks = [int(x) for x in data["x"]][::-1][::every]
        # tick labels: the submission and its size
        axis.major_label_overrides = {
            int(x): f"#{sid}\n{short_count(n)} tasks"
            for x, sid, n in zip(data["x"], data["submission_id"], data["tasks"])
        }


class MemoryIcicle:
    """The scheduler's memory tree as an icicle (hover: bytes, count, B/task).

    x is bytes: the icicles of all kinds share one x range (:class:`Views`),
    so stock's and slim's trees are drawn to the same absolute byte scale
    (a tree half as big is drawn half as wide). :meth:`set_fit` draws one
    tree at its own extent instead (a small tree is a sliver on the shared
    scale), on an x range of its own; the shared one stays the default."""

    #: the x axis's label on the shared scale, and fitted
    SHARED_LABEL = "bytes (same scale for every scheduler)"
    FIT_LABEL = "bytes (fitted: this tree at its own scale)"

    def __init__(self, kind: str, sizing_mode: str | None = None, width: int = 560,
                 x_range: Any = None, peers: list | None = None):  # fmt: skip
        from bokeh.models import AdaptiveTicker, ColumnDataSource, HoverTool, NumeralTickFormatter, Range1d

        self.kind = kind
        self.total = 0.0
        #: the icicles sharing ``x_range`` (their largest total sets its end)
        self.peers = peers if peers is not None else [self]
        self.source = ColumnDataSource({c: [] for c in TREE_COLUMNS}, name=f"sg-memory-{kind}")
        #: the x range every peer draws on (the one byte scale)
        self.shared_range = x_range if x_range is not None else Range1d(0, 2**20)
        #: this tree's own x range, while fitted (made at the first fit)
        self.own_range: Any = None
        self.fit = False
        #: the columns last drawn (drawn again on a fit change)
        self._shown: dict | None = None
        fig = _figure(sizing_mode, width, title=f"scheduler memory by object: {kind}",
                      x_range=self.shared_range, y_range=Range1d(-7, 0),
                      tools="xwheel_zoom,xpan,reset,save", x_axis_label=self.SHARED_LABEL,
                      height=260, name=f"sg-memory-figure-{kind}")  # fmt: skip
        q = fig.quad(
            left="x0", right="x1", bottom="y0", top="y1",
            source=self.source, fill_color="color",
            line_color="white", fill_alpha=0.9,
        )  # fmt: skip
        fig.text(
            x="x0", y="y0", text="label", source=self.source,
            x_offset=3, y_offset=-4, text_font_size="8pt", text_baseline="bottom",
            text_color="#222222",
        )  # fmt: skip
        fig.add_tools(
            HoverTool(
                renderers=[q],
                tooltips=[
                    ("object", "@path"),
                    ("bytes", "@bytes_h (@bytes{0,0})"),
                    ("count", "@count{0,0}"),
                    ("bytes/task", "@bytes_per_task{0.0}"),
                ],
            )
        )
        fig.yaxis.visible = False
        fig.xaxis.formatter = NumeralTickFormatter(format="0.0 b")
        # ticks a power of two apart ("512.0 KiB", "1.0 MiB"), at most 4: a
        # decimal ticker's "488.3 KiB976.6 KiB" ran together in a tree half
        # of a 1,000 px window wide
        fig.xaxis.ticker = AdaptiveTicker(base=2, mantissas=[1], min_interval=1, desired_num_ticks=4)
        fig.grid.visible = False
        self.empty = waiting_label(fig, "walking the scheduler's memory...")
        self.figure = lean(fig)

    def show(self, data: dict, ntasks: int | None = None, sample: int | None = None) -> None:
        """Draw :func:`~.transforms.icicle` columns; the title says how many
        tasks were walked (a document callback)."""
        self._draw(data)
        if ntasks is not None:
            how = f"{sample:,} of {ntasks:,} tasks sampled" if sample else f"{ntasks:,} tasks"
            total = fmt_bytes(self.total)
            title = f"scheduler memory by object: {self.kind}, {total} ({how})"
            if self.figure.title.text != title:
                self.figure.title.text = title

    def _draw(self, data: dict) -> None:
        """The tree's boxes, its x range and its labels (not the title: an
        owner may have set its own, see the app)."""
        self._shown = data
        self.total = max(data["x1"], default=0.0)
        shared_end = max(p.total for p in self.peers) or 2**20
        # (the shared range follows the largest tree even while this one is
        # fitted: its peers draw on it)
        _set_span(self.shared_range, shared_end)
        end = shared_end
        if self.fit:
            end = self.total or 2**20
            _set_span(self.own_range, end)
        # labels cut to their boxes as drawn, at ~6 px per 8pt character of
        # the plot's width as the browser reports it (Bokeh syncs inner_width)
        chars = (_inner_width(self.figure) or self.figure.width or 560) / 6
        data = dict(data, label=[fit_label(name, (x1 - x0) / end, chars) for name, x0, x1
                                 in zip(data["name"], data["x0"], data["x1"])])  # fmt: skip
        self.source.data = data
        depth = max(data["depth"], default=0)
        if self.figure.y_range.start != -depth - 1:
            self.figure.y_range.start = -depth - 1
        self.empty.visible = False

    def set_fit(self, fit: bool) -> None:
        """Draw this tree at its own extent (``True``: its x range ends at
        its own total) or on the scale it shares with its peers (``False``,
        the default). A change of the figure's x range model, not of the
        shared range's numbers: the peers stay on the one scale, and
        panning or zooming a fitted tree moves it alone."""
        from bokeh.models import Range1d

        fit = bool(fit)
        if fit == self.fit:
            return
        self.fit = fit
        if fit and self.own_range is None:
            self.own_range = Range1d(0, self.total or 2**20)
        self.figure.x_range = self.own_range if fit else self.shared_range
        self.figure.xaxis.axis_label = self.FIT_LABEL if fit else self.SHARED_LABEL
        if self._shown is not None:
            self._draw(self._shown)  # (the range's end and the labels' room)


def _set_span(rng: Any, end: float) -> None:
    """``rng`` from 0 to ``end`` when its end is not ``end`` (a page's pan
    or zoom stays until the tree's extent changes; each write is a message
    to every open page)."""
    if rng.end != end:
        rng.start, rng.end = 0, end


class LazySeriesFigure:
    """Bytes the task containers hold, would hold eagerly, and save, over time."""

    def __init__(self, kind: str, sizing_mode: str | None = None, width: int = 560):
        from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem

        self.kind = kind
        self.source = ColumnDataSource({c: [] for c in LAZY_SERIES_COLUMNS}, name=f"sg-lazy-{kind}")
        fig = _figure(sizing_mode, width, title=f"task containers' bytes over time: {kind}",
                      x_axis_type="datetime", y_axis_label="MiB", x_axis_label="time",
                      height=260, **_empty_ranges(time_x=True))  # fmt: skip
        src = self.source
        # the saving is the band between what is held and what eager sets would hold.
        # ("if made now": a set keeps its table as items leave, so on stock the
        # dashed line falls below what is held as tasks run and their sets empty)
        r1 = fig.varea("time", y1="held_mb", y2="saved_top_mb", source=src,
                       fill_color=engine_tint(kind, 1), fill_alpha=0.6)
        r2 = fig.line("time", "held_mb", source=src, color=engine_color(kind), line_width=2)
        r3 = fig.line("time", "eager_mb", source=src, color=EAGER_COLOR, line_width=2,
                      line_dash="dashed")
        fig.add_layout(
            Legend(
                items=[
                    LegendItem(label="held", renderers=[r2]),
                    LegendItem(label="eager sets if made now", renderers=[r3]),
                    LegendItem(label="saved", renderers=[r1]),
                ],
                label_text_font_size="8pt",
                orientation="horizontal",
                spacing=12,
                padding=2,
                margin=2,
            ),
            "below",
        )
        fig.add_tools(
            HoverTool(
                renderers=[r2],
                mode="vline",
                tooltips=[
                    ("saved", "@saved_mb{0.00} MiB"),
                    ("held", "@held_mb{0.00} MiB"),
                    ("eager", "@eager_mb{0.00} MiB"),
                    ("allocated", "@allocated{0,0}"),
                    ("not allocated", "@not_allocated{0,0}"),
                    ("shared", "@shared{0,0}"),
                ],
            )
        )
        _time_axis(fig)
        self.empty = waiting_label(fig, "no census yet")
        self.figure = lean(fig)

    def append(self, point: dict, rollover: int = 2000) -> None:
        self.extend([point], rollover)

    def extend(self, points: list[dict], rollover: int = 2000) -> None:
        """Stream census points (a document callback)."""
        if points:
            self.source.stream({c: [p[c] for p in points] for c in LAZY_SERIES_COLUMNS}, rollover)
            _follow_time(self.figure, self.source)
            self.empty.visible = False


class LazyAttrsFigure:
    """Per container attribute, now: the bytes its containers hold, and
    what they save against stock's eager sets (together: what eager sets
    would hold)."""

    def __init__(self, kind: str, sizing_mode: str | None = None, width: int = 560):
        from bokeh.models import (
            ColumnDataSource,
            DataRange1d,
            FactorRange,
            HoverTool,
            Legend,
            LegendItem,
            NumeralTickFormatter,
        )

        from slimgraph.instrument.lazysets import ATTRS

        self.kind = kind
        _, attrs = lazy_summary(None)
        assert tuple(attrs) == LAZY_ATTR_COLUMNS
        self.source = ColumnDataSource(attrs, name=f"sg-lazyattrs-{kind}")
        fig = _figure(sizing_mode, width, title=f"task containers' bytes per attribute (now): {kind}",
                      y_range=FactorRange(*ATTRS),
                      x_range=DataRange1d(start=0, default_span=2**20, range_padding=0.05),
                      x_axis_label="bytes", height=260)  # fmt: skip
        rs = fig.hbar_stack(
            ["held_bytes", "saved_drawn"],
            y="attribute",
            height=0.7,
            source=self.source,
            color=[engine_color(kind), engine_tint(kind, 1)],
        )
        fig.add_layout(
            Legend(
                items=[
                    LegendItem(label="held", renderers=[rs[0]]),
                    LegendItem(label="saved vs eager sets", renderers=[rs[1]]),
                ],
                label_text_font_size="8pt",
                orientation="horizontal",
                spacing=12,
                padding=2,
                margin=2,
            ),
            "below",
        )
        fig.add_tools(
            HoverTool(
                renderers=list(rs),
                tooltips=[
                    ("attribute", "@attribute"),
                    ("bytes held", "@held_h"),
                    ("saved vs eager", "@saved_h"),
                    ("allocated", "@allocated{0,0}"),
                    ("not allocated", "@not_allocated{0,0}"),
                    ("empty but allocated", "@empty_allocated{0,0}"),
                    ("shared", "@shared{0,0}"),
                ],
            )
        )
        fig.xaxis.formatter = NumeralTickFormatter(format="0.0 b")
        fig.xaxis.ticker.desired_num_ticks = 5
        fig.ygrid.grid_line_color = None
        self.empty = waiting_label(fig, "no census yet")
        self.figure = lean(fig)

    def show(self, attrs: dict) -> None:
        factors = list(attrs["attribute"])
        if factors and list(self.figure.y_range.factors) != factors:
            self.figure.y_range.factors = factors
        self.source.data = attrs
        self.empty.visible = not factors


class RssFigure:
    """Resident set size of each scheduler's process, one line per kind,
    sampled while a view is open; marks at each update_graph's start and
    end (RSS before and after it, from the records: the history)."""

    def __init__(self, kinds: tuple[str, ...], sizing_mode: str | None = None, width: int = 560):
        from bokeh.models import ColumnDataSource, HoverTool

        self.kinds = tuple(kinds)
        self.source = ColumnDataSource({"time": [], **{f"{k}_mb": [] for k in self.kinds}},
                                       name="sg-rss")  # fmt: skip
        self.marks = ColumnDataSource({c: [] for c in RSS_MARK_COLUMNS}, name="sg-rss-marks")
        fig = _figure(sizing_mode, width, title="scheduler process RSS", x_axis_type="datetime",
                      y_axis_label="RSS (MiB)", x_axis_label="time", height=220,
                      **_empty_ranges(time_x=True))  # fmt: skip
        lines = []
        for kind in self.kinds:
            lines.append(fig.line(
                "time", f"{kind}_mb", source=self.source, color=engine_color(kind),
                line_width=2, legend_label=kind,
            ))  # fmt: skip
        dots = fig.scatter("time", "mb", source=self.marks, color="color", size=7,
                           marker="diamond", legend_label="update_graph start/end")  # fmt: skip
        fig.legend.location = "bottom_left"
        fig.legend.label_text_font_size = "8pt"
        fig.legend.background_fill_alpha = 0.7
        _time_axis(fig)
        fig.add_tools(HoverTool(renderers=lines, mode="vline",
                                tooltips=[(k, f"@{k}_mb{{0.0}} MiB") for k in self.kinds]))  # fmt: skip
        fig.add_tools(HoverTool(renderers=[dots], tooltips=[("", "@what"), ("RSS", "@mb{0.0} MiB")]))
        self.figure = lean(fig)

    def mark(self, rows: list[dict], rollover: int = 1000) -> None:
        """Stream :func:`~.transforms.rss_marks` rows (a document callback)."""
        if rows:
            self.marks.stream({c: [r[c] for r in rows] for c in RSS_MARK_COLUMNS}, rollover)
            _follow_time(self.figure, self.source, self.marks)

    def append(self, point: dict, rollover: int = 2000) -> None:
        self.extend([point], rollover)

    def extend(self, points: list[dict], rollover: int = 2000) -> None:
        """Stream points ``{"time", "<kind>_mb"...}`` (a kind a point lacks
        is NaN: a gap in its line)."""
        if points:
            cols = ["time", *(f"{k}_mb" for k in self.kinds)]
            self.source.stream({c: [p.get(c, float("nan")) for p in points] for c in cols},
                               rollover)  # fmt: skip
            _follow_time(self.figure, self.source, self.marks)


class Views:
    """The figures for one or more scheduler kinds, and their layouts.

    ``sizing_mode``/``width`` apply to every figure. The phase charts of all
    kinds share one y axis, so their bars compare by height.
    """

    def __init__(self, kinds=KINDS, width: int = 560, sizing_mode: str | None = None, rss: bool = True,
                 census: bool = True):  # fmt: skip
        """``rss=False``: no :class:`RssFigure` (an owner that draws RSS
        its own way, as the app does per engine process). ``census=False``:
        the lazy-container figures are made later, by
        :meth:`add_census_figures` (an owner that shows them only on demand:
        until then ``lazy`` and ``lazy_attrs`` are empty)."""
        from bokeh.models import Div

        self.kinds = tuple(kinds)
        self.width = width
        self.sizing_mode = sizing_mode
        fig = {"sizing_mode": sizing_mode, "width": width}
        self.timing: dict[str, TimingFigure] = {}
        shared_y = None
        bars: list[TimingFigure] = []
        for kind in self.kinds:
            self.timing[kind] = TimingFigure(kind, y_range=shared_y, peers=bars, **fig)
            shared_y = self.timing[kind].figure.y_range
        bars.extend(self.timing.values())
        from bokeh.models import Range1d

        icicle_x = Range1d(0, 2**20)  # one byte scale for every kind's tree
        peers: list[MemoryIcicle] = []
        self.memory = {k: MemoryIcicle(k, x_range=icicle_x, peers=peers, **fig)
                       for k in self.kinds}  # fmt: skip
        peers.extend(self.memory.values())
        self.lazy: dict[str, LazySeriesFigure] = {}
        self.lazy_attrs: dict[str, LazyAttrsFigure] = {}
        if census:
            self.add_census_figures()
        self.rss = RssFigure(self.kinds, **fig) if rss else None
        #: Per kind: what could not be measured (a refresher writes it).
        div = {"sizing_mode": "stretch_width"} if sizing_mode else {}
        self.notes = {k: Div(text="", name=f"sg-note-{k}", styles={"color": MUTED}, **div)
                      for k in self.kinds}  # fmt: skip
        self.status = Div(text="", name="sg-status")

    def add_census_figures(self) -> None:
        """The lazy-container figures (series and per attribute), per kind."""
        fig = {"sizing_mode": self.sizing_mode, "width": self.width}
        self.lazy = {k: LazySeriesFigure(k, **fig) for k in self.kinds}
        self.lazy_attrs = {k: LazyAttrsFigure(k, **fig) for k in self.kinds}

    def set_bar_unit(self, unit: str) -> None:
        """Every phase chart in seconds (``"s"``) or us per task (``"us"``),
        on one shared y axis."""
        for f in self.timing.values():
            f.set_unit(unit)
        for f in self.timing.values():  # (the shared axis fits the tallest of all)
            f._fit_height()

    # the sources and figures by kind (what the app, tests and notebooks read)
    @property
    def timing_sources(self) -> dict:
        return {k: f.source for k, f in self.timing.items()}

    @property
    def timing_figs(self) -> dict:
        return {k: f.figure for k, f in self.timing.items()}

    @property
    def tree_sources(self) -> dict:
        return {k: f.source for k, f in self.memory.items()}

    @property
    def tree_figs(self) -> dict:
        return {k: f.figure for k, f in self.memory.items()}

    @property
    def lazy_sources(self) -> dict:
        return {k: f.source for k, f in self.lazy.items()}

    @property
    def lazyattr_sources(self) -> dict:
        return {k: f.source for k, f in self.lazy_attrs.items()}

    @property
    def rss_source(self):
        return self.rss.source

    @property
    def rss_fig(self):
        return self.rss.figure

    # -- layouts -----------------------------------------------------------
    def timing_layout(self):
        from bokeh.layouts import row

        return row(*[self.timing[k].figure for k in self.kinds], sizing_mode=self.sizing_mode)

    def memory_layout(self):
        from bokeh.layouts import column, row

        return column(
            row(*[self.memory[k].figure for k in self.kinds], sizing_mode=self.sizing_mode),
            self.rss.figure,
            sizing_mode=self.sizing_mode,
        )

    def lazy_layout(self):
        from bokeh.layouts import column, row

        return row(
            *[column(self.lazy[k].figure, self.lazy_attrs[k].figure, self.notes[k],
                     sizing_mode=self.sizing_mode)
              for k in self.kinds],
            sizing_mode=self.sizing_mode,
        )  # fmt: skip

    def page_layout(self):
        """The scheduler tab's page (one kind, ``stretch_width``): phases
        beside RSS, the memory tree across, the container series beside
        the per-attribute bars."""
        from bokeh.layouts import column, row
        from bokeh.models import Div

        sm = self.sizing_mode

        def h(text):
            return Div(text=f"<h3 style='margin:4px 0'>{text}</h3>", sizing_mode=sm)

        (kind,) = self.kinds
        return column(
            self.status,
            row(column(h("update_graph phases"), self.timing[kind].figure, sizing_mode=sm),
                column(h("Scheduler process"), self.rss.figure, sizing_mode=sm), sizing_mode=sm),
            h("Scheduler memory by object"),
            self.memory[kind].figure,
            h("Task containers (lazy vs eager sets)"),
            row(self.lazy[kind].figure, self.lazy_attrs[kind].figure, sizing_mode=sm),
            self.notes[kind],
            sizing_mode=sm,
        )  # fmt: skip

    def layout(self):
        from bokeh.layouts import column
        from bokeh.models import Div

        return column(
            self.status,
            Div(text="<h3>update_graph phases</h3>"),
            self.timing_layout(),
            Div(text="<h3>Scheduler memory</h3>"),
            self.memory_layout(),
            Div(text="<h3>Lazy containers</h3>"),
            self.lazy_layout(),
            sizing_mode=self.sizing_mode,
        )
