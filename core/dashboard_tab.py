"""slimgraph's views, and a "slimgraph" tab in the scheduler's own dashboard.

This module holds everything the dashboard shows that does not need Panel:

- :class:`Views`: the Bokeh figures, each fed by a *named* ColumnDataSource
  (``sg-timing-<kind>``, ``sg-memory-<kind>``, ``sg-rss``, ``sg-lazy-<kind>``,
  ``sg-lazyattrs-<kind>``) so a browser test can read their data;
- feeds that read one scheduler: :class:`LocalFeed` (a scheduler object in this
  process, read on its own event loop) and :class:`ClientFeed` (a remote
  scheduler, read through a :class:`distributed.Client`);
- :class:`Refresher`: the periodic refresh that moves data from feeds into
  views without blocking a scheduler's event loop: new phase records are
  cheap (``History.since``), the memory tree is built by the incremental
  ``memory_tree_async`` on the scheduler's loop in a task of its own, and
  document updates are posted with ``add_next_tick_callback``;
- :func:`register`: adds the ``/slimgraph`` page (navbar tab) and three
  ``/individual-slimgraph-*`` pages to ``distributed.dashboard.scheduler``.
  The preload module ``slimgraph.distributed`` calls it on import; it is
  idempotent. Those pages are read-only (no workload launcher) and are plain
  Bokeh, so Panel is never imported into a scheduler for them. Because
  ``import panel`` replaces Bokeh's per-app URL handlers (which blanks dask's
  own tabs), :func:`register` also wraps ``connect`` so a scheduler whose
  dashboard is built in a process that imported Panel (the Panel app's
  embedded LocalCluster) still gets Bokeh's stock handlers;
- :func:`serverproxy` / :data:`DASHBOARD_DIR`: the ``jupyter_serverproxy_servers``
  entry point (a JupyterLab launcher tile running ``panel serve dashboard``).

Nothing here imports panel, and bokeh/distributed's dashboard are imported
lazily, so importing this module from a preload is cheap.
"""
from __future__ import annotations

import asyncio
import logging
import math
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

from slimgraph.instrument.records import PHASES

logger = logging.getLogger(__name__)

KINDS = ("stock", "slim")

#: Fixed phase colours, in :data:`slimgraph.instrument.records.PHASES` order.
PHASE_COLORS = dict(
    zip(
        PHASES,
        (
            "#1f77b4",  # deserialize
            "#aec7e8",  # materialize
            "#ff7f0e",  # cull
            "#ffbb78",  # lost_dependencies
            "#2ca02c",  # order
            "#98df8a",  # task_states
            "#d62728",  # annotations
            "#9467bd",  # priorities
            "#8c564b",  # who_wants
            "#e377c2",  # transitions
            "#7f7f7f",  # plugins
            "#17becf",  # commit
        ),
    )
)
#: What a timing bar stacks: the phases, then "other" (the rest of total_s
#: that the stock recorder attributes to no phase), light grey.
OTHER = "other"
STACK = (*PHASES, OTHER)
PHASE_COLORS[OTHER] = "#d9d9d9"
KIND_COLORS = {"stock": "#d62728", "slim": "#1f77b4"}

#: Where ``panel serve`` finds the app (``dashboard/main.py`` of the checkout).
DASHBOARD_DIR = Path(__file__).resolve().parent.parent / "dashboard"


class Unavailable(RuntimeError):
    """A measurement this scheduler (or this checkout) cannot provide."""


# ---------------------------------------------------------------------------
# The measurement API, resolved lazily (slimgraph.instrument is optional here)
# ---------------------------------------------------------------------------


def _import(name: str):
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as e:  # pragma: no cover - depends on the checkout
        raise Unavailable(f"{name} is not importable ({e})") from e


def scheduler_kind(scheduler) -> str:
    """``"slim"`` for a SlimScheduler (or a slim engine), else ``"stock"``."""
    for cls in type(scheduler).__mro__:
        if "slim" in cls.__qualname__.lower():
            return "slim"
    return "stock"


def get_history(scheduler):
    """The scheduler's phase history, attaching the recorder if needed."""
    recorder = _import("slimgraph.instrument.recorder")
    return recorder.get_history(scheduler)


def ensure_recording(scheduler) -> None:
    """Hook the scheduler's update_graph so it records (idempotent).

    Stock schedulers get their phases timed from outside; slim ones record
    their own and only get the update_graph hook (memray capture). Call on
    the scheduler's event loop thread.
    """
    try:
        stock = _import("slimgraph.instrument.stock")
    except Unavailable:
        return
    try:
        stock.install(scheduler)
    except Exception:  # pragma: no cover
        logger.exception("slimgraph: could not hook update_graph")


def record_to_dict(rec) -> dict:
    if isinstance(rec, dict):
        return rec
    if hasattr(rec, "to_dict"):
        return rec.to_dict()
    from dataclasses import asdict

    return asdict(rec)


def records_since_sync(scheduler, submission_id: int) -> list[dict]:
    return [record_to_dict(r) for r in get_history(scheduler).since(submission_id)]


def frame_to_records(frame) -> list[dict]:
    if frame is None:
        return []
    if hasattr(frame, "to_dict"):
        return frame.to_dict(orient="records")
    return list(frame)


#: Longest slice of scheduler-loop time a walk may take (the target for a
#: whole refresh is 50 ms; GC pauses and one walk step come on top).
SLICE_S = 0.01

#: Above this many tasks the memory tree walks a random sample of
#: ``MEMORY_SAMPLE`` tasks and scales the per-task nodes (within ~5 %, see
#: slimgraph.instrument.memory): a dashboard refresh must stay cheap at 1M tasks.
MEMORY_SAMPLE = 2000


def tree_rows(tree) -> list[dict]:
    """MemoryTree -> rows (path, parent, name, bytes, count, bytes_per_task),
    without pandas (cheap enough to run on a scheduler's loop)."""
    root = getattr(tree, "root", None)
    if root is None:
        return frame_to_records(tree.to_frame())
    nt = max(int(getattr(tree, "ntasks", 0) or 0), 1)
    rows: list[dict] = []

    def rec(node, parent):
        tb = node.total_bytes
        rows.append({"path": node.path, "parent": parent, "name": node.name, "bytes": tb,
                     "count": node.total_count, "bytes_per_task": tb / nt})  # fmt: skip
        for c in node.children.values():
            rec(c, node.path)

    rec(root, None)
    if rows:
        rows[0]["ntasks"] = int(getattr(tree, "ntasks", 0) or 0)
        rows[0]["sample"] = getattr(tree, "sample", None)
    return rows


async def memory_rows_async(scheduler, sample: int | None = MEMORY_SAMPLE) -> list[dict]:
    """Memory tree rows, built incrementally on the scheduler's own loop."""
    memory = _import("slimgraph.instrument.memory")
    fn = getattr(memory, "memory_tree_async", None)
    if fn is None:
        raise Unavailable("slimgraph.instrument.memory.memory_tree_async is missing")
    if sample is not None and len(scheduler.tasks) <= sample:
        sample = None
    tree = await fn(scheduler, sample=sample, budget_s=SLICE_S)
    return tree_rows(tree)


def _census_rows(result) -> list[dict]:
    """Normalize a census result to one dict per container attribute."""
    if result is None:
        return []
    if hasattr(result, "to_records") and not hasattr(result, "columns"):
        result = result.to_records()
    if hasattr(result, "to_frame"):
        result = result.to_frame()
    if hasattr(result, "to_dict") and hasattr(result, "columns"):
        rows = result.reset_index().to_dict(orient="records")
    elif isinstance(result, dict):
        rows = []
        for attr, v in result.items():
            d = record_to_dict(v) if not isinstance(v, (int, float)) else {"value": v}
            rows.append({"attribute": attr, **d})
    else:
        rows = [record_to_dict(r) for r in result]
    out = []
    for r in rows:
        attr = r.get("attribute") or r.get("attr") or r.get("name") or r.get("index")
        out.append({**r, "attribute": str(attr)})
    return out


async def census_rows_async(scheduler) -> list[dict]:
    lazysets = _import("slimgraph.instrument.lazysets")
    fn = getattr(lazysets, "census_async", None)
    if fn is not None:
        return _census_rows(await fn(scheduler, budget_s=SLICE_S))
    return _census_rows(lazysets.census(scheduler))


def progress_counts(scheduler) -> dict:
    """Task counts by state, summed over task groups (cheap: O(groups))."""
    counts: dict[str, int] = {}
    for tg in list(scheduler.task_groups.values()):
        for state, n in tg.states.items():
            counts[state] = counts.get(state, 0) + n
    # every task the live groups ever held, including those already
    # forgotten after their results were delivered
    counts["total"] = sum(counts.values())
    return counts


def rss_bytes() -> int:
    import psutil

    return psutil.Process(os.getpid()).memory_info().rss


def _remote_info(dask_scheduler=None):
    return {"kind": scheduler_kind(dask_scheduler), "rss": rss_bytes()}


def _remote_records(submission_id, dask_scheduler=None):
    ensure_recording(dask_scheduler)
    return records_since_sync(dask_scheduler, submission_id)


async def _remote_memory(dask_scheduler=None):
    return await memory_rows_async(dask_scheduler)


async def _remote_census(dask_scheduler=None):
    return await census_rows_async(dask_scheduler)


# -- run on a scheduler (``run_on_scheduler``): they live in this installed
# module, so a remote scheduler can unpickle them ---------------------------


def remote_latest_record(dask_scheduler=None) -> dict | None:
    rec = get_history(dask_scheduler).latest()
    if rec is None:
        return None
    return {
        "submission_id": rec.submission_id,
        "status": rec.status,
        "total_s": rec.total_s,
        "tasks": rec.tasks,
        "error": rec.error,
    }


def remote_progress(dask_scheduler=None) -> dict:
    return progress_counts(dask_scheduler)


def remote_memray_arm(directory: str | None, dask_scheduler=None) -> str:
    from slimgraph.instrument import memray_capture

    cap = memray_capture.arm(dask_scheduler, directory=directory)
    return str(getattr(cap, "path", cap))


async def remote_memray_result(path: str, dask_scheduler=None) -> dict | None:
    """The finished capture whose file is ``path``: summary + flamegraph HTML.

    Reading the capture and writing the flamegraph (a ``memray flamegraph``
    subprocess) take seconds: they run in a thread, never on the loop.
    """
    import asyncio

    from slimgraph.instrument.recorder import get_extension

    ext = get_extension(dask_scheduler)
    cap = None
    for c in reversed(list(ext.memray_done)):
        if str(getattr(c, "path", "")) == path:
            cap = c
            break
    if cap is None:
        return None  # not run yet
    loop = asyncio.get_running_loop()
    summary = await loop.run_in_executor(None, lambda: cap.summary(top=10, flamegraph=True))
    d = summary.to_dict() if hasattr(summary, "to_dict") else dict(summary)
    html = None
    fg = d.get("flamegraph")
    if isinstance(fg, str) and fg.endswith(".html"):
        def read():
            with open(fg, encoding="utf-8") as f:
                return f.read()

        try:
            html = await loop.run_in_executor(None, read)
        except OSError:
            html = None
    return {
        "error": d.get("error"),
        "peak_bytes": d.get("peak_bytes"),
        "total_allocations": d.get("total_allocations"),
        "html": html,
    }


def remote_set_lazy(flag: bool, dask_scheduler=None) -> bool:
    """``slimgraph.lazy-containers`` for the next submissions: the config
    (global in the scheduler's process) and, since a SlimScheduler reads it
    once at start, its ``slim_lazy`` attribute."""
    import dask.config

    dask.config.set({"slimgraph.lazy-containers": bool(flag)})
    if dask_scheduler is not None and hasattr(dask_scheduler, "slim_lazy"):
        dask_scheduler.slim_lazy = bool(flag)
    from slimgraph import config as _sgconfig

    return _sgconfig.get("lazy-containers")


#: RPC handlers :func:`remote_setup` registers, so that what the app polls
#: every second from a remote scheduler (RSS, progress, the latest record) is
#: a plain RPC, not ``run_on_scheduler`` (which logs a line per call).
RPC_HANDLERS = {
    "slimgraph_dash_info": "_remote_info",
    "slimgraph_dash_progress": "remote_progress",
    "slimgraph_dash_latest": "remote_latest_record",
}


def _handler(scheduler, fn):
    def handler():
        return fn(dask_scheduler=scheduler)

    handler.__name__ = fn.__name__
    return handler


def remote_setup(dask_scheduler=None) -> dict:
    """Once per scheduler the app reads: record phases, add the RPC handlers."""
    ensure_recording(dask_scheduler)
    handlers = getattr(dask_scheduler, "handlers", None)
    if isinstance(handlers, dict):
        for name, fn_name in RPC_HANDLERS.items():
            handlers.setdefault(name, _handler(dask_scheduler, globals()[fn_name]))
    return {"kind": scheduler_kind(dask_scheduler), "rss": rss_bytes()}


def rpc_name(fn) -> str | None:
    """The RPC handler name standing for ``fn`` (see :data:`RPC_HANDLERS`)."""
    for name, fn_name in RPC_HANDLERS.items():
        if getattr(fn, "__name__", None) == fn_name and globals().get(fn_name) is fn:
            return name
    return None


def client_rpc(client, name: str, **kwargs):
    """Call a scheduler RPC handler from a synchronous or asynchronous client."""
    method = getattr(client.scheduler, name)
    if client.asynchronous:
        return method(**kwargs)
    return client.sync(method, **kwargs)


# ---------------------------------------------------------------------------
# Feeds: one scheduler each
# ---------------------------------------------------------------------------


class LocalFeed:
    """A scheduler object in this process.

    Everything that walks scheduler state runs *on the scheduler's event loop*
    (hopping threads when the caller runs elsewhere, as the Panel app does with
    an embedded LocalCluster), so it never races with update_graph, and the
    walks that can be long are the incremental async ones.
    """

    remote = False

    def __init__(self, scheduler, kind: str | None = None):
        self.scheduler = scheduler
        self.kind = kind or scheduler_kind(scheduler)

    async def _on_loop(self, fn: Callable, *args):
        loop = self.scheduler.loop.asyncio_loop
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover
            here = None

        async def run():
            out = fn(*args)
            if asyncio.iscoroutine(out):
                out = await out
            return out

        if here is loop:
            return await run()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), loop))

    async def records_since(self, submission_id: int) -> list[dict]:
        # History is thread-safe and since() is O(history): no loop hop needed.
        return records_since_sync(self.scheduler, submission_id)

    async def memory_rows(self) -> list[dict]:
        return await self._on_loop(memory_rows_async, self.scheduler)

    async def census_rows(self) -> list[dict]:
        return await self._on_loop(census_rows_async, self.scheduler)

    async def progress(self) -> dict:
        return await self._on_loop(progress_counts, self.scheduler)

    async def rss(self) -> int:
        return rss_bytes()


class ClientFeed:
    """A remote scheduler, read through a Client (asynchronous or not).

    Uses :mod:`slimgraph.instrument.client` getters when they exist, else runs
    the same functions on the scheduler with ``run_on_scheduler``.
    """

    remote = True

    def __init__(self, client, kind: str | None = None):
        self.client = client
        self.kind = kind or "stock"
        try:
            self._helpers = _import("slimgraph.instrument.client")
        except Unavailable:
            self._helpers = None

    async def _call(self, fn, *args):
        c = self.client
        if c.asynchronous:
            return await c.run_on_scheduler(fn, *args)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, partial(c.run_on_scheduler, fn, *args))

    async def _helper(self, names: tuple[str, ...], *args, **kwargs):
        h = self._helpers
        for name in names:
            fn = getattr(h, name, None) if h is not None else None
            if fn is None:
                continue
            if self.client.asynchronous:
                out = fn(self.client, *args, **kwargs)
                return await out if asyncio.iscoroutine(out) else out
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, partial(fn, self.client, *args, **kwargs))
        raise LookupError

    async def detect_kind(self) -> str:
        info = await self._call(_remote_info)
        self.kind = info["kind"]
        return self.kind

    async def records_since(self, submission_id: int) -> list[dict]:
        try:
            recs = await self._helper(("get_submissions",), since=submission_id)
        except LookupError:
            return await self._call(_remote_records, submission_id)
        return [record_to_dict(r) for r in recs]

    async def memory_rows(self) -> list[dict]:
        try:
            tree = await self._helper(("get_memory_tree",), sample=MEMORY_SAMPLE, budget_s=SLICE_S)
        except LookupError:
            return await self._call(_remote_memory)
        return tree_rows(tree)

    async def census_rows(self) -> list[dict]:
        try:
            return _census_rows(await self._helper(("get_lazysets",)))
        except LookupError:
            return await self._call(_remote_census)

    async def _rpc_or_run(self, fn):
        name = rpc_name(fn)
        if name is not None:
            try:
                if self.client.asynchronous:
                    return await client_rpc(self.client, name)
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(None, partial(client_rpc, self.client, name))
            except Exception:  # noqa: BLE001 - no such handler: remote_setup was not run
                pass
        return await self._call(fn)

    async def progress(self) -> dict:
        return await self._rpc_or_run(remote_progress)

    async def rss(self) -> int:
        return (await self._rpc_or_run(_remote_info))["rss"]


# ---------------------------------------------------------------------------
# Pure data transforms (tested without a browser)
# ---------------------------------------------------------------------------


def timing_row(rec: dict, x: int) -> dict:
    tasks = int(rec.get("tasks") or 0)
    secs = {p["name"]: float(p.get("wall_s") or 0.0) for p in rec.get("phases") or ()}
    row: dict[str, Any] = {
        "x": x,
        "submission_id": int(rec.get("submission_id") or 0),
        "tasks": tasks,
        "total_s": float(rec.get("total_s") or sum(secs.values())),
        "status": str(rec.get("status") or ""),
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


def fmt_bytes(n: float) -> str:
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


_TREE_COLORS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip

TREE_COLUMNS = (
    "x0", "x1", "y0", "y1", "name", "path", "bytes", "count",
    "bytes_per_task", "bytes_h", "color", "label", "depth",
)  # fmt: skip


def icicle(rows: list[dict], max_depth: int = 6, min_fraction: float = 0.002) -> dict:
    """Lay a memory tree out as an icicle: x is the share of bytes, y the depth.

    ``rows`` carry path, parent, name, bytes, count, bytes_per_task. Children
    are placed left to right inside their parent's span, each as wide as its
    share of the parent's bytes; nodes narrower than ``min_fraction`` of the
    total, or deeper than ``max_depth``, are not drawn.
    """
    out: dict[str, list] = {c: [] for c in TREE_COLUMNS}
    if not rows:
        return out
    by_path = {str(r["path"]): r for r in rows}
    children: dict[str | None, list[dict]] = {}
    for r in rows:
        parent = r.get("parent")
        parent = None if parent in (None, "") or (isinstance(parent, float) and math.isnan(parent)) else str(parent)
        if parent is not None and parent not in by_path:
            parent = None
        children.setdefault(parent, []).append(r)
    roots = children.get(None, [])
    total = float(sum(max(float(r.get("bytes") or 0), 0.0) for r in roots)) or 1.0

    def place(node, x0, x1, depth, color, recurse=True):
        width = x1 - x0
        if depth > max_depth or width < min_fraction:
            return
        b = float(node.get("bytes") or 0)
        count = node.get("count")
        bpt = node.get("bytes_per_task")
        out["x0"].append(x0)
        out["x1"].append(x1)
        out["y0"].append(-depth - 1)
        out["y1"].append(-depth)
        out["depth"].append(depth)
        out["name"].append(str(node.get("name")))
        out["path"].append(str(node["path"]))
        out["bytes"].append(b)
        out["count"].append(float(count) if count is not None else float("nan"))
        out["bytes_per_task"].append(float(bpt) if bpt is not None else float("nan"))
        out["bytes_h"].append(fmt_bytes(b))
        out["color"].append(color)
        out["label"].append(str(node.get("name")) if width > 0.06 else "")
        kids = sorted(children.get(str(node["path"]), []), key=lambda r: -float(r.get("bytes") or 0))
        if b <= 0 or not recurse:
            return
        x = x0
        for kid in kids:
            w = width * max(float(kid.get("bytes") or 0), 0.0) / b
            w = min(w, x1 - x)
            place(kid, x, x + w, depth + 1, color)
            x += w

    x = 0.0
    ranked = sorted(roots, key=lambda r: -float(r.get("bytes") or 0))
    if len(ranked) == 1:
        # One root ("state"): draw it grey and colour its branches instead.
        root = ranked[0]
        b = float(root.get("bytes") or 0)
        place(root, 0.0, 1.0, 0, "#bdbdbd", recurse=False)
        kids = sorted(children.get(str(root["path"]), []), key=lambda r: -float(r.get("bytes") or 0))
        for i, kid in enumerate(kids):
            w = max(float(kid.get("bytes") or 0), 0.0) / (b or 1.0)
            w = min(w, 1.0 - x)
            place(kid, x, x + w, 1, _TREE_COLORS[i % len(_TREE_COLORS)])
            x += w
        return out
    for i, r in enumerate(ranked):
        w = max(float(r.get("bytes") or 0), 0.0) / total
        place(r, x, x + w, 0, _TREE_COLORS[i % len(_TREE_COLORS)])
        x += w
    return out


def _num(r: dict, *names: str) -> float:
    for n in names:
        v = r.get(n)
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            try:
                return float(v)
            except (TypeError, ValueError):
                continue
    return 0.0


def lazy_summary(rows: list[dict]) -> tuple[dict, dict]:
    """(time-series point, per-attribute bars) from census rows."""
    attrs: dict[str, list] = {
        c: []
        for c in (
            "attribute", "allocated", "empty_allocated", "not_allocated",
            "shared", "held_bytes", "eager_bytes", "saved_bytes", "held_h", "saved_h",
        )
    }  # fmt: skip
    tot = dict.fromkeys(("allocated", "not_allocated", "empty_allocated", "shared"), 0.0)
    held = eager = 0.0
    for r in rows:
        alloc = _num(r, "allocated", "n_allocated")
        empty = _num(r, "empty_allocated", "empty_but_allocated", "allocated_empty", "empty")
        shared = _num(r, "shared", "n_shared")
        h = _num(r, "bytes_held", "held_bytes", "bytes", "nbytes")
        e = _num(r, "eager_bytes", "bytes_eager", "eager")
        tasks = _num(r, "tasks", "total", "n_tasks")
        not_alloc = _num(r, "not_allocated", "unallocated", "missing")
        if not not_alloc and ("none" in r or "singleton" in r):
            not_alloc = _num(r, "none") + _num(r, "singleton")
        elif not not_alloc and tasks:
            not_alloc = max(tasks - alloc, 0.0)
        saved = _num(r, "bytes_saved", "saved_bytes", "saved") or max(e - h, 0.0)
        attrs["attribute"].append(r["attribute"])
        attrs["allocated"].append(alloc)
        attrs["empty_allocated"].append(empty)
        attrs["not_allocated"].append(not_alloc)
        attrs["shared"].append(shared)
        attrs["held_bytes"].append(h)
        attrs["eager_bytes"].append(e)
        attrs["saved_bytes"].append(saved)
        attrs["held_h"].append(fmt_bytes(h))
        attrs["saved_h"].append(fmt_bytes(saved))
        tot["allocated"] += alloc
        tot["not_allocated"] += not_alloc
        tot["empty_allocated"] += empty
        tot["shared"] += shared
        held += h
        eager += e
    point = {
        "time": time.time() * 1000,
        "held_mb": held / 2**20,
        "eager_mb": eager / 2**20,
        "saved_mb": max(sum(attrs["saved_bytes"]), 0.0) / 2**20,
        **tot,
    }
    return point, attrs


# ---------------------------------------------------------------------------
# Views: Bokeh figures with named sources
# ---------------------------------------------------------------------------


def _time_formatter():
    from bokeh.models import DatetimeTickFormatter

    return DatetimeTickFormatter(
        milliseconds="%H:%M:%S.%3N", seconds="%H:%M:%S", minsec="%H:%M:%S",
        minutes="%H:%M", hourmin="%H:%M", hours="%H:%M",
    )  # fmt: skip


class Views:
    """The figures for one or more scheduler kinds.

    ``sizing_mode``/``width`` apply to every figure. Each source is named so a
    test (or a user with the browser console) can read it:
    ``Bokeh.documents[0].get_model_by_name("sg-timing-stock").data``.
    """

    def __init__(self, kinds=KINDS, width: int = 560, sizing_mode: str | None = None):
        from bokeh.models import ColumnDataSource, Div

        self.kinds = tuple(kinds)
        self.width = width
        self.sizing_mode = sizing_mode
        self.timing_sources = {}
        self.timing_figs = {}
        self.tree_sources = {}
        self.tree_figs = {}
        self.lazy_sources = {}
        self.lazyattr_sources = {}
        self.lazy_figs = {}
        self.lazyattr_figs = {}
        self.notes: dict[str, Any] = {}
        for kind in self.kinds:
            self.timing_sources[kind] = ColumnDataSource(empty_timing(), name=f"sg-timing-{kind}")
            self.tree_sources[kind] = ColumnDataSource(
                {c: [] for c in TREE_COLUMNS}, name=f"sg-memory-{kind}"
            )
            self.lazy_sources[kind] = ColumnDataSource(
                {c: [] for c in ("time", "held_mb", "eager_mb", "saved_mb", "allocated",
                                 "not_allocated", "empty_allocated", "shared")},
                name=f"sg-lazy-{kind}",
            )  # fmt: skip
            _, attrs = lazy_summary([])
            self.lazyattr_sources[kind] = ColumnDataSource(attrs, name=f"sg-lazyattrs-{kind}")
            self.notes[kind] = Div(text="", name=f"sg-note-{kind}", styles={"color": "#666"})
        rss_cols = {"time": []}
        for kind in self.kinds:
            rss_cols[f"{kind}_mb"] = []
        self.rss_source = ColumnDataSource(rss_cols, name="sg-rss")
        self.status = Div(text="", name="sg-status")
        self._build()

    def _fig(self, **kw):
        from bokeh.plotting import figure

        kw.setdefault("height", 300)
        if self.sizing_mode:
            kw["sizing_mode"] = self.sizing_mode
        else:
            kw.setdefault("width", self.width)
        kw.setdefault("toolbar_location", "above")
        kw.setdefault("tools", "pan,wheel_zoom,box_zoom,reset,save")
        return figure(**kw)

    def _build(self) -> None:
        from bokeh.models import DatetimeTickFormatter, HoverTool, Legend, LegendItem, NumeralTickFormatter, Range1d

        shared_y = None
        for kind in self.kinds:
            kw = {"y_range": shared_y} if shared_y is not None else {}
            fig = self._fig(
                title=f"update_graph phases: {kind}",
                x_axis_label="submission",
                y_axis_label="seconds",
                **kw,
            )
            if shared_y is None:
                shared_y = fig.y_range
            renderers = fig.vbar_stack(
                list(STACK),
                x="x",
                width=0.8,
                source=self.timing_sources[kind],
                color=[PHASE_COLORS[p] for p in STACK],
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
            self.timing_figs[kind] = fig

            tree = self._fig(
                title=f"scheduler memory by object: {kind}",
                x_range=Range1d(0, 1),
                tools="xwheel_zoom,xpan,reset,save",
                height=260,
            )
            q = tree.quad(
                left="x0", right="x1", bottom="y0", top="y1",
                source=self.tree_sources[kind], fill_color="color",
                line_color="white", fill_alpha=0.8,
            )  # fmt: skip
            tree.text(
                x="x0", y="y0", text="label", source=self.tree_sources[kind],
                x_offset=3, y_offset=-3, text_font_size="8pt", text_baseline="bottom",
            )  # fmt: skip
            tree.add_tools(
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
            tree.axis.visible = False
            tree.grid.visible = False
            self.tree_figs[kind] = tree

            lazy = self._fig(
                title=f"lazy containers over time: {kind}",
                x_axis_type="datetime",
                y_axis_label="MiB",
                height=260,
            )
            src = self.lazy_sources[kind]
            r1 = lazy.line("time", "saved_mb", source=src, color="#2ca02c", line_width=2)
            r2 = lazy.line("time", "held_mb", source=src, color="#1f77b4", line_width=2)
            r3 = lazy.line("time", "eager_mb", source=src, color="#7f7f7f", line_dash="dashed")
            lazy.add_layout(
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
            lazy.add_tools(
                HoverTool(
                    renderers=[r1],
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
            lazy.xaxis.formatter = _time_formatter()
            self.lazy_figs[kind] = lazy

            bars = self._fig(
                title=f"containers per attribute (now): {kind}",
                y_range=[],
                x_axis_label="containers",
                height=260,
            )
            asrc = self.lazyattr_sources[kind]
            rs = bars.hbar_stack(
                ["allocated", "not_allocated"],
                y="attribute",
                height=0.7,
                source=asrc,
                color=["#1f77b4", "#c7c7c7"],
            )
            bars.add_layout(
                Legend(
                    items=[
                        LegendItem(label="allocated", renderers=[rs[0]]),
                        LegendItem(label="not allocated", renderers=[rs[1]]),
                    ],
                    label_text_font_size="8pt",
                ),
                "right",
            )
            bars.add_tools(
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
            bars.xaxis.formatter = NumeralTickFormatter(format="0a")
            self.lazyattr_figs[kind] = bars

        rss = self._fig(
            title="scheduler process RSS", x_axis_type="datetime", y_axis_label="MiB", height=220
        )
        for kind in self.kinds:
            rss.line(
                "time", f"{kind}_mb", source=self.rss_source, color=KIND_COLORS.get(kind, "black"),
                line_width=2, legend_label=kind,
            )  # fmt: skip
        rss.legend.location = "top_left"
        rss.xaxis.formatter = _time_formatter()
        rss.add_tools(HoverTool(tooltips=[(k, f"@{k}_mb{{0.0}} MiB") for k in self.kinds]))
        self.rss_fig = rss

    # -- layouts -----------------------------------------------------------

    def timing_layout(self):
        from bokeh.layouts import row

        return row(*[self.timing_figs[k] for k in self.kinds], sizing_mode=self.sizing_mode)

    def memory_layout(self):
        from bokeh.layouts import column, row

        return column(
            row(*[self.tree_figs[k] for k in self.kinds], sizing_mode=self.sizing_mode),
            self.rss_fig,
            sizing_mode=self.sizing_mode,
        )

    def lazy_layout(self):
        from bokeh.layouts import column, row

        return row(
            *[column(self.lazy_figs[k], self.lazyattr_figs[k], self.notes[k]) for k in self.kinds],
            sizing_mode=self.sizing_mode,
        )

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


# ---------------------------------------------------------------------------
# Refresher: feeds -> views, never blocking a scheduler's loop
# ---------------------------------------------------------------------------


class Refresher:
    """Moves data from feeds into views.

    ``tick()`` is called periodically on the document's loop. Fast data (new
    records, RSS) is fetched every tick; the memory tree and the container
    census are fetched every ``slow_interval`` seconds, each in a task of its
    own that never overlaps with itself. Results are applied to the document
    in next-tick callbacks.
    """

    def __init__(self, views: Views, feeds: dict, doc, slow_interval: float = 2.0,
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
        self.last_progress: dict[str, dict] = {}

    def set_feed(self, kind: str, feed) -> None:
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
            await self._fast()
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

    async def _fast(self) -> None:
        rss_point: dict[str, float] = {"time": time.time() * 1000}
        any_rss = False
        for kind in self.views.kinds:
            feed = self.feeds.get(kind)
            rss_point[f"{kind}_mb"] = float("nan")
            if feed is None:
                continue
            try:
                recs = await feed.records_since(self._cursor[kind])
                self._note(kind, "phases", None)
            except Unavailable as e:
                self._note(kind, "phases", e)
                recs = []
            except Exception as e:  # noqa: BLE001  (a closed scheduler, ...)
                self._note(kind, "phases", repr(e))
                recs = []
            new = []
            for rec in sorted(recs, key=lambda r: r.get("submission_id", 0)):
                sid = rec.get("submission_id", 0)
                if sid in self._seen[kind]:
                    continue
                if rec.get("status") == "running":
                    break  # wait for it; keep the cursor before it
                self._seen[kind].add(sid)
                self._cursor[kind] = max(self._cursor[kind], sid)
                self._x[kind] += 1
                new.append(timing_row(rec, self._x[kind]))
            if new:
                cols = {c: [r[c] for r in new] for c in new[0]}
                self._post(self.views.timing_sources[kind].stream, cols, self.rollover)
            try:
                rss_point[f"{kind}_mb"] = (await feed.rss()) / 2**20
                any_rss = True
            except Exception:  # noqa: BLE001
                pass
        if any_rss:
            self._post(self.views.rss_source.stream, {k: [v] for k, v in rss_point.items()}, 2000)

    async def _slow(self, kind: str) -> None:
        t0 = time.monotonic()
        try:
            await self._slow_walks(kind)
        finally:
            self._slow_took[kind] = time.monotonic() - t0

    async def _slow_walks(self, kind: str) -> None:
        feed = self.feeds.get(kind)
        if feed is None:
            return
        # the census first: it is the time series that must catch a running graph
        try:
            rows = await feed.census_rows()
            self._note(kind, "lazy sets", None)
            point, attrs = lazy_summary(rows)
            self._ntasks[kind] = int(max((_num(r, "tasks", "ntasks") for r in rows), default=0))
            self._post(self._set_lazy, kind, point, attrs)
        except Exception as e:  # noqa: BLE001
            self._note(kind, "lazy sets", e if isinstance(e, Unavailable) else repr(e))
        try:
            rows = await feed.memory_rows()
            self._note(kind, "memory", None)
            meta = rows[0] if rows else {}
            self._post(self._set_tree, kind, icicle(rows), meta.get("ntasks"), meta.get("sample"))
        except Exception as e:  # noqa: BLE001
            self._note(kind, "memory", e if isinstance(e, Unavailable) else repr(e))

    def _set_tree(self, kind: str, data: dict, ntasks: int | None = None,
                  sample: int | None = None) -> None:  # fmt: skip
        self.views.tree_sources[kind].data = data
        if ntasks is not None:
            how = f"{sample:,} of {ntasks:,} tasks sampled" if sample else f"{ntasks:,} tasks"
            title = f"scheduler memory by object: {kind} ({how})"
            fig = self.views.tree_figs[kind]
            if fig.title.text != title:
                fig.title.text = title

    def _set_lazy(self, kind: str, point: dict, attrs: dict) -> None:
        self.views.lazy_sources[kind].stream({k: [v] for k, v in point.items()}, 2000)
        fig = self.views.lazyattr_figs[kind]
        if list(fig.y_range.factors) != list(attrs["attribute"]):
            fig.y_range.factors = list(attrs["attribute"])
        self.views.lazyattr_sources[kind].data = attrs

    def stop(self) -> None:
        for task in self._slow_tasks.values():
            if not task.done():
                task.cancel()


# ---------------------------------------------------------------------------
# Pages inside the scheduler's dashboard (read-only, plain Bokeh)
# ---------------------------------------------------------------------------

TAB = "slimgraph"
INDIVIDUAL = {
    "/individual-slimgraph-timing": "timing_layout",
    "/individual-slimgraph-memory": "memory_layout",
    "/individual-slimgraph-lazy-sets": "lazy_layout",
}
REFRESH_MS = 1000


def _attach(scheduler, doc, views: Views) -> Refresher:
    kind = views.kinds[0]
    ensure_recording(scheduler)  # document callbacks run on the scheduler's loop
    refresher = Refresher(views, {kind: LocalFeed(scheduler, kind)}, doc)
    doc.add_periodic_callback(refresher.tick, REFRESH_MS)

    def on_destroy(session_context):
        refresher.stop()

    doc.on_session_destroyed(on_destroy)
    return refresher


def slimgraph_doc(scheduler, extra, doc):
    """The ``/slimgraph`` navbar page."""
    try:
        from distributed.dashboard.components.scheduler import BOKEH_THEME, env

        kind = scheduler_kind(scheduler)
        views = Views(kinds=(kind,), width=640)
        views.status.text = (
            f"<b>slimgraph</b>: {kind} scheduler; phases, memory and lazy containers, "
            f"refreshed every {REFRESH_MS // 1000} s."
        )
        _attach(scheduler, doc, views)
        doc.add_root(views.layout())
        doc.title = "Dask: slimgraph"
        doc.template = env.get_template("simple.html")
        doc.template_variables.update(extra)
        doc.theme = BOKEH_THEME
    except Exception:  # pragma: no cover - shown in the scheduler's log
        logger.exception("slimgraph dashboard page failed")
        raise


def individual_slimgraph_doc(which: str, scheduler, extra, doc):
    from distributed.dashboard.components.scheduler import BOKEH_THEME

    kind = scheduler_kind(scheduler)
    views = Views(kinds=(kind,), sizing_mode="stretch_width")
    _attach(scheduler, doc, views)
    doc.add_root(getattr(views, which)())
    doc.title = f"Dask: slimgraph {which.split('_')[0]}"
    doc.theme = BOKEH_THEME


def _stock_bokeh_patterns():
    from bokeh.server.views.autoload_js_handler import AutoloadJsHandler
    from bokeh.server.views.doc_handler import DocHandler
    from bokeh.server.views.metadata_handler import MetadataHandler
    from bokeh.server.views.ws import WSHandler

    return [
        (r"/?", DocHandler),
        (r"/ws", WSHandler),
        (r"/metadata", MetadataHandler),
        (r"/autoload.js", AutoloadJsHandler),
    ]


def _wrap_connect(connect):
    if getattr(connect, "_slimgraph", False):
        return connect

    def connect_with_stock_bokeh(*args, **kwargs):
        # ``import panel`` replaces bokeh's per-app handlers in place; dask's
        # pages need bokeh's own, so build the dashboard with those.
        from bokeh.server import urls

        saved = list(urls.per_app_patterns)
        urls.per_app_patterns[:] = _stock_bokeh_patterns()
        try:
            return connect(*args, **kwargs)
        finally:
            urls.per_app_patterns[:] = saved

    connect_with_stock_bokeh._slimgraph = True  # type: ignore[attr-defined]
    connect_with_stock_bokeh.__wrapped__ = connect  # type: ignore[attr-defined]
    return connect_with_stock_bokeh


def _wrap_template_variables(template_variables):
    if getattr(template_variables, "_slimgraph", False):
        return template_variables

    def with_slimgraph(scheduler):
        tv = template_variables(scheduler)  # memoized per scheduler: edit in place, once
        pages = tv.setdefault("pages", [])
        if TAB not in pages:
            pos = pages.index("info") if "info" in pages else len(pages)
            pages.insert(pos, TAB)
        plots = tv.setdefault("plots", [])
        urls = {p["url"] for p in plots}
        for path in INDIVIDUAL:
            url = path.strip("/")
            if url not in urls:
                plots.append({"url": url, "name": " ".join(url.split("-")[1:]).title()})
        plots.sort(key=lambda d: d["name"])
        return tv

    with_slimgraph._slimgraph = True  # type: ignore[attr-defined]
    with_slimgraph.__wrapped__ = template_variables  # type: ignore[attr-defined]
    return with_slimgraph


def _pages() -> dict:
    pages = {"/" + TAB: slimgraph_doc}
    for path, which in INDIVIDUAL.items():
        pages[path] = partial(individual_slimgraph_doc, which)
    return pages


def register() -> None:
    """Add slimgraph's pages to scheduler dashboards (idempotent).

    Dashboards built from now on get them through
    ``distributed.dashboard.scheduler.applications`` (call this before the
    Scheduler starts: a preload module's *import* is early enough; its
    ``dask_setup`` is not, it runs after the dashboard is built). Schedulers in
    this process whose dashboard already exists get the pages added late: a
    navbar tab and working pages, but not listed in ``/individual-plots.json``
    (dask-labextension reads only the first Bokeh application).
    """
    import distributed.dashboard.scheduler as ds

    for path, fn in _pages().items():
        ds.applications.setdefault(path, fn)
    ds.template_variables = _wrap_template_variables(ds.template_variables)
    ds.connect = _wrap_connect(ds.connect)

    from distributed import Scheduler

    for scheduler in list(Scheduler._instances):
        _add_late_soon(scheduler)


def _add_late_soon(scheduler) -> None:
    loop = getattr(getattr(scheduler, "loop", None), "asyncio_loop", None)
    try:
        here = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    if loop is None or here is loop:
        _add_late(scheduler)
    elif loop.is_running() and not loop.is_closed():
        loop.call_soon_threadsafe(_add_late, scheduler)


def _add_late(scheduler) -> bool:
    """Serve slimgraph's pages from a scheduler whose dashboard is built."""
    if getattr(scheduler, "_slimgraph_pages", False):
        return False
    app = getattr(scheduler, "http_application", None)
    if app is None or getattr(scheduler, "status", None) is None:
        return False
    try:
        from bokeh.server.tornado import BokehTornado
        from tornado.ioloop import IOLoop

        import distributed.dashboard.scheduler as ds
        from distributed.dashboard.core import BokehApplication
    except ImportError:  # pragma: no cover
        return False
    tornados = [a for a in getattr(app, "applications", ()) if isinstance(a, BokehTornado)]
    if not tornados:
        return False  # no dashboard (yet): connect() will include the pages
    if any("/" + TAB in t.app_paths for t in tornados):
        scheduler._slimgraph_pages = True
        return False
    prefix = getattr(tornados[0], "_prefix", "") or ""
    tv = ds.template_variables(scheduler)  # wrapped: adds the tab in place
    from bokeh.server import urls

    saved = list(urls.per_app_patterns)
    urls.per_app_patterns[:] = _stock_bokeh_patterns()
    try:
        bokeh_app = BokehApplication(_pages(), scheduler, prefix=prefix, template_variables=tv)
    finally:
        urls.per_app_patterns[:] = saved
    app.add_application(bokeh_app)
    bokeh_app.initialize(IOLoop.current())
    bokeh_app.start()
    scheduler._slimgraph_pages = True
    return True


def unregister() -> None:
    """Undo :func:`register` for dashboards built from now on (tests)."""
    ds = sys.modules.get("distributed.dashboard.scheduler")
    if ds is None:
        return
    for path in _pages():
        ds.applications.pop(path, None)
    for name in ("template_variables", "connect"):
        fn = getattr(ds, name)
        while getattr(fn, "_slimgraph", False):
            fn = fn.__wrapped__
        setattr(ds, name, fn)


def dask_setup(scheduler) -> None:
    """``--preload slimgraph.dashboard_tab``: the tab and phase recording.

    As a preload, this module's ``dask_setup`` runs after the dashboard is
    built, so the pages are added late (see :func:`register`). Preloads that
    call :func:`register` at import time get them listed in
    ``/individual-plots.json`` as well.
    """
    register()
    ensure_recording(scheduler)


def registered() -> bool:
    ds = sys.modules.get("distributed.dashboard.scheduler")
    return bool(ds and "/" + TAB in ds.applications and getattr(ds.connect, "_slimgraph", False))


# ---------------------------------------------------------------------------
# JupyterLab launcher tile (jupyter-server-proxy entry point)
# ---------------------------------------------------------------------------


def serverproxy() -> dict:
    """``jupyter_serverproxy_servers`` entry point: ``panel serve dashboard``.

    The proxied app starts its own LocalClusters unless the environment
    variable ``SLIMGRAPH_SCHEDULER`` names a scheduler to read instead.
    """
    icon = DASHBOARD_DIR / "icon.svg"
    return {
        "command": [
            sys.executable, "-m", "panel", "serve", str(DASHBOARD_DIR),
            "--port", "{port}",
            "--allow-websocket-origin", "*",
            "--prefix", "{base_url}slimgraph",
        ],  # fmt: skip
        "absolute_url": True,
        "timeout": 120,
        "launcher_entry": {
            "title": "slimgraph dashboard",
            "icon_path": str(icon) if icon.exists() else "",
            "path_info": "slimgraph/dashboard",
        },
    }


def launch(argv: list[str] | None = None) -> int:
    """``slimgraph dashboard`` for the CLI: run ``dashboard.launch.main``.

    The app lives in this checkout's ``dashboard/`` directory (next to the
    ``core/`` package); it is put on ``sys.path`` first.
    """
    root = str(DASHBOARD_DIR.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from dashboard.launch import main

    return main(argv)
