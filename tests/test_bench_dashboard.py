"""``bench --mode dashboard``: the dashboard app in headless Chromium while stock ingests.

A small ingestion and a short soak, for real (the app's processes, the
browser): every figure the report gives is measured (n > 0, positive,
ordered), the stock update_graph the page shows is the scheduler's record,
the soak reloaded pages and saw no HTTP 500, screenshots were written next
to the JSON, and the app and its engine processes are gone afterwards. The
targets themselves are the benchmark's business, not this test's.
"""
from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.timeout(300)]

TIMED = ("widget_answer_seconds", "page_load_seconds", "page_plots_seconds",
         "plot_refresh_gap_seconds", "live_text_gap_seconds", "rss_sample_gap_seconds",
         "job_status_gap_seconds")  # fmt: skip


def test_dashboard_mode_measures_the_page_and_soaks(tmp_path):
    from slimgraph.bench.browser import TARGETS

    out = tmp_path / "dash.json"
    proc = subprocess.run(
        [sys.executable, "-m", "slimgraph", "bench", "--mode", "dashboard", "--tasks", "40000",
         "--soak-minutes", "0.25", "--json", str(out)],
        capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(out.read_text())
    assert r["mode"] == "dashboard" and r["workload"] == "array" and r["requested_tasks"] == 40000

    ing = r["ingestion"]
    assert ing["phase"] == "done" and ing["iterations"] >= 1
    assert 30_000 < ing["tasks"] < 50_000
    # the page's figure is the scheduler's record, and the page showed the
    # ingestion running for about as long as it took
    assert ing["update_graph_seconds"] > 0
    assert ing["update_graph_seconds"] == pytest.approx(ing["record_update_graph_seconds"], rel=1e-9)
    assert ing["chart_update_graph_seconds"] == pytest.approx(ing["update_graph_seconds"], rel=1e-9)
    assert ing["shown_seconds"] > 0
    assert ing["widget_unanswered"] == 0 and ing["page_load_failures"] == 0

    assert set(r["metrics"]) == set(TIMED) == set(TARGETS)
    for name, m in r["metrics"].items():
        assert m["n"] > 0 and len(m["values"]) == m["n"], (name, m)
        assert 0 < m["median"] <= m["p99"] <= m["max"], (name, m)
        assert m["target_seconds"] == TARGETS[name]
        if m["target_seconds"] is None:
            assert m["met"] is None
        else:
            assert m["met"] == (m["max"] <= m["target_seconds"])
            assert 0 <= m["within_target"] <= 1

    s = r["soak"]
    assert s["reloads"] >= 1 and s["dask_page_loads"] >= 2 * s["reloads"]
    assert s["http_500"] == 0
    assert s["broken_sessions"] == len(s["broken"])
    assert s["jobs_started"] >= 1 and sum(s["jobs"].values()) == s["jobs_started"]
    assert s["app_rss_mib_start"] > 50 and s["app_rss_mib_end"] > 50
    assert s["app_rss_mib_max"] >= max(s["app_rss_mib_start"], s["app_rss_mib_end"])
    assert s["reload_seconds"]["n"] >= 1 and s["dask_page_seconds"]["n"] >= 2
    assert set(s["dask_dashboards"]) <= {"stock", "slim"} and "stock" in s["dask_dashboards"]

    # screenshots next to the JSON: the ingestion, the soak (our page, dask's), the end
    shots = tmp_path / "dash-shots"
    assert r["shots_dir"] == str(shots)
    names = {p.name for p in shots.glob("*.png")}
    assert set(r["screenshots"]) == {str(shots / n) for n in names}
    assert {"ingesting-0-main-page.png", "ingesting-0-new-page.png", "end-main-page.png"} <= names
    assert any(n.startswith("soak-") and "dask-stock-status" in n for n in names)
    assert all((shots / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names)

    # the table, and nothing left running: the app and the scheduler processes the page named
    assert "widget change answered" in proc.stdout and "soak:" in proc.stdout
    pids = [r["app"]["pid"], *r["app"]["engine_pids"].values()]
    assert len(pids) >= 2
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def test_the_apps_lazy_series_shows_its_census_points():
    """Found by this benchmark's screenshots: the app streamed census points
    into the lazy-containers chart's source directly, so its explicit time
    range stayed on the minute before the page was built and "no census yet"
    stayed up while the data sat outside the chart. A session renders a
    point from the poller's snapshot: the label goes, the range spans it."""
    import time

    from slimgraph.dashboard.app import App
    from slimgraph.dashboard.clusters import ClusterManager
    from slimgraph.dashboard.poller import Poller
    from slimgraph.instrument.lazysets import AttrCensus, Census
    from slimgraph.views.transforms import lazy_summary

    mgr = ClusterManager()  # nothing started: the snapshot is filled in by hand
    app = App(manager=mgr, start_clusters=False, poller=Poller(mgr))
    app._plot_cards()  # the deferred plots, as a page's first render builds them
    assert app.views.lazy == {}  # ... but not the lazy containers' tab before it is shown
    app._census_card()  # the tab shown
    fig = app.views.lazy["stock"]
    assert fig.empty.visible
    time.sleep(0.05)
    census = Census(time=time.time(), ntasks=10, attrs={"dependents": AttrCensus(
        "dependents", tasks=10, none=4, singleton=0, allocated=6, empty_allocated=1, shared=0,
        held_bytes=1200, eager_bytes=2400)})  # fmt: skip
    point, attrs = lazy_summary(census)
    snap = app.poll.engine("stock")
    snap.lazy_points.append(point)
    snap.lazy_attrs = attrs
    snap.lazy_seq += 1
    app._render_plots()
    assert list(fig.source.data["time"]) == [point["time"]]
    assert not fig.empty.visible
    assert fig.figure.x_range.start < point["time"] < fig.figure.x_range.end
    assert not app.views.lazy_attrs["stock"].empty.visible


def test_page_errors_name_their_tab_and_frame():
    """Two tabs of one app share its URL: each error the bench records
    names the tab it came from and, for a page error, where it was raised."""
    from playwright.sync_api import sync_playwright

    from slimgraph.bench.browser import Watch, launch_browser

    watch = Watch()
    with sync_playwright() as pw:
        browser = launch_browser(pw)
        try:
            ctx = browser.new_context()
            watch.attach_context(ctx)
            quiet, loud = ctx.new_page(), ctx.new_page()
            quiet.set_content("<p>fine</p>")
            loud.set_content("<script>function render(node) { return node.firstChild; }"
                             "setTimeout(() => render(null), 0);</script>")  # fmt: skip
            loud.wait_for_timeout(300)
        finally:
            browser.close()
    msgs = [m for _, _, m in watch.errors]
    assert len(msgs) == 1 and msgs[0].startswith("[tab 2] pageerror "), msgs
    assert "firstChild" in msgs[0] and "(at render" in msgs[0], msgs
