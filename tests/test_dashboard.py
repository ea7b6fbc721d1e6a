"""The dashboard's data path, without a browser.

Real schedulers (in process), real instruments; the Bokeh sources are read
directly. Browser tests are in ``test_dashboard_browser.py``.
"""
from __future__ import annotations

import asyncio
import gc
import math
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the checkout's dashboard/ package
    sys.path.insert(0, str(ROOT))

from slimgraph import dashboard_tab as dt
from slimgraph.instrument.records import PHASES


def test_importing_dashboard_tab_does_not_import_panel():
    import subprocess

    code = (
        "import sys, slimgraph.dashboard_tab as t; t.register(); "
        "print('panel' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_stack_order_and_colours_are_fixed():
    assert dt.STACK[: len(PHASES)] == PHASES
    assert dt.STACK[-1] == "other"
    colours = [dt.PHASE_COLORS[p] for p in dt.STACK]
    assert len(set(colours)) == len(colours)


def test_timing_row_seconds_and_us_per_task():
    rec = {
        "submission_id": 7,
        "tasks": 2000,
        "total_s": 0.5,
        "status": "OK",
        "phases": [{"name": "order", "wall_s": 0.2}, {"name": "other", "wall_s": 0.1}],
    }
    row = dt.timing_row(rec, 3)
    assert row["x"] == 3 and row["submission_id"] == 7
    assert row["order"] == pytest.approx(0.2)
    assert row["order_us"] == pytest.approx(100.0)
    assert row["other_us"] == pytest.approx(50.0)
    assert row["cull"] == 0.0
    assert row["us_per_task"] == pytest.approx(250.0)
    assert set(dt.empty_timing()) == set(row)


def test_icicle_children_nest_inside_parents():
    rows = [
        {"path": "state", "parent": float("nan"), "name": "state", "bytes": 1000, "count": 1, "bytes_per_task": 10},
        {"path": "state/a", "parent": "state", "name": "a", "bytes": 600, "count": 1, "bytes_per_task": 6},
        {"path": "state/b", "parent": "state", "name": "b", "bytes": 300, "count": 1, "bytes_per_task": 3},
        {"path": "state/a/x", "parent": "state/a", "name": "x", "bytes": 300, "count": 5, "bytes_per_task": 3},
        {"path": "state/tiny", "parent": "state", "name": "tiny", "bytes": 1, "count": 1, "bytes_per_task": 0},
    ]
    out = dt.icicle(rows)
    by = {p: i for i, p in enumerate(out["path"])}
    assert "state/tiny" not in by  # narrower than min_fraction
    span = lambda p: (out["x0"][by[p]], out["x1"][by[p]])  # noqa: E731
    assert span("state") == (0.0, 1.0)
    assert span("state/a") == pytest.approx((0.0, 0.6))
    assert span("state/b") == pytest.approx((0.6, 0.9))
    assert span("state/a/x") == pytest.approx((0.0, 0.3))
    assert out["y1"][by["state/a/x"]] == out["y0"][by["state/a"]]
    assert out["bytes_h"][by["state"]] == "1000 B"


def test_lazy_summary_from_a_census():
    rows = [
        {"attr": "dependencies", "tasks": 10, "none": 4, "singleton": 1, "allocated": 5,
         "empty_allocated": 1, "shared": 2, "held_bytes": 1080, "eager_bytes": 2160, "saved_bytes": 1080},
        {"attr": "waiters", "tasks": 10, "none": 10, "singleton": 0, "allocated": 0,
         "empty_allocated": 0, "shared": 0, "held_bytes": 0, "eager_bytes": 2160, "saved_bytes": 2160},
    ]  # fmt: skip
    point, attrs = dt.lazy_summary(dt._census_rows(rows))
    assert attrs["attribute"] == ["dependencies", "waiters"]
    assert attrs["not_allocated"] == [5.0, 10.0]
    assert point["saved_mb"] == pytest.approx(3240 / 2**20)
    assert point["allocated"] == 5


@pytest.fixture
def registered():
    """register() for one test; undone after, for the rest of the suite."""
    dt.register()
    yield
    dt.unregister()


def test_register_is_idempotent_and_adds_tab(registered):
    import distributed.dashboard.scheduler as ds

    dt.register()
    apps, tv, connect = dict(ds.applications), ds.template_variables, ds.connect
    dt.register()
    assert dict(ds.applications) == apps
    assert ds.template_variables is tv and ds.connect is connect
    assert "/slimgraph" in ds.applications
    for path in dt.INDIVIDUAL:
        assert path in ds.applications and path.startswith("/individual-")
    assert dt.registered()
    dt.unregister()
    assert "/slimgraph" not in ds.applications and not dt.registered()
    assert not getattr(ds.connect, "_slimgraph", False)
    assert not getattr(ds.template_variables, "_slimgraph", False)


async def _close(s) -> None:
    """Close an in-process scheduler and undo the phase hooks, which patch
    module globals of distributed and dask while any scheduler is hooked."""
    from slimgraph.instrument.stock import uninstall

    uninstall(s)
    await s.close()


async def _graph_on_scheduler(ntasks: int):
    """A scheduler (stock, in process, no workers) holding ~ntasks tasks."""
    import dask.array as da
    from distributed import Client, Scheduler

    s = await Scheduler(dashboard_address=":0", host="127.0.0.1")
    dt.ensure_recording(s)
    c = await Client(s.address, asynchronous=True)
    side = int(math.sqrt(ntasks / 3))
    x = (da.ones((side * 2, side * 2), chunks=2) + 1).sum()
    fut = c.compute(x)
    hist = dt.get_history(s)
    while not len(hist):
        await asyncio.sleep(0.05)
    return s, c, fut


class LoopBlocks:
    """The longest stretch of CPU work the event loop did without yielding.

    A ticker on the loop wakes every millisecond; between two ticks the
    loop thread ran other callbacks (or nothing). For each gap we take the
    loop thread's CPU time (``time.thread_time``), not the wall time, minus
    cyclic-GC pauses, so a loaded machine (the thread waiting for a core) or
    a collection triggered by someone else's allocations does not count as
    the refresh blocking the loop. Wall-clock blocks are kept for the log.
    """

    def __init__(self):
        self.max_cpu = self.max_wall = 0.0
        self._gc = 0.0
        self._gc_t0 = 0.0
        self._task = None

    def _on_gc(self, phase, info):
        if phase == "start":
            self._gc_t0 = time.thread_time()
        else:
            self._gc += time.thread_time() - self._gc_t0

    async def _tick(self):
        w, c, g = time.perf_counter(), time.thread_time(), self._gc
        while True:
            await asyncio.sleep(0.001)
            w2, c2, g2 = time.perf_counter(), time.thread_time(), self._gc
            self.max_wall = max(self.max_wall, w2 - w - 0.001)
            self.max_cpu = max(self.max_cpu, (c2 - c) - (g2 - g))
            w, c, g = w2, c2, g2

    def start(self):
        self.max_cpu = self.max_wall = 0.0
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.ensure_future(self._tick())
        return self

    async def stop(self):
        await asyncio.sleep(0.005)
        self._task.cancel()
        gc.callbacks.remove(self._on_gc)


def _blocking(parts: tuple[str, ...], ntasks: int = 60_000):
    """Run the dashboard's refresh pieces ``parts`` on a live scheduler
    holding ~``ntasks`` tasks; return (views, longest block, sync block).

    ``sync block`` is how long a synchronous (exact) memory walk of the same
    state blocks the loop: the graph must be big enough for that to exceed
    the 50 ms target, or the measurement would not mean anything.
    """
    from bokeh.document import Document

    from slimgraph.instrument.memory import memory_tree

    async def main():
        s, c, fut = await _graph_on_scheduler(ntasks)
        try:
            assert len(s.tasks) > 20_000
            views = dt.Views(kinds=("stock",))
            doc = Document()
            doc.add_root(views.layout())
            r = dt.Refresher(views, {"stock": dt.LocalFeed(s)}, doc, post=lambda f: f())
            await asyncio.sleep(0.05)
            mon = LoopBlocks().start()
            await asyncio.sleep(0.01)
            memory_tree(s)
            await mon.stop()
            sync_block = mon.max_cpu
            await asyncio.sleep(0.05)
            mon.start()
            if "fast" in parts:
                await r._fast()
            if "census" in parts:
                point, attrs = dt.lazy_summary(await r.feeds["stock"].census_rows())
                r._set_lazy("stock", point, attrs)
            if "memory" in parts:
                r._set_tree("stock", dt.icicle(await r.feeds["stock"].memory_rows()))
            await mon.stop()
            block = mon.max_cpu
            print(f"{parts}: sync walk blocked {sync_block * 1e3:.0f} ms; refresh blocked "
                  f"{block * 1e3:.0f} ms of loop CPU ({mon.max_wall * 1e3:.0f} ms wall)")
            return views, block, sync_block
        finally:
            await c.close()
            await _close(s)

    return asyncio.run(main())


def test_refresh_records_and_lazy_sets_do_not_block_the_loop():
    """Target: a refresh blocks the scheduler's loop < 50 ms (records, census)."""
    views, block, sync_block = _blocking(("fast", "census"))
    data = views.timing_sources["stock"].data
    assert data["tasks"] and data["tasks"][0] > 20_000
    attrs = views.lazyattr_sources["stock"].data
    assert "dependencies" in attrs["attribute"]
    assert sum(attrs["allocated"]) > 20_000
    assert views.lazy_sources["stock"].data["time"]
    assert sync_block > 0.05, "the graph is too small for this test to mean anything"
    assert block < 0.05


def test_refresh_memory_tree_does_not_block_the_loop():
    """Target: the memory-tree refresh blocks the scheduler's loop < 50 ms."""
    views, block, sync_block = _blocking(("memory",))
    tree = views.tree_sources["stock"].data
    assert len(tree["path"]) > 3 and tree["path"][0] == "state"
    assert sync_block > 0.05, "the graph is too small for this test to mean anything"
    assert block < 0.05


def test_scheduler_pages_render_with_data(registered):
    """The /slimgraph doc function builds and streams on a live scheduler."""
    from bokeh.document import Document

    async def main():
        s, c, fut = await _graph_on_scheduler(3_000)
        try:
            doc = Document()
            dt.slimgraph_doc(s, {"prefix": "/", "pages": []}, doc)
            src = doc.get_model_by_name("sg-timing-stock")
            assert src is not None
            # run the page's own refresh once (its periodic callback would)
            (cb,) = [cb for cb in doc.session_callbacks]
            await cb.callback()
            await asyncio.sleep(0.5)
            for nxt in list(doc.session_callbacks):
                if nxt is not cb:
                    nxt.callback()
            assert len(src.data["submission_id"]) == 1
            assert "slimgraph" in dt._wrap_template_variables(lambda s: {"pages": ["status", "info"]})(s)["pages"]
        finally:
            await c.close()
            await _close(s)

    asyncio.run(main())


def test_tab_added_late_and_by_the_slim_preload():
    """``slimgraph.distributed``'s dask_setup registers after the dashboard
    exists: the page must still be served (late path), on a slim scheduler."""
    import subprocess
    import textwrap

    code = textwrap.dedent("""
        import asyncio, json
        from distributed import Scheduler
        from tornado.httpclient import AsyncHTTPClient

        async def main():
            out = {}
            async with Scheduler(dashboard_address="127.0.0.1:0", host="127.0.0.1",
                                 preload=["slimgraph.distributed"]) as s:
                out["class"] = type(s).__qualname__
                port = s.http_server.port
                http = AsyncHTTPClient()
                r = await http.fetch(f"http://127.0.0.1:{port}/slimgraph", raise_error=False)
                out["code"] = r.code
                from bokeh.document import Document
                from slimgraph.dashboard_tab import slimgraph_doc
                doc = Document()
                slimgraph_doc(s, {"prefix": "/"}, doc)
                out["slim_source"] = doc.get_model_by_name("sg-timing-slim") is not None
                r = await http.fetch(f"http://127.0.0.1:{port}/workers", raise_error=False)
                out["workers_code"] = r.code
                out["navbar"] = b'href="slimgraph"' in r.body
            print(json.dumps(out))

        asyncio.run(main())
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    import json

    out = json.loads(p.stdout.strip().splitlines()[-1])
    if out["class"] != "SlimScheduler":  # pragma: no cover - depends on slimgraph.distributed
        pytest.fail(f"the preload did not make the scheduler slim: {out}")
    assert out == {"class": "SlimScheduler", "code": 200, "slim_source": True,
                   "workers_code": 200, "navbar": True}


def test_slim_choice_is_not_available_without_slim_scheduler(monkeypatch):
    """Without slimgraph.distributed the launcher offers stock only and says why."""
    from dashboard import clusters

    monkeypatch.setitem(sys.modules, "slimgraph.distributed", None)  # import fails
    mgr = clusters.ClusterManager(address="")
    assert not mgr.available("slim") and mgr.available("stock")
    assert mgr.entries["slim"].status == "unavailable"
    assert "SlimScheduler is not available" in mgr.entries["slim"].error
    assert mgr.get("slim").status == "unavailable"  # never starts a cluster


def test_workload_sizes_are_about_right():
    """The launcher's sizes are task counts after dask's optimizations."""
    import asyncio

    from distributed import Client, Scheduler

    from dashboard import workloads

    async def main():
        async with Scheduler(dashboard_address=":0", host="127.0.0.1") as s:
            dt.ensure_recording(s)
            hist = dt.get_history(s)
            out = {}
            async with Client(s.address, asynchronous=True) as c:
                for name in workloads.WORKLOADS:
                    n = len(hist)
                    fut = c.compute(workloads.build(name, "1k"))
                    while len(hist) == n:
                        await asyncio.sleep(0.02)
                    out[name] = hist.latest().tasks
                    await c.cancel(fut)
            from slimgraph.instrument.stock import uninstall

            uninstall(s)
            return out

    sizes = asyncio.run(main())
    for name, tasks in sizes.items():
        assert 700 <= tasks <= 1400, sizes
