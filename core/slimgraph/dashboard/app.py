"""The Panel app: launcher in the sidebar, the answer at a glance, live views.

``build()`` makes one session's app (``main.py`` calls it per browser
session under ``panel serve``; a notebook cell calls it once). The engines
run in processes of their own (:mod:`slimgraph.dashboard.clusters`); one
process-wide poller (:mod:`slimgraph.dashboard.poller`) reads them off
Panel's event loop, and each session's periodic callback only copies what
changed from the poller's snapshot into its own Bokeh sources, so a page
load or a widget change never waits for a busy scheduler.

What a session shows, top to bottom: the engines' state (running, busy
ingesting and for how long), the latest job's summary strip (stock beside
slim, ratios), the job history (CSV download), update_graph phases (bars
labelled by job, both engines at the same slot), the memory trees (drawn to
one byte scale across engines, or each fitted to its own extent), RSS of
each scheduler process (ingestions shaded), lazy containers.
"""
from __future__ import annotations

import io
import logging
import os
import tempfile
import time
from typing import Any

# Import what the job threads will import, here, on the main thread: a module
# being imported by another thread is seen half-built by bokeh.
import dask.array  # noqa: F401
import dask.bag  # noqa: F401
import dask.dataframe  # noqa: F401
import distributed  # noqa: F401
import pandas as pd
import panel as pn

from slimgraph import workloads
from slimgraph.dashboard import clusters, summary
from slimgraph.dashboard.jobs import Job, expected_seconds
from slimgraph.dashboard.poller import Poller, poller as shared_poller
from slimgraph.dashboard.summary import ENGINE_COLORS
from slimgraph.views.figures import Views, waiting_label, lean
from slimgraph.views.transforms import timing_row, tree_table

logger = logging.getLogger(__name__)

OPT_LAZY = "lazy containers"
OPT_INGEST = "ingest only (no compute)"
OPT_MEMRAY = "memray capture"
#: the size preset shown while the typed task count matches no preset
CUSTOM_SIZE = "custom"

REFRESH_MS = int(os.environ.get("SLIMGRAPH_DASHBOARD_REFRESH_MS", 500))
#: the pause between the turns that make a new page's charts (see
#: :meth:`App._plot_cards_in_steps`)
STEP_PAUSE_MS = 50

#: Every job of the process, oldest first (every session sees them).
_jobs: list[Job] = []


def current_job() -> Job | None:
    return _jobs[-1] if _jobs else None


def jobs() -> list[Job]:
    return list(_jobs)


def job_figures(poll: Poller, job: Job) -> dict[str, dict]:
    """kind -> :func:`summary.engine_figures` of ``job``."""
    return {k: summary.engine_figures(poll.record_of(k, job.id), job.results.get(k)) for k in job.kinds}


def history_frame(poll: Poller) -> pd.DataFrame:
    rows = [summary.history_row(j, job_figures(poll, j)) for j in jobs()]
    return pd.DataFrame(rows, columns=summary.history_columns())


def _count_text(value: object) -> str:
    """A typed task count as digits to read ("200,000" and "200_000" too)."""
    return str(value).strip().replace(",", "").replace("_", "")


#: what a live memory tree is of (the poller walks each engine's state)
LIVE_TREE = "the tasks it held at its last walk"


def _tree_source(seq: tuple) -> str:
    """What a memory tree shows, by the key ``_render_plots`` gives it."""
    if seq[0] == "job":
        job = next((j for j in jobs() if j.id == seq[1]), None)
        return f"{job.label if job is not None else f'job {seq[1]}'}, at the end of its ingestion"
    return LIVE_TREE


def _widget(cls: type, **params: Any) -> Any:
    """``cls(**params)``, with a widget's text and colour passed under the
    names this Panel uses: Panel 1.9 renamed a widget's ``name`` to
    ``label`` and a button's ``button_type`` to ``color``, and warns on the
    old names (in every server log, once per session); older Panels know
    only the old ones."""
    if "name" in params and "label" in cls.param:
        params["label"] = params.pop("name")
    if "button_type" in params and "color" in cls.param:
        params["color"] = params.pop("button_type")
    return cls(**params)


#: the tables' look: the page's small type (Tabulator's 16 px made four
#: columns of the memory table wider than a 1,000 px window's main area),
#: and a bottom edge, so that a row cut by the table's height reads as
#: scrolled, not as covered by the chart below. (The class doubled: the
#: theme's stylesheet comes later and would win a tie.)
TABLE_CSS = ".tabulator.tabulator { font-size: 13px; border-bottom: 1px solid #cccccc; }"


def _column_title(column: str) -> str:
    """A history column's title: words that wrap in a narrow header
    ("stock us_per_task" -> "stock us per task"; the CSV keeps the names)."""
    words = column.replace("update_graph", "update-graph").replace("_", " ")
    if words.endswith(" s"):  # (seconds; a ratio has no unit)
        words = words[:-2] + ("" if column.startswith("ratio ") else " (s)")
    return words.replace("update-graph", "update_graph").replace("rss", "RSS").replace("ratio ", "stock/slim ")


def _flamegraph_download(kind: str, html: str, job_id: int) -> pn.widgets.FileDownload:
    """A download button for a flamegraph (sent only when clicked)."""
    name = f"slimgraph-memray-{kind}-job{job_id}.html"
    path = os.path.join(tempfile.mkdtemp(prefix="slimgraph-flamegraph-"), name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)
    return pn.widgets.FileDownload(
        file=path, filename=name, embed=False, label=f"memray flamegraph ({kind}, job {job_id})",
        css_classes=["sg-flamegraph"], sizing_mode="stretch_width",
    )  # fmt: skip


def _life_download(job: Job, kinds: list) -> pn.widgets.FileDownload:
    """A download of a job's whole-life records and the figures the page
    shows of them (per engine: ``{"records": LifeRecords.to_dict(),
    "figures": life_figures(records), "run_profiled": "py-spy" or why the
    run's parts are missing}``), as ``bench --mode life`` keeps its own."""
    import json

    name = f"slimgraph-life-job{job.id}.json"
    path = os.path.join(tempfile.mkdtemp(prefix="slimgraph-life-"), name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"job": job.id, "how_far": job.how_far,
                   **{k: {"records": job.life[k].to_dict(), "figures": job.results[k]["life"],
                          "run_profiled": job.profiled.get(k)} for k in kinds}}, f)
    return pn.widgets.FileDownload(
        file=path, filename=name, embed=False, label=f"whole-life records (JSON, job {job.id})",
        css_classes=["sg-life-records"], sizing_mode="stretch_width",
    )  # fmt: skip


class _EngineSeries:
    """One line per scheduler process (a named source per engine,
    ``{"time": ms, Y: ...}``) on a datetime axis, and what its ranges span
    before the first point."""

    #: the series' column
    Y = ""

    def _series(self, fig, kinds: tuple[str, ...], name: str, top: float, hover: tuple, waiting: str) -> list:
        from bokeh.models import ColumnDataSource, HoverTool

        y = self.Y
        self.sources = {k: ColumnDataSource({"time": [], y: []}, name=f"{name}-{k}") for k in kinds}
        lines = [fig.line("time", y, source=self.sources[k], color=ENGINE_COLORS.get(k, "black"),
                          line_width=2, legend_label=f"{k} scheduler") for k in kinds]  # fmt: skip
        # What the automatic ranges span before the first point: the minute
        # before the page was made, 0 to ``top``, drawn by an invisible
        # line. Over empty sources alone both ranges are NaN, and BokehJS
        # warns "could not set initial ranges" at every paint (and draws no
        # axes) until the engines answer (the charts share the x range).
        # :meth:`extend` empties it at the first point: from then on the
        # ranges follow the data alone (pan, zoom and reset as before).
        now = time.time() * 1000
        self.blank = ColumnDataSource({"time": [now - 60_000, now], y: [0.0, top]}, name=f"{name}-blank")
        blank = fig.line("time", y, source=self.blank, line_alpha=0)
        fig.y_range.only_visible = True
        fig.y_range.renderers = [*lines, blank]
        fig.xaxis.formatter = _time_formatter()
        fig.xaxis.ticker.desired_num_ticks = 6
        fig.add_tools(HoverTool(tooltips=[hover], mode="vline", renderers=lines))
        self.waiting = waiting_label(fig, waiting)
        return lines

    def extend(self, kind: str, points: list) -> None:
        """Stream ``(time ms, value)`` points of ``kind`` (a document
        callback); the first empties the stand-in range (see ``_series``)."""
        if not points:
            return
        self.sources[kind].stream({"time": [p[0] for p in points], self.Y: [p[1] for p in points]}, 3000)
        if self.blank.data["time"]:
            self.blank.data = {"time": [], self.Y: []}
            self.waiting.visible = False


class RssView(_EngineSeries):
    """RSS of each scheduler process (one named source per engine), ingestions shaded."""

    Y = "mb"

    def __init__(self, kinds: tuple[str, ...]):
        from bokeh.models import ColumnDataSource, DataRange1d, Title
        from bokeh.plotting import figure

        self.shade = ColumnDataSource({"left": [], "right": [], "kind": [], "color": []}, name="sg-ingestions")
        #: ingestions still running (from their start to the latest answer),
        #: replaced on every refresh; a finished one moves to ``shade``
        self.live = ColumnDataSource({"left": [], "right": [], "kind": [], "color": []}, name="sg-ingestions-live")
        fig = figure(title=Title(text="RSS of each scheduler process (shaded: update_graph running)"),
                     x_axis_type="datetime", y_axis_label="MiB", height=240, sizing_mode="stretch_width",
                     name="sg-rss-figure",
                     y_range=DataRange1d(start=0), tools="xpan,xwheel_zoom,reset,save",
                     toolbar_location="right")  # fmt: skip
        for src in (self.shade, self.live):
            fig.quad(left="left", right="right", bottom=0, top=1e9, source=src,
                     fill_color="color", fill_alpha=0.12, line_alpha=0)  # fmt: skip
        self._series(fig, kinds, "sg-rss", 100.0, ("MiB", "@mb{0.0}"), "waiting for the engines' first RSS sample")
        fig.legend.location = "top_left"
        self.figure = lean(fig)


class CpuView(_EngineSeries):
    """Each scheduler process's CPU use (read by pid, % of one core) on the
    RSS chart's time axis, with the jobs' stages shaded: stock's in the upper
    half of the chart, slim's in the lower (hover: engine, job, stage)."""

    Y = "cpu"

    def __init__(self, kinds: tuple[str, ...], x_range) -> None:
        from bokeh.models import ColumnDataSource, DataRange1d, HoverTool, Range1d, Title
        from bokeh.plotting import figure

        self.kinds = kinds
        self.stages = ColumnDataSource({"left": [], "right": [], "bottom": [], "top": [], "kind": [], "stage": [],
                                        "job": [], "color": []}, name="sg-stages")  # fmt: skip
        fig = figure(title=Title(text="CPU of each scheduler process, % of one core (shaded: the jobs' "
                                      "stages, stock's above, slim's below)"),
                     x_axis_type="datetime", y_axis_label="% CPU", height=220, sizing_mode="stretch_width",
                     name="sg-cpu-figure", x_range=x_range, y_range=DataRange1d(start=0),
                     tools="xpan,xwheel_zoom,reset,save", toolbar_location="right")  # fmt: skip
        # the stages on a 0..1 range of their own: each engine's half of the
        # chart whatever the CPU axis spans
        fig.extra_y_ranges = {"stages": Range1d(0, 1)}
        shades = fig.quad(left="left", right="right", bottom="bottom", top="top", source=self.stages,
                          y_range_name="stages", fill_color="color", fill_alpha=0.8, line_alpha=0,
                          legend_field="stage")  # fmt: skip
        self._series(fig, kinds, "sg-cpu", 100.0, ("CPU", "@cpu{0} %"), "waiting for the engines' first CPU reading")
        # the legend (engines, then the stages shaded) below the plot: inside,
        # it covered the first seconds of the lines
        legend = fig.legend[0]
        fig.add_layout(legend, "below")
        legend.orientation = "horizontal"
        legend.location = "center"
        legend.label_text_font_size = "8pt"
        fig.add_tools(HoverTool(tooltips=[("engine", "@kind"), ("job", "@job"), ("stage", "@stage")],
                                renderers=[shades]))  # fmt: skip
        self.figure = lean(fig)

    def show_stages(self, jobs: list) -> None:
        """Shade the stages of ``jobs`` (a stage still running up to now)."""
        from slimgraph.instrument.stages import STAGE_LABELS, STAGES
        from slimgraph.views.palette import STAGE_COLORS

        now = time.time()
        rows: dict[str, list] = {c: [] for c in self.stages.data}
        # (stage by stage: the legend names them in the order of their first rows)
        for stage, job, k, life in sorted(((st, j, k, life) for j in jobs for k, life in list(j.life.items())
                                           for st in STAGE_LABELS), key=lambda r: STAGES.index(r[0])):  # fmt: skip
            half = (0.5, 1.0) if k == "stock" or len(self.kinds) == 1 else (0.0, 0.5)
            a, b = life.bounds.get(stage) or (None, None)
            if a is not None:
                rows["left"].append(a * 1000)
                rows["right"].append((now if b is None else b) * 1000)
                rows["bottom"].append(half[0])
                rows["top"].append(half[1])
                rows["kind"].append(k)
                rows["stage"].append(STAGE_LABELS[stage])
                rows["job"].append(job.label)
                rows["color"].append(STAGE_COLORS[stage])
        if rows != self.stages.data:
            self.stages.data = rows


class BlocksView:
    """Each scheduler's event-loop blocks (50 ms or more) on the RSS chart's
    time axis, one row per engine, coloured by cause
    (:mod:`slimgraph.instrument.blame`): which blocks were the ingestion's
    own, dask's calls, collections, or other handlers such as dask's
    dashboard pages."""

    def __init__(self, kinds: tuple[str, ...], x_range) -> None:
        from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Title
        from bokeh.plotting import figure

        self.source = ColumnDataSource({"kind": [], "left": [], "right": [], "seconds": [],
                                        "cause": [], "label": [], "color": []}, name="sg-blocks")  # fmt: skip
        fig = figure(title=Title(text="event-loop blocks of 50 ms or more, by cause (hover: what ran)"),
                     x_axis_type="datetime", y_range=FactorRange(*reversed(kinds)),
                     height=180 + 10 * len(kinds), sizing_mode="stretch_width",
                     tools="xpan,xwheel_zoom,reset,save", toolbar_location="right",
                     **({} if x_range is None else {"x_range": x_range}))  # fmt: skip
        r = fig.hbar(y="kind", left="left", right="right", height=0.7, source=self.source,
                     fill_color="color", line_color="color", legend_field="cause")  # fmt: skip
        fig.xaxis.formatter = _time_formatter()
        fig.xaxis.ticker.desired_num_ticks = 6
        # the legend below the plot: inside, it covered the first engine's row
        legend = fig.legend[0]
        fig.add_layout(legend, "below")
        legend.orientation = "horizontal"
        legend.location = "center"
        legend.label_text_font_size = "8pt"
        fig.add_tools(HoverTool(renderers=[r], tooltips=[
            ("engine", "@kind"), ("block", "@seconds{0.000} s"), ("cause", "@cause"), ("what ran", "@label")]))
        self.figure = lean(fig)

    def add(self, kind: str, blocks: list) -> None:
        from slimgraph.views.palette import CAUSE_COLORS

        self.source.stream({
            "kind": [kind] * len(blocks),
            "left": [(b["wall_end"] - b["seconds"]) * 1000 for b in blocks],
            "right": [b["wall_end"] * 1000 for b in blocks],
            "seconds": [b["seconds"] for b in blocks],
            "cause": [b["cause"] for b in blocks],
            "label": [b["label"] for b in blocks],
            "color": [CAUSE_COLORS.get(b["cause"], "#BBBBBB") for b in blocks],
        }, 4000)


def _figure_row(figs: list) -> pn.pane.Bokeh:
    """Bokeh figures side by side (one per engine), in a pane that follows
    the page's width."""
    from bokeh.layouts import row

    return pn.pane.Bokeh(row(*figs, sizing_mode="stretch_width"), sizing_mode="stretch_width")


def _time_formatter():
    from bokeh.models import DatetimeTickFormatter

    return DatetimeTickFormatter(seconds="%H:%M:%S", minsec="%H:%M:%S", minutes="%H:%M",
                                 hourmin="%H:%M", hours="%H:%M")  # fmt: skip


class App:
    def __init__(self, notebook: bool = False, manager: clusters.ClusterManager | None = None,
                 start_clusters: bool = True, poller: Poller | None = None):  # fmt: skip
        self.notebook = notebook
        self.mgr = manager or clusters.manager()
        if self.mgr.remote:
            self.mgr.get("remote")  # connect now: the views need the remote kind
        elif start_clusters:
            self.mgr.start_in_background()
        self.poll = poller or shared_poller(self.mgr)
        self.kinds = self.mgr.kinds()
        #: the Bokeh figures: built after the page has loaded (``defer_load``),
        #: since building the page's Bokeh models is most of a page load
        self.views: Views | None = None
        self.rss: RssView | None = None
        self.cpu: CpuView | None = None
        self._seen = dict.fromkeys(self.kinds, 0)
        #: per (series, kind): the poller's count of its points, and the
        #: time of the last one drawn (series "rss" and "cpu")
        self._series_seq = {(s, k): 0 for s in ("rss", "cpu") for k in self.kinds}
        self._series_last = {(s, k): 0.0 for s in ("rss", "cpu") for k in self.kinds}
        self._blocks_seq = dict.fromkeys(self.kinds, 0)
        self._blocks_last = dict.fromkeys(self.kinds, 0.0)
        self.blocks: BlocksView | None = None
        self._tree_seq = dict.fromkeys(self.kinds, -1)
        #: the session's document (set by :meth:`start`)
        self._doc = None
        self._lazy_seq = dict.fromkeys(self.kinds, 0)
        self._lazy_last = dict.fromkeys(self.kinds, 0.0)
        self._shown_job: tuple | None = None
        #: why the launcher's last Submit did not submit ("" once one did)
        self._notice = ""
        self._history_key: tuple | None = None
        self._build_widgets()
        self.layout = self._layout()

    # -- widgets --------------------------------------------------------------
    def _build_widgets(self) -> None:
        remote = self.mgr.remote
        slim_ok = self.mgr.available("slim")
        self.workload = pn.widgets.Select(label="Workload", options=list(workloads.WORKLOADS), value="array",
                                          sizing_mode="stretch_width")  # fmt: skip
        self.size = pn.widgets.Select(label="Size preset (fills in the task count)",
                                      options=[*workloads.SIZES, CUSTOM_SIZE], value="10k",
                                      sizing_mode="stretch_width")  # fmt: skip
        self.tasks = pn.widgets.TextInput(label="Tasks (about; any positive whole number)",
                                          value=str(workloads.SIZES["10k"]), sizing_mode="stretch_width")  # fmt: skip
        self.size.param.watch(self._on_preset, "value")
        self.tasks.param.watch(self._on_tasks_typed, "value")
        self.kind = pn.widgets.RadioButtonGroup(
            label="Scheduler", options=["stock", "slim", "both"], value="both" if slim_ok else "stock",
            visible=not remote, sizing_mode="stretch_width",
        )  # fmt: skip
        # one group: each box is wrapped in a <label>, so every box has an
        # accessible name (Panel's single Checkbox renders an unlabeled input)
        self.options = _widget(
            pn.widgets.CheckBoxGroup, name="Submission options", options=[OPT_LAZY, OPT_INGEST, OPT_MEMRAY], value=[OPT_LAZY],
            inline=False, sizing_mode="stretch_width",
        )  # fmt: skip
        # how far a computed job goes: to the end, or cancelled N s after its
        # ingestion (as ``bench --mode life --compute-seconds N``)
        self.cancel_after = pn.widgets.TextInput(label="Cancel after N s (empty: to the end)",
                                                 value="", placeholder="to the end", sizing_mode="stretch_width")
        self.options.param.watch(lambda e: setattr(self.cancel_after, "disabled", OPT_INGEST in e.new), "value")
        self.submit = _widget(pn.widgets.Button, label="Submit", button_type="primary")
        self.cancel = pn.widgets.Button(label="Cancel", disabled=True)
        self.submit.on_click(self._on_submit)
        self.cancel.on_click(self._on_cancel)
        self.progress = _widget(pn.indicators.Progress, value=0, max=100, active=False, sizing_mode="stretch_width",
                                               name="computation progress")  # fmt: skip
        self.job_status = pn.pane.HTML("<small>no job yet</small>", sizing_mode="stretch_width",
                                       css_classes=["sg-job-status"])  # fmt: skip
        self.downloads = pn.Column(sizing_mode="stretch_width")
        self.engine_status = pn.pane.HTML("<small>engines: starting</small>", sizing_mode="stretch_width",
                                          css_classes=["sg-engines"])  # fmt: skip
        if remote:
            note = f"Reading the scheduler at <code>{self.mgr.address}</code> (SLIMGRAPH_SCHEDULER)."
        elif not slim_ok:
            note = f"<b>slim: not available</b> &mdash; {self.mgr.entries['slim'].error}. Only stock runs."
        else:
            note = ("Each engine is a scheduler process of its own with its workers, "
                    "started by this app.")  # fmt: skip
        note += ("<br>Options: <i>lazy containers</i> = the engine switch slimgraph-switches.lazy-containers; "
                 "<i>ingest only</i> releases the graph after update_graph (no compute); otherwise it is "
                 "computed to the end, or cancelled the seconds given after its ingestion; "
                 "<i>memray</i> captures the scheduler's update_graph (peak, top sites, flamegraph download).")
        self.mode_note = pn.pane.HTML(f"<small>{note}</small>", sizing_mode="stretch_width")
        self.summary = pn.pane.HTML(
            "<div class='sg-summary'><i>No job yet: submit one from the launcher on the left. "
            "Its figures appear here, stock beside slim.</i></div>",
            sizing_mode="stretch_width", stylesheets=[summary.SUMMARY_CSS],
        )  # fmt: skip
        # ~60 columns (per engine, and their ratios) are wider than any
        # window: the table scrolls sideways inside its card (never the
        # page), the job column frozen, and says so (headless Chromium and
        # overlay scrollbars show no scrollbar: columns just end at its edge)
        columns = summary.history_columns()
        self.history = _widget(pn.widgets.Tabulator, value=pd.DataFrame(columns=columns, dtype=object),
                                            disabled=True, show_index=False,
                                            sizing_mode="stretch_width", pagination="local",
                                            page_size=10, frozen_columns=["job"], name="job history",
                                            titles={c: _column_title(c) for c in columns},
                                            stylesheets=[TABLE_CSS],
                                            configuration={"placeholder": "no job yet: each job submitted from the "
                                                                          "launcher gets a row here",
                                                           "columnDefaults": {"headerWordWrap": True}})  # fmt: skip
        self.history_note = pn.pane.HTML(
            f"<small class='sg-history-note'>{len(columns)} columns: scroll the table sideways (the job "
            "column stays); the downloads hold every column with every digit.</small>",
            sizing_mode="stretch_width", margin=(0, 10),
        )  # fmt: skip
        self.csv = _widget(pn.widgets.FileDownload, callback=self._history_csv, filename="slimgraph-jobs.csv",
                                           label="Download the job history (CSV)", embed=False,
                                           button_type="default")  # fmt: skip
        self.parquet = _widget(pn.widgets.FileDownload, callback=self._history_parquet, filename="slimgraph-jobs.parquet",
                                               label="Download the job history (Parquet)", embed=False,
                                               button_type="default")  # fmt: skip

    def _build_figures(self) -> None:
        # the event-loop blocks and the lazy containers: made when their
        # tab is first shown (_blocks_card, _census_card)
        self.views = Views(kinds=self.kinds, sizing_mode="stretch_width", rss=False, census=False)
        self.rss = RssView(self.kinds)
        self.cpu = CpuView(self.kinds, self.rss.figure.x_range)
        self._style_figures()

    def _style_figures(self) -> None:
        from bokeh.models import FixedTicker

        for k in self.kinds:
            fig = self.views.timing[k].figure
            fig.xaxis.axis_label = "job"
            fig.xaxis.ticker = FixedTicker(ticks=[])
            fig.xaxis.major_label_text_font_size = "8pt"
            fig.height = 280
            fig.title.text = f"{k}: update_graph phases per job (s)"
            fig.toolbar_location = "right"
            mem = self.views.memory[k].figure
            mem.toolbar_location = "right"
            # (two lines, as every title it gets: Bokeh lays a figure out
            # for its title's height once, and a second line added later is
            # drawn over the card's header)
            mem.title.text = f"scheduler memory by object: {k}\nwaiting for the scheduler..."

    def _blocks_card(self):
        """The event-loop blocks strip (made when first shown; the next
        refresh fills it with every block the engines reported)."""
        self.blocks = BlocksView(self.kinds, self.rss.figure.x_range)
        self._blocks_seq = dict.fromkeys(self.kinds, 0)
        self._blocks_last = dict.fromkeys(self.kinds, 0.0)
        return pn.Card(pn.pane.Bokeh(self.blocks.figure, sizing_mode="stretch_width"),
                       title="Event-loop blocks (same time axis as the RSS chart)",
                       sizing_mode="stretch_width")  # fmt: skip

    def _census_card(self):
        """The lazy containers' figures (made when first shown; the next
        refresh fills them with the census history)."""
        self.views.add_census_figures()
        for k in self.kinds:
            for fig in (self.views.lazy[k].figure, self.views.lazy_attrs[k].figure):
                fig.toolbar_location = "right"
                fig.height = 220
            self.views.lazy[k].figure.xaxis.ticker.desired_num_ticks = 5
            self.views.lazy[k].figure.y_range.start = 0
        self._lazy_seq = dict.fromkeys(self.kinds, 0)
        self._lazy_last = dict.fromkeys(self.kinds, 0.0)
        return pn.Card(_figure_row([self.views.lazy[k].figure for k in self.kinds]),
                       _figure_row([self.views.lazy_attrs[k].figure for k in self.kinds]),
                       title="Lazy containers", sizing_mode="stretch_width")  # fmt: skip

    def _layout(self):
        self.launcher = pn.Column(
            self.mode_note, self.workload, self.size, self.tasks,
            pn.pane.HTML("<div style='font-size:13px'>Scheduler (engine)</div>", margin=(5, 10, 0, 10),
                         visible=not self.mgr.remote),
            self.kind, self.options, self.cancel_after, pn.Row(self.submit, self.cancel), self.progress,
            self.job_status, self.downloads, self.engine_status, sizing_mode="stretch_width",
        )  # fmt: skip
        self.cards = [
            pn.Card(self.summary, title="Latest job: stock beside slim", sizing_mode="stretch_width",
                    collapsible=False),  # fmt: skip
            pn.Card(self.history, self.history_note, pn.Row(self.csv, self.parquet), title="Job history",
                    sizing_mode="stretch_width"),  # fmt: skip
        ]
        if self.notebook:
            self.cards += self._plot_cards()
        else:
            # built once the page is up, in steps: the launcher answers at once
            def plots():
                return self._plot_cards_in_steps()

            self.cards.append(pn.panel(plots, defer_load=True,
                                       loading_indicator=True, sizing_mode="stretch_width"))  # fmt: skip
        self.main = pn.Column(self.engine_banner(), *self.cards, sizing_mode="stretch_width")
        if self.notebook:
            return pn.Row(pn.Column(pn.pane.HTML("<h3>Workload launcher</h3>"), self.launcher, width=300),
                          self.main, sizing_mode="stretch_width")  # fmt: skip
        tmpl = pn.template.BootstrapTemplate(title="slimgraph dashboard", sidebar_width=320,
                                             header_background="#2f3e4e")  # fmt: skip
        tmpl.sidebar.append(pn.pane.HTML("<h4>Workload launcher</h4>"))
        tmpl.sidebar.append(self.launcher)
        tmpl.main.append(self.main)
        return tmpl

    def _plot_cards(self, render: bool = True) -> list:
        self._build_figures()

        # the memory trees as a table: the largest parts of the state, per
        # task, stock beside slim (also what a screen reader gets of them)
        # (four columns: fitted to the card's width at every window width)
        self.memory_table = _widget(
            pn.widgets.Tabulator, value=self._memory_frame({}), disabled=True, show_index=False, sizing_mode="stretch_width", height=260,
            name="memory per task", text_align={c: "right" for c in ("stock B/task", "slim B/task", "stock - slim B/task")},
            layout="fit_columns", stylesheets=[TABLE_CSS], margin=(5, 10, 15, 10),
            configuration={"columnDefaults": {"headerWordWrap": True},
                           # (an empty scheduler is left out: say why the table is empty)
                           "placeholder": "no tasks held yet on either engine (a job's tree is kept at the end "
                                          "of its ingestion)"},
        )  # fmt: skip
        #: which graph each tree is of, when they are of different ones
        self.memory_note = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 10))
        # seconds, or us per task: a 1M-task bar of minutes flattens every
        # small job's bar in seconds
        self.bar_unit = _widget(
            pn.widgets.RadioButtonGroup, name="Phase bars in", options={"seconds": "s", "us per task": "us"}, value="s", width=220,
        )  # fmt: skip
        self.bar_unit.param.watch(lambda e: self.views.set_bar_unit(e.new), "value")
        # per tree: the one byte scale (the default: a tree half as big is
        # drawn half as wide), or fitted to its own extent (slim's tree is
        # a sliver on stock's scale)
        self.tree_fit = _widget(
            pn.widgets.CheckBoxGroup, name="Fit trees", options={f"fit {k}'s tree to its own width": k for k in self.kinds},
            value=[], inline=True, css_classes=["sg-tree-fit"], align="center",
        )  # fmt: skip
        self.tree_fit.param.watch(lambda e: self._fit_trees(e.new), "value")
        cards = [
            pn.Card(pn.Row(pn.pane.HTML("<small>bars in</small>", margin=(12, 4, 0, 10)), self.bar_unit),
                    _figure_row([self.views.timing[k].figure for k in self.kinds]),
                    title="update_graph phases per job", sizing_mode="stretch_width"),  # fmt: skip
            pn.Card(pn.Row(pn.pane.HTML("<small>trees on one byte scale, or</small>", margin=(0, 4, 0, 10),
                                        align="center"), self.tree_fit),
                    _figure_row([self.views.memory[k].figure for k in self.kinds]),
                    self.memory_note, self.memory_table,
                    pn.pane.Bokeh(self.rss.figure, sizing_mode="stretch_width"),
                    pn.pane.Bokeh(self.cpu.figure, sizing_mode="stretch_width"),
                    title="Scheduler memory (trees drawn to one byte scale) and CPU",
                    sizing_mode="stretch_width"),  # fmt: skip
            # made when first rendered (in the page: when their tab is first shown)
            # (ParamFunction takes functions, not bound methods)
            pn.param.ParamFunction(lambda: self._blocks_card(), lazy=True, sizing_mode="stretch_width"),
            pn.param.ParamFunction(lambda: self._census_card(), lazy=True, sizing_mode="stretch_width"),
        ]
        if render:
            self._render_plots()
        return cards

    def _fit_trees(self, fitted: list) -> None:
        """The trees of ``fitted`` kinds at their own extent, the others on
        the one byte scale (the fit toggle's callback)."""
        for k in self.kinds:
            self.views.memory[k].set_fit(k in fitted)

    def _memory_frame(self, table: dict) -> pd.DataFrame:
        """The memory table's frame: always the same columns (the part, each
        engine's bytes per task, and with both engines their difference),
        bytes shown as the summary strip shows them; a part a tree does not
        draw (too small, or absent there) as a dash, a difference that would
        compare two graphs (see the note above the table) left blank.

        Why the same columns. Every new set of columns makes Tabulator's
        column models anew, and a page loading while that happens can get a
        message that names models it was never sent: a reloaded page broke
        with BokehJS errors ("reference pNNNN isn't known", "Cannot read
        properties of null (reading 'firstChild')"), and a bare Tabulator
        whose columns change often does the same (none with fixed columns)."""
        columns = ["part", *(f"{k} B/task" for k in self.kinds)]
        if len(self.kinds) == 2:
            columns.append("stock - slim B/task")
        n = len(table.get("part", ()))
        out = {}
        for c in columns:
            v = table.get(c)
            if c == "part":
                out[c] = pd.Series(v or [], dtype=object)
            elif v is None:
                out[c] = pd.Series([""] * n, dtype=object)
            else:
                out[c] = pd.Series([summary.fmt(x, "B") for x in v], dtype=object)
        return pd.DataFrame(out)

    #: the chart tabs, in order (the first is shown when a page opens)
    TABS = ("Phases and memory", "Event-loop blocks", "Lazy containers")

    def _plot_cards_in_steps(self):
        """The chart tabs made in three turns of the event loop, 50 ms
        apart, instead of one: the figures, their data, then the tabs
        (attached to the page in one piece). Each turn holds Panel's loop,
        which every open page's refresh needs too: made in one turn, a new
        page held it long enough to hold up every other page's refresh.
        The pause lets the refreshes that fell due run between the turns.
        A page closed meanwhile (a reload, a tab closed at once) stops at
        the next turn: its charts would be built and sent to nobody."""
        holder = pn.Column(sizing_mode="stretch_width", min_height=400, loading=True)
        made: dict = {}
        doc = pn.state.curdoc

        def later(step):
            if doc is not None and doc.session_context is not None:
                doc.add_timeout_callback(lambda: step() if self._page_open() else made.clear(), STEP_PAUSE_MS)
            else:  # (no server session: a static export, a test's document)
                step()

        def figures():
            made["cards"] = self._plot_cards(render=False)
            later(data)

        def data():
            self._render_plots()
            later(attach)

        def attach():
            phases, memory, blocks, lazy = made.pop("cards")
            holder.loading = False
            holder.min_height = None
            holder[:] = [pn.Tabs(
                (self.TABS[0], pn.Column(phases, memory, sizing_mode="stretch_width")),
                (self.TABS[1], blocks),
                (self.TABS[2], lazy),
                dynamic=True, sizing_mode="stretch_width",
            )]  # fmt: skip

        later(figures)
        return holder

    def engine_banner(self):
        self.banner = pn.pane.HTML("", sizing_mode="stretch_width", css_classes=["sg-banner"])
        return self.banner

    # -- callbacks ------------------------------------------------------------
    def _on_preset(self, event) -> None:
        if event.new in workloads.SIZES:
            self.tasks.value = str(workloads.SIZES[event.new])

    def _on_tasks_typed(self, event) -> None:
        """The preset follows a typed count: the preset of that size, or
        "custom" (a preset left showing "10k" beside 200000 tells the user
        the wrong size)."""
        text = _count_text(event.new)
        match = [name for name, n in workloads.SIZES.items() if text == str(n)]
        self.size.value = match[0] if match else CUSTOM_SIZE

    def _history_csv(self):
        return io.StringIO(history_frame(self.poll).to_csv(index=False))

    def _history_parquet(self):
        out = io.BytesIO()
        history_frame(self.poll).to_parquet(out, index=False)
        out.seek(0)
        return out

    def _parse_tasks(self) -> int:
        text = _count_text(self.tasks.value)
        try:
            n = int(text)
        except ValueError:
            raise ValueError(f"the task count must be a positive whole number, not {self.tasks.value!r}") from None
        return workloads.validate_tasks(n)

    def _parse_cancel_after(self) -> float | None:
        text = self.cancel_after.value.strip()
        if not text or OPT_INGEST in self.options.value:
            return None
        try:
            secs = float(text)
        except ValueError:
            secs = -1.0
        if not secs >= 0 or secs == float("inf"):
            raise ValueError(f"cancel after a number of seconds (0 or more), not {text!r}")
        return secs

    def _on_submit(self, event=None) -> Job | None:
        job = current_job()
        if job is not None and job.running:
            self._say("<b>A job is already running</b>; cancel it or wait for it to end.")
            return None
        if self.mgr.remote:
            kinds = ("remote",)
        else:
            kinds = ("stock", "slim") if self.kind.value == "both" else (self.kind.value,)
        kinds = tuple(k for k in kinds if k == "remote" or self.mgr.available(k))
        if not kinds:
            self._say("<b>slim: not available</b> in this checkout.")
            return None
        if self.mgr.remote:
            kinds = (self.kinds[0],)
        try:
            tasks = self._parse_tasks()
            job = Job(self.mgr, self.workload.value, tasks, kinds, lazy=OPT_LAZY in self.options.value,
                      memray=OPT_MEMRAY in self.options.value, ingest_only=OPT_INGEST in self.options.value,
                      poller=self.poll, cancel_after=self._parse_cancel_after())  # fmt: skip
        except ValueError as e:
            self._say(f"<b class='sg-error'>Cannot submit</b>: {e}")
            return None
        self._notice = ""
        _jobs.append(job.start())
        self._render_job()
        return job

    def _say(self, html: str) -> None:
        """Why the launcher did not submit, above the latest job's status
        until the next submission. (Written into the status alone, it was
        replaced by the latest job's status at the next refresh, half a
        second later, whenever an earlier job existed.)"""
        self._notice = html
        self._render_job()
        if current_job() is None:
            self.job_status.object = html

    def _on_cancel(self, event=None) -> None:
        job = current_job()
        if job is not None and job.running:
            job.cancel()

    # -- refresh: copy what changed from the poller's snapshot ------------------
    def _render_engines(self) -> None:
        now = time.monotonic()
        lines = []
        job = current_job()
        for key, e in self.mgr.entries.items():
            kind = e.kind if key == "remote" else key
            snap = self.poll.engines.get(kind)
            status = "not available" if e.status == "unavailable" else e.status
            color = ENGINE_COLORS.get(kind, "#333")
            bits = [f"<b style='color:{color}'>{kind}</b>: <span class='sg-engine-state'>{status}</span>"]
            if e.address:
                bits.append(f"<code class='sg-address' data-kind='{kind}'>{e.address}</code>")
            if e.pid:
                bits.append(f"<span class='sg-pid' data-kind='{kind}'>pid {e.pid}</span>")
            if snap is not None and snap.rss:
                bits.append(f"RSS {snap.rss[-1][1]:,.0f} MiB")
            if snap is not None and snap.status:
                bits.append(f"{snap.status.get('tasks', 0):,} tasks held")
            if job is not None and kind in job.kinds and job.phases.get(kind) == "ingesting":
                t0 = job.submitted_at.get(kind)
                el = f"{now - t0:.0f} s" if t0 else ""
                more = ""
                running = (snap.status or {}).get("running") if snap is not None else None
                if running and running[-1].get("phase"):
                    more += f", <span class='sg-live-phase' data-kind='{kind}'>phase {running[-1]['phase']}</span>"
                expected = expected_seconds(kind, job.workload, job.tasks)
                if expected is not None:
                    more += f"; expected about {expected[0]:,.0f} s"
                bits.append(f"<b>ingesting job {job.id}: update_graph running, {el}</b>{more}")
            busy = snap.busy_for(now) if snap is not None else 0.0
            if busy >= 2:
                bits.append(f"<i>its event loop has not answered for {busy:.0f} s (figures resume when it does)</i>")
            if e.dashboard_link:
                bits.append(f"<a href='{e.dashboard_link}' target='_blank'>{kind} dask dashboard</a>")
            if e.error and e.status != "unavailable":
                bits.append(f"<small>{e.error}</small>")
            lines.append(" &middot; ".join(bits))
        html = "<div style='font-size:13px'>" + "<br>".join(lines) + "</div>"
        if self.banner.object != html:
            self.banner.object = html
        short = "<small>" + "<br>".join(
            f"<b>{e.kind if k == 'remote' else k}</b>: {e.status}" for k, e in self.mgr.entries.items()
        ) + "</small>"  # fmt: skip
        if self.engine_status.object != short:
            self.engine_status.object = short

    def _render_job(self) -> None:
        job = current_job()
        if job is None:
            return
        running = job.running
        self.cancel.disabled = not running
        self.submit.disabled = running
        done, total = job.progress
        self.progress.active = running and not total
        self.progress.value = int(100 * done / total) if total else (100 if job.phase == "done" else 0)
        lines = "".join(f"<br><small>{k}: <span class='sg-phase-{k}'>{job.phases[k]}</span> &mdash; "
                        f"{job.messages[k]}</small>" for k in job.kinds)  # fmt: skip
        text = f"<b>{job.label}</b> ({job.settings}): <span class='sg-phase'>{job.phase}</span>{lines}"
        if self._notice:
            text = f"{self._notice}<br>{text}"
        if self.job_status.object != text:
            self.job_status.object = text
        figs = job_figures(self.poll, job)
        strip = summary.strip_html(job, figs, job.kinds)
        if self.summary.object != strip:
            self.summary.object = strip
        lived = sorted(k for k in job.kinds if "life" in job.results[k])
        key = (job.id, f"{sorted(job.flamegraphs)}{sorted(job.memray_summaries)}{sorted(job.memray_errors)}{lived}", job.running)
        if key != self._shown_job:
            self._shown_job = key
            items = [pn.pane.HTML(summary.memray_html(k, job.id, summ), sizing_mode="stretch_width")
                     for k, summ in job.memray_summaries.items()]  # fmt: skip
            items += [_flamegraph_download(k, html, job.id) for k, html in job.flamegraphs.items()]
            items += [pn.pane.HTML(f"<small>memray ({k}): {err}</small>") for k, err in job.memray_errors.items()]
            if lived and not job.running:
                items.append(_life_download(job, lived))
            self.downloads.objects = items

    def _render_history(self) -> None:
        js = jobs()
        key = tuple((j.id, j.phase, tuple(sorted((k, tuple(sorted(map(str, r.items())))) for k, r in j.results.items())),
                     tuple(self.poll.record_of(k, j.id) is not None for k in j.kinds)) for j in js)  # fmt: skip
        if key != self._history_key:
            self._history_key = key
            # shown rounded to 4 significant digits; the CSV has every digit
            df = history_frame(self.poll)
            for col in df.columns:
                if df[col].dtype.kind == "f":
                    df[col] = df[col].map(lambda v: float(f"{v:.4g}") if pd.notna(v) else v)
            # an engine a job did not use shows a dash, not NaN (the CSV and
            # Parquet downloads keep empty cells)
            self.history.value = df.astype(object).where(df.notna(), "-")

    def _render_plots(self) -> None:
        if self.views is None:
            return
        labels = dict(self.poll.book.labels)
        trees = {}
        self._render_live_shade()
        self.cpu.show_stages(jobs()[-20:])
        for k in self.kinds:
            snap = self.poll.engines.get(k)
            if snap is None:
                continue
            recs = list(snap.records)
            if len(recs) > self._seen[k]:
                new = recs[self._seen[k]:]
                self._seen[k] = len(recs)
                self.views.timing[k].append([timing_row(r, slot) for slot, r in new], 500)
                self.rss.shade.stream({"left": [r.start * 1000 for _, r in new],
                                       "right": [(r.start + r.total_s) * 1000 for _, r in new],
                                       "kind": [k] * len(new),
                                       "color": [ENGINE_COLORS.get(k, "grey")] * len(new)}, 200)  # fmt: skip
            for name, view in (("rss", self.rss), ("cpu", self.cpu)):
                seq = getattr(snap, f"{name}_seq")
                if seq != self._series_seq[name, k]:
                    self._series_seq[name, k] = seq
                    pts = [p for p in list(getattr(snap, name)) if p[0] > self._series_last[name, k]]
                    if pts:
                        self._series_last[name, k] = pts[-1][0]
                        view.extend(k, pts)
            if self.blocks is not None and snap.blocks_seq != self._blocks_seq[k]:
                self._blocks_seq[k] = snap.blocks_seq
                new_blocks = [b for b in list(snap.blocks) if b["wall_end"] > self._blocks_last[k]]
                if new_blocks:
                    self._blocks_last[k] = new_blocks[-1]["wall_end"]
                    self.blocks.add(k, new_blocks)
            if k in self.views.lazy and snap.lazy_seq != self._lazy_seq[k]:
                self._lazy_seq[k] = snap.lazy_seq
                pts = [p for p in list(snap.lazy_points) if p["time"] > self._lazy_last[k]]
                if pts:
                    self._lazy_last[k] = pts[-1]["time"]
                    # (extend, not the source's stream: it also moves the chart's
                    # explicit time range to the data and hides "no census yet")
                    self.views.lazy[k].extend(pts, 2000)
                if snap.lazy_attrs is not None:
                    self.views.lazy_attrs[k].show(snap.lazy_attrs)
            if snap.tree is not None:
                trees[k] = (("live", snap.tree_seq), snap.tree, "")
        trees.update(self._kept_trees(trees))
        if trees and any(self._tree_seq[k] != seq for k, (seq, _, _) in trees.items()):
            # (an engine holding no tasks, with no job's tree kept, has no
            # bytes per task to compare)
            held = {k: v for k, v in trees.items() if v[1][1] > 0}
            # (the difference column only for trees of one graph at one point: both live,
            # or both kept at the end of the same job's ingestion)
            same = len({seq if seq[0] == "job" else "live" for seq, _, _ in held.values()}) <= 1
            table = tree_table({k: t[0] for k, (_, t, _) in held.items()}, kinds=self.kinds, compare=same)
            note = "" if same else "<small class='sg-memory-note'>" + "; ".join(
                f"{k}: {_tree_source(seq)}" for k, (seq, _, _) in held.items()
            ) + ": not one graph at one point, so no difference (its column left blank)</small>"  # fmt: skip
            if self.memory_note.object != note:
                self.memory_note.object = note
            self.memory_table.value = self._memory_frame(table)
            for k, (_, (data, _, _, _), _) in trees.items():
                # (every tree's extent first: each show sets the shared
                # range's end to the largest, and cuts labels to it)
                self.views.memory[k].total = max(data["x1"], default=0.0)
            for k, (seq, (data, ntasks, sample, total), when) in trees.items():
                self._tree_seq[k] = seq
                # (x in bytes: the icicles' shared x range is the one byte
                # scale; a tree's labels are cut to its boxes by show)
                self.views.memory[k].show(data, ntasks, sample)
                from slimgraph.instrument.memory import fmt_bytes

                how = f"{sample:,} of {ntasks:,} tasks sampled" if sample else f"{ntasks:,} tasks"
                # (what the tree is of, on a second line: a title on one line
                # is cut at the figure's width in a narrow window; every title
                # has two, see _plot_cards)
                when = "\n" + (when.lstrip(", ") if when else f"live: {LIVE_TREE}")
                self.views.memory[k].figure.title.text = f"scheduler memory: {k}, {fmt_bytes(total)} ({how}){when}"
        if labels:  # jobs name the bars
            for k in self.kinds:
                self.views.timing[k].relabel({int(s): lab for s, lab in labels.items()})

    def _render_live_shade(self) -> None:
        """Shade each update_graph still running on the RSS chart, from its
        start to now, so that the RSS a big ingestion builds is marked while
        it builds it (a finished one is shaded from its record)."""
        now_ms = time.time() * 1000
        rows: dict[str, list] = {"left": [], "right": [], "kind": [], "color": []}
        for k in self.kinds:
            snap = self.poll.engines.get(k)
            running = (snap.status or {}).get("running") if snap is not None else None
            if not running or snap.answered_at is None:
                continue
            # (elapsed as of the engine's last answer)
            since = time.monotonic() - snap.answered_at
            for r in running:
                rows["left"].append(now_ms - (r.get("elapsed_s", 0.0) + since) * 1000)
                rows["right"].append(now_ms)
                rows["kind"].append(k)
                rows["color"].append(ENGINE_COLORS.get(k, "grey"))
        if rows["left"] or self.rss.live.data["left"]:
            self.rss.live.data = rows

    def _kept_trees(self, live: dict) -> dict:
        """Where an engine holds no tasks now (its graph released or
        computed), the tree kept at the end of the latest job's ingestion on
        it: the graph's cost, which the live walk no longer sees."""
        out = {}
        for k in self.kinds:
            cur = live.get(k)
            if cur is not None and cur[1][1] > 0:
                continue
            job = next((j for j in reversed(jobs()) if k in j.trees), None)
            if job is not None:
                out[k] = (("job", job.id), job.trees[k], f", kept at the end of job {job.id}'s ingestion")
        return out

    def _render(self) -> None:
        self._render_engines()
        self._render_job()
        self._render_history()
        self._render_plots()

    def _notebook_apply(self, fn=None) -> None:
        """Apply changes in a notebook: inline CSS, then push everything at once."""
        from bokeh.models import UIElement
        from panel.io.notebook import block_comm, patch_inline_stylesheets, push_notebook

        with block_comm():
            if fn is not None:
                fn()
            for model, _ in list(self.layout._models.values()):
                for sub in model.select({"type": UIElement}):
                    patch_inline_stylesheets(sub)
        push_notebook(self.layout)

    def tick(self) -> None:
        """One refresh: draw what is new since the last one.

        Why in Panel's ``unlocked``: a page has two queues of messages to
        its browser, Bokeh's (changes to Bokeh models made in a callback:
        the charts' streams) and Panel's (changes Panel makes, written at
        once or, while the socket is busy, queued for later). The chart tabs
        reach a page through Panel's (``_plot_cards_in_steps``); when that
        message was queued behind a busy socket, the next refresh's streams
        went out first through Bokeh's and named models the browser had not
        been sent yet: BokehJS "reference pNNNN isn't known" errors and
        charts that stayed empty (the websocket's frames showed the stream
        messages written before the
        older message that defined their models). Inside ``unlocked`` every
        change goes through Panel's queue, behind whatever it still holds."""
        try:
            if self.notebook:
                self._notebook_apply(self._render)
            elif self._page_open():
                with pn.io.unlocked():
                    self._render()
        except Exception:  # noqa: BLE001
            logger.exception("dashboard tick")

    def _page_open(self) -> bool:
        """Whether a browser is connected to this page's server session (or
        there is no server session to ask). A closed page's session lives on
        for 15-32 s (Bokeh's unused-session lifetime, checked every 17 s);
        its refresh drew into figures nobody sees, on the loop every open
        page needs, and with pages opening often while an engine ingests
        such refreshes take a large share of that loop's busy time.
        Skipped refreshes lose nothing: each draws what
        is new since the last one it drew."""
        ctx = getattr(self._doc, "session_context", None)
        session = getattr(ctx, "_session", None)
        return session is None or session.connection_count > 0

    def start(self) -> "App":
        self._doc = pn.state.curdoc
        self.tick()
        cb = quiet_periodic_callback(self.tick, REFRESH_MS)
        self._cb = cb
        if not self.notebook:
            try:
                pn.state.on_session_destroyed(lambda ctx: cb.stop())
            except Exception:  # noqa: BLE001
                pass
        return self

    def stop(self) -> None:
        """Stop this app's refresh (a notebook's cell ends it; pages end on close)."""
        cb = getattr(self, "_cb", None)
        if cb is not None:
            cb.stop()
            self._cb = None


def quiet_periodic_callback(callback: Any, period_ms: int) -> Any:
    """A started Panel periodic callback that does not mark the server busy.

    Why: Panel counts every periodic callback as a busy event, and a busy
    change sets the template's spinner, one object shared by every session,
    so each session's refresh pushed a change to every open page, and with
    a few pages open the Panel loop spent a noticeable share of its time on
    spinner updates. A refresh every half second is not work a user
    waits for. Panel's ``PeriodicCallback`` takes ``background=True`` for
    this; where it does not (an older Panel), this is the usual callback."""
    from panel.io.callbacks import PeriodicCallback

    try:
        cb = PeriodicCallback(callback=callback, period=period_ms, background=True)
    except (TypeError, ValueError):
        cb = None
    if cb is None or getattr(cb, "_background", False) is not True:
        return pn.state.add_periodic_callback(callback, period=period_ms)
    cb.start()  # (the caller stops it when the session ends)
    return cb


ICON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "icon.svg")


def quiet_closed_websockets(loop: Any = None) -> bool:
    """Log a page's websocket closed under a pending write at DEBUG, not as a
    traceback. Returns whether the handler was installed (once per loop).

    Why: when a browser tab reloads or closes while the server is pushing
    to it, Bokeh's write fails with ``WebSocketClosedError`` in a task nobody
    awaits, and asyncio prints "Task exception was never retrieved" with a
    traceback (``bench --mode dashboard --soak-minutes 30`` met it). The
    user did nothing wrong and nothing
    is lost; every other exception still goes to the default handler."""
    import asyncio

    from tornado.websocket import WebSocketClosedError

    loop = loop or asyncio.get_event_loop()
    if getattr(loop, "_slimgraph_quiet_ws", False):
        return False
    previous = loop.get_exception_handler()

    def handler(lp: Any, context: dict) -> None:
        if isinstance(context.get("exception"), WebSocketClosedError):
            logger.debug("a page's websocket closed under a write: %s", context.get("message"))
            return
        if previous is not None:
            previous(lp, context)
        else:
            lp.default_exception_handler(context)

    loop.set_exception_handler(handler)
    loop._slimgraph_quiet_ws = True
    return True


class DetachedSessionFilter(logging.Filter):
    """Turns Bokeh's traceback for a message that reached a page's connection
    after its session was detached into one DEBUG line.

    Why: when a tab is closed while its page is still loading, the browser's
    last messages (a plot's range, computed on the page) can be handled
    after Bokeh has detached the session from the connection; Bokeh's
    ``ServerConnection.session`` then fails an ``assert`` and both Bokeh's
    protocol handler and Tornado log the traceback (a ``bench --mode
    dashboard`` run met it at a closed tab). Nothing is lost:
    the page is gone. Only that exact failure is demoted; every other
    record passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, AssertionError) and _raised_in(exc, "bokeh/server/connection.py", "session"):
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("a closed page's message after its session ended: %s", record.getMessage()[:200])
            return False
        return True


def _raised_in(exc: BaseException, filename: str, function: str) -> bool:
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return False
    code = last.tb_frame.f_code
    return code.co_filename.replace("\\", "/").endswith(filename) and code.co_name == function


def quiet_detached_sessions() -> bool:
    """Install :class:`DetachedSessionFilter` on the two loggers that report
    it (once per process). Returns whether it was installed now."""
    installed = False
    for name in ("bokeh.server.protocol_handler", "tornado.application"):
        log = logging.getLogger(name)
        if not any(isinstance(f, DetachedSessionFilter) for f in log.filters):
            log.addFilter(DetachedSessionFilter())
            installed = True
    return installed


_frozen = False


def freeze_startup_objects() -> bool:
    """Move what the server process holds before its first page (the
    imported modules of Panel, Bokeh, pandas, dask and distributed: a few
    hundred thousand objects) out of the cyclic collector's reach, once
    (``gc.freeze``).

    Why: Panel runs a full ``gc.collect()`` on its event loop after pages
    are closed, and every full collection walked all of them, longer still
    while an ingestion shares the machine, on the loop every open page's
    refresh needs. After the freeze a collection walks only what was made
    since. Those objects live as long as the process anyway. Returns
    whether this call froze."""
    global _frozen
    if _frozen:
        return False
    import gc

    gc.freeze()
    _frozen = True
    return True


def build(notebook: bool = False, **kwargs) -> pn.viewable.Viewable:
    """One app (layout) with its refresh running; ``.servable()`` it or display it."""
    if not notebook:
        quiet_closed_websockets()
        quiet_detached_sessions()
        freeze_startup_objects()  # (before this page's objects are made)
    app = App(notebook=notebook, **kwargs).start()
    layout = app.layout
    if not notebook and isinstance(layout, pn.template.BaseTemplate):
        # Panel links "./favicon.ico", which 404s under --prefix (as behind
        # jupyter-server-proxy): the template embeds a local file instead.
        layout.favicon = ICON
    layout._slimgraph_app = app  # keep a handle for tests and notebooks
    return layout


def show_in_notebook(**kwargs):
    """For a notebook cell: inline resources (works offline), then the app."""
    pn.extension("tabulator", inline=True)
    return build(notebook=True, **kwargs)
