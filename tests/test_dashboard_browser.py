"""The dashboard in a real headless Chromium, reached the three ways.

- (a) ``panel serve dashboard`` from the checkout (reading a scheduler named
  by ``SLIMGRAPH_SCHEDULER``) and ``python -m slimgraph dashboard`` (port,
  embedded stock and slim LocalClusters);
- (b) JupyterLab: the launcher tile (jupyter-server-proxy entry point) and a
  notebook cell (``show_in_notebook``, inline resources);
- (c) the "slimgraph" tab of a scheduler's own dashboard, next to dask's
  Status/Workers/Tasks/System tabs (``dask scheduler --preload
  slimgraph.views.tab`` in a subprocess).

Every page must load with no console errors, and every request the browser
makes must go to 127.0.0.1/localhost. Streaming is checked by reading the
named ColumnDataSources: ``Bokeh.documents[i].get_model_by_name(NAME).data``.
Screenshots go to ``test-artifacts/``.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest
from subprocs import Proc, dask_scheduler, free_port, wait_http

# the data of a named ColumnDataSource, read in the page (the bench's own reader)
from slimgraph.bench.browser import CHROMIUM, CHROMIUM_ARGS, SOURCE_JS

pytestmark = [pytest.mark.browser, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
LOCAL_HOSTS = {"127.0.0.1", "localhost"}

if not os.path.exists(CHROMIUM):  # pragma: no cover
    pytest.skip(f"{CHROMIUM} is not installed", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def tmp_mod(tmp_path_factory):
    return tmp_path_factory.mktemp("dashboard")


@pytest.fixture(scope="module")
def scheduler_proc(tmp_mod):
    """A stock ``dask scheduler --preload slimgraph.views.tab`` subprocess
    (phases recorded, the slimgraph tab added by the preload's dask_setup),
    plus one worker; yields (address, dashboard url)."""
    with dask_scheduler(tmp_mod, "--preload", "slimgraph.views.tab") as (address, dash, sched):
        worker = Proc("worker", [
            sys.executable, "-m", "distributed.cli.dask_worker", address,
            "--nworkers", "1", "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1",
        ], tmp_mod, cwd=tmp_mod)  # fmt: skip
        try:
            yield address, dash
        finally:
            # shut down through the scheduler, as a cluster's close does: a
            # dask-worker stopped by a signal takes 8-15 s to close its nanny
            from distributed import Client

            try:
                with Client(address, timeout="10s", set_as_default=False) as c:
                    c.shutdown()
                worker.p.wait(20)
            except Exception:  # noqa: BLE001 - the signal below still stops it
                pass
            worker.stop()


@pytest.fixture(scope="module")
def client(scheduler_proc):
    from distributed import Client

    with Client(scheduler_proc[0], timeout="20s") as c:
        c.wait_for_workers(1, timeout=60)
        yield c


# ---------------------------------------------------------------------------
# the browser
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Watch:
    """Console errors, page errors and every request of a browser context."""

    def __init__(self):
        self.errors: list[str] = []
        self.requests: list[str] = []

    def attach(self, page) -> None:
        page.on("console", lambda m: m.type == "error" and self.errors.append(f"{page.url}: {m.text}"))
        page.on("pageerror", lambda e: self.errors.append(f"{page.url}: pageerror {e}"))

    def outside(self) -> list[str]:
        out = []
        for u in self.requests:
            p = urlparse(u)
            if p.scheme in ("data", "blob", "about"):
                continue
            if p.hostname not in LOCAL_HOSTS:
                out.append(u)
        return out


@pytest.fixture
def web(chromium, request):
    ctx = chromium.new_context(viewport={"width": 1500, "height": 1300}, accept_downloads=True)
    watch = Watch()
    ctx.on("request", lambda r: watch.requests.append(r.url))
    ctx.on("page", watch.attach)
    page = ctx.new_page()
    page.set_default_timeout(30_000)
    yield page, watch
    ARTIFACTS.mkdir(exist_ok=True)
    for i, pg in enumerate(ctx.pages):
        try:
            suffix = "" if i == 0 else f"-{i}"
            pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}{suffix}-end.png"), full_page=True)
        except Exception:  # noqa: BLE001
            pass
    ctx.close()


def shot(page, name: str) -> None:
    """A screenshot to look at (not an assertion). Chromium's capture can
    stall under load (a CI run once waited 120 s for one after every
    assertion of its test had passed): one more try, then the view only."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = str(ARTIFACTS / f"{name}.png")
    try:
        page.screenshot(path=path, full_page=True, timeout=60_000)
    except sync_api.TimeoutError:
        page.wait_for_timeout(1000)
        page.screenshot(path=path, full_page=False, timeout=60_000)




TITLE_JS = """(name) => {
    for (const d of Bokeh.documents) {
        const m = d.get_model_by_name(name);
        if (m) return m.title.text;
    }
    return null;
}"""

#: the ids of a table's column models (the table with a column of that
#: field: "part" the memory table, "job" the job history), or null before
#: the table is in the page
COLUMNS_JS = """(field) => {
    for (const d of Bokeh.documents)
        for (const m of d.all_models)
            if (m.columns && m.source && m.columns.some((c) => c.field === field))
                return m.columns.map((c) => c.id);
    return null;
}"""


def source(page, name: str) -> dict | None:
    return page.evaluate(SOURCE_JS, name)


def nrows(page, name: str, col: str) -> int:
    d = source(page, name)
    return -1 if d is None else len(d.get(col, []))


def wait_rows(page, name: str, col: str, more_than: int, timeout: float = 90) -> int:
    deadline = time.monotonic() + timeout
    n = nrows(page, name, col)
    while n <= more_than and time.monotonic() < deadline:
        page.wait_for_timeout(500)
        n = nrows(page, name, col)
    assert n > more_than, f"{name}.{col}: {n} rows, wanted > {more_than}"
    return n


def settle(page, ticks: int = 2, kind: str = "stock", source: str | None = None) -> None:
    """Wait until the page has refreshed ``ticks`` times (history loaded):
    the Panel app's RSS series of ``kind``, or ``source`` (the scheduler
    tab's views name theirs ``sg-rss``)."""
    wait_rows(page, source or f"sg-rss-{kind}", "time", ticks - 1, timeout=60)
    page.wait_for_timeout(300)


def wait_model(page, name: str, timeout: float = 60_000) -> None:
    page.wait_for_function(
        "(n) => window.Bokeh && Bokeh.documents.some(d => d.get_model_by_name(n) !== null)",
        arg=name, timeout=timeout,
    )


def assert_clean(watch: Watch) -> None:
    assert not watch.errors, "console errors:\n" + "\n".join(watch.errors)
    outside = watch.outside()
    assert not outside, f"requests to outside hosts: {outside}"
    assert watch.requests, "no request was recorded at all"


# ---------------------------------------------------------------------------
# (c) the scheduler's own dashboard
# ---------------------------------------------------------------------------

DASK_TABS = ("status", "workers", "tasks", "system")


def test_scheduler_tab_beside_dask_tabs(web, scheduler_proc, client):
    page, watch = web
    _, dash = scheduler_proc

    page.goto(f"{dash}/slimgraph")
    wait_model(page, "sg-timing-stock")
    nav = page.locator("a[href='slimgraph']")
    assert nav.count() >= 1, "no slimgraph entry in the navbar"
    settle(page, source="sg-rss")
    before = nrows(page, "sg-timing-stock", "submission_id")
    lazy_before = nrows(page, "sg-lazy-stock", "time")

    import dask.array as da

    x = da.ones((400, 400), chunks=10) + 1
    fut = client.compute(x.sum())
    wait_rows(page, "sg-timing-stock", "submission_id", before)
    wait_rows(page, "sg-memory-stock", "path", 0)
    wait_rows(page, "sg-lazy-stock", "time", lazy_before + 1)
    assert fut.result(timeout=60) == 2 * 400 * 400
    row = source(page, "sg-timing-stock")
    assert row["tasks"][-1] > 1000 and row["total_s"][-1] > 0
    shot(page, "scheduler-slimgraph-tab")

    # dask's own tabs still render: their documents have plots drawn on canvases
    for tab in DASK_TABS:
        page.goto(f"{dash}/{tab}")
        page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0")
        page.wait_for_function(
            "() => Bokeh.documents[0].roots().length > 0 && document.querySelector('.bk-Figure, .bk-DataTable, .bk-Column, .bk-Row, .bk-GridPlot, .bk-Tabs') !== null",
            timeout=30_000,
        )
        page.locator("canvas").first.wait_for(state="attached", timeout=30_000)
        assert page.locator("a[href='slimgraph']").count() >= 1, f"navbar of /{tab} lacks slimgraph"
        shot(page, f"scheduler-dask-{tab}")

    # the individual-* pages that dask-labextension lists
    with urllib.request.urlopen(f"{dash}/individual-plots.json") as r:
        plots = json.load(r)
    ours = {k: v for k, v in plots.items() if "slimgraph" in v}
    assert set(ours.values()) == {"/individual-slimgraph-timing", "/individual-slimgraph-memory",
                                  "/individual-slimgraph-lazy-sets"}  # fmt: skip
    page.goto(f"{dash}/individual-slimgraph-timing")
    wait_model(page, "sg-timing-stock")
    wait_rows(page, "sg-timing-stock", "submission_id", 0)
    shot(page, "scheduler-individual-timing")
    assert_clean(watch)


# ---------------------------------------------------------------------------
# (a) panel serve dashboard, against an existing scheduler
# ---------------------------------------------------------------------------


def test_a_closed_pages_session_stops_drawing(web, scheduler_proc, monkeypatch):
    """Bokeh keeps a closed page's session for 15-32 s; its refresh stops
    drawing as soon as no browser is connected, and an open page's goes
    on (the app served in this process, reading a real scheduler)."""
    import panel as pn

    from slimgraph.dashboard import app as appmod, clusters
    from slimgraph.dashboard.poller import reset_poller

    page, watch = web
    monkeypatch.setenv(clusters.ENV_ADDRESS, scheduler_proc[0])
    reset_poller()
    clusters.reset_manager()
    apps = []

    def make():
        # (not build(): it freezes the process's objects out of the collector)
        app = appmod.App().start()
        app.drawn = 0
        draw = app._render

        def counted():
            app.drawn += 1
            draw()

        app._render = counted
        apps.append(app)
        return app.layout

    port = free_port()
    server = pn.serve({"dashboard": make}, port=port, address="127.0.0.1", show=False, threaded=True,
                      websocket_origin=[f"127.0.0.1:{port}"])  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/dashboard"
        wait_http(url)  # (a session no browser connects to)
        never = apps.pop()
        page.goto(url)
        page.get_by_role("button", name="Submit").wait_for()
        other = page.context.new_page()
        other.goto(url)
        other.get_by_role("button", name="Submit").wait_for()
        assert len(apps) == 2
        first, second = apps
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (first.drawn > 2 and second.drawn > 2):
            time.sleep(0.1)
        assert first.drawn > 2 and second.drawn > 2, (first.drawn, second.drawn)
        other.close()
        time.sleep(1.0)  # (the server sees the websocket close)
        assert first._page_open() and not second._page_open()
        closed_at, open_at = second.drawn, first.drawn
        time.sleep(2.0)  # four refresh periods
        assert second.drawn == closed_at
        assert first.drawn >= open_at + 2
        assert not second._doc.session_context._session.destroyed  # (still kept by Bokeh)
        assert never.drawn == 0
        # a page closed before its deferred charts are built never builds
        # them (their turns are spaced out here so that it closes first)
        monkeypatch.setattr(appmod, "STEP_PAUSE_MS", 3000)
        third = page.context.new_page()
        third.goto(url)
        third.get_by_role("button", name="Submit").wait_for()
        third.close()
        time.sleep(4.5)  # (past the first turn: the figures)
        assert len(apps) == 3 and apps[2].views is None
        assert first.views is not None
    finally:
        server.stop()
        reset_poller()
        clusters.reset_manager()
    assert_clean(watch)


def test_charts_reaching_a_busy_page_are_drawn_in_order(web, scheduler_proc, monkeypatch):
    """The chart tabs reach a page a moment after it opens; if its socket is
    busy then, Panel queues that message, and the refreshes that fall due
    meanwhile stream into those charts. Their messages must not overtake the
    one that sends the charts: the browser would not know the models they
    name ("reference pNNNN isn't known") and the charts would stay empty
    (seen when a job was submitted in a page's first seconds). Here the
    socket is held busy for 1.5 s (three refreshes) as the tabs go out."""
    import panel as pn
    from tornado.ioloop import IOLoop

    from slimgraph.dashboard import app as appmod, clusters
    from slimgraph.dashboard.poller import reset_poller

    page, watch = web
    monkeypatch.setenv(clusters.ENV_ADDRESS, scheduler_proc[0])
    reset_poller()
    clusters.reset_manager()
    real_tabs = pn.Tabs
    held = []

    def tabs_behind_a_busy_socket(*args, **kwargs):
        tabs = real_tabs(*args, **kwargs)
        session = pn.state.curdoc.session_context._session
        loop = IOLoop.current()
        for conn in session._subscribed_connections:  # (none while a page is built)
            lock = conn._socket.write_lock
            lock.acquire().add_done_callback(lambda _, lock=lock: loop.call_later(1.5, lock.release))
            held.append(lock)
        return tabs

    monkeypatch.setattr(pn, "Tabs", tabs_behind_a_busy_socket)
    port = free_port()
    server = pn.serve({"dashboard": lambda: appmod.App().start().layout}, port=port, address="127.0.0.1",
                      show=False, threaded=True, websocket_origin=[f"127.0.0.1:{port}"])  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/dashboard"
        wait_http(url)
        page.goto(url)
        page.get_by_role("button", name="Submit").wait_for()
        wait_model(page, "sg-rss-stock")
        assert held, "the tabs were not sent while the page was connected"
        n = wait_rows(page, "sg-rss-stock", "time", 0, timeout=30)
        wait_rows(page, "sg-rss-stock", "time", n + 2, timeout=30)  # (refreshes still arrive)
    finally:
        server.stop()
        reset_poller()
        clusters.reset_manager()
    assert_clean(watch)


def test_panel_serve_reads_existing_scheduler(web, scheduler_proc, client, tmp_mod):
    page, watch = web
    address, _ = scheduler_proc
    port = free_port()
    app = Proc("panel-serve", [
        sys.executable, "-m", "panel", "serve", "dashboard", "--address", "127.0.0.1",
        "--port", str(port), "--allow-websocket-origin", f"127.0.0.1:{port}",
    ], tmp_mod, env={"SLIMGRAPH_SCHEDULER": address})  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/dashboard", proc=app)
        page.goto(f"http://127.0.0.1:{port}/dashboard")
        wait_model(page, "sg-timing-stock")
        assert source(page, "sg-timing-slim") is None  # one remote scheduler: its kind only
        page.get_by_text("SLIMGRAPH_SCHEDULER").first.wait_for()
        settle(page)
        old_ids = source(page, "sg-timing-stock")["submission_id"]
        before = len(old_ids)
        page.locator("select").nth(1).select_option("1k")
        page.get_by_role("button", name="Submit").click()
        n = wait_rows(page, "sg-timing-stock", "submission_id", before)
        new = source(page, "sg-timing-stock")
        assert new["submission_id"][-1] > max(old_ids, default=0)
        assert 500 < new["tasks"][-1] < 5000  # the 1k array workload
        wait_rows(page, "sg-memory-stock", "path", 0)
        # the lazy containers' tab: its charts are made when it is first shown
        assert source(page, "sg-lazy-stock") is None
        page.locator(".bk-tab", has_text="Lazy containers").click()
        wait_rows(page, "sg-lazy-stock", "time", 0)
        page.locator(".bk-tab", has_text="Event-loop blocks").click()
        wait_model(page, "sg-blocks")
        page.locator(".bk-tab", has_text="Phases and memory").click()  # (its charts come back)
        wait_model(page, "sg-timing-stock")
        page.get_by_text(re.compile(r"job \d+")).first.wait_for()
        page.wait_for_function(
            "() => document.body.innerHTML.length > 0", timeout=5_000)  # page alive
        shot(page, "panel-serve-remote")
        assert n >= 1

        # any number of tasks, not only the presets
        page.get_by_text(re.compile(r"job 1 .*: done")).first.wait_for(timeout=60_000)
        before = nrows(page, "sg-timing-stock", "submission_id")
        box = page.locator(".bk-input-group", has_text="Tasks (about").locator("input").first
        box.fill("1500")
        box.press("Enter")
        # the preset follows what was typed: no preset is 1500
        sync_api.expect(page.locator("select").nth(1)).to_have_value("custom")
        page.get_by_role("button", name="Submit").click()
        page.get_by_text(re.compile(r"job 2 \(array 1.5k\).*: done")).first.wait_for(timeout=60_000)
        wait_rows(page, "sg-timing-stock", "submission_id", before)
        assert 1000 < source(page, "sg-timing-stock")["tasks"][-1] < 2200

        # cancel: a 10k-task job on one single-threaded worker runs for seconds
        page.locator("select").nth(1).select_option("10k")
        sync_api.expect(box).to_have_value("10000")
        page.get_by_role("button", name="Submit").click()
        page.get_by_text(re.compile(r"job 3 .*: running")).first.wait_for(timeout=60_000)
        page.get_by_text(re.compile(r"stock: computing")).first.wait_for(timeout=60_000)
        page.get_by_role("button", name="Cancel").click()
        page.get_by_text(re.compile(r"job 3 .*: cancelled")).first.wait_for(timeout=30_000)
        # the job's thread ends a moment after its phase reads "cancelled"; the next
        # refresh enables Submit again
        sync_api.expect(page.get_by_role("button", name="Submit")).to_be_enabled(timeout=15_000)
        shot(page, "panel-serve-remote-cancelled")
        assert_clean(watch)
    finally:
        app.stop()


# ---------------------------------------------------------------------------
# (a) slimgraph dashboard: engines in processes of their own
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def launched(tmp_mod):
    """``python -m slimgraph dashboard`` on a free port (1 worker per engine)."""
    port = free_port()
    app = Proc("launch", [
        sys.executable, "-m", "slimgraph", "dashboard", "--port", str(port), "--workers", "1",
    ], tmp_mod, cwd=tmp_mod)  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/dashboard", proc=app)
        yield f"http://127.0.0.1:{port}/dashboard", app
    finally:
        app.stop()
    import psutil

    assert not [p for p in psutil.process_iter(["cmdline"])
                if str(tmp_mod) in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid()
                and "dask_" in " ".join(p.info["cmdline"] or [])]  # fmt: skip


def engines_running(page, timeout: float = 180_000) -> tuple[str, ...]:
    """Wait for the engines; the kinds that run (slim may be unavailable)."""
    page.locator(".sg-address[data-kind='stock']").first.wait_for(timeout=timeout)
    if page.get_by_text("slim: not available").count():
        return ("stock",)
    page.locator(".sg-address[data-kind='slim']").first.wait_for(timeout=timeout)
    return ("stock", "slim")


def addresses(page, kinds) -> dict[str, str]:
    return {k: page.locator(f".sg-address[data-kind='{k}']").first.inner_text() for k in kinds}


def summary_values(page) -> dict[tuple[str, str], float | None]:
    cells = page.locator(".sg-summary td.sg-fig")
    out = {}
    for i in range(cells.count()):
        c = cells.nth(i)
        v = c.get_attribute("data-value")
        out[(c.get_attribute("data-kind"), c.get_attribute("data-key"))] = float(v) if v else None
    return out


def no_horizontal_scroll(page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")


#: a figure's x range and x axis label, read from Bokeh's document in the page
X_RANGE_JS = """(name) => {
    for (const d of Bokeh.documents) {
        const m = d.get_model_by_name(name);
        if (m) {
            const axis = m.below.find((a) => a.axis_label != null);
            return {start: m.x_range.start, end: m.x_range.end, label: axis ? axis.axis_label : null};
        }
    }
    return null;
}"""

#: the page's main panels (Panel's cards, Bokeh's figures, the tables) as
#: boxes in page coordinates; those not shown (other tabs) have no size
PANELS_JS = """() => {
    const out = [];
    const visit = (root) => {
        for (const el of root.querySelectorAll('*')) {
            const cls = el.classList;
            let what = null;
            if (cls.contains('card')) what = 'card';
            else if (cls.contains('bk-Figure')) what = 'figure';
            else if (cls.contains('tabulator')) what = 'table';
            if (what) {
                const r = el.getBoundingClientRect();
                if (r.width > 0 && r.height > 0) {
                    const title = what === 'card' ? (el.querySelector('.card-header, .card-title') || el).innerText.split('\\n')[0]
                        : what === 'table' ? (el.innerText || '').trim().split('\\n')[0] : '';
                    out.push({what, title, x: r.left, y: r.top, w: r.width, h: r.height});
                }
            }
            if (el.shadowRoot) visit(el.shadowRoot);
        }
    };
    visit(document);
    return out;
}"""

#: (scrollWidth, clientWidth) of the memory table's rows
TABLE_SCROLL_JS = """(el) => { const h = el.querySelector('.tabulator-tableholder');
    return [h.scrollWidth, h.clientWidth]; }"""


def _overlaps(boxes: list[dict]) -> list[tuple]:
    """Pairs of boxes that overlap by more than a pixel each way."""
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            dx = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
            dy = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
            if dx > 1 and dy > 1:
                out.append((a, b))
    return out


def test_empty_app_charts_set_their_ranges(web):
    """The app's charts as a page opened before the engines answer gets
    them (no RSS sample, no block, no bar, no tree, no census), drawn by
    BokehJS in the browser: no "could not set initial ranges" (Bokeh's
    automatic ranges over empty sources are NaN, and BokehJS warned at
    every paint: 7 warnings per page load while the engines started), no
    console warning or error at all, and finite axes."""
    from bokeh.embed import json_item
    from bokeh.layouts import column
    from bokeh.util.paths import bokehjs_path

    from slimgraph.dashboard.app import BlocksView, CpuView, RssView
    from slimgraph.views.figures import Views

    page, _ = web
    messages: list[str] = []
    page.on("console", lambda m: m.type in ("warning", "error") and messages.append(m.text))
    kinds = ("stock", "slim")
    views = Views(kinds=kinds, sizing_mode="stretch_width", rss=False, census=True)
    rss = RssView(kinds)
    blocks = BlocksView(kinds, rss.figure.x_range)
    cpu = CpuView(kinds, rss.figure.x_range)
    figs = [*views.timing_figs.values(), *views.tree_figs.values(), rss.figure, blocks.figure, cpu.figure,
            *(f.figure for f in views.lazy.values()), *(f.figure for f in views.lazy_attrs.values())]  # fmt: skip
    # the page holds BokehJS itself and the charts' document, nothing else
    # to load (a page with any other resource would log its failure)
    bokehjs = (bokehjs_path() / "js" / "bokeh.min.js").read_text()
    item = json.dumps(json_item(column(*figs, sizing_mode="stretch_width")))
    page.set_content(f"<html><body><script>{bokehjs}</script><div id='root'></div>"
                     f"<script>Bokeh.embed.embed_item({item}, 'root')</script></body></html>")
    page.wait_for_function("() => window.Bokeh && Bokeh.documents.length === 1 && "
                           "Bokeh.documents[0].get_model_by_name('sg-rss-figure') !== null")  # fmt: skip
    page.wait_for_timeout(1500)  # (several paints)
    rss_ranges = page.evaluate("""() => { const m = Bokeh.documents[0].get_model_by_name('sg-rss-figure');
        return [m.x_range.start, m.x_range.end, m.y_range.start, m.y_range.end]; }""")
    assert all(v is not None and abs(v) < float("inf") for v in rss_ranges), rss_ranges
    assert rss_ranges[0] < rss_ranges[1] and rss_ranges[2] == 0 < rss_ranges[3], rss_ranges
    cpu_ranges = page.evaluate("""() => { const m = Bokeh.documents[0].get_model_by_name('sg-cpu-figure');
        return [m.y_range.start, m.y_range.end]; }""")
    assert cpu_ranges[0] == 0 < cpu_ranges[1] < float("inf"), cpu_ranges
    assert not messages, messages
    # the stand-in span goes at the first sample: from then on the data's
    rss.extend("stock", [(1.0e12, 120.0)])
    assert rss.blank.data["time"] == [] and not rss.waiting.visible
    cpu.extend("slim", [(1.0e12, 12.0)])
    assert cpu.blank.data["time"] == [] and not cpu.waiting.visible


def _open_launched(page, url: str, height: int) -> list[str]:
    """Open the app 1,440 px wide; the list its console warnings and errors go to."""
    messages: list[str] = []
    page.on("console", lambda m: m.type in ("warning", "error") and messages.append(m.text))
    page.set_viewport_size({"width": 1440, "height": height})
    page.goto(url)
    return messages


@pytest.mark.timeout(300)
def test_launch_page_is_clean_fits_every_width_and_fits_a_tree(web, launched):
    """The main job's page over a load and a small job (opened while the
    engines may still be starting): no console warning or error; at 1,000,
    1,440 and 1,920 px the page never scrolls sideways, its cards, charts
    and tables do not overlap, and the memory table's columns fit; the
    "fit" toggle draws slim's tree at its own extent and back."""
    page, watch = web
    messages = _open_launched(page, launched[0], 1100)
    wait_model(page, "sg-memory-figure-stock")
    kinds = engines_running(page)
    page.locator("select").nth(1).select_option("1k")
    page.get_by_role("checkbox", name=re.compile("ingest only")).check()
    page.get_by_role("button", name="both" if len(kinds) == 2 else "stock", exact=True).click()
    page.get_by_role("button", name="Submit").click()
    page.get_by_text(re.compile(r"job \d+ \(array 1k\).*: done")).first.wait_for(timeout=120_000)
    for k in kinds:
        wait_rows(page, f"sg-memory-{k}", "x1", 1, timeout=30)
        # the branches are tints of the engine's colour, not greys (dark
        # ones hid their labels): no colour below the root has r = g = b
        tree = source(page, f"sg-memory-{k}")
        greys = [c for c, d in zip(tree["color"], tree["depth"]) if d > 0 and len(set(c[1:].lower()[i:i + 2]
                 for i in (0, 2, 4))) == 1]  # fmt: skip
        assert not greys, (k, greys)
    memory = page.locator(".tabulator", has_text="B/task").first
    memory.locator(".tabulator-row").first.wait_for(timeout=30_000)

    for width in (1000, 1440, 1920):
        # (tall enough that the whole first tab is in the screenshot)
        page.set_viewport_size({"width": width, "height": 2300})
        page.wait_for_timeout(1200)  # (Bokeh lays out again after a resize)
        sw, cw = page.evaluate("() => [document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]")
        assert sw <= cw, (width, sw, cw)
        panels = page.evaluate(PANELS_JS)
        kinds_seen = sorted({p["what"] for p in panels})
        # the summary, history, phases and memory cards; 2 phase charts, 2
        # trees, RSS and CPU per two engines; the history and the memory table
        assert kinds_seen == ["card", "figure", "table"], panels
        assert len([p for p in panels if p["what"] == "figure"]) == 2 * len(kinds) + 2, panels
        assert len([p for p in panels if p["what"] == "table"]) == 2, panels
        for group in ("card", ("figure", "table")):
            boxes = [p for p in panels if p["what"] in group]
            bad = _overlaps(boxes)
            assert not bad, (width, bad)
        for p in panels:  # nothing runs past the window's right edge
            assert p["x"] >= 0 and p["x"] + p["w"] <= cw + 1, (width, p)
        scroll_w, client_w = memory.evaluate(TABLE_SCROLL_JS)
        assert scroll_w <= client_w + 1, (width, scroll_w, client_w)  # every column shown
        shot(page, f"launch-polish-{width}")

    # fit slim's tree to its own extent, and back to the one byte scale
    if "slim" in kinds:
        page.set_viewport_size({"width": 1440, "height": 2300})
        slim_x1 = max(source(page, "sg-memory-slim")["x1"])
        stock_x1 = max(source(page, "sg-memory-stock")["x1"])
        shared = page.evaluate(X_RANGE_JS, "sg-memory-figure-slim")
        assert shared["end"] == page.evaluate(X_RANGE_JS, "sg-memory-figure-stock")["end"] == stock_x1
        assert slim_x1 < 0.8 * stock_x1, (slim_x1, stock_x1)  # (a fit that changes something)
        assert "same scale" in shared["label"]
        page.get_by_role("checkbox", name=re.compile("fit slim")).check()
        # (the range and the axis label may arrive in two messages)
        page.wait_for_function(f"""() => {{ const x = ({X_RANGE_JS})('sg-memory-figure-slim');
            return x.end === {slim_x1} && x.label.includes('own scale'); }}""", timeout=15_000)  # fmt: skip
        fitted = page.evaluate(X_RANGE_JS, "sg-memory-figure-slim")
        assert fitted["start"] == 0, fitted
        assert page.evaluate(X_RANGE_JS, "sg-memory-figure-stock")["end"] == stock_x1  # stock stays
        shot(page, "launch-polish-fit-slim")
        page.get_by_role("checkbox", name=re.compile("fit slim")).uncheck()
        page.wait_for_function(f"""() => {{ const x = ({X_RANGE_JS})('sg-memory-figure-slim');
            return x.end === {stock_x1} && x.label.includes('same scale'); }}""", timeout=15_000)  # fmt: skip
    # the other tabs' charts, made when first shown, warn of nothing either
    page.locator(".bk-tab", has_text="Event-loop blocks").click()
    wait_model(page, "sg-blocks")
    page.locator(".bk-tab", has_text="Lazy containers").click()
    wait_rows(page, "sg-lazy-stock", "time", 0, timeout=30)
    page.wait_for_timeout(1000)
    assert not messages, messages
    assert_clean(watch)


def _submit_and_wait(page, size: str) -> str:
    """Submit (an array job of ``size``, as the launcher shows it); the
    job's id once it is done."""
    # (an earlier test's job may be the latest until this one's is shown)
    earlier = page.locator(".sg-summary[data-job]")
    earlier = earlier.first.get_attribute("data-job") if earlier.count() else None
    page.get_by_role("button", name="Submit").click()
    job = page.locator(".sg-summary[data-job]" + (f":not([data-job='{earlier}'])" if earlier else "")).first
    job.wait_for(timeout=30_000)
    job_id = job.get_attribute("data-job")
    page.get_by_text(re.compile(rf"job {job_id} \(array {re.escape(size)}\).*: done")).first.wait_for(timeout=240_000)
    return job_id


@pytest.mark.timeout(600)
def test_launch_both_engines_summary_equals_records(web, launched):
    """Submit on both engines at once; the summary strip's figures are the
    records each scheduler process holds; history, CSV, memray; widths."""
    from distributed import Client

    from slimgraph.dashboard.summary import fmt as summary_fmt
    from slimgraph.instrument.client import get_memray_results, get_submissions
    from slimgraph.instrument.offline_html import remote_assets

    page, watch = web
    url, _ = launched
    page.goto(url)
    kinds = engines_running(page)
    page.get_by_role("button", name="Submit").wait_for()
    page.wait_for_function(f"() => ({COLUMNS_JS})('job') !== null", timeout=60_000)
    history_columns = page.evaluate(COLUMNS_JS, "job")
    box = page.locator(".bk-input-group", has_text="Tasks (about").locator("input").first
    box.fill("not a number")
    box.press("Enter")
    page.get_by_role("button", name="Submit").click()
    page.get_by_text(re.compile("Cannot submit.*positive whole number")).first.wait_for(timeout=20_000)
    box.fill("1500")
    box.press("Enter")
    page.get_by_role("button", name="both" if len(kinds) == 2 else "stock").click()
    page.get_by_role("checkbox", name=re.compile("memray")).check()
    page.get_by_role("checkbox", name=re.compile("ingest only")).check()
    job_id = _submit_and_wait(page, "1.5k")
    page.wait_for_timeout(1500)  # one more refresh after the end
    # the job history got its row in the columns it was sent before it had
    # any (new column models while pages load break reloads: App._memory_frame)
    assert page.evaluate(COLUMNS_JS, "job") == history_columns
    shown = summary_values(page)
    for kind, address in addresses(page, kinds).items():
        with Client(address, timeout="30s", set_as_default=False) as c:
            recs = [r for r in get_submissions(c) if r.status == "OK" and r.tasks > 1000]
            assert {r.status for r in get_submissions(c)} == {"OK"}
        assert recs, kind
        rec = recs[-1]
        assert shown[(kind, "update_graph_s")] == pytest.approx(rec.total_s, rel=1e-9)
        assert shown[(kind, "us_per_task")] == pytest.approx(rec.total_s / rec.tasks * 1e6, rel=1e-9)
        assert shown[(kind, "longest_block_s")] == pytest.approx(rec.longest_block_s, rel=1e-9)
        own = (rec.block_causes or {}).get("ingestion")
        if own is not None:
            assert shown[(kind, "own_block_s")] == pytest.approx(own["seconds"], rel=1e-9)
        else:
            assert shown[(kind, "own_block_s")] is None  # shown as "< 50 ms", no value
        assert shown[(kind, "rss_per_task")] == pytest.approx(
            (rec.rss_after - rec.rss_before) / rec.tasks, rel=1e-9)  # fmt: skip
        assert shown[(kind, "state_per_task")] > 0
        # the bars: one per engine at the job's slot, labelled by the job
        timing = source(page, f"sg-timing-{kind}")
        assert rec.submission_id in timing["submission_id"]
    # ingest only: the graphs are released, and each memory tree is the one
    # kept at the end of the job's ingestion (not the empty live state)
    for kind in kinds:
        title = page.evaluate(TITLE_JS, f"sg-memory-figure-{kind}")
        assert title.endswith(f"kept at the end of job {job_id}'s ingestion"), title
        tree = source(page, f"sg-memory-{kind}")
        assert len(tree["x1"]) > 1 and max(tree["bytes"]) > 0, kind
    if len(kinds) == 2:
        ing = page.locator(".sg-summary td[data-kind='slim'][data-key='ingestion']").inner_text()
        assert ing.startswith(("staged", "in place"))
        xs = {k: source(page, f"sg-timing-{k}")["x"][-1] for k in kinds}
        assert xs["stock"] == xs["slim"]
    # the trees as a table: per part, each engine's bytes per task, largest first
    table = page.locator(".tabulator", has_text="B/task").first
    table.wait_for(timeout=30_000)
    heads = [h for h in table.locator(".tabulator-col-title").all_inner_texts() if h.strip()]
    assert heads[0] == "part" and all(f"{k} B/task" in heads for k in kinds), heads
    assert table.locator(".tabulator-row").count() > 1
    top = {k: max(b for b, d in zip(source(page, f"sg-memory-{k}")["bytes_per_task"],
                                     source(page, f"sg-memory-{k}")["depth"]) if d == 1) for k in kinds}  # fmt: skip
    big = max(kinds, key=lambda k: top[k])  # the largest part of either tree comes first
    cell = table.locator(".tabulator-row").first.locator(f".tabulator-cell[tabulator-field='{big} B/task']")
    assert cell.inner_text().strip() == summary_fmt(top[big], "B")
    assert "NaN" not in table.inner_text()
    if len(kinds) == 2:  # both trees of this job: their difference
        assert "stock - slim B/task" in heads and not page.locator(".sg-memory-note").count()
        first_diff = table.locator(".tabulator-row").first.locator(".tabulator-cell[tabulator-field='stock - slim B/task']")
        assert first_diff.inner_text().strip() not in ("", "-")
    table.scroll_into_view_if_needed()
    shot(page, "launch-memory-table")
    # the history table and its CSV
    with page.expect_download(timeout=30_000) as dl:
        page.get_by_role("button", name=re.compile(r"Download the job history \(CSV\)")).click()
    csv = Path(dl.value.path()).read_text()
    head, *rows = csv.strip().splitlines()
    assert "stock update_graph_s" in head and any(r.startswith(f"{job_id},array,1500,") for r in rows)
    with page.expect_download(timeout=30_000) as dl:
        page.get_by_role("button", name=re.compile(r"Download the job history \(Parquet\)")).click()
    import pandas as pd

    frame = pd.read_parquet(dl.value.path())
    assert list(frame.columns) == head.split(",") and int(frame["job"].iloc[-1]) == int(job_id)
    assert frame["stock update_graph_s"].iloc[-1] == pytest.approx(shown[("stock", "update_graph_s")], rel=1e-9)
    if len(kinds) == 2:  # the bench's array is compact on slim, dask's on stock
        mat = page.locator(".sg-summary td[data-kind='slim'][data-key='materialization']").inner_text()
        assert mat.startswith("compact") and frame["slim materialization"].iloc[-1] == mat
    for k in kinds:
        button = page.get_by_role("button", name=re.compile(rf"memray flamegraph \({k}, job"))
        button.wait_for(timeout=120_000)
        with page.expect_download(timeout=30_000) as dl:
            button.click()
        html = Path(dl.value.path()).read_text(errors="replace")
        assert len(html) > 10_000 and "update_graph" in html
        assert remote_assets(html) == []  # works offline: no CDN
        # in the page: the capture's peak, allocations and top sites, as the
        # engine's own summary of the capture gives them
        shown = page.locator(f".sg-memray[data-kind='{k}']").first
        with Client(addresses(page, kinds)[k], timeout="30s", set_as_default=False) as c:
            caps = get_memray_results(c, flamegraph=False)
        assert int(shown.locator(".sg-memray-peak").get_attribute("data-value")) == caps[-1]["peak_bytes"] > 0
        assert int(shown.locator(".sg-memray-allocations").get_attribute("data-value")) == caps[-1]["total_allocations"]
        assert shown.locator("ol.sg-memray-top li").count() > 0
    # the phase bars per task: the per-task stack shows, the seconds one hides
    visible_js = """(name) => { for (const d of Bokeh.documents) {
        const m = d.get_model_by_name(name); if (m) return m.visible; } return null; }"""
    k0 = kinds[-1]
    assert page.evaluate(visible_js, f"sg-phase-order-{k0}") is True
    page.get_by_role("button", name="us per task").click()
    try:
        page.wait_for_function(f"() => ({visible_js})('sg-pertask-order-{k0}') === true", timeout=15_000)
    except sync_api.TimeoutError:
        # seen in some full runs on the 2-core machine, never alone: say
        # what the page holds, then toggle once more (a user would); a
        # toggle that never takes still fails below
        names = """() => { const out = []; for (const d of Bokeh.documents) {
            for (const m of d._all_models.values()) { if (m.name && m.name.startsWith('sg-p'))
            out.push(m.name + '=' + m.visible); } } return [Bokeh.documents.length, out]; }"""
        print("per-task bars not shown after 15 s:", kinds, page.evaluate(names))
        print(launched[1].log_tail(40))
        page.get_by_role("button", name="seconds").click()
        page.wait_for_timeout(1000)
        page.get_by_role("button", name="us per task").click()
        page.wait_for_function(f"() => ({visible_js})('sg-pertask-order-{k0}') === true", timeout=30_000)
    assert page.evaluate(visible_js, f"sg-phase-order-{k0}") is False
    shot(page, "launch-phase-bars-per-task")
    page.get_by_role("button", name="seconds").click()
    page.wait_for_function(f"() => ({visible_js})('sg-phase-order-{k0}') === true", timeout=15_000)
    for width in (1000, 1920):
        page.set_viewport_size({"width": width, "height": 1100})
        page.wait_for_timeout(800)
        assert no_horizontal_scroll(page), width
        shot(page, f"launch-summary-{width}")
    # every control has a label; the dask dashboard links have distinct names
    links = [page.locator("a", has_text=f"{k} dask dashboard").count() for k in kinds]
    assert links == [1] * len(kinds)
    assert_clean(watch)


def _submit_life(page, preset: str, cancel_after: str, kinds) -> str:
    """Submit an array job of ``preset`` size, computed (cancelled
    ``cancel_after`` s after its ingestion, or to the end when empty), to
    every engine; its id once done."""
    page.locator("select").nth(1).select_option(preset)
    box = page.locator(".bk-input-group", has_text="Cancel after N s").locator("input").first
    box.fill(cancel_after)
    box.press("Enter")
    page.get_by_role("button", name="both" if len(kinds) == 2 else "stock", exact=True).click()
    return _submit_and_wait(page, preset)


@pytest.mark.timeout(600)
def test_launch_whole_life_to_the_end_and_cancelled(web, launched):
    """The main job's whole life, on both engines: one job computed to the
    end and one cancelled a second after its ingestion. Every stage figure
    in the summary strip (scheduler CPU per task of ingest, run and release,
    the run's dispatch, completions and other, the longest loop block of each, peak RSS growth, tasks completed per
    second) is the one the job's whole-life records give
    (``life_figures``, as ``bench --mode life`` computes its own), and the
    records are what the schedulers hold: the ingestion ends at the
    update_graph record's end, the blocks are the loop monitor's, the CPU
    is the scheduler process's (read by pid). The CPU chart shows each
    process's CPU and shades the stages at the records' bounds; the job
    history's CSV carries the figures; no console warning or error."""
    import psutil
    from distributed import Client

    from slimgraph.dashboard.summary import LIFE_FIGURES, fmt, life_keys
    from slimgraph.instrument.client import get_submissions
    from slimgraph.instrument.feed import RemoteFeed
    from slimgraph.instrument.stages import STAGE_LABELS, LifeRecords, life_figures

    page, watch = web
    messages = _open_launched(page, launched[0], 1300)
    kinds = engines_running(page)
    wait_model(page, "sg-cpu-figure")
    pids = {k: int(page.locator(f".sg-pid[data-kind='{k}']").first.inner_text().split()[-1]) for k in kinds}
    units = {key: unit for key, _, unit in LIFE_FIGURES}
    sampled: set = set()  # (job, engine) whose run py-spy split into its parts
    for preset, cancel_after in (("1k", ""), ("10k", "1")):
        job_id = _submit_life(page, preset, cancel_after, kinds)
        button = page.get_by_role("button", name=f"whole-life records (JSON, job {job_id})")
        button.wait_for(timeout=30_000)
        with page.expect_download(timeout=30_000) as dl:
            button.click()
        data = json.loads(Path(dl.value.path()).read_text())
        page.wait_for_timeout(1500)  # (one more refresh after the end)
        shown = summary_values(page)
        stages = source(page, "sg-stages")
        for k in kinds:
            rec = LifeRecords.from_dict(data[k]["records"])
            figures = life_figures(rec)
            assert figures == data[k]["figures"]
            # the page shows the records' figures, every digit in data-value
            for key, value in life_keys(figures).items():
                if value is None:
                    assert shown[(k, key)] is None, (k, key)
                    continue
                assert shown[(k, key)] == pytest.approx(value, rel=1e-12), (k, key)
                cell = page.locator(f".sg-summary td.sg-fig[data-kind='{k}'][data-key='{key}']").first
                text = "< 50 ms" if key.endswith("_longest_block_s") and value == 0 else fmt(value, units[key])
                assert cell.inner_text().strip() == text, (k, key)
            b = rec.bounds
            assert list(b) == ["ingest", "run", "release"]
            assert b["ingest"][1] == b["run"][0] < b["run"][1] <= b["release"][0] < b["release"][1]
            # the records are the schedulers': the update_graph record, the
            # loop monitor's blocks, the process's CPU
            with Client(addresses(page, kinds)[k], timeout="30s", set_as_default=False) as c:
                sub = [r for r in get_submissions(c) if r.status == "OK"][-1]
                feed = RemoteFeed(c, k)
                blocks = feed.sync(feed.loop_blocks, b["ingest"][0], timeout=30)
            assert rec.tasks == sub.tasks and b["ingest"][1] == pytest.approx(sub.start + sub.total_s, abs=1e-6)
            end = b["release"][1]
            assert [tuple(x) for x in rec.blocks if x[0] <= end] == \
                [(x["wall_end"], x["seconds"]) for x in blocks if x["wall_end"] <= end]
            times, cpu = [t for t, _, _ in rec.samples], [c for _, c, _ in rec.samples]
            assert times[0] <= b["ingest"][0] and times[-1] >= end and times == sorted(times)
            assert cpu == sorted(cpu) and cpu[-1] <= sum(psutil.Process(pids[k]).cpu_times()[:2]) + 0.02
            assert figures["stages"]["run"]["cpu_s"] > 0
            # the run's CPU split into dispatch, completions and other by
            # py-spy's samples of it (bench --mode life's split); a run
            # too short for a sample says so where its parts would be
            # (py-spy is installed here: a run is sampled, unless it ended
            # before py-spy's first sample of a thread holding the GIL)
            parts = figures["stages"]["run"]["parts"]
            assert data[k]["run_profiled"] in ("py-spy", "py-spy took no sample of it (a run too short)"), data[k]
            if parts is not None:
                sampled.add((job_id, k))
                assert data[k]["run_profiled"] == "py-spy" and sum(rec.run_parts.values()) > 0
                assert sum(p["cpu_s"] for p in parts.values()) == pytest.approx(figures["stages"]["run"]["cpu_s"])
            else:
                cell = page.locator(f".sg-summary td.sg-fig[data-kind='{k}'][data-key='dispatch_cpu_us_per_task']")
                assert data[k]["run_profiled"] in cell.first.get_attribute("title"), data[k]["run_profiled"]
            if cancel_after:
                assert 0 < rec.completed < rec.tasks, (rec.completed, rec.tasks)
                assert b["run"][1] - b["run"][0] == pytest.approx(float(cancel_after), abs=0.5)
            else:
                assert rec.completed == rec.tasks
            assert figures["tasks_per_s"] == pytest.approx(rec.completed / (b["run"][1] - b["run"][0]))
            # the CPU chart: the process's CPU, and this job's stages shaded
            # at the records' bounds (stock above, slim below)
            assert nrows(page, f"sg-cpu-{k}", "cpu") > 0
            for stage, (a, z) in b.items():
                rows = [i for i, (kind, st) in enumerate(zip(stages["kind"], stages["stage"]))
                        if kind == k and st == STAGE_LABELS[stage] and stages["left"][i] == pytest.approx(a * 1000, abs=1)]
                assert len(rows) == 1, (k, stage, stages)
                assert stages["right"][rows[0]] == pytest.approx(z * 1000, abs=1)
                assert (stages["bottom"][rows[0]], stages["top"][rows[0]]) == (
                    (0.5, 1) if k == "stock" or len(kinds) == 1 else (0, 0.5))
        assert f"job {job_id}" in page.locator(".sg-summary-title").inner_text()
        # the job history's CSV: the same figures
        with page.expect_download(timeout=30_000) as dl:
            page.get_by_role("button", name=re.compile(r"Download the job history \(CSV\)")).click()
        import pandas as pd

        frame = pd.read_csv(dl.value.path())
        row = frame[frame["job"] == int(job_id)].iloc[-1]
        for k in kinds:
            for key, value in life_keys(data[k]["figures"]).items():
                if value is not None:
                    assert row[f"{k} {key}"] == pytest.approx(value, rel=1e-9), (k, key)
            if len(kinds) == 2:
                assert row["ratio run_cpu_us_per_task"] == pytest.approx(
                    data["stock"]["figures"]["stages"]["run"]["cpu_us_per_task"]
                    / data["slim"]["figures"]["stages"]["run"]["cpu_us_per_task"], rel=1e-9)  # fmt: skip
        # (tall enough for the whole first tab: the CPU chart at its end)
        page.set_viewport_size({"width": 1440, "height": 2700})
        page.wait_for_timeout(1000)
        shot(page, f"launch-life-{'cancelled' if cancel_after else 'to-the-end'}")
        page.set_viewport_size({"width": 1440, "height": 1300})
    # the second job's run (a busy second of a 10k array) was sampled on
    # one engine at least: its parts are on the page, checked above
    assert any(j == job_id for j, _ in sampled), sampled
    for width in (1000, 1920):
        page.set_viewport_size({"width": width, "height": 1100})
        page.wait_for_timeout(800)
        assert no_horizontal_scroll(page), width
    assert not messages, messages
    assert_clean(watch)


def _answer_s(page, preset: str, expected: str) -> float:
    """Seconds from choosing a size preset until the server's answer (the
    task count it fills in) shows in the page."""
    box = page.locator(".bk-input-group", has_text="Tasks (about").locator("input").first
    t0 = time.monotonic()
    page.locator("select").nth(1).select_option(preset)
    page.wait_for_function("([el, v]) => el.value === v", arg=[box.element_handle(), expected],
                           timeout=60_000)  # fmt: skip
    return time.monotonic() - t0


@pytest.mark.timeout(600)
def test_launch_stays_live_while_stock_ingests(web, launched, chromium):
    """A large stock ingestion ("ingest only") blocks the stock scheduler's
    loop for seconds; the app keeps answering (widget changes, page loads,
    RSS points), shows the ingestion, and many reloads break nothing: no
    broken session, dask's /status of both engines answers 200."""
    from slimgraph import workloads

    page, watch = web
    url, _ = launched
    page.goto(url)
    kinds = engines_running(page)
    page.wait_for_function(f"() => ({COLUMNS_JS})('part') !== null", timeout=60_000)
    columns_before = page.evaluate(COLUMNS_JS, "part")
    page.locator("select").nth(1).select_option("100k")
    box = page.locator(".bk-input-group", has_text="Tasks (about").locator("input").first
    # (the server's answer to the preset, "100000", must land before the
    # count is typed: arriving during the typing, under load, it made
    # "100000120000" and a job of 100 billion tasks)
    sync_api.expect(box).to_have_value("100000", timeout=60_000)
    box.fill("120000")
    sync_api.expect(box).to_have_value("120000")
    box.press("Enter")
    page.get_by_role("button", name="stock", exact=True).click()
    page.get_by_role("checkbox", name=re.compile("ingest only")).check()
    page.get_by_role("button", name="Submit").click()
    page.get_by_text(re.compile(r"ingesting job \d+: update_graph running")).first.wait_for(timeout=120_000)
    # the running ingestion is shaded on the RSS chart while it runs (from
    # the scheduler's status, as soon as its loop answers during it)
    page.wait_for_function(f"""() => {{ const s = ({SOURCE_JS})('sg-ingestions-live');
        return s && s.kind.length === 1 && s.kind[0] === 'stock' && s.right[0] > s.left[0]; }}""",
                           timeout=120_000)  # fmt: skip
    answers, loads = [], []
    presets = [p for p in ("1k", "10k") for _ in range(2)]
    for p in presets:
        if not page.get_by_text(re.compile("ingesting job")).count():
            break
        answers.append(_answer_s(page, p, str(workloads.SIZES[p])))
        other = page.context.new_page()
        t0 = time.monotonic()
        other.goto(url, wait_until="domcontentloaded", timeout=120_000)
        other.get_by_role("button", name="Submit").wait_for(timeout=120_000)
        loads.append(time.monotonic() - t0)
        other.close()
    shot(page, "launch-while-stock-ingests")
    page.get_by_text(re.compile(r"job \d+ .*: done")).first.wait_for(timeout=600_000)
    page.wait_for_function(f"() => ({SOURCE_JS})('sg-ingestions-live').left.length === 0", timeout=30_000)
    assert "stock" in source(page, "sg-ingestions")["kind"]  # ... and from its record once done
    # the memory table of a page open since before the job: the kept tree's
    # parts, filled in (it showed NaN in every cell once the table had been
    # sent empty, until the page was reloaded)
    memory = page.locator(".tabulator", has_text="stock B/task").first
    memory.locator(".tabulator-row").first.wait_for(timeout=30_000)
    first = memory.locator(".tabulator-row").first.locator(".tabulator-cell[tabulator-field='part']")
    assert first.inner_text().strip() and "NaN" not in memory.inner_text()
    # ... in the columns it was sent when the page opened: new column models
    # while pages load broke reloads now and then (BokehJS: "reference ...
    # isn't known"; see App._memory_frame)
    assert page.evaluate(COLUMNS_JS, "part") == columns_before
    # after the earlier test's job on both engines, slim's tree is of that
    # job and stock's of this one: two graphs, said so, and no difference
    titles = {k: page.evaluate(TITLE_JS, f"sg-memory-figure-{k}") for k in kinds}
    # every memory title has two lines, as when the page was laid out (a
    # second line added later was drawn over the card's header)
    assert all(t.count("\n") == 1 for t in titles.values()), titles
    jobs_shown = {k: re.findall(r"job (\d+)'s ingestion", t) for k, t in titles.items()}
    heads = [h for h in memory.locator(".tabulator-col-title").all_inner_texts() if h.strip()]
    if len(kinds) == 2 and jobs_shown["slim"] and jobs_shown["slim"] != jobs_shown["stock"]:
        note = page.locator(".sg-memory-note").first.inner_text()
        assert "not one graph at one point" in note and f"job {jobs_shown['slim'][0]} " in note, note
        diff = memory.locator(".tabulator-cell[tabulator-field='stock - slim B/task']").all_inner_texts()
        assert diff and not any(t.strip() for t in diff), diff  # (the column stays; blank)
    else:
        print("one graph's trees only:", titles)
    rss = source(page, "sg-rss-stock")["time"]
    gaps = [(b - a) / 1000 for a, b in zip(rss, rss[1:])]
    print(f"\nwidget answers (s): {[round(a, 2) for a in answers]}; page loads (s): "
          f"{[round(t, 2) for t in loads]}; longest RSS refresh gap (s): {max(gaps):.2f}")
    assert answers, "the ingestion ended before any widget change could be timed"
    # Every change was answered and every page came up while stock's loop was
    # blocked (each wait above fails after 60-120 s otherwise). The times go to
    # the output, not into assertions: on a shared 2-core machine one answer
    # took 14.7 s (behind another session's document build), others < 1 s.
    # RSS is read by pid, not through the blocked loop: its points keep coming.
    assert max(gaps) < 10
    # history on open: a new session shows the job's bar; reloads break nothing
    for _ in range(5):
        page.reload(wait_until="domcontentloaded", timeout=120_000)
        page.get_by_role("button", name="Submit").wait_for(timeout=120_000)
    wait_rows(page, "sg-timing-stock", "submission_id", 0, timeout=60)
    assert source(page, "sg-timing-stock")["tasks"][-1] > 100_000
    # a stock-only job: the history's slim cells are dashes, not NaN
    history = page.locator(".tabulator", has_text="requested tasks").first
    history.wait_for(timeout=30_000)
    assert "NaN" not in history.inner_text()
    for kind, address in addresses(page, kinds).items():
        link = page.locator("a", has_text=f"{kind} dask dashboard").first.get_attribute("href")
        for _ in range(3):
            with urllib.request.urlopen(link, timeout=60) as r:
                assert r.status == 200
    shot(page, "launch-after-reloads")
    assert_clean(watch)


# ---------------------------------------------------------------------------
# (b) JupyterLab: launcher tile and a notebook cell
# ---------------------------------------------------------------------------


def test_jupyterlab_launcher_tile_and_notebook(web, scheduler_proc, client, tmp_mod):
    page, watch = web
    address, _ = scheduler_proc
    import dask.bag as db

    assert client.compute(db.range(100, npartitions=10).sum()).result(timeout=60) == 4950
    port, token, base = free_port(), "sgtoken", "/jl/"
    nbdir = tmp_mod / "nb"
    nbdir.mkdir(exist_ok=True)
    nb = {
        "cells": [{
            "cell_type": "code", "execution_count": None, "id": "c1", "metadata": {}, "outputs": [],
            "source": ["from slimgraph.dashboard.app import show_in_notebook\n",
                       "show_in_notebook()"],
        }],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }  # fmt: skip
    (nbdir / "dash.ipynb").write_text(json.dumps(nb))
    home = tmp_mod / "jhome"
    env = {
        "SLIMGRAPH_SCHEDULER": address,
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "IPYTHONDIR": str(home / "ipython"),
    }
    lab = Proc("jupyterlab", [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip", "127.0.0.1",
        "--port", str(port), f"--IdentityProvider.token={token}", f"--ServerApp.base_url={base}",
        f"--ServerApp.root_dir={nbdir}", "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
        *(["--allow-root"] if os.geteuid() == 0 else []),
    ], tmp_mod, env=env)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}{base}"
        wait_http(f"{url}api/status?token={token}", proc=lab)
        page.goto(f"{url}lab?token={token}")
        tile = page.locator(".jp-LauncherCard", has_text="slimgraph dashboard")
        tile.first.wait_for(timeout=60_000)
        lab_errors = list(watch.errors)
        with page.context.expect_page(timeout=30_000) as new:
            tile.first.click()
        app = new.value
        app.wait_for_load_state()
        wait_model(app, "sg-timing-stock", timeout=90_000)
        assert urlparse(app.url).path.startswith(f"{base}slimgraph/dashboard")
        app.get_by_text("SLIMGRAPH_SCHEDULER").first.wait_for()
        settle(app)
        assert nrows(app, "sg-timing-stock", "submission_id") >= 1  # the scheduler's history
        shot(app, "jupyterlab-proxied-app")
        app_errors = [e for e in watch.errors if "/slimgraph/" in e]
        assert not app_errors, "console errors:\n" + "\n".join(app_errors)
        app.close()

        # a notebook cell, offline (inline BokehJS and CSS)
        # (its own workspace: two windows on one workspace make JupyterLab
        # redirect the second one while it loads)
        nbpage = page.context.new_page()
        nbpage.goto(f"{url}lab/workspaces/nb/tree/dash.ipynb?token={token}")
        nbpage.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
        nbpage.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first.wait_for(timeout=60_000)
        nbpage.wait_for_timeout(1000)
        nbpage.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first.click()
        nbpage.keyboard.press("Shift+Enter")
        try:
            wait_model(nbpage, "sg-timing-stock", timeout=120_000)
        except Exception as e:
            raise AssertionError(f"the notebook cell did not render the app; console errors: {watch.errors}") from e
        nbpage.locator(".jp-OutputArea-output canvas").first.wait_for(state="attached", timeout=60_000)
        settle(nbpage, ticks=3)  # live updates reach the notebook (comm pushes)
        shot(nbpage, "jupyterlab-notebook-cell")
        # JupyterLab's own console messages are not ours; nothing may come
        # from the app's pages (Bokeh/Panel) and nothing may leave the host
        ours = [e for e in watch.errors if e not in lab_errors
                and any(w in e.lower() for w in ("bokeh", "panel", "slimgraph"))]
        assert not ours, "console errors:\n" + "\n".join(ours)
        outside = watch.outside()
        assert not outside, f"requests to outside hosts: {outside}"
    finally:
        lab.stop()


# ---------------------------------------------------------------------------
# (c) the individual pages as dask-labextension shows them: in an iframe pane
# ---------------------------------------------------------------------------


def _pane(page, url: str, width: int, height: int):
    """``url`` in an iframe of ``width`` x ``height`` (a JupyterLab pane, as
    dask-labextension embeds individual pages); its frame."""
    page.set_content(
        f'<html><body style="margin:0"><iframe id="pane" src="{url}" '
        f'style="width:{width}px;height:{height}px;border:0"></iframe></body></html>')
    frame = page.frame_locator("#pane")
    frame.locator("canvas").first.wait_for(state="attached", timeout=60_000)
    return next(f for f in page.frames if f.url.startswith(url))


def _drawn_box(page) -> tuple[float, float]:
    """Width and height spanned by the canvases in the pane (shadow DOM included)."""
    boxes = [b for b in (c.bounding_box() for c in page.frame_locator("#pane").locator("canvas").all())
             if b and b["width"] > 0]  # fmt: skip
    assert boxes, "nothing drawn"
    return (max(b["x"] + b["width"] for b in boxes) - min(b["x"] for b in boxes),
            max(b["y"] + b["height"] for b in boxes) - min(b["y"] for b in boxes))


def test_individual_pages_fill_the_pane_and_show_history(web, scheduler_proc, client):
    """Opened after a submission, each individual page holds the records the
    scheduler already has (timing bars, RSS marks), fills its pane both ways
    at two pane sizes, and logs no warning (no "could not set initial
    ranges") and no error."""
    import dask.array as da

    from slimgraph.instrument import client as sgc

    page, watch = web
    _, dash = scheduler_proc
    warnings: list[str] = []
    page.on("console", lambda m: m.type in ("warning", "error") and warnings.append(m.text))
    assert client.compute((da.ones((300, 300), chunks=10) + 1).sum()).result(timeout=60) == 180_000
    done = [r for r in sgc.get_submissions(client) if r.status != "running"]
    assert done

    for which, (w, h) in {"timing": (900, 600), "memory": (900, 600),
                          "lazy-sets": (900, 600)}.items():  # fmt: skip
        url = f"{dash}/individual-slimgraph-{which}"
        frame = _pane(page, url, w, h)
        if which == "timing":
            frame.wait_for_function(
                "([n, k]) => { const s = Bokeh.documents[0].get_model_by_name(n);"
                " return s && s.data.submission_id.length >= k; }",
                arg=["sg-timing-stock", len(done)], timeout=60_000)  # fmt: skip
            ids = frame.evaluate(SOURCE_JS, "sg-timing-stock")["submission_id"]
            assert [r.submission_id for r in done] == ids[-len(done):]
        if which == "memory":
            frame.wait_for_function(
                "() => { const s = Bokeh.documents[0].get_model_by_name('sg-rss-marks');"
                " return s && s.data.time.length >= 2; }", timeout=60_000)  # fmt: skip
        page.wait_for_timeout(1500)
        dw, dh = _drawn_box(page)
        assert dw >= 0.9 * w and dh >= 0.85 * h, (which, dw, dh)
        shot(page, f"scheduler-individual-{which}-pane")

    frame = _pane(page, f"{dash}/individual-slimgraph-memory", 1300, 900)
    page.wait_for_timeout(1500)
    dw, dh = _drawn_box(page)
    assert dw >= 0.9 * 1300 and dh >= 0.85 * 900, (dw, dh)  # follows the pane
    shot(page, "scheduler-individual-memory-pane-large")
    assert not [m for m in warnings if "initial ranges" in m], warnings
    assert not warnings, warnings
    assert_clean(watch)
