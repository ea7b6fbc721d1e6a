"""What the sidebar shows, as plain JSON, from the registry's readings.

Per scheduler: where it comes from, its kind, whether it answers (and for
how long it has not), RSS and tasks held, the update_graphs running now, and
the figures of its newest finished submission. The figures are the
dashboard's own (:func:`slimgraph.dashboard.summary.engine_figures` of the
scheduler's :class:`~slimgraph.instrument.records.SubmissionRecord`, with
the app's labels and formatting), so the sidebar and the app's summary
strip say the same. Stock and slim schedulers of one group (a dashboard's
two engines) get stock/slim ratios when their newest submissions are of
the same graph size.
"""
from __future__ import annotations

import html
import time
from typing import Any

#: the figures a record alone gives (the app's strip adds the memory tree's
#: and the lazy-container census's, which take walks of the scheduler)
KEYS = ("update_graph_s", "us_per_task", "longest_block_s", "own_block_s", "rss_per_task")


def figure_specs() -> list[dict]:
    from slimgraph.dashboard.summary import FIGURES

    out = []
    for key, label, unit in FIGURES:
        if key in KEYS:
            text = html.unescape(label)
            out.append({"key": key, "label": text.strip(), "unit": unit,
                        "indent": text != text.lstrip()})  # fmt: skip
    return out


def record_summary(rec: Any) -> dict:
    """The newest submission: id, tasks, when it ended, its status and each
    figure as ``{"value", "text"}``."""
    from slimgraph.dashboard.summary import engine_figures, fmt

    figs = engine_figures(rec)
    units = {f["key"]: f["unit"] for f in figure_specs()}
    return {
        "submission_id": rec.submission_id,
        "tasks": int(rec.tasks),
        "ended": rec.start + rec.total_s,
        "status": rec.status,
        "ingestion": figs.get("ingestion"),
        "materialization": figs.get("materialization"),
        "figures": {k: {"value": figs.get(k), "text": fmt(figs.get(k), units[k])} for k in KEYS},
    }


def scheduler_summary(s: Any, now: float | None = None) -> dict:
    from slimgraph.instrument.memory import fmt_bytes

    now = time.monotonic() if now is None else now
    st = s.status or {}
    if s.client is None:
        state = "error" if s.error else "connecting"
    elif s.answered is not None and now - s.answered > 2.0:
        state = "waiting"
    else:
        state = "ok"
    return {
        "id": s.id,
        "address": s.address,
        "source": s.source,
        "label": s.label,
        "group": s.group,
        "kind": s.kind,
        "dashboard": s.dashboard,
        "state": state,
        "error": s.error,
        "silent_s": None if s.answered is None else round(now - s.answered, 1),
        "rss": st.get("rss"),
        "rss_text": fmt_bytes(st["rss"]) if st.get("rss") is not None else None,
        "tasks": st.get("tasks"),
        "running": st.get("running") or [],
        "latest": record_summary(s.latest) if s.latest is not None else None,
    }


def group_ratios(members: list[dict]) -> dict | None:
    """stock / slim of each figure, when the group has one of each and their
    newest submissions are of the same number of tasks (else None)."""
    from slimgraph.dashboard.summary import ratio

    by_kind = {m["kind"]: m for m in members if m.get("latest")}
    st, sl = by_kind.get("stock"), by_kind.get("slim")
    if st is None or sl is None or st["latest"]["tasks"] != sl["latest"]["tasks"]:
        return None
    out = {}
    for k in KEYS:
        r = ratio(st["latest"]["figures"][k]["value"], sl["latest"]["figures"][k]["value"])
        out[k] = None if r is None else {"value": r, "text": f"{r:,.1f}x"}
    return out


def snapshot(registry: Any, app_url: str | None) -> dict:
    """The sidebar's whole state (``GET .../api/summary``)."""
    scheds = [scheduler_summary(s) for s in registry.shown()]
    groups: dict[str, list[dict]] = {}
    for m in scheds:
        groups.setdefault(m["group"], []).append(m)
    return {
        "figures": figure_specs(),
        "schedulers": scheds,
        "groups": [{"title": g, "source": ms[0]["source"], "members": [m["id"] for m in ms],
                    "ratios": group_ratios(ms)} for g, ms in groups.items()],  # fmt: skip
        "app": app_url,
        "time": time.time(),
    }
