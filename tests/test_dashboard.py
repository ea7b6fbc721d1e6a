"""The dashboard's data path and the scheduler tab, without a browser.

Real schedulers (in process, and ``dask scheduler`` subprocesses), real
instruments; the Bokeh sources are read directly. Browser tests are in
``test_dashboard_browser.py``.
"""
from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import subprocess
import sys
import textwrap
import time

import pytest
from subprocs import dask_scheduler, get

from slimgraph.instrument.feed import LocalFeed
from slimgraph.instrument.lazysets import AttrCensus, Census
from slimgraph.instrument.recorder import get_extension, get_history
from slimgraph.instrument.records import PHASES, PhaseRecord, SubmissionRecord
from slimgraph.views import tab, transforms
from slimgraph.views.figures import Views
from slimgraph.views.palette import PHASE_COLORS
from slimgraph.views.refresher import Refresher

OUR_PAGES = {"/individual-slimgraph-timing", "/individual-slimgraph-memory",
             "/individual-slimgraph-lazy-sets"}  # fmt: skip


def _run(code: str, env: dict | None = None, timeout: float = 120) -> dict:
    """Run ``code`` in a fresh interpreter (outside the checkout); its last
    output line is JSON."""
    import os

    e = dict(os.environ, **(env or {}))
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=timeout, env=e, cwd="/")  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_views_do_not_import_panel():
    """Everything the scheduler tab needs is plain Bokeh: no Panel in a
    scheduler process, even once its pages are served."""
    out = _run("""
        import asyncio, json, sys
        from distributed import Scheduler
        import slimgraph.views.figures, slimgraph.views.refresher, slimgraph.views.tab
        import slimgraph.views.transforms, slimgraph.views.notebook, slimgraph.views.serverproxy
        from slimgraph.views.figures import Views

        async def main():
            async with Scheduler(dashboard_address="127.0.0.1:0", host="127.0.0.1",
                                 preload=["slimgraph.distributed"]) as s:
                Views().layout()
                from slimgraph.views.tab import has_pages
                return has_pages(s)

        pages = asyncio.run(main())
        print(json.dumps({"pages": pages, "panel": "panel" in sys.modules}))
    """)
    assert out == {"pages": True, "panel": False}


def test_importing_slimgraph_has_no_side_effects():
    """``import slimgraph.distributed`` (e.g. for SlimLocalCluster) changes
    nothing in distributed or bokeh; a scheduler started without the preload
    gets no slimgraph pages, handlers or extension."""
    out = _run("""
        import asyncio, json, sys
        import bokeh.server.urls as urls
        import distributed
        import distributed.dashboard.scheduler as ds
        before = (sorted(ds.applications), ds.template_variables, ds.connect,
                  list(urls.per_app_patterns), dict(distributed.Scheduler.__dict__))

        import slimgraph, slimgraph.distributed, slimgraph.instrument.client
        import slimgraph.views.tab, slimgraph.dashboard, slimgraph.workloads
        from slimgraph.distributed import SlimLocalCluster  # noqa: F401
        after = (sorted(ds.applications), ds.template_variables, ds.connect,
                 list(urls.per_app_patterns), dict(distributed.Scheduler.__dict__))
        out = {"unchanged": [a == b for a, b in zip(before, after)]}

        async def main():
            async with distributed.Scheduler(dashboard_address="127.0.0.1:0",
                                             host="127.0.0.1") as s:
                out["pages"] = slimgraph.views.tab.has_pages(s)
                out["navbar"] = "slimgraph" in ds.template_variables(s)["pages"]
                out["handlers"] = sorted(h for h in s.handlers if "slimgraph" in h)
                out["extension"] = "slimgraph" in s.extensions
                out["class"] = type(s).__qualname__

        asyncio.run(main())
        out["panel"] = "panel" in sys.modules
        print(json.dumps(out))
    """)
    assert out == {"unchanged": [True] * 5, "pages": False, "navbar": False, "handlers": [],
                   "extension": False, "class": "Scheduler", "panel": False}


def test_stack_order_and_colours_are_fixed():
    assert transforms.STACK[: len(PHASES)] == PHASES
    assert transforms.STACK[-1] == "other"
    colours = [PHASE_COLORS[p] for p in transforms.STACK]
    assert len(set(colours)) == len(colours)


def test_timing_row_seconds_and_us_per_task():
    rec = SubmissionRecord(
        scheduler="stock",
        submission_id=7,
        tasks=2000,
        total_s=0.5,
        status="OK",
        phases=[PhaseRecord("order", wall_s=0.2), PhaseRecord("other", wall_s=0.1)],
    )
    row = transforms.timing_row(rec, 3)
    assert row["x"] == 3 and row["submission_id"] == 7
    assert row["order"] == pytest.approx(0.2)
    assert row["order_us"] == pytest.approx(100.0)
    assert row["other_us"] == pytest.approx(50.0)
    assert row["cull"] == 0.0
    assert row["us_per_task"] == pytest.approx(250.0)
    assert set(transforms.empty_timing()) == set(row)


def test_icicle_children_nest_inside_parents():
    rows = [
        {"path": "state", "parent": None, "name": "state", "bytes": 1000, "count": 1, "bytes_per_task": 10},
        {"path": "state/a", "parent": "state", "name": "a", "bytes": 600, "count": 1, "bytes_per_task": 6},
        {"path": "state/b", "parent": "state", "name": "b", "bytes": 300, "count": 1, "bytes_per_task": 3},
        {"path": "state/a/x", "parent": "state/a", "name": "x", "bytes": 300, "count": 5, "bytes_per_task": 3},
        {"path": "state/tiny", "parent": "state", "name": "tiny", "bytes": 1, "count": 1, "bytes_per_task": 0},
    ]
    out = transforms.icicle(rows)
    by = {p: i for i, p in enumerate(out["path"])}
    assert "state/tiny" not in by  # narrower than min_fraction
    span = lambda p: (out["x0"][by[p]], out["x1"][by[p]])  # noqa: E731
    assert span("state") == (0.0, 1000.0)  # x is bytes
    assert span("state/a") == pytest.approx((0.0, 600))
    assert span("state/b") == pytest.approx((600, 900))
    assert span("state/a/x") == pytest.approx((0.0, 300))
    assert out["y1"][by["state/a/x"]] == out["y0"][by["state/a"]]
    assert out["bytes_h"][by["state"]] == "1000 B"


def test_tree_rows_are_the_memory_trees_frame():
    """The pandas-free rows equal ``MemoryTree.to_frame()``."""
    from slimgraph.instrument.memory import MemoryTree, Node

    root = Node("state", "state", bytes=10, count=1)
    a = root.child("a")
    a.bytes, a.count = 600, 2
    x = a.child("x", per_task=True)
    x.bytes, x.count = 300, 5
    tree = MemoryTree(root, ntasks=4)
    frame = tree.to_frame().to_dict(orient="records")
    frame[0]["parent"] = None  # pandas' missing value
    assert transforms.tree_rows(tree) == frame


def test_lazy_summary_from_a_census():
    census = Census(time=0.0, ntasks=10, attrs={
        "dependencies": AttrCensus("dependencies", tasks=10, none=4, singleton=1, allocated=5,
                                   empty_allocated=1, shared=2, held_bytes=1080, eager_bytes=2160),
        "waiters": AttrCensus("waiters", tasks=10, none=10, singleton=0, allocated=0,
                              empty_allocated=0, shared=0, held_bytes=0, eager_bytes=2160),
    })  # fmt: skip
    point, attrs = transforms.lazy_summary(census)
    assert attrs["attribute"] == ["dependencies", "waiters"]
    assert attrs["not_allocated"] == [5.0, 10.0]
    assert point["saved_mb"] == pytest.approx(3240 / 2**20)
    assert point["allocated"] == 5
    # the census' own wire format round-trips
    assert Census.from_records(census.to_records()).attrs == census.attrs


def test_memray_summary_in_the_page():
    """A capture's figures as the page shows them: the peak and allocation
    count as data values, the top sites (escaped, file base names, full path
    on hover), at most ``top``."""
    from slimgraph.dashboard import summary

    sites = [{"function": f"f<{i}>", "file": f"/x/y/mod{i}.py", "line": i, "bytes": 1000 - i, "count": i + 1}
             for i in range(8)]  # fmt: skip
    out = summary.memray_html("slim", 4, {"peak_bytes": 3 * 2**20, "total_allocations": 12_345,
                                          "retained_bytes": 2048, "top_by_bytes": sites}, top=5)  # fmt: skip
    assert "data-value='3145728'>3.0 MiB<" in out and "data-value='12345'>12,345<" in out
    assert out.count("<li ") == 5 and "f&lt;0&gt;" in out and "f<0>" not in out
    assert "(mod0.py:0, 1 allocations)" in out and "title='/x/y/mod0.py:0'" in out and "mod5.py" not in out
    assert "2.0 KiB still held" in out and "data-kind='slim'" in out
    bare = summary.memray_html("stock", 1, {"peak_bytes": 10})
    assert "<ol" not in bare and "data-value='10'>10 B<" in bare


def test_a_running_update_graph_is_told_with_its_phase_and_expected_length(monkeypatch):
    from slimgraph.dashboard import jobs

    monkeypatch.setattr(jobs, "_rates", {})
    assert jobs.expected_seconds("stock", "array", 1000) is None
    jobs._rates[("stock", "array")] = [(1000, 2e-3), (2000, 1e-3), (500, 9e-3)]  # (tasks, s per task)
    assert jobs.expected_seconds("stock", "array", 1000) == (2.0, 3)  # the median
    assert jobs.expected_seconds("slim", "array", 1000) is None  # per engine
    # only jobs of about its size: a small job's per-task time is mostly fixed costs
    assert jobs.expected_seconds("stock", "array", 100_000) is None
    jobs._rates[("stock", "array")].append((50_000, 1e-4))
    assert jobs.expected_seconds("stock", "array", 100_000) == (10.0, 1)
    status = {"running": [{"submission_id": 4, "elapsed_s": 3.0, "phase": "transitions", "tasks": 10}]}
    line = jobs.running_line(12.34, status, (105.2, 1))
    assert line == "update_graph running, 12.3 s, phase transitions; expected about 105 s (from 1 earlier job)"
    blocked = jobs.running_line(40.0, status, None, busy=31)
    assert blocked == ("update_graph running, 40.0 s, phase transitions (last seen); "
                       "the scheduler's loop has not answered for 31 s")  # fmt: skip
    assert jobs.running_line(1.0, {"running": []}, None) == "update_graph running, 1.0 s"


def test_add_pages_is_explicit_idempotent_and_per_scheduler():
    """Pages for one scheduler, added by a call (twice: no change), listed in
    its /individual-plots.json; nothing global changes, so a scheduler
    started afterwards in the same process has none."""
    import distributed.dashboard.scheduler as ds
    from distributed import Scheduler
    from tornado.httpclient import AsyncHTTPClient

    async def fetch(s, path):
        r = await AsyncHTTPClient().fetch(f"http://127.0.0.1:{s.http_server.port}{path}",
                                          raise_error=False)  # fmt: skip
        return r.code, r.body

    async def main():
        apps_before = sorted(ds.applications)
        async with Scheduler(dashboard_address="127.0.0.1:0", host="127.0.0.1") as s:
            assert not tab.has_pages(s)
            assert (await fetch(s, "/slimgraph"))[0] == 404
            assert tab.add_pages(s) is True
            n_apps = len(s.http_application.applications)
            assert tab.add_pages(s) is False  # idempotent
            assert len(s.http_application.applications) == n_apps
            assert tab.has_pages(s)
            code, body = await fetch(s, "/individual-plots.json")
            listed = set(json.loads(body).values())
            assert OUR_PAGES <= listed and "/individual-task-stream" in listed
            for path in ("/slimgraph", *OUR_PAGES):
                assert (await fetch(s, path))[0] == 200, path
            code, body = await fetch(s, "/workers")  # dask's own page, with our tab
            assert code == 200 and b'href="slimgraph"' in body
            async with Scheduler(dashboard_address="127.0.0.1:0", host="127.0.0.1") as s2:
                assert not tab.has_pages(s2)
                assert "slimgraph" not in ds.template_variables(s2)["pages"]
                assert (await fetch(s2, "/slimgraph"))[0] == 404
            assert sorted(ds.applications) == apps_before
        with pytest.raises(RuntimeError, match="event loop"):
            async with Scheduler(dashboard_address="127.0.0.1:0", host="127.0.0.1") as s3:
                await asyncio.to_thread(tab.add_pages, s3)

    asyncio.run(main())


async def _close(s) -> None:
    """Close an in-process scheduler and undo the phase hooks, which patch
    module globals of distributed and dask while any scheduler is hooked."""
    from slimgraph.instrument.stock_recorder import uninstall

    uninstall(s)
    await s.close()


async def _graph_on_scheduler(ntasks: int):
    """A scheduler (stock, in process, no workers) holding ~ntasks tasks."""
    import dask.array as da
    from distributed import Client, Scheduler

    s = await Scheduler(dashboard_address=":0", host="127.0.0.1")
    get_extension(s).install()
    c = await Client(s.address, asynchronous=True)
    side = int(math.sqrt(ntasks / 3))
    x = (da.ones((side * 2, side * 2), chunks=2) + 1).sum()
    fut = c.compute(x)
    hist = get_history(s)
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
            views = Views(kinds=("stock",))
            doc = Document()
            doc.add_root(views.layout())
            r = Refresher(views, {"stock": LocalFeed(s)}, doc, post=lambda f: f())
            await asyncio.sleep(0.05)
            mon = LoopBlocks().start()
            await asyncio.sleep(0.01)
            memory_tree(s)
            await mon.stop()
            sync_block = mon.max_cpu
            await asyncio.sleep(0.05)
            mon.start()
            if "fast" in parts:
                await r.refresh_fast()
            if "census" in parts:
                await r.refresh_lazy("stock")
            if "memory" in parts:
                await r.refresh_memory("stock")
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


def test_scheduler_pages_render_with_data():
    """The /slimgraph doc function builds and streams on a live scheduler."""
    from bokeh.document import Document

    async def main():
        s, c, fut = await _graph_on_scheduler(3_000)
        try:
            doc = Document()
            tab.slimgraph_doc(s, {"prefix": "/", "pages": []}, doc)
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
            tv = {"pages": ["status", "info"]}
            tab._add_to_navbar(tv)
            assert tv["pages"] == ["status", "slimgraph", "info"]
        finally:
            await c.close()
            await _close(s)

    asyncio.run(main())


def test_tab_by_the_slim_preload_in_process():
    """``Scheduler(preload=["slimgraph.distributed"])``: slim, the tab served
    and listed, dask's pages with the tab in their navbar."""
    out = _run("""
        import asyncio, json
        from distributed import Scheduler
        from tornado.httpclient import AsyncHTTPClient

        async def main():
            out = {}
            async with Scheduler(dashboard_address="127.0.0.1:0", host="127.0.0.1",
                                 preload=["slimgraph.distributed"]) as s:
                out["class"] = type(s).__qualname__
                # the handlers distributed bound in __init__ run the slim methods
                out["slim_handler"] = (s.stream_handlers["update-graph"].__func__
                                       is type(s).update_graph)
                port = s.http_server.port
                http = AsyncHTTPClient()
                r = await http.fetch(f"http://127.0.0.1:{port}/slimgraph", raise_error=False)
                out["code"] = r.code
                from bokeh.document import Document
                from slimgraph.views.tab import slimgraph_doc
                doc = Document()
                slimgraph_doc(s, {"prefix": "/"}, doc)
                out["slim_source"] = doc.get_model_by_name("sg-timing-slim") is not None
                r = await http.fetch(f"http://127.0.0.1:{port}/workers", raise_error=False)
                out["workers_code"] = r.code
                out["navbar"] = b'href="slimgraph"' in r.body
                r = await http.fetch(f"http://127.0.0.1:{port}/individual-plots.json")
                out["listed"] = sorted(v for v in json.loads(r.body).values() if "slimgraph" in v)
            print(json.dumps(out))

        asyncio.run(main())
    """)
    assert out == {"class": "SlimScheduler", "slim_handler": True, "code": 200, "slim_source": True,
                   "workers_code": 200, "navbar": True, "listed": sorted(OUR_PAGES)}


def _check_dashboard(dash: str) -> None:
    """The slimgraph pages of the scheduler dashboard at ``dash``."""
    code, body = get(f"{dash}/individual-plots.json")
    assert code == 200
    listed = set(json.loads(body).values())
    assert OUR_PAGES <= listed, listed
    assert "/individual-task-stream" in listed  # dask's own are still listed
    for path in ("/slimgraph", *OUR_PAGES):
        assert get(f"{dash}{path}")[0] == 200, path
    code, body = get(f"{dash}/status")
    assert code == 200 and b'href="slimgraph"' in body


@pytest.mark.cluster
def test_dask_scheduler_cli_preload_lists_the_pages(tmp_path):
    """``dask scheduler --preload slimgraph.distributed``: slim, recording,
    and the tab plus the ``individual-slimgraph-*`` pages in
    /individual-plots.json (what dask-labextension lists)."""
    from distributed import Client

    from slimgraph.instrument import client as sgc

    with dask_scheduler(tmp_path, "--preload", "slimgraph.distributed") as (address, dash, proc):
        _check_dashboard(dash)
        with Client(address, timeout="20s") as c:
            st = sgc.get_status(c)
        assert st["kind"] == "slim" and st["recording"] is True


@pytest.mark.cluster
def test_stock_scheduler_cli_preload_of_the_tab(tmp_path):
    """``dask scheduler --preload slimgraph.views.tab``: a stock scheduler,
    recorded, with the same pages."""
    from distributed import Client

    from slimgraph.instrument import client as sgc

    with dask_scheduler(tmp_path, "--preload", "slimgraph.views.tab") as (address, dash, proc):
        _check_dashboard(dash)
        with Client(address, timeout="20s") as c:
            st = sgc.get_status(c)
        assert st["kind"] == "stock" and st["recording"] is True


def test_preload_by_environment_variable_with_local_cluster():
    """``DASK_DISTRIBUTED__SCHEDULER__PRELOAD='["slimgraph.distributed"]'``
    with a LocalCluster: slim, the pages listed."""
    out = _run("""
        import json
        from urllib.request import urlopen
        from distributed import LocalCluster

        with LocalCluster(n_workers=0, processes=False,
                          dashboard_address="127.0.0.1:0") as lc:
            port = lc.scheduler.http_server.port
            with urlopen(f"http://127.0.0.1:{port}/individual-plots.json") as r:
                listed = sorted(v for v in json.load(r).values() if "slimgraph" in v)
            with urlopen(f"http://127.0.0.1:{port}/slimgraph") as r:
                code = r.status
            print(json.dumps({"class": type(lc.scheduler).__qualname__, "listed": listed,
                              "code": code}))
    """, env={"DASK_DISTRIBUTED__SCHEDULER__PRELOAD": '["slimgraph.distributed"]'})
    assert out == {"class": "SlimScheduler", "listed": sorted(OUR_PAGES), "code": 200}


def test_slim_choice_is_not_available_without_slim_scheduler(monkeypatch):
    """Without slimgraph.distributed the launcher offers stock only and says why."""
    from slimgraph.dashboard import clusters

    monkeypatch.setitem(sys.modules, "slimgraph.distributed", None)  # import fails
    mgr = clusters.ClusterManager(address="")
    assert not mgr.available("slim") and mgr.available("stock")
    assert mgr.entries["slim"].status == "unavailable"
    assert "SlimScheduler is not available" in mgr.entries["slim"].error
    assert mgr.get("slim").status == "unavailable"  # never starts a cluster


def _ingested_tasks(requests: list[tuple[str, int]]) -> list[int]:
    """Tasks on the scheduler after submitting each (workload, size) of
    :mod:`slimgraph.workloads` (no workers: counted after dask's optimizations)."""
    from distributed import Client, Scheduler

    from slimgraph import workloads

    async def main():
        async with Scheduler(dashboard_address=":0", host="127.0.0.1") as s:
            get_extension(s).install()
            hist = get_history(s)
            out = []
            async with Client(s.address, asynchronous=True, set_as_default=False) as c:
                for name, size in requests:
                    n = len(hist)
                    fut = c.compute(workloads.build(name, size))
                    while len(hist) == n:
                        await asyncio.sleep(0.02)
                    out.append(hist.latest().tasks)
                    await c.cancel(fut)
            from slimgraph.instrument.stock_recorder import uninstall

            uninstall(s)
            return out

    return asyncio.run(main())


def test_workload_sizes_are_about_right():
    """The launcher's sizes are task counts after dask's optimizations."""
    from slimgraph import workloads

    names = list(workloads.WORKLOADS)
    sizes = dict(zip(names, _ingested_tasks([(n, workloads.SIZES["1k"]) for n in names])))
    for name, tasks in sizes.items():
        assert 700 <= tasks <= 1400, sizes


def test_any_positive_task_count_and_clear_errors():
    """The dashboard takes any positive number of tasks, not only presets;
    anything else is refused with a clear message before a job starts."""
    from slimgraph import workloads
    from slimgraph.dashboard.clusters import ClusterManager
    from slimgraph.dashboard.jobs import Job

    (tasks,) = _ingested_tasks([("array", 2345)])
    assert 0.7 * 2345 <= tasks <= 1.4 * 2345
    mgr = ClusterManager(address="")  # nothing is started
    for bad in (0, -3, 1.5, "1k", True, None):
        with pytest.raises(ValueError, match="positive integer"):
            Job(mgr, "array", bad, ("stock",))
    with pytest.raises(ValueError, match="unknown workload"):
        Job(mgr, "arrays", 1000, ("stock",))
    with pytest.raises(ValueError, match="positive integer"):
        workloads.build("delayed", 0)


def test_dashboard_and_bench_build_the_same_graphs():
    """One workloads module: the dashboard's job, the bench and the profile
    command build the same graph for the same name and size."""
    from dask.base import tokenize

    from slimgraph import workloads
    from slimgraph.dashboard import jobs

    assert jobs.workloads is workloads
    for name in workloads.WORKLOADS:
        job = jobs.Job(None, name, 1234, ("stock",))
        assert tokenize(job.build()) == tokenize(workloads.WORKLOADS[name](1234)), name


def test_the_served_app_freezes_what_the_process_held_before_its_first_page():
    """Panel's full collections after closed pages walk only what was made
    since the first page: the imports are frozen once, before it (in a
    process of its own: the freeze is process-wide)."""
    code = textwrap.dedent("""
        import gc
        from slimgraph.dashboard import app
        before = gc.get_freeze_count()
        assert app.freeze_startup_objects() is True
        frozen = gc.get_freeze_count()
        assert frozen > before + 50_000, (before, frozen)  # Panel, Bokeh, pandas, dask...
        assert app.freeze_startup_objects() is False  # once
        assert gc.get_freeze_count() == frozen
        # what a page makes afterwards stays collectable
        class Page:
            pass
        p = Page()
        p.me = p  # a cycle: only the collector frees it
        del p
        assert gc.collect() >= 1 and gc.get_freeze_count() == frozen
        print("ok", frozen)
    """)  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok")


def test_a_finished_computation_is_done_even_when_its_release_cancels_it_at_once():
    """Releasing a job's last reference to its future cancels the future on
    the client's loop, at any moment after: the job's phase comes from the
    status read before the release (a job that finished showed "error"
    when the client's loop won the race)."""
    import dask.array as da
    from distributed import Client, LocalCluster

    from slimgraph.dashboard import jobs

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:  # fmt: skip
        fut = client.compute((da.ones(10, chunks=5) + 1).sum())
        assert fut.result(timeout=30) == 20
        release = fut.release

        def release_and_lose_the_race() -> None:
            release()
            deadline = time.monotonic() + 10
            while fut.status != "cancelled":  # the client's loop cancels it
                assert time.monotonic() < deadline, fut.status
                time.sleep(0.01)

        fut.release = release_and_lose_the_race
        job = jobs.Job(None, "array", 1000, ("stock",))
        res: dict = {}
        job._compute("stock", fut, res)
        assert fut.status == "cancelled"  # (the race was lost)
        assert res["status"] == "finished" and "error" not in res
        assert job.phases["stock"] == "done", (job.phases, job.messages)


# ---------------------------------------------------------------------------
# the app's engines, poller and summary
# ---------------------------------------------------------------------------


def _record(kind: str, sid: int, client: str, tasks: int = 1000, total_s: float = 0.5, **kw):
    from slimgraph.instrument.records import SubmissionRecord

    return SubmissionRecord(scheduler=kind, submission_id=sid, client=client, tasks=tasks,
                            total_s=total_s, status="OK", **kw)  # fmt: skip


def test_jobbook_puts_both_engines_bars_of_a_job_at_one_slot():
    from slimgraph.dashboard.poller import JobBook

    book = JobBook()
    slot = book.expect(7, "stock", "client-a", 3, "job 7")
    assert book.expect(7, "slim", "client-b", 0, "job 7") == slot
    # another client's record, or one from before the job's mark, is not the job's
    assert book.place("stock", _record("stock", 9, "someone-else"))[1] is None
    assert book.place("stock", _record("stock", 3, "client-a"))[1] is None
    assert book.place("slim", _record("slim", 1, "client-b")) == (slot, 7)
    assert book.place("stock", _record("stock", 10, "client-a")) == (slot, 7)
    assert book.job_of == {("slim", 1): 7, ("stock", 10): 7}
    # a later record of the same client is a new slot, labelled as a submission
    other, job = book.place("stock", _record("stock", 11, "client-a", tasks=1234))
    assert job is None and other not in (slot,) and "1,234 tasks" in book.labels[other]
    assert book.labels[slot] == "job 7"


def test_summary_figures_and_ratios_come_from_the_records():
    from slimgraph.dashboard import summary

    stock = _record("stock", 1, "c", tasks=2000, total_s=2.0, longest_block_s=1.5,
                    rss_before=100_000_000, rss_after=110_000_000,
                    block_causes={"ingestion": {"seconds": 1.5, "label": "distributed: update_graph"},
                                  "other handler": {"seconds": 0.3, "label": "bokeh: get"}})  # fmt: skip
    slim = _record("slim", 1, "c", tasks=2000, total_s=0.5, longest_block_s=0.01,
                   rss_before=100_000_000, rss_after=104_000_000, ingestion="staged",
                   block_causes={}, materialization="compact, 12 tasks by dask")  # fmt: skip
    f_stock = summary.engine_figures(stock, {"state_bytes": 4_000_000, "state_tasks": 2000})
    f_slim = summary.engine_figures(slim, {"state_bytes": 2_000_000, "state_tasks": 2000,
                                           "lazy_saved_bytes": 3 * 2**20})  # fmt: skip
    assert f_stock["us_per_task"] == pytest.approx(1000.0)
    assert f_stock["rss_per_task"] == pytest.approx(5000.0)
    assert f_slim["state_per_task"] == pytest.approx(1000.0)
    assert f_stock["ingestion"].startswith("synchronous") and f_slim["ingestion"] == "staged"
    assert summary.ratio(f_stock["update_graph_s"], f_slim["update_graph_s"]) == pytest.approx(4.0)
    assert summary.ratio(1.0, None) is None and summary.ratio(1.0, 0) is None

    class J:
        id, workload, tasks, kinds, settings, phase, label = 3, "array", 2000, ("stock", "slim"), "lazy on", "done", "job 3"

    html = summary.strip_html(J, {"stock": f_stock, "slim": f_slim}, J.kinds)
    assert "data-kind='stock' data-key='update_graph_s' data-value='2.0'" in html
    assert "data-kind='slim' data-key='longest_block_s' data-value='0.01'" in html
    assert ">4.0x<" in html  # update_graph stock/slim
    # the ingestion's own longest block: stock's from its record; slim had
    # none of 50 ms or more, which is said, not shown as a dash or a zero
    assert "data-kind='stock' data-key='own_block_s' data-value='1.5'" in html
    assert "data-kind='slim' data-key='own_block_s' data-value=''>&lt; 50 ms<" in html
    assert "other handler 0.30 s (bokeh: get)" in html  # the causes, on the longest block
    row = summary.history_row(J, {"stock": f_stock, "slim": f_slim})
    assert row["ratio update_graph_s"] == pytest.approx(4.0) and row["slim ingestion"] == "staged"
    # which materialized the graph: slim's record says; stock's is always dask
    assert "data-kind='slim' data-key='materialization'>compact, 12 tasks by dask<" in html
    assert "data-kind='stock' data-key='materialization'>dask: every node (stock)<" in html
    assert row["slim materialization"] == "compact, 12 tasks by dask"
    # an engine that measured nothing shows dashes, not zeros
    empty = summary.engine_figures(None)
    assert empty["update_graph_s"] is None and summary.fmt(None, "s") == "-"
    assert "the whole life" not in html  # (no life measured: no such rows)

    # the whole life: per stage, from each engine's life_figures
    from slimgraph.instrument.stages import LifeRecords, life_figures

    def life(cpu_run: float, block: float) -> dict:
        samples = [(0.0, 0.0, 100), (1.0, 0.2, 150), (3.0, 0.2 + cpu_run, 400), (4.0, 0.3 + cpu_run, 120)]
        return life_figures(LifeRecords(tasks=2000, bounds={"ingest": [0.0, 1.0], "run": [1.0, 3.0],
                                                            "release": [3.0, 4.0]},
                                        samples=samples, blocks=[(2.0, block)] if block else [], completed=2000))
    f_stock = summary.engine_figures(stock, {"life": life(2.0, 0.4)})
    f_slim = summary.engine_figures(slim, {"life": life(1.0, 0.0)})
    assert f_stock["run_cpu_us_per_task"] == pytest.approx(1000.0) and f_slim["tasks_per_s"] == pytest.approx(1000.0)
    J.how_far = "to the end"
    html = summary.strip_html(J, {"stock": f_stock, "slim": f_slim}, J.kinds)
    assert "the whole life (to the end)" in html
    assert "data-kind='stock' data-key='run_cpu_us_per_task' data-value='1000.0'>1,000.0 us<" in html
    assert "data-key='run_cpu_us_per_task'>2.0x<" in html  # stock/slim
    # no block of 50 ms or more in slim's run: said so
    assert "data-kind='slim' data-key='run_longest_block_s' data-value='0.0'>&lt; 50 ms<" in html
    row = summary.history_row(J, {"stock": f_stock, "slim": f_slim})
    assert row["ratio run_cpu_us_per_task"] == pytest.approx(2.0) and row["slim completed"] == 2000
    assert "ratio completed" not in row and list(row) == summary.history_columns()


@pytest.mark.cluster
def test_engines_run_in_processes_of_their_own():
    """The app starts a scheduler process (and workers) per engine; no
    scheduler lives in its own process; the poller's RSS of each engine is
    that process's own figure; closing stops every process."""
    import gc

    import psutil
    from distributed import Scheduler

    from slimgraph.dashboard import clusters
    from slimgraph.dashboard.poller import Poller

    # Schedulers that earlier tests of this process left for the GC are not the app's
    before = {id(o) for o in gc.get_objects() if isinstance(o, Scheduler)}
    mgr = clusters.ClusterManager(address="", n_workers=1, threads_per_worker=1)
    poll = None
    try:
        mgr.start_all()
        kinds = [k for k in ("stock", "slim") if mgr.available(k)]
        assert kinds[0] == "stock" and all(mgr.entries[k].status == "running" for k in kinds), \
            {k: (e.status, e.error) for k, e in mgr.entries.items()}
        pids = {k: mgr.entries[k].pid for k in kinds}
        assert len(set(pids.values())) == len(kinds) and os.getpid() not in pids.values()
        for k, pid in pids.items():
            cmd = " ".join(psutil.Process(pid).cmdline())
            assert "distributed.cli.dask_scheduler" in cmd
            assert ("slimgraph.distributed" in cmd) == (k == "slim")
        assert not [o for o in gc.get_objects() if isinstance(o, Scheduler) and id(o) not in before]
        poll = Poller(mgr, period=0.2).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
                poll.engine(k).status and poll.engine(k).rss for k in kinds):  # fmt: skip
            time.sleep(0.2)
        for k in kinds:
            snap = poll.engine(k)
            assert snap.status["kind"] == k
            own = snap.status["rss"] / 2**20  # the scheduler's own reading of itself
            seen = snap.rss[-1][1]
            assert abs(seen - own) < 0.1 * own, (k, seen, own)
        # a block on each engine's loop reaches the blocks strip with its cause
        import functools

        from distributed import Client

        spin = functools.partial(exec, "import time\nt = time.perf_counter()\n"
                                       "while time.perf_counter() - t < 0.3: pass", {})  # fmt: skip
        for k in kinds:
            with Client(mgr.entries[k].address, timeout="30s", set_as_default=False) as c:
                c.run_on_scheduler(spin)

        def blocked(k):
            return [b for b in poll.engine(k).blocks if b["cause"] == "other handler" and b["seconds"] >= 0.25]

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(blocked(k) for k in kinds):
            time.sleep(0.2)
        for k in kinds:
            assert blocked(k), (k, list(poll.engine(k).blocks))
            assert "run_function" in blocked(k)[0]["label"] or "distributed" in blocked(k)[0]["label"]
        from slimgraph.dashboard.app import BlocksView
        from slimgraph.views.palette import CAUSE_COLORS

        view = BlocksView(tuple(kinds), None)
        for k in kinds:
            view.add(k, blocked(k))
        data = view.source.data
        assert list(data["kind"]) == [k for k in kinds for _ in blocked(k)]
        assert set(data["color"]) == {CAUSE_COLORS["other handler"]}
        assert all(r - l >= 250 for l, r in zip(data["left"], data["right"]))  # ms
        # the CPU use the poller reads by pid saw the spin (0.3 s of one core)
        for k in kinds:
            assert max(c for _, c in poll.engine(k).cpu) > 20, list(poll.engine(k).cpu)
        # a computation cancelled by the user (Cancel): the run ends there,
        # before its tasks are all done; the release is measured
        from slimgraph.dashboard.jobs import Job
        from slimgraph.instrument.stages import life_figures

        job = Job(mgr, "array", 10_000, tuple(kinds), poller=poll).start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(job.phases[k] == "computing" for k in kinds):
            time.sleep(0.05)
        time.sleep(0.3)
        asked = time.time()
        job.cancel()
        job.join(180)
        assert job.phase == "cancelled", job.messages
        for k in kinds:
            rec, res = job.life[k], job.results[k]
            assert res["status"] == "cancelled" and "error" not in res, res
            assert asked <= rec.bounds["run"][1] <= asked + 1.0
            assert 0 < rec.completed < rec.tasks
            assert rec.bounds["release"][0] >= rec.bounds["run"][1] and res["life"] == life_figures(rec)
            assert res["life"]["stages"]["release"]["cpu_s"] > 0
        procs = [p for k in kinds for p in mgr.entries[k].procs]
    finally:
        if poll is not None:
            poll.stop()
        mgr.close()
    assert all(p.poll() is not None for p in procs)


def test_closed_websockets_are_not_tracebacks(caplog):
    """A page's websocket closed under a write (a reload) is logged at DEBUG;
    any other unretrieved exception still reaches asyncio's own handler."""
    import asyncio
    import logging

    from tornado.websocket import WebSocketClosedError

    from slimgraph.dashboard.app import quiet_closed_websockets

    loop = asyncio.new_event_loop()
    try:
        assert quiet_closed_websockets(loop) and not quiet_closed_websockets(loop)  # once per loop
        with caplog.at_level(logging.DEBUG):
            loop.call_exception_handler({"message": "Task exception was never retrieved",
                                         "exception": WebSocketClosedError()})  # fmt: skip
            loop.call_exception_handler({"message": "Task exception was never retrieved",
                                         "exception": ValueError("boom")})  # fmt: skip
    finally:
        loop.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "boom" in (errors[0].exc_text or repr(errors[0].exc_info))
    assert any(r.levelno == logging.DEBUG and "websocket closed" in r.getMessage() for r in caplog.records)


def test_a_closed_pages_late_message_is_not_a_traceback(caplog):
    """Bokeh's failed ``assert`` for a message handled after a closed page's
    session was detached is logged at DEBUG; any other error record of the
    same loggers still passes."""
    import logging

    from bokeh.server.connection import ServerConnection

    from slimgraph.dashboard.app import DetachedSessionFilter, quiet_detached_sessions

    quiet_detached_sessions()
    assert not quiet_detached_sessions()  # once per process
    conn = ServerConnection.__new__(ServerConnection)
    conn._session = None  # (what Bokeh leaves when it detaches the session)
    try:
        conn.session
    except AssertionError:
        import sys

        detached = sys.exc_info()
    else:  # pragma: no cover
        raise AssertionError("bokeh no longer asserts a session here")
    try:
        raise AssertionError("another assert")
    except AssertionError:
        import sys

        other = sys.exc_info()
    with caplog.at_level(logging.DEBUG):
        for name in ("bokeh.server.protocol_handler", "tornado.application"):
            log = logging.getLogger(name)
            assert any(isinstance(f, DetachedSessionFilter) for f in log.filters)
            log.error("error handling message", exc_info=detached)
            log.error("something else", exc_info=other)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == ["something else", "something else"]
