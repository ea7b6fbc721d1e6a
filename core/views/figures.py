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
    PHASE_COLORS,
    PHASE_HATCHES,
    engine_color,
    engine_tint,
)
from slimgraph.views.transforms import (
    LAZY_ATTR_COLUMNS,
    LAZY_SERIES_COLUMNS,
    OTHER,
    STACK,
    TREE_COLUMNS,
    empty_timing,
    lazy_summary,
)

KINDS = ("stock", "slim")



def _figure(sizing_mode: str | None, width: int, **kw: Any):
    from bokeh.plotting import figure

    kw.setdefault("height", 300)
    if sizing_mode:
        kw["sizing_mode"] = sizing_mode
    else:
        kw.setdefault("width", width)
    kw.setdefault("toolbar_location", "above")
    kw.setdefault("tools", "pan,wheel_zoom,box_zoom,reset,save")
    return figure(**kw)


def _time_formatter():
    from bokeh.models import DatetimeTickFormatter

    return DatetimeTickFormatter(
        milliseconds="%H:%M:%S.%3N", seconds="%H:%M:%S", minsec="%H:%M:%S",
        minutes="%H:%M", hourmin="%H:%M", hours="%H:%M",
    )  # fmt: skip


class TimingFigure:
    """Stacked bars, one per update_graph: seconds per phase (hover: us/task)."""

    def __init__(self, kind: str, sizing_mode: str | None = None, width: int = 560,
                 y_range: Any = None):  # fmt: skip
        from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem

        self.kind = kind
        self.source = ColumnDataSource(empty_timing(), name=f"sg-timing-{kind}")
        kw = {"y_range": y_range} if y_range is not None else {}
        fig = _figure(sizing_mode, width, title=f"update_graph phases: {kind}",
                      x_axis_label="submission", y_axis_label="seconds", **kw)  # fmt: skip
        renderers = fig.vbar_stack(
            list(STACK),
            x="x",
            width=0.8,
            source=self.source,
            color=[PHASE_COLORS[p] for p in STACK],
            hatch_pattern=[PHASE_HATCHES[p] for p in STACK],
            hatch_color="#333333",
            hatch_alpha=0.45,
            hatch_scale=8,
            name=[f"sg-phase-{p}-{kind}" for p in STACK],
        )
        for p, r in zip(STACK, renderers):
            fig.add_tools(
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
        legend = Legend(
            items=[LegendItem(label=p, renderers=[r]) for p, r in zip(STACK, renderers)],
            label_text_font_size="8pt",
            spacing=0,
            padding=2,
            click_policy="hide",
        )
        fig.add_layout(legend, "right")
        fig.xaxis.minor_tick_line_color = None
        fig.xaxis[0].ticker.min_interval = 1
        fig.y_range.start = 0
        self.figure = fig

    def append(self, rows: list[dict], rollover: int) -> None:
        """Stream :func:`~.transforms.timing_row` rows (a document callback)."""
        if rows:
            self.source.stream({c: [r[c] for r in rows] for c in rows[0]}, rollover)


class MemoryIcicle:
    """The scheduler's memory tree as an icicle (hover: bytes, count, B/task)."""

    def __init__(self, kind: str, sizing_mode: str | None = None, width: int = 560):
        from bokeh.models import ColumnDataSource, HoverTool, Range1d

        self.kind = kind
        self.source = ColumnDataSource({c: [] for c in TREE_COLUMNS}, name=f"sg-memory-{kind}")
        fig = _figure(sizing_mode, width, title=f"scheduler memory by object: {kind}",
                      x_range=Range1d(0, 1), tools="xwheel_zoom,xpan,reset,save",
                      height=260)  # fmt: skip
        q = fig.quad(
            left="x0", right="x1", bottom="y0", top="y1",
            source=self.source, fill_color="color",
            line_color="white", fill_alpha=0.8,
        )  # fmt: skip
        fig.text(
            x="x0", y="y0", text="label", source=self.source,
            x_offset=3, y_offset=-3, text_font_size="8pt", text_baseline="bottom",
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
        fig.axis.visible = False
        fig.grid.visible = False
        self.figure = fig

    def show(self, data: dict, ntasks: int | None = None, sample: int | None = None) -> None:
        """Draw :func:`~.transforms.icicle` columns; the title says how many
        tasks were walked (a document callback)."""
        self.source.data = data
        if ntasks is not None:
            how = f"{sample:,} of {ntasks:,} tasks sampled" if sample else f"{ntasks:,} tasks"
            title = f"scheduler memory by object: {self.kind} ({how})"
            if self.figure.title.text != title:
                self.figure.title.text = title


class LazySeriesFigure:
    """Bytes the task containers hold, would hold eagerly, and save, over time."""

    def __init__(self, kind: str, sizing_mode: str | None = None, width: int = 560):
        from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem

        self.kind = kind
        self.source = ColumnDataSource({c: [] for c in LAZY_SERIES_COLUMNS}, name=f"sg-lazy-{kind}")
        fig = _figure(sizing_mode, width, title=f"lazy containers over time: {kind}",
                      x_axis_type="datetime", y_axis_label="MiB", height=260)  # fmt: skip
        src = self.source
        # the saving is the band between what is held and what eager sets would hold
        r1 = fig.varea("time", y1="held_mb", y2="eager_mb", source=src,
                       fill_color=engine_tint(kind, 1), fill_alpha=0.6)
        r2 = fig.line("time", "held_mb", source=src, color=engine_color(kind), line_width=2)
        r3 = fig.line("time", "eager_mb", source=src, color=EAGER_COLOR, line_width=2,
                      line_dash="dashed")
        fig.add_layout(
            Legend(
                items=[
                    LegendItem(label="saved vs eager", renderers=[r1]),
                    LegendItem(label="held", renderers=[r2]),
                    LegendItem(label="eager would hold", renderers=[r3]),
                ],
                label_text_font_size="8pt",
            ),
            "right",
        )
        fig.add_tools(
            HoverTool(
                renderers=[r2],
                mode="vline",
                tooltips=[
                    ("saved", "@saved_mb{0.00} MiB"),
                    ("held", "@held_mb{0.00} MiB"),
                    ("allocated", "@allocated{0,0}"),
                    ("not allocated", "@not_allocated{0,0}"),
                    ("empty but allocated", "@empty_allocated{0,0}"),
                    ("shared", "@shared{0,0}"),
                ],
            )
        )
        fig.xaxis.formatter = _time_formatter()
        self.figure = fig

    def append(self, point: dict, rollover: int = 2000) -> None:
        self.source.stream({k: [v] for k, v in point.items()}, rollover)


class LazyAttrsFigure:
    """Per container attribute: tasks with a container of their own, and without."""

    def __init__(self, kind: str, sizing_mode: str | None = None, width: int = 560):
        from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem, NumeralTickFormatter

        self.kind = kind
        _, attrs = lazy_summary(None)
        assert tuple(attrs) == LAZY_ATTR_COLUMNS
        self.source = ColumnDataSource(attrs, name=f"sg-lazyattrs-{kind}")
        fig = _figure(sizing_mode, width, title=f"containers per attribute (now): {kind}",
                      y_range=[], x_axis_label="containers", height=260)  # fmt: skip
        rs = fig.hbar_stack(
            ["allocated", "not_allocated"],
            y="attribute",
            height=0.7,
            source=self.source,
            color=[engine_color(kind), engine_tint(kind, 3)],
        )
        fig.add_layout(
            Legend(
                items=[
                    LegendItem(label="allocated", renderers=[rs[0]]),
                    LegendItem(label="not allocated", renderers=[rs[1]]),
                ],
                label_text_font_size="8pt",
            ),
            "right",
        )
        fig.add_tools(
            HoverTool(
                renderers=list(rs),
                tooltips=[
                    ("attribute", "@attribute"),
                    ("allocated", "@allocated{0,0}"),
                    ("not allocated", "@not_allocated{0,0}"),
                    ("empty but allocated", "@empty_allocated{0,0}"),
                    ("shared", "@shared{0,0}"),
                    ("bytes held", "@held_h"),
                    ("saved vs eager", "@saved_h"),
                ],
            )
        )
        fig.xaxis.formatter = NumeralTickFormatter(format="0a")
        self.figure = fig

    def show(self, attrs: dict) -> None:
        if list(self.figure.y_range.factors) != list(attrs["attribute"]):
            self.figure.y_range.factors = list(attrs["attribute"])
        self.source.data = attrs


class RssFigure:
    """Resident set size of each scheduler's process, one line per kind."""

    def __init__(self, kinds: tuple[str, ...], sizing_mode: str | None = None, width: int = 560):
        from bokeh.models import ColumnDataSource, HoverTool

        self.kinds = tuple(kinds)
        self.source = ColumnDataSource({"time": [], **{f"{k}_mb": [] for k in self.kinds}},
                                       name="sg-rss")  # fmt: skip
        fig = _figure(sizing_mode, width, title="scheduler process RSS", x_axis_type="datetime",
                      y_axis_label="MiB", height=220)  # fmt: skip
        for kind in self.kinds:
            fig.line(
                "time", f"{kind}_mb", source=self.source, color=engine_color(kind),
                line_width=2, legend_label=kind,
            )  # fmt: skip
        fig.legend.location = "top_left"
        fig.xaxis.formatter = _time_formatter()
        fig.add_tools(HoverTool(tooltips=[(k, f"@{k}_mb{{0.0}} MiB") for k in self.kinds]))
        self.figure = fig

    def append(self, point: dict, rollover: int = 2000) -> None:
        self.source.stream({k: [v] for k, v in point.items()}, rollover)


class Views:
    """The figures for one or more scheduler kinds, and their layouts.

    ``sizing_mode``/``width`` apply to every figure. The phase charts of all
    kinds share one y axis, so their bars compare by height.
    """

    def __init__(self, kinds=KINDS, width: int = 560, sizing_mode: str | None = None):
        from bokeh.models import Div

        self.kinds = tuple(kinds)
        self.width = width
        self.sizing_mode = sizing_mode
        fig = {"sizing_mode": sizing_mode, "width": width}
        self.timing: dict[str, TimingFigure] = {}
        shared_y = None
        for kind in self.kinds:
            self.timing[kind] = TimingFigure(kind, y_range=shared_y, **fig)
            shared_y = self.timing[kind].figure.y_range
        self.memory = {k: MemoryIcicle(k, **fig) for k in self.kinds}
        self.lazy = {k: LazySeriesFigure(k, **fig) for k in self.kinds}
        self.lazy_attrs = {k: LazyAttrsFigure(k, **fig) for k in self.kinds}
        self.rss = RssFigure(self.kinds, **fig)
        #: Per kind: what could not be measured (a refresher writes it).
        self.notes = {k: Div(text="", name=f"sg-note-{k}", styles={"color": "#666"})
                      for k in self.kinds}  # fmt: skip
        self.status = Div(text="", name="sg-status")

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
            *[column(self.lazy[k].figure, self.lazy_attrs[k].figure, self.notes[k])
              for k in self.kinds],
            sizing_mode=self.sizing_mode,
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
