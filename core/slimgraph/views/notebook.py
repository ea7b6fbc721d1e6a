"""Tables and plots for notebooks (the walkthroughs in ``notebooks/`` use them).

The notebooks measure; this module only shapes what they measured into
pandas tables and Bokeh figures (the project's own dependencies: no
matplotlib). It is part of the package, so a notebook imports it from
any working directory: ``from slimgraph.views import notebook as nbviews``.
Every function takes plain results of the measurement API:

- phase records: :class:`slimgraph.instrument.records.SubmissionRecord` (from
  ``get_history(scheduler)`` or ``slimgraph.instrument.client.get_submissions``)
- memory trees: :class:`slimgraph.instrument.memory.MemoryTree`
- lazy-container census: a DataFrame (``Census.to_frame()`` or
  ``slimgraph.instrument.client.get_lazysets``)
- memray summaries: ``MemraySummary`` objects or their ``to_dict()``

so the same code serves in-process schedulers and remote ones.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import pandas as pd

from slimgraph.instrument.records import PHASES
from slimgraph.views.palette import ENGINE_COLORS, categorical, mix

#: Colours per scheduler label (the dashboard's engine colours; slim's eager
#: containers a tint of slim's).
COLORS = {**ENGINE_COLORS, "slim (eager)": mix(ENGINE_COLORS["slim"], 0.55),
          "slim (lazy)": ENGINE_COLORS["slim"]}  # fmt: skip


def color(label: str, i: int = 0) -> str:
    """A scheduler label's colour; other labels take greys (never a phase's colour)."""
    return COLORS.get(label, ("#444444", "#888888", "#BBBBBB")[i % 3])


# -- waiting for a submission ---------------------------------------------------
def wait_for_record(get_records: Callable[[], list], after_id: int = 0,
                    timeout: float = 120.0, poll: float = 0.05):
    """Poll ``get_records()`` until a finished record newer than ``after_id``.

    ``get_records`` returns SubmissionRecords (a History, or a client
    helper's list). Raises ``TimeoutError`` when none arrives in time.
    """
    deadline = time.monotonic() + timeout
    while True:
        done = [r for r in get_records()
                if r.submission_id > after_id and r.status != "running"]
        if done:
            return max(done, key=lambda r: r.submission_id)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no update_graph record after #{after_id} within {timeout} s")
        time.sleep(poll)


def last_id(records) -> int:
    return max((r.submission_id for r in records), default=0)


# -- phases -------------------------------------------------------------------
def phase_frame(records: Mapping[str, Any]) -> pd.DataFrame:
    """One row per phase, columns ``<label> s`` and ``<label> us/task`` per
    scheduler, ``stock/slim`` when both are present; a ``total`` row last.

    Phases a scheduler does not have (stock has no separate ``cull`` for
    expression graphs, slim no ``other``) are 0.
    """
    labels = list(records)
    names = [p for p in PHASES if any(p in r.phase_seconds() for r in records.values())]
    names += sorted({p for r in records.values() for p in r.phase_seconds()} - set(names))
    rows = []
    for name in [*names, "total"]:
        row: dict[str, Any] = {"phase": name}
        for lab in labels:
            rec = records[lab]
            sec = rec.total_s if name == "total" else rec.phase_seconds().get(name, 0.0)
            row[f"{lab} s"] = sec
            row[f"{lab} us/task"] = sec / max(rec.tasks, 1) * 1e6
        if "stock" in records and "slim" in records:
            s, m = row["stock s"], row["slim s"]
            row["stock/slim"] = s / m if s > 0 and m > 0 else float("nan")
        rows.append(row)
    return pd.DataFrame(rows).set_index("phase")


def phase_figure(frame: pd.DataFrame, title: str = "update_graph phases"):
    """Horizontal bars, one group per phase, one bar per scheduler."""
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool
    from bokeh.plotting import figure

    labels = [c[:-2] for c in frame.columns if c.endswith(" s")]
    phases = [p for p in frame.index if p != "total"][::-1]
    factors = [(p, lab) for p in phases for lab in labels]
    src = ColumnDataSource({
        "y": factors,
        "seconds": [float(frame.loc[p, f"{lab} s"]) for p, lab in factors],
        "us_per_task": [float(frame.loc[p, f"{lab} us/task"]) for p, lab in factors],
        "color": [color(lab, labels.index(lab)) for _, lab in factors],
    })
    fig = figure(y_range=FactorRange(*factors), height=40 + 22 * len(factors), width=700,
                 title=title, x_axis_label="seconds (wall)", toolbar_location=None,
                 tools="")
    fig.hbar(y="y", right="seconds", height=0.8, color="color", source=src)
    fig.add_tools(HoverTool(tooltips=[("", "@y"), ("seconds", "@seconds{0.0000}"),
                                      ("us/task", "@us_per_task{0.00}")]))
    fig.y_range.range_padding = 0.02
    fig.yaxis.group_label_orientation = "horizontal"
    fig.ygrid.grid_line_color = None
    return fig


# -- memory -------------------------------------------------------------------
def tree_frame(trees: Mapping[str, Any], depth: int = 1) -> pd.DataFrame:
    """Bytes per task of each tree node down to ``depth`` (1: the top-level
    nodes), one column per scheduler, sorted by the first column; a
    ``total`` row last."""
    cols = {}
    for lab, tree in trees.items():
        df = tree.to_frame()
        df["depth"] = df["path"].str.count("/")
        df = df[(df["depth"] >= 1) & (df["depth"] <= depth)]
        s = pd.Series(df["bytes_per_task"].values,
                      index=df["path"].str.split("/", n=1).str[1], dtype=float)
        s["total"] = tree.total_bytes / max(tree.ntasks, 1)
        cols[f"{lab} B/task"] = s
    out = pd.DataFrame(cols).fillna(0.0)
    first = out.columns[0]
    body = out.drop(index="total").sort_values(first, ascending=False)
    out = pd.concat([body, out.loc[["total"]]])
    if "stock" in trees and "slim" in trees:
        out["stock/slim"] = out["stock B/task"] / out["slim B/task"].where(out["slim B/task"] > 0)
    return out


def tree_figure(frame: pd.DataFrame, title: str = "scheduler state, bytes per task",
                min_bytes: float = 1.0):
    """Stacked bars: one bar per scheduler, one segment per top-level node."""
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.plotting import figure

    cols = [c for c in frame.columns if c.endswith(" B/task")]
    labels = [c[: -len(" B/task")] for c in cols]
    body = frame.drop(index="total")
    body = body[(body[cols] >= min_bytes).any(axis=1)]
    nodes = list(body.index)
    data = {"scheduler": labels}
    for n in nodes:
        data[n] = [float(body.loc[n, c]) for c in cols]
    palette = categorical(len(nodes))
    fig = figure(x_range=labels, height=420, width=760, title=title,
                 y_axis_label="bytes per task", toolbar_location=None, tools="")
    rs = fig.vbar_stack(nodes, x="scheduler", width=0.6, source=ColumnDataSource(data),
                        color=palette,
                        legend_label=nodes)
    for r, n in zip(rs, nodes):
        fig.add_tools(HoverTool(renderers=[r], tooltips=[("node", n), ("B/task", f"@{{{n}}}{{0,0}}")]))
    fig.legend.label_text_font_size = "8pt"
    fig.add_layout(fig.legend[0], "right")  # beside the bars, not over them
    fig.xgrid.grid_line_color = None
    return fig


# -- lazy containers ----------------------------------------------------------
CENSUS_COLUMNS = ["allocated", "empty_allocated", "shared", "items", "held_bytes",
                  "eager_bytes", "saved_bytes"]


def census_frame(censuses: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """``held_bytes`` per task per container attribute, one column per
    scheduler, plus stock's eager model (``eager_bytes``, from the first
    census; it depends only on the tasks' states and edges)."""
    cols = {}
    first = None
    for lab, df in censuses.items():
        df = df.set_index("attr")
        n = max(int(df["ntasks"].iloc[0]), 1) if "ntasks" in df else 1
        cols[f"{lab} held B/task"] = df["held_bytes"] / n
        cols[f"{lab} allocated/task"] = df["allocated"] / n
        if first is None:
            first = df["eager_bytes"] / n
    out = pd.DataFrame(cols)
    out["eager model B/task"] = first
    out.loc["total"] = out.sum()
    return out


def census_figure(frame: pd.DataFrame, title: str = "task containers: bytes held per task"):
    from bokeh.models import ColumnDataSource, FactorRange
    from bokeh.plotting import figure

    cols = [c for c in frame.columns if c.endswith(" held B/task")]
    labels = [c[: -len(" held B/task")] for c in cols]
    attrs = [a for a in frame.index if a != "total"]
    factors = [(a, lab) for a in attrs for lab in labels]
    src = ColumnDataSource({
        "x": factors,
        "bytes": [float(frame.loc[a, f"{lab} held B/task"]) for a, lab in factors],
        "color": [color(lab, labels.index(lab)) for _, lab in factors],
    })
    fig = figure(x_range=FactorRange(*factors), height=340, width=760, title=title,
                 y_axis_label="bytes per task", toolbar_location=None,
                 tools="hover", tooltips=[("", "@x"), ("B/task", "@bytes{0.0}")])
    fig.vbar(x="x", top="bytes", width=0.85, color="color", source=src)
    fig.xaxis.major_label_orientation = 1.0
    fig.xgrid.grid_line_color = None
    return fig


# -- memray -------------------------------------------------------------------
def _as_dict(summary: Any) -> dict:
    return summary if isinstance(summary, dict) else summary.to_dict()


def _short(path: str) -> str:
    """A source path from its package on (``slimgraph/...``, ``dask/...``)."""
    for marker in ("/slimgraph/", "site-packages/"):
        i = path.rfind(marker)
        if i >= 0:
            return path[i + 1 if marker == "/slimgraph/" else i + len(marker):]
    return path


def memray_overview(summaries: Mapping[str, Any]) -> pd.DataFrame:
    rows = {}
    for lab, s in summaries.items():
        d = _as_dict(s)
        rows[lab] = {"peak bytes": d["peak_bytes"], "allocations": d["total_allocations"],
                     "retained bytes": d["retained_bytes"], "capture s": d["duration_s"],
                     "error": d["error"], "flamegraph": d["flamegraph"]}
    return pd.DataFrame.from_dict(rows, orient="index")


def sites_frame(summaries: Mapping[str, Any], which: str = "top_by_bytes",
                top: int = 10) -> pd.DataFrame:
    """Top allocation sites (``which``: ``top_by_bytes``, ``top_by_count``,
    ``retained_by_bytes``) of each capture, side by side."""
    rows = []
    for lab, s in summaries.items():
        for rank, site in enumerate(_as_dict(s)[which][:top], 1):
            rows.append({"scheduler": lab, "rank": rank, "function": site["function"],
                         "where": f"{_short(site['file'])}:{site['line']}",
                         "bytes": site["bytes"], "count": site["count"]})
    return pd.DataFrame(rows, columns=["scheduler", "rank", "function", "where", "bytes", "count"])


def sites_figure(frame: pd.DataFrame, title: str = "memray: top allocation sites (bytes)"):
    from bokeh.models import ColumnDataSource, FactorRange, NumeralTickFormatter
    from bokeh.plotting import figure

    labels = list(dict.fromkeys(frame["scheduler"]))
    ys = [(r.scheduler, f"{r.rank}. {r.function} {r.where.rsplit('/', 1)[-1]}")
          for r in frame.itertuples()][::-1]
    src = ColumnDataSource({
        "y": ys, "bytes": list(frame["bytes"])[::-1],
        "color": [color(s, labels.index(s)) for s in list(frame["scheduler"])[::-1]],
    })
    fig = figure(y_range=FactorRange(*ys), height=60 + 20 * len(ys), width=760, title=title,
                 x_axis_label="bytes at the high-water mark", toolbar_location=None,
                 tools="hover", tooltips=[("site", "@y"), ("bytes", "@bytes{0,0}")])
    fig.hbar(y="y", right="bytes", height=0.8, color="color", source=src)
    fig.xaxis.formatter = NumeralTickFormatter(format="0.0 b")
    fig.ygrid.grid_line_color = None
    return fig
