"""slimgraph's own JupyterLab extension, in a real JupyterLab and a real Chromium.

- the prebuilt labextension is listed by ``jupyter labextension list`` as
  enabled and OK in a labextensions directory (prebuilt: no Node.js needed,
  no JupyterLab build), and the server extension ``slimgraph.jupyter`` as
  enabled (the wheel's install is checked in ``test_install.py``);
- in JupyterLab: the launcher tile and the command-palette commands, the
  sidebar finding the engines of a running slimgraph dashboard (their
  scheduler files in ``$TMPDIR/slimgraph-dashboard-<kind>-*``, the layout
  ``slimgraph.dashboard.clusters`` writes: here a stock and a slim ``dask
  scheduler`` process with one worker each, started that way), a graph
  submitted to both showing in the sidebar (stock beside slim, ratios)
  within 2 s of its end with the figures of the schedulers' own records, a
  notebook's own ``LocalCluster`` (stock, no preload; started in a cell)
  added by its dashboard URL and the notebook's next computation shown,
  and a view opened in a main-area pane that it fills.

Screenshots go to ``test-artifacts/jupyterlab-extension-*.png``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from subprocs import Proc, free_port, wait_http

from slimgraph.bench.browser import CHROMIUM, CHROMIUM_ARGS, SOURCE_JS

pytestmark = [pytest.mark.browser, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

if not os.path.exists(CHROMIUM):  # pragma: no cover
    pytest.skip(f"{CHROMIUM} is not installed", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


def _run_all(*commands: tuple[str, ...]) -> list[str]:
    """``python -m ...`` commands of this environment, at the same time."""
    procs = [subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for args in commands]  # fmt: skip
    out = []
    for p in procs:
        text = p.communicate(timeout=120)[0]
        assert p.returncode == 0, text
        out.append(ANSI.sub("", text))
    return out


def labextension_listing(output: str) -> dict[str, list[str]]:
    """``jupyter labextension list``'s output as {section header: lines}."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in output.splitlines():
        if not line.strip():
            continue
        if not line.startswith((" ", "\t")):
            current = line.strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line.strip())
    return sections


def test_labextension_listed_enabled_and_prebuilt():
    listing, servers = _run_all(("-m", "jupyterlab.labextensions", "list"),
                                ("-m", "jupyter_server", "extension", "list"))  # fmt: skip
    sections = labextension_listing(listing)
    found = {d: [ln for ln in lines if ln.startswith("slimgraph ")] for d, lines in sections.items()}
    found = {d: ls for d, ls in found.items() if ls}
    assert len(found) == 1, sections
    ((directory, (line,)),) = found.items()
    # a prebuilt extension lives in a labextensions directory (one JupyterLab
    # built into its own bundle is listed under "Other labextensions")
    assert directory.endswith(os.path.join("share", "jupyter", "labextensions")), directory
    assert re.fullmatch(r"slimgraph v\S+ enabled OK \(python, slimgraph\)", line), line
    pkg = json.loads((Path(directory) / "slimgraph" / "package.json").read_text())
    assert (Path(directory) / "slimgraph" / pkg["jupyterlab"]["_build"]["load"]).is_file()

    assert re.search(r"slimgraph\.jupyter\s+enabled", servers), servers
    assert re.search(r"slimgraph\.jupyter\s+OK", servers), servers


def source_sha256(folder: Path) -> tuple[str, list[str]]:
    """jupyterlab/stamp.mjs's digest of the extension's sources, in Python."""
    skip = {"node_modules", "lib", "tsconfig.tsbuildinfo"}
    files = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d not in skip]
        files += [Path(dirpath, f).relative_to(folder).as_posix() for f in filenames if f not in skip]
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.encode() + b"\0")
        h.update((folder / f).read_bytes())
        h.update(b"\0")
    return h.hexdigest(), sorted(files)


def test_prebuilt_extension_is_built_from_the_committed_sources():
    """The committed build (what pip installs) was made from jupyterlab/ as
    it is: a change to the TypeScript must come with its build."""
    built = json.loads((ROOT / "core/slimgraph/jupyter/labextension/source.json").read_text())
    digest, files = source_sha256(ROOT / "jupyterlab")
    assert {"src/index.ts", "src/sidebar.ts", "package.json", "package-lock.json"} <= set(files)
    assert built["files"] == files
    assert built["source_sha256"] == digest, (
        "core/slimgraph/jupyter/labextension/ is not the build of jupyterlab/: "
        "cd jupyterlab && npm ci && npm run build, and commit the result")


# ---------------------------------------------------------------------------
# the schedulers: a slimgraph dashboard's two engines, a notebook's LocalCluster
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tmp_mod(tmp_path_factory):
    return tmp_path_factory.mktemp("jlab")


@pytest.fixture(scope="module")
def engines(tmp_mod):
    """{kind: scheduler file} of a stock and a slim engine laid out as a
    running ``slimgraph dashboard`` lays out its own (a scheduler file in
    ``<TMPDIR>/slimgraph-dashboard-<kind>-*``, one worker process); the
    Jupyter server gets ``TMPDIR=<tmp_mod>/tmp``."""
    base = tmp_mod / "tmp"
    procs, files = [], {}
    for kind, preload in (("stock", "slimgraph.views.tab"), ("slim", "slimgraph.distributed")):
        d = base / f"slimgraph-dashboard-{kind}-test"
        d.mkdir(parents=True)
        sfile = d / "scheduler.json"
        files[kind] = str(sfile)
        procs.append(Proc(f"{kind}-scheduler", [
            sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
            "--port", "0", "--dashboard-address", f"127.0.0.1:{free_port()}",
            "--scheduler-file", str(sfile), "--preload", preload,
        ], tmp_mod, cwd=tmp_mod))  # fmt: skip
        procs.append(Proc(f"{kind}-worker", [
            sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(sfile),
            "--nworkers", "1", "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1",
        ], tmp_mod, cwd=tmp_mod))  # fmt: skip
    try:
        yield files
    finally:
        from distributed import Client

        for sfile in files.values():
            try:
                with Client(scheduler_file=sfile, timeout="10s", set_as_default=False) as c:
                    c.shutdown()
            except Exception:  # noqa: BLE001 - stopped below anyway
                pass
        for p in reversed(procs):
            p.stop()


@pytest.fixture(scope="module")
def clients(engines):
    from distributed import Client

    out = {}
    try:
        for kind, sfile in engines.items():
            deadline = time.monotonic() + 60
            while not (os.path.exists(sfile) and os.path.getsize(sfile)):
                assert time.monotonic() < deadline, f"{kind} scheduler did not start"
                time.sleep(0.1)
            out[kind] = Client(scheduler_file=sfile, timeout="20s", set_as_default=False)
            out[kind].wait_for_workers(1, timeout=60)
        yield out
    finally:
        for c in out.values():
            c.close()


def _cell(i: int, *lines: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {},
            "outputs": [], "source": [ln + "\n" for ln in lines]}  # fmt: skip


#: a user's notebook: a cluster of its own (stock, no preload, nothing of
#: slimgraph on it), then a computation on it
NOTEBOOK = {
    "cells": [
        _cell(1, "from distributed import Client, LocalCluster",
              "cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False,",
              "                       protocol='tcp://', host='127.0.0.1', dashboard_address='127.0.0.1:0')",
              "client = Client(cluster)",
              "print('DASHBOARD', cluster.dashboard_link, 'ADDRESS', cluster.scheduler_address)"),
        _cell(2, "import dask.array as da",
              "print('RESULT', client.compute(da.arange(1000, chunks=100).sum()).result())"),
    ],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
    "nbformat": 4, "nbformat_minor": 5,
}  # fmt: skip


@pytest.fixture(scope="module")
def lab(tmp_mod, engines):
    port, token = free_port(), "sgtoken"
    home = tmp_mod / "jhome"
    settings = home / "settings"
    # no "get notified about news" toast over the screenshots
    note = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    note.parent.mkdir(parents=True)
    note.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    root = tmp_mod / "root"
    root.mkdir()
    (root / "nb.ipynb").write_text(json.dumps(NOTEBOOK))
    env = {
        "TMPDIR": str(tmp_mod / "tmp"),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "IPYTHONDIR": str(home / "ipython"),
    }
    env.pop("SLIMGRAPH_SCHEDULER", None)
    proc = Proc("jupyterlab", [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip", "127.0.0.1",
        "--port", str(port), f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
        *(["--allow-root"] if os.geteuid() == 0 else []),
    ], tmp_mod, env=env)  # fmt: skip
    try:
        # (the test waits for it to answer: the schedulers start meanwhile)
        yield f"http://127.0.0.1:{port}/", token, proc
    finally:
        proc.stop()


# ---------------------------------------------------------------------------
# the browser
# ---------------------------------------------------------------------------


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"jupyterlab-extension-{name}.png"))


def cell(page, scope: str, kind: str, key: str) -> float | None:
    v = page.locator(f"{scope} td[data-kind='{kind}'][data-key='{key}']").first.get_attribute("data-value")
    return float(v) if v else None


def wait_submission(page, scope: str, kind: str, submission_id: int, timeout: float = 20) -> float:
    """Seconds until the sidebar shows ``submission_id`` on ``kind`` in the
    table ``scope`` (polled every 50 ms)."""
    t0 = time.monotonic()
    sel = f"{scope} th[data-kind='{kind}'][data-submission='{submission_id}']"
    while not page.locator(sel).count():
        assert time.monotonic() - t0 < timeout, f"{sel} not shown in {timeout} s"
        page.wait_for_timeout(50)
    return time.monotonic() - t0


def check_figures(page, scope: str, kind: str, rec) -> None:
    """The sidebar's figures of ``kind`` are the record's own."""
    assert cell(page, scope, kind, "update_graph_s") == pytest.approx(rec.total_s, rel=1e-9)
    assert cell(page, scope, kind, "us_per_task") == pytest.approx(rec.total_s / rec.tasks * 1e6, rel=1e-9)
    if rec.longest_block_s is not None:
        assert cell(page, scope, kind, "longest_block_s") == pytest.approx(rec.longest_block_s, rel=1e-9)
    if rec.rss_before is not None and rec.rss_after is not None:
        assert cell(page, scope, kind, "rss_per_task") == pytest.approx(
            (rec.rss_after - rec.rss_before) / rec.tasks, rel=1e-9)  # fmt: skip


def test_sidebar_summary_and_a_view_in_a_pane(lab, clients):
    import dask.array as da

    from slimgraph.instrument import client as sgc

    from distributed import Client

    url, token, proc = lab
    wait_http(f"{url}api/status?token={token}", proc=proc)
    problems: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(30_000)
            page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
            page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
            page.on("response", lambda r: r.status >= 400 and problems.append(f"{r.status} {r.url}"))
            page.goto(f"{url}lab?token={token}")

            # the launcher tile and the palette's commands
            page.locator(".jp-LauncherCard", has_text="slimgraph app in a pane").wait_for(timeout=60_000)
            page.keyboard.press("Control+Shift+C")
            page.locator(".lm-CommandPalette-input").fill("slimgraph")
            labels = page.locator(".lm-CommandPalette-item .lm-CommandPalette-itemLabel").all_inner_texts()
            for want in ("Show the slimgraph sidebar", "Open the slimgraph dashboard app in a pane",
                         "Add a scheduler to the slimgraph sidebar…", "Open a slimgraph view"):  # fmt: skip
                assert want in labels, labels
            page.locator(".lm-CommandPalette-item", has_text="Show the slimgraph sidebar").click()

            # the sidebar finds both engines of the "running dashboard"
            side = page.locator("#slimgraph-sidebar")
            side.wait_for(state="visible")
            for kind in ("stock", "slim"):
                side.locator(f".sg-Engine[data-kind='{kind}'][data-state='ok']").wait_for(timeout=30_000)
            assert side.locator(".sg-Group[data-source='slimgraph dashboard'] .sg-Engine").count() == 2
            shot(page, "sidebar-found")

            # one graph, submitted to both engines
            ended = {}
            for kind, c in clients.items():
                assert c.compute((da.ones((150, 150), chunks=10) + 1).sum()).result(timeout=60) == 45_000
                ended[kind] = time.monotonic()
            recs = {k: sgc.get_submissions(c)[-1] for k, c in clients.items()}
            assert recs["stock"].tasks == recs["slim"].tasks > 0
            scope = "#slimgraph-sidebar table[data-group='slimgraph dashboard']"
            for kind in ("slim", "stock"):
                waited = wait_submission(page, scope, kind, recs[kind].submission_id)
                after = time.monotonic() - ended[kind]
                assert after <= 2.0 or waited <= 0.05, f"{kind}: shown {after:.2f} s after its end"
                check_figures(page, scope, kind, recs[kind])
            ratio = cell(page, scope, "ratio", "update_graph_s")
            assert ratio == pytest.approx(recs["stock"].total_s / recs["slim"].total_s, rel=1e-9)
            text = page.locator(f"{scope} td[data-kind='slim'][data-key='update_graph_s']").inner_text()
            assert text.endswith(("ms", " s")), text
            shot(page, "sidebar-summary")

            # a notebook's own cluster, added by its dashboard URL: the
            # recorder is installed there, and the notebook's next
            # submission is shown
            page.evaluate("(url) => window.open(url, '_self')", f"{url}lab/tree/nb.ipynb?token={token}")
            page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").first.wait_for(timeout=60_000)
            page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=60_000)
            page.wait_for_timeout(1000)
            side.wait_for(state="visible")  # (the layout keeps the sidebar open)
            page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first.click()
            page.keyboard.press("Shift+Enter")
            out = page.locator(".jp-OutputArea-output", has_text="ADDRESS tcp://")
            try:
                out.wait_for(timeout=15_000)
            except sync_api.TimeoutError:
                prompt = page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first.inner_text()
                if prompt.strip() == "[ ]:":  # not run (the kernel was not connected yet): again
                    page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first.click()
                    page.keyboard.press("Shift+Enter")
                out.wait_for(timeout=60_000)
            m = re.search(r"DASHBOARD (\S+) ADDRESS (\S+)", out.inner_text())
            dashboard, address = m.group(1), m.group(2)
            page.locator(".sg-Sidebar-input").fill(dashboard)
            page.keyboard.press("Enter")
            side.locator(f".sg-Engine[data-sg-scheduler='{address}'][data-state='ok']").wait_for(timeout=30_000)
            page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").nth(1).click()
            page.keyboard.press("Shift+Enter")
            page.locator(".jp-OutputArea-output", has_text="RESULT 499500").wait_for(timeout=60_000)
            with Client(address, timeout="20s", set_as_default=False) as nb_client:
                rec = sgc.get_submissions(nb_client)[-1]
            assert rec.scheduler == "stock" and rec.tasks > 0
            nb_scope = f"#slimgraph-sidebar table[data-group='{address}']"
            wait_submission(page, nb_scope, "stock", rec.submission_id)
            check_figures(page, nb_scope, "stock", rec)
            assert not page.locator(f"{nb_scope} td[data-kind='ratio']").count()  # one engine: no ratio
            # installing the recorder logged nothing into the user's notebook
            # (distributed's "No handler ... found" traceback for a probe)
            assert not page.locator(".jp-OutputArea-output", has_text="slimgraph").count()
            shot(page, "notebook-submission")

            # a view of the slim engine in a main-area pane that it fills
            slim_dash = clients["slim"].dashboard_link.rsplit("/status", 1)[0]
            view = side.locator(f"button.sg-View[data-url='{slim_dash}/individual-slimgraph-timing']")
            view.wait_for(timeout=15_000)
            view.click()
            pane = page.locator(".sg-ViewPane:visible")
            pane.wait_for()
            frame_el = pane.locator("iframe")
            frame_el.wait_for()
            frame = page.frame_locator(".sg-ViewPane:visible iframe")
            frame.locator("canvas").first.wait_for(state="attached", timeout=60_000)
            fr = next(f for f in page.frames if f.url.endswith("/individual-slimgraph-timing"))
            fr.wait_for_function(
                "([n, k]) => { const s = Bokeh.documents[0].get_model_by_name(n);"
                " return s && s.data.submission_id.includes(k); }",
                arg=["sg-timing-slim", recs["slim"].submission_id], timeout=30_000)  # fmt: skip
            assert recs["slim"].submission_id in fr.evaluate(SOURCE_JS, "sg-timing-slim")["submission_id"]
            page.wait_for_timeout(1500)
            # the pane spans the main area under its tab bar (JupyterLab keeps
            # a few pixels of padding around the dock), the iframe the pane
            dock = page.locator("#jp-main-dock-panel").bounding_box()
            bar = page.locator("#jp-main-dock-panel .lm-DockPanel-tabBar").first.bounding_box()
            pb, fb = pane.bounding_box(), frame_el.bounding_box()
            assert abs(pb["width"] - bar["width"]) <= 2 and pb["x"] <= bar["x"] + 2, (pb, bar)
            assert pb["y"] <= bar["y"] + bar["height"] + 2, (pb, bar)
            assert pb["y"] + pb["height"] >= dock["y"] + dock["height"] - 8, (pb, dock)
            assert fb["width"] >= pb["width"] - 2 and fb["height"] >= pb["height"] - 2, (fb, pb)
            boxes = [b for b in (c.bounding_box() for c in frame.locator("canvas").all())
                     if b and b["width"] > 0]  # fmt: skip
            drawn_w = max(b["x"] + b["width"] for b in boxes) - min(b["x"] for b in boxes)
            drawn_h = max(b["y"] + b["height"] for b in boxes) - min(b["y"] for b in boxes)
            assert drawn_w >= 0.9 * fb["width"] and drawn_h >= 0.85 * fb["height"], (drawn_w, drawn_h, fb)
            tab = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")
            assert "slimgraph: timing" in tab.inner_text()
            shot(page, "view-pane")
        except BaseException:
            shot(page, "failure")
            raise
        finally:
            browser.close()
    ours = [m for m in problems if "slimgraph" in m]
    assert not ours, "\n".join(ours)
    log = proc.log.read_text(errors="replace")
    assert "slimgraph: JupyterLab server extension loaded" in log
    assert "Traceback" not in log, log[-3000:]
