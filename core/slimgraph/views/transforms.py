"""Measurements in, plot columns out: the pure part of the views.

No Bokeh, no scheduler, no I/O: each function takes the instrument's own
objects (a :class:`~slimgraph.instrument.records.SubmissionRecord`, a
:class:`~slimgraph.instrument.memory.MemoryTree`, a
:class:`~slimgraph.instrument.lazysets.Census`) and returns the columns of a
ColumnDataSource, so the tests check them without a browser, and they are
cheap enough to run on a scheduler's loop (the scheduler tab does).
"""
from __future__ import annotations

import time
from typing import Any

from slimgraph.instrument.memory import fmt_bytes  # noqa: F401  (the package's one formatter)
from slimgraph.instrument.records import PHASES
from slimgraph.views.palette import engine_tint

#: What a timing bar stacks: the phases, then "other" (the rest of total_s
#: that the stock recorder attributes to no phase).
OTHER = "other"
STACK = (*PHASES, OTHER)


# -- update_graph phases ------------------------------------------------------
def timing_row(rec, x: int) -> dict[str, Any]:
    """One bar: seconds and us/task per phase of the record ``rec``
    (a :class:`SubmissionRecord`), at position ``x``."""
    tasks = int(rec.tasks)
    secs = {p.name: float(p.wall_s) for p in rec.phases}
    row: dict[str, Any] = {
        "x": x,
        "submission_id": int(rec.submission_id),
        "tasks": tasks,
        "total_s": float(rec.total_s),
        "status": str(rec.status),
    }
    row["us_per_task"] = row["total_s"] / tasks * 1e6 if tasks else 0.0
    for name in STACK:
        s = secs.get(name, 0.0)
        row[name] = s
        row[f"{name}_us"] = s / tasks * 1e6 if tasks else 0.0
    return row


def empty_timing() -> dict[str, list]:
    cols = ["x", "submission_id", "tasks", "total_s", "status", "us_per_task"]
    for name in STACK:
        cols += [name, f"{name}_us"]
    return {c: [] for c in cols}


#: Columns of the RSS marks: each update_graph's RSS before and after it.
RSS_MARK_COLUMNS = ("time", "mb", "kind", "what", "color")


def rss_marks(rec) -> list[dict]:
    """The RSS ``rec`` measured before and after its update_graph, as marks
    on the RSS chart (the history a page shows when opened late)."""
    from slimgraph.views.palette import engine_color

    out = []
    start_ms = float(rec.start) * 1000
    for when, value, what in ((start_ms, rec.rss_before, "before"),
                              (start_ms + float(rec.total_s) * 1000, rec.rss_after, "after")):  # fmt: skip
        if value:
            out.append({"time": when, "mb": value / 2**20, "kind": str(rec.scheduler),
                        "what": f"{what} update_graph #{rec.submission_id} ({rec.tasks:,} tasks)",
                        "color": engine_color(str(rec.scheduler))})  # fmt: skip
    return out


# -- memory tree --------------------------------------------------------------
def tree_rows(tree) -> list[dict]:
    """A :class:`MemoryTree` as rows (path, parent, name, bytes, count,
    bytes_per_task; ``bytes``/``count`` include the children), like
    ``MemoryTree.to_frame`` but without pandas."""
    nt = max(int(tree.ntasks), 1)
    rows: list[dict] = []

    def rec(node, parent):
        tb = node.total_bytes
        rows.append({"path": node.path, "parent": parent, "name": node.name, "bytes": tb,
                     "count": node.total_count, "bytes_per_task": tb / nt})  # fmt: skip
        for c in node.children.values():
            rec(c, node.path)

    rec(tree.root, None)
    return rows



#: The icicle's root (the whole state), neutral.
ROOT_COLOR = "#D9D9D9"

TREE_COLUMNS = (
    "x0", "x1", "y0", "y1", "name", "path", "bytes", "count",
    "bytes_per_task", "bytes_h", "color", "label", "depth",
)  # fmt: skip


def icicle(rows: list[dict], max_depth: int = 6, min_fraction: float = 0.002,
           kind: str = "") -> dict:
    """Lay a memory tree out as an icicle: x is bytes, y the depth.

    ``rows`` are :func:`tree_rows`. The roots span 0 to their total bytes
    (so two trees drawn on one x range compare by width). Children are placed left to right inside
    their parent's span, each as wide as its share of the parent's bytes;
    nodes narrower than ``min_fraction`` of the total, or deeper than
    ``max_depth``, are not drawn. Branches are tints of ``kind``'s engine
    colour (:func:`slimgraph.views.palette.engine_tint`).
    """
    out: dict[str, list] = {c: [] for c in TREE_COLUMNS}
    if not rows:
        return out
    by_path = {str(r["path"]): r for r in rows}
    children: dict[str | None, list[dict]] = {}
    for r in rows:
        parent = r["parent"]
        parent = str(parent) if parent is not None and str(parent) in by_path else None
        children.setdefault(parent, []).append(r)
    roots = children.get(None, [])
    total = float(sum(max(float(r["bytes"]), 0.0) for r in roots)) or 1.0

    def place(node, x0, x1, depth, color, recurse=True):
        width = x1 - x0
        if depth > max_depth or width < min_fraction:
            return
        b = float(node["bytes"])
        out["x0"].append(x0)
        out["x1"].append(x1)
        out["y0"].append(-depth - 1)
        out["y1"].append(-depth)
        out["depth"].append(depth)
        out["name"].append(str(node["name"]))
        out["path"].append(str(node["path"]))
        out["bytes"].append(b)
        out["count"].append(float(node["count"]))
        out["bytes_per_task"].append(float(node["bytes_per_task"]))
        out["bytes_h"].append(fmt_bytes(b))
        out["color"].append(color)
        out["label"].append(str(node["name"]) if width > 0.06 else "")
        kids = sorted(children.get(str(node["path"]), []), key=lambda r: -float(r["bytes"]))
        if b <= 0 or not recurse:
            return
        x = x0
        for kid in kids:
            w = width * max(float(kid["bytes"]), 0.0) / b
            w = min(w, x1 - x)
            place(kid, x, x + w, depth + 1, color)
            x += w

    x = 0.0
    ranked = sorted(roots, key=lambda r: -float(r["bytes"]))
    if len(ranked) == 1:
        # One root ("state"): draw it grey and colour its branches instead.
        root = ranked[0]
        b = float(root["bytes"])
        place(root, 0.0, 1.0, 0, ROOT_COLOR, recurse=False)
        kids = sorted(children.get(str(root["path"]), []), key=lambda r: -float(r["bytes"]))
        for i, kid in enumerate(kids):
            w = max(float(kid["bytes"]), 0.0) / (b or 1.0)
            w = min(w, 1.0 - x)
            place(kid, x, x + w, 1, engine_tint(kind, i))
            x += w
        return _in_bytes(out, b)
    for i, r in enumerate(ranked):
        w = max(float(r["bytes"]), 0.0) / total
        place(r, x, x + w, 0, engine_tint(kind, i))
        x += w
    return _in_bytes(out, total)


#: How many 8pt characters fit across a whole icicle (its narrowest, ~500 px).
ICICLE_CHARS = 75


def fit_label(name: str, share: float, chars: int = ICICLE_CHARS) -> str:
    """``name`` as it fits a box ``share`` of the chart wide: whole, cut
    with an ellipsis, or nothing (never running into the next box)."""
    room = int(share * chars) - 1
    if room >= len(name):
        return name
    return name[: room - 1] + "\u2026" if room >= 4 else ""


def short_count(n: float) -> str:
    """1234 -> '1.2k', 2_500_000 -> '2.5M' (tick labels)."""
    for div, unit in ((1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.1f}".rstrip("0").rstrip(".") + unit
    return f"{n:.0f}"


def _in_bytes(out: dict, total: float) -> dict:
    out["x0"] = [x * total for x in out["x0"]]
    out["x1"] = [x * total for x in out["x1"]]
    return out


# -- lazy containers ------------------------------------------------------------
#: Columns of the lazy-container time series (one point per census).
LAZY_SERIES_COLUMNS = ("time", "held_mb", "eager_mb", "saved_mb", "saved_top_mb", "allocated",
                       "not_allocated", "empty_allocated", "shared")  # fmt: skip
#: Columns of the per-attribute bars (one row per container attribute).
LAZY_ATTR_COLUMNS = (
    "attribute", "allocated", "empty_allocated", "not_allocated",
    "shared", "held_bytes", "eager_bytes", "saved_bytes", "saved_drawn", "held_h", "saved_h",
)  # fmt: skip


def lazy_summary(census) -> tuple[dict, dict]:
    """(time-series point, per-attribute bars) of a :class:`Census`.

    "not allocated" is a task without a container of its own: ``None`` or a
    shared free singleton (``none + singleton``).
    """
    attrs: dict[str, list] = {c: [] for c in LAZY_ATTR_COLUMNS}
    tot = dict.fromkeys(("allocated", "not_allocated", "empty_allocated", "shared"), 0.0)
    held = eager = 0.0
    for a in census.attrs.values() if census is not None else ():
        not_alloc = float(a.none + a.singleton)
        attrs["attribute"].append(a.attr)
        attrs["allocated"].append(float(a.allocated))
        attrs["empty_allocated"].append(float(a.empty_allocated))
        attrs["not_allocated"].append(not_alloc)
        attrs["shared"].append(float(a.shared))
        attrs["held_bytes"].append(float(a.held_bytes))
        attrs["eager_bytes"].append(float(a.eager_bytes))
        attrs["saved_bytes"].append(float(a.saved_bytes))
        attrs["saved_drawn"].append(max(float(a.saved_bytes), 0.0))  # a bar can't be negative
        attrs["held_h"].append(fmt_bytes(a.held_bytes))
        attrs["saved_h"].append(fmt_bytes(a.saved_bytes))
        tot["allocated"] += a.allocated
        tot["not_allocated"] += not_alloc
        tot["empty_allocated"] += a.empty_allocated
        tot["shared"] += a.shared
        held += a.held_bytes
        eager += a.eager_bytes
    point = {
        "time": time.time() * 1000,
        "held_mb": held / 2**20,
        "eager_mb": eager / 2**20,
        "saved_mb": max(sum(attrs["saved_bytes"]), 0.0) / 2**20,
        # the top of the "saved" band: no band where eager sets would hold less
        "saved_top_mb": max(eager, held) / 2**20,
        **tot,
    }
    return point, attrs


def tree_table(trees: dict[str, dict], max_depth: int = 2, kinds: tuple = ("stock", "slim"),
               compare: bool = True) -> dict[str, list]:
    """The memory trees as one table, stock beside slim: per part of the
    scheduler's state (a tree node down to ``max_depth``, joined by path),
    bytes per task on each engine and the difference. The icicles' data-table
    alternative: the largest parts first, each followed by its own parts.

    ``trees``: kind -> :func:`icicle` columns (the nodes drawn). ``compare``:
    whether the trees are of one graph at one point; the difference column
    only then (one engine's tree of a delayed graph minus the other's of a
    dataframe says nothing)."""
    per: dict[str, dict[str, float]] = {}
    depth: dict[str, int] = {}
    for kind, data in trees.items():
        for path, d, bpt in zip(data.get("path", ()), data.get("depth", ()), data.get("bytes_per_task", ())):
            if 0 < d <= max_depth:
                per.setdefault(path, {})[kind] = float(bpt)
                depth[path] = int(d)

    def size(path: str) -> float:
        return max(per[path].values())

    def parent(path: str) -> str:
        return path.rsplit("/", 1)[0] if "/" in path else ""

    by_parent: dict[str, list[str]] = {}
    for path in per:
        p = parent(path)
        by_parent.setdefault(p if p in per else "", []).append(path)
    order: list[str] = []

    def walk(p: str) -> None:
        for path in sorted(by_parent.get(p, ()), key=lambda q: -size(q)):
            order.append(path)
            walk(path)

    walk("")
    out: dict[str, list] = {"part": []}
    for k in kinds:
        out[f"{k} B/task"] = []
    both = compare and all(k in trees for k in ("stock", "slim"))
    if both:
        out["stock - slim B/task"] = []
    for path in order:
        indent = "\u2003" * (depth[path] - 2) + "\u2514 " if depth[path] > 1 else ""  # (HTML keeps em spaces)
        out["part"].append(indent + path.rsplit("/", 1)[-1])
        for k in kinds:
            out[f"{k} B/task"].append(per[path].get(k))
        if both:
            # (a part one tree does not draw is too small to draw, or absent)
            out["stock - slim B/task"].append((per[path].get("stock") or 0.0) - (per[path].get("slim") or 0.0))
    return out
