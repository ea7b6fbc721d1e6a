"""The answer at a glance: per job, each engine's figures and stock/slim ratios.

Pure (no Panel, no network): figures come from the engine's
:class:`~slimgraph.instrument.records.SubmissionRecord` of the job's
update_graph, what the job measured right after it (state bytes from a
sampled memory tree, bytes saved by lazy containers) and the figures of the
graph's whole life (:func:`slimgraph.instrument.stages.life_figures` of the
job's records, as ``bench --mode life`` computes its own). The app shows them as a
strip (latest job) and a history table (every job; CSV export); the browser
test checks the strip against the records themselves.
"""
from __future__ import annotations

import html
from typing import Any

from slimgraph.instrument.stages import PARTS, STAGE_LABELS

#: how the run's parts are named where a reader meets them
PART_LABELS = {"dispatch": "dispatch", "completions": "completions",
               "other": "other (messages out, heartbeats, ...)"}
_PART_KEYS = tuple(f"{p}_cpu_us_per_task" for p in PARTS)

#: Engine colours (colour-blind safe, distinct from the phase colours).
#: Defined here until ``slimgraph.views.palette`` exists; the one place the app takes them from.
ENGINE_COLORS = {"stock": "#b35806", "slim": "#2166ac"}

#: (key, label, unit) of each figure, in the order shown.
FIGURES = (
    ("update_graph_s", "update_graph", "s"),
    ("us_per_task", "update_graph per task", "us"),
    ("longest_block_s", "longest event-loop block", "s"),
    ("own_block_s", "&nbsp;&nbsp;of it the ingestion's own", "s"),
    ("rss_per_task", "RSS growth per task", "B"),
    ("state_per_task", "scheduler state per task", "B"),
    ("lazy_saved_bytes", "saved by lazy containers", "B"),
)

#: figures whose stock/slim ratio says nothing
NO_RATIO = ("lazy_saved_bytes", "completed")

#: the whole life's figures (:func:`life_keys`), after :data:`FIGURES`
LIFE_FIGURES = (
    ("ingest_cpu_us_per_task", "scheduler CPU per task: " + STAGE_LABELS["ingest"], "us"),
    ("run_cpu_us_per_task", "&nbsp;&nbsp;" + STAGE_LABELS["run"], "us"),
    # the run's parts (interleaved in time: split by py-spy's samples)
    *((f"{p}_cpu_us_per_task", "&nbsp;&nbsp;&nbsp;&nbsp;of the run: " + PART_LABELS[p], "us") for p in PARTS),
    ("release_cpu_us_per_task", "&nbsp;&nbsp;" + STAGE_LABELS["release"], "us"),
    ("whole_cpu_us_per_task", "&nbsp;&nbsp;whole life", "us"),
    *((f"{stage}_longest_block_s", ("longest loop block: " if i == 0 else "&nbsp;&nbsp;") + label, "s")
      for i, (stage, label) in enumerate(STAGE_LABELS.items())),
    ("peak_rss_growth_bytes", "peak RSS growth over the life", "B"),
    ("completed", "tasks completed", "n"),
    ("tasks_per_s", "tasks completed per second (run)", "/s"),
)


def engine_figures(rec: Any, measured: dict | None = None) -> dict:
    """One engine's figures for one job (None where not measured)."""
    m = measured or {}
    out: dict[str, Any] = dict.fromkeys(k for k, _, _ in (*FIGURES, *LIFE_FIGURES))
    if rec is not None:
        tasks = int(rec.tasks)
        out["tasks"] = tasks
        out["update_graph_s"] = float(rec.total_s)
        out["us_per_task"] = rec.total_s / tasks * 1e6 if tasks else None
        out["longest_block_s"] = rec.longest_block_s
        # the longest block that was the engine's own code (or its thread
        # holding the GIL), not another handler's (a dask dashboard page) nor
        # a collection: slimgraph.instrument.blame; blocks under 50 ms are
        # not attributed
        causes = getattr(rec, "block_causes", None)
        if causes is not None:
            out["own_block_s"] = (causes.get("ingestion") or {}).get("seconds")
            out["own_block_known"] = True
            out["block_causes"] = causes
        if rec.rss_before is not None and rec.rss_after is not None and tasks:
            out["rss_per_task"] = (rec.rss_after - rec.rss_before) / tasks
        # stock records say nothing: stock ingests on its event loop, in one go
        out["ingestion"] = rec.ingestion or "synchronous (stock: on the event loop)"
        # which materialized the graph: slim's compact graph (a node per task
        # only when read), or dask, as stock always does
        out["materialization"] = getattr(rec, "materialization", None) or (
            "dask: every node (stock)" if rec.scheduler == "stock" else None)
        out["record_status"] = rec.status
    if m.get("state_bytes") is not None and m.get("state_tasks"):
        out["state_per_task"] = m["state_bytes"] / m["state_tasks"]
    if m.get("lazy_saved_bytes") is not None:
        out["lazy_saved_bytes"] = float(m["lazy_saved_bytes"])
    out.update(life_keys(m.get("life")))
    out["run_profiled"] = m.get("run_profiled")
    return out


def life_keys(life: dict | None) -> dict:
    """:data:`LIFE_FIGURES` of one engine's ``life_figures`` (empty: none;
    None: a stage not lived, such as an "ingest only" job's run)."""
    if not life:
        return {}
    spans = {**life["stages"], "whole": life.get("whole")}
    out = {f"{stage}_cpu_us_per_task": (spans.get(stage) or {}).get("cpu_us_per_task") for stage in spans}
    out.update({f"{stage}_longest_block_s": (spans.get(stage) or {}).get("longest_block_s") for stage in STAGE_LABELS})
    out.update({k: life.get(k) for k in ("peak_rss_growth_bytes", "completed", "tasks_per_s")})
    parts = (spans.get("run") or {}).get("parts") or {}
    out.update({f"{p}_cpu_us_per_task": (parts.get(p) or {}).get("cpu_us_per_task") for p in PARTS})
    return out


def ratio(stock: float | None, slim: float | None) -> float | None:
    """stock / slim, or None when either is missing or slim is 0."""
    if stock is None or slim is None or slim == 0:
        return None
    return stock / slim


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1e3:,.1f} ms" if abs(value) < 1 else f"{value:,.2f} s"
    if unit == "us":
        return f"{value:,.1f} us"
    if unit == "/s":
        return f"{value:,.0f} /s"
    if unit == "n":
        return f"{value:,.0f}"
    if unit == "B":
        from slimgraph.instrument.memory import fmt_bytes

        return fmt_bytes(value) if abs(value) >= 1024 else f"{value:,.0f} B"
    return f"{value:g}"


def history_row(job: Any, figures: dict[str, dict]) -> dict:
    """One row of the job history table: settings, then each engine's figures."""
    row: dict[str, Any] = {
        "job": job.id, "workload": job.workload, "requested tasks": job.tasks,
        "engines": "+".join(job.kinds), "settings": job.settings, "state": job.phase,
    }  # fmt: skip
    for kind in ("stock", "slim"):
        f = figures.get(kind) or {}
        row[f"{kind} tasks"] = f.get("tasks")
        for key, _, _ in (*FIGURES, *LIFE_FIGURES):
            row[f"{kind} {key}"] = f.get(key)
        row[f"{kind} ingestion"] = f.get("ingestion")
        row[f"{kind} materialization"] = f.get("materialization")
    for key, _, _ in (*FIGURES, *LIFE_FIGURES):
        if key not in NO_RATIO:
            row[f"ratio {key}"] = ratio((figures.get("stock") or {}).get(key),
                                        (figures.get("slim") or {}).get(key))  # fmt: skip
    return row


def history_columns() -> list[str]:
    """The job history table's columns, in order (the same for every row:
    the table is sent with them before its first job, and never with
    others; see ``App._memory_frame`` for why)."""
    from types import SimpleNamespace

    blank = SimpleNamespace(id=None, workload=None, tasks=None, kinds=(), settings=None, phase=None)
    return list(history_row(blank, {}))


def strip_html(job: Any, figures: dict[str, dict], kinds: tuple[str, ...]) -> str:
    """The summary strip of one job: a small table, stock beside slim, ratios.

    Every figure cell carries ``data-kind``, ``data-key`` and ``data-value``
    (the unrounded number) so a test reads what is shown.
    """
    head = "".join(f"<th class='sg-kind-{k}'>{k}</th>" for k in kinds)
    both = "stock" in kinds and "slim" in kinds
    if both:
        head += "<th>stock / slim</th>"
    rows = _figure_rows(FIGURES, figures, kinds, both)
    ing = "".join(f"<td data-kind='{k}' data-key='ingestion'>{(figures.get(k) or {}).get('ingestion') or '-'}</td>"
                  for k in kinds)  # fmt: skip
    rows.append(f"<tr><th scope='row'>how it was ingested</th>{ing}{'<td></td>' if both else ''}</tr>")
    mat = "".join(f"<td data-kind='{k}' data-key='materialization'>"
                  f"{html.escape((figures.get(k) or {}).get('materialization') or '-')}</td>" for k in kinds)  # fmt: skip
    rows.append(f"<tr><th scope='row'>how it was materialized</th>{mat}{'<td></td>' if both else ''}</tr>")
    if any((figures.get(k) or {}).get("whole_cpu_us_per_task") is not None for k in kinds):
        rows.append(f"<tr class='sg-life-head'><th scope='rowgroup' colspan='{len(kinds) + 1 + both}'>the whole life "
                    f"({job.how_far}): the scheduler process's CPU, read by pid, per stage</th></tr>")
        rows += _figure_rows(LIFE_FIGURES, figures, kinds, both)
    tasks = ", ".join(f"{k} {(figures.get(k) or {}).get('tasks') or 0:,}" for k in kinds)
    return (f"<div class='sg-summary' data-job='{job.id}'>"
            f"<div class='sg-summary-title'><b>{job.label}</b> &middot; {job.settings} &middot; "
            f"tasks ingested: {tasks} &middot; <span class='sg-job-state'>{job.phase}</span></div>"
            f"<table class='sg-summary-table'><thead><tr><th></th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")  # fmt: skip


def _figure_rows(spec: tuple, figures: dict[str, dict], kinds: tuple[str, ...], both: bool) -> list[str]:
    """The strip's rows of the figures of ``spec`` ((key, label, unit)...)."""
    rows = []
    for key, label, unit in spec:
        cells = []
        for k in kinds:
            f = figures.get(k) or {}
            v = f.get(key)
            dv = "" if v is None else repr(float(v))
            shown = fmt(v, unit)
            if key == "own_block_s" and v is None and f.get("own_block_known") or \
                    key.endswith("_longest_block_s") and v == 0:  # (the loop monitor keeps blocks of 50 ms up)
                shown = "&lt; 50 ms"
            title = ""
            if key == "longest_block_s" and f.get("block_causes"):
                title = " title='" + html.escape("; ".join(
                    f"{cause} {c['seconds']:.2f} s ({c['label']})" for cause, c in
                    sorted(f["block_causes"].items(), key=lambda kv: -kv[1]["seconds"])), quote=True) + "'"
            if v is None and key in _PART_KEYS and f.get("run_profiled") not in (None, "py-spy"):
                # (why a run lived has no parts: py-spy missing, no ptrace, a run too short to sample)
                title = " title='" + html.escape(f"the run not split: {f['run_profiled']}", quote=True) + "'"
            cells.append(f"<td class='sg-fig' data-kind='{k}' data-key='{key}' data-value='{dv}'{title}>"
                         f"{shown}</td>")  # fmt: skip
        if both and key in NO_RATIO:
            cells.append(f"<td class='sg-ratio' data-key='{key}'></td>")
        elif both:
            r = ratio((figures.get("stock") or {}).get(key), (figures.get("slim") or {}).get(key))
            cells.append(f"<td class='sg-ratio' data-key='{key}'>{'-' if r is None else f'{r:,.1f}x'}</td>")
        rows.append(f"<tr><th scope='row'>{label}</th>{''.join(cells)}</tr>")
    return rows


SUMMARY_CSS = f"""
.sg-summary-title {{ margin: 0 0 6px 0; font-size: 14px; }}
.sg-summary-table {{ border-collapse: collapse; font-size: 13px; width: 100%; max-width: 900px; }}
.sg-summary-table th, .sg-summary-table td {{ padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: right; }}
.sg-summary-table th[scope=row] {{ text-align: left; font-weight: normal; color: #333; }}
.sg-summary-table .sg-ratio {{ font-weight: bold; }}
.sg-summary-table .sg-life-head th {{ text-align: left; padding-top: 10px; font-weight: bold; }}
.sg-kind-stock {{ color: {ENGINE_COLORS["stock"]}; }}
.sg-kind-slim {{ color: {ENGINE_COLORS["slim"]}; }}
"""


def memray_html(kind: str, job_id: Any, summ: dict, top: int = 5) -> str:
    """One engine's memray capture of a job's update_graph, in the page: the
    peak, how many allocations, what was still held after it, and the sites
    that held the most at the peak (``MemraySummary.to_dict()``). Written
    for the sidebar's width: one short line per site, the full path on hover."""
    items = "".join(
        f"<li title='{html.escape(str(s['file']))}:{int(s['line'])}'>"
        f"<span class='sg-memray-bytes'>{fmt(s['bytes'], 'B')}</span> "
        f"<code>{html.escape(str(s['function']))}</code> "
        f"({html.escape(str(s['file']).replace(chr(92), '/').rsplit('/', 1)[-1])}:{int(s['line'])}, "
        f"{int(s['count']):,} allocations)</li>"
        for s in (summ.get("top_by_bytes") or [])[:top]
    )
    peak = int(summ.get("peak_bytes") or 0)
    allocations = int(summ.get("total_allocations") or 0)
    head = (f"<b>memray, {kind}, job {html.escape(str(job_id))}</b>: peak "
            f"<span class='sg-memray-peak' data-value='{peak}'>{fmt(peak, 'B')}</span>, "
            f"<span class='sg-memray-allocations' data-value='{allocations}'>{allocations:,}</span> "
            f"allocations, {fmt(summ.get('retained_bytes'), 'B')} still held after update_graph")
    sites = f"<br>held most at the peak:<ol class='sg-memray-top'>{items}</ol>" if items else ""
    return f"<div class='sg-memray' data-kind='{kind}'><small>{head}{sites}</small></div>"
