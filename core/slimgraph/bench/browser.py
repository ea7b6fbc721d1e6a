"""``python -m slimgraph bench --mode dashboard``: the dashboard's own targets (issue #15).

Why. The engine and client modes measure schedulers; nobody had measured
what the dashboard's user sees while a stock scheduler is busy, and issue
#15 sets targets for it. While the stock scheduler ingests a 1M-task graph:

- a page load of the main job (``python -m slimgraph dashboard``) <= 2 s,
- a widget change answered <= 1 s,
- plot refresh gaps <= 2 s;

and 30 minutes of reloading our page and dask's own dashboard pages of both
engines while graphs are ingested without a broken session or an HTTP 500.

What. Everything runs for real and is driven the way a user drives it:

1. the main job, ``python -m slimgraph dashboard --port P --workers 1``, as
   a subprocess in a session of its own (stopped by its id: SIGTERM, then
   SIGKILL to that session, which holds its engine processes too); headless
   Chromium (playwright) opens its page;
2. the page's launcher submits an "ingest only" job of ``tasks`` tasks of
   ``workload`` on the stock engine; once the page shows the ingestion
   running ("ingesting job N: update_graph running"), and until it stops
   showing it, the bench repeatedly
   - changes the size preset and times the server's answer (the task count
     it fills into the box): *widget change answered*;
   - opens the page in a new tab and times ``goto`` until the Submit button
     is visible: *page load* (and, without a target, until the deferred
     plots exist: *page load, plots*);
   while a script in the first page notes, every 100 ms, when new RSS
   points reach the RSS chart's source (``sg-rss-stock``): *plot refresh
   gap*, the gaps between their arrivals; when the engines banner's
   counter "ingesting job N: update_graph running, E s" (whole seconds)
   changes: *live elapsed text gap*; and, without targets, the gaps of the
   RSS points' own sample times (the poller's side) and of changes of the
   launcher's job status text (its "update_graph running, 12.3 s" is
   written by the job's thread, which is busy in ``client.compute`` until
   the graph has been sent). A gap counts when it overlaps the time the
   page showed the ingestion.
   The stock update_graph duration is read from the page (summary strip,
   phases chart) and from the scheduler's records;
3. with ``soak_minutes``: for that long, jobs (array and delayed, stock,
   slim and both, ingest only, ``tasks`` and ``tasks // 2``) are submitted
   one after the other through the first page while a loop reloads our
   page in a second tab (a new session each time) and loads dask's own
   ``/status`` and ``/graph`` of both engines in a third (each a Bokeh
   session made and discarded). Counted: broken sessions (our page: a
   navigation that is not 200, a traceback or error page, the Submit button
   or the plots not coming, a page error or console error; dask's pages:
   not 200, no Bokeh document, a page or console error), every HTTP
   response >= 400 the browser got from either dashboard, reloads, jobs by
   outcome, the share of reloads that overlapped an ingestion, and the RSS
   of the app process at the start and the end.

"Met" means every observed value is within the target (max <= target);
``within_target`` gives the share that is. The browser, the bench and the
app share the machine (on the 2-core development machine the browser's
rendering competes with the app for a CPU), as a user's browser on a
laptop running a local cluster does.

Screenshots (the page during the ingestion, a page loaded during it, the
end; the soak's pages) go to ``<json stem>-shots/`` next to ``--json``, or
to a temporary directory that is printed; the app's log goes there too.

JSON (``--json PATH``)::

    {"mode": "dashboard", "workload", "requested_tasks", "versions",
     "app": {"url", "pid", "log", "commit" (the checkout's), "engine_pids": {kind: scheduler pid}},
     "ingestion": {"job", "tasks", "update_graph_seconds" (the page's summary
         strip), "chart_update_graph_seconds" (phases chart), "record_update_graph_seconds"
         (the stock scheduler's record), "shown_seconds" (how long the page
         showed it running), "window_ms" (its start and end, epoch ms),
         "iterations", "widget_unanswered", "page_load_failures",
         "rounds": [{"at_ms", "widget_s", "load_at_ms", "load_end_ms",
         "submit_s", "plots_s", "broken"}]},
     "metrics": {name: {"n", "median", "p99", "max", "target_seconds",
         "met", "within_target", "values", "over_target" (gaps: [{"at_seconds",
         "seconds", "during_page_load", "during_screenshot"}])}},   (target None: no target)
     "soak": null or {"minutes", "reloads", "broken_sessions", "broken",
         "dask_page_loads", "dask_broken", "http_not_200", "http_500",
         "http_errors", "jobs": {outcome: count}, "jobs_done",
         "reloads_during_ingestion", "app_rss_mib_start", "app_rss_mib_end",
         "app_rss_mib_max", "reload_seconds", "dask_page_seconds"},
     "errors": {"ours", "dask"} (console/page errors), "app_log_errors",
     "screenshots": [paths], "shots_dir"}
"""
from __future__ import annotations

import atexit
import functools
import html
import json
import os
import platform
import re
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from slimgraph.bench.e2e import distribution

#: issue #15's targets (seconds), per metric; None: reported without one
TARGETS: dict[str, float | None] = {
    "page_load_seconds": 2.0,
    "widget_answer_seconds": 1.0,
    "plot_refresh_gap_seconds": 2.0,
    "live_text_gap_seconds": 2.0,
    "rss_sample_gap_seconds": None,
    "page_plots_seconds": None,
    "job_status_gap_seconds": None,
}

LABELS = {
    "widget_answer_seconds": "widget change answered",
    "page_load_seconds": "page load (Submit visible)",
    "page_plots_seconds": "page load, plots drawn",
    "plot_refresh_gap_seconds": "plot refresh gap (RSS chart)",
    "live_text_gap_seconds": "live elapsed text gap",
    "rss_sample_gap_seconds": "RSS sample gap (poller)",
    "job_status_gap_seconds": "job status text gap",
}

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking"]  # fmt: skip
WORKERS = 1
#: every wait on the page (a blocked app shows up as a long value, not an error)
WAIT_MS = 120_000
#: viewport height for screenshots of our page (all of its cards)
TALL = 3600


def say(msg: str) -> None:
    sys.stderr.write(f"[dashboard] {msg}\n")
    sys.stderr.flush()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# the app process
# ---------------------------------------------------------------------------


class AppProcess:
    """``python -m slimgraph dashboard`` in a session of its own (its engine
    processes are in that session too); stopped by its id."""

    def __init__(self, logdir: Path, workers: int = WORKERS):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/dashboard"
        self.log = logdir / "app.log"
        self._fh = open(self.log, "w")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.p = subprocess.Popen(
            [sys.executable, "-m", "slimgraph", "dashboard", "--port", str(self.port),
             "--workers", str(workers)],
            stdout=self._fh, stderr=subprocess.STDOUT, env=env, cwd=str(logdir),
            start_new_session=True,
        )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.p.pid

    def rss_mib(self) -> float | None:
        import psutil

        try:
            return psutil.Process(self.p.pid).memory_info().rss / 2**20
        except psutil.Error:
            return None

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError(f"the app exited ({self.p.returncode}):\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    if r.status == 200:
                        return
            except Exception as e:  # noqa: BLE001
                last = e
            time.sleep(0.3)
        raise TimeoutError(f"{self.url} did not answer 200 in {timeout} s ({last})\n{self.tail()}")

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)  # the app stops its engines
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                pass
        try:  # the session we made: the app and its engine processes only
            os.killpg(self.p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        self._fh.close()


def log_errors(path: Path) -> list[str]:
    """The log records of the app that carry a traceback, each as its first
    line and the exception it ends with (a chained traceback is one record)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    records: list[list[str]] = []
    for line in lines:
        if re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", line) or not records:
            records.append([line])
        else:
            records[-1].append(line)
    out = []
    for rec in records:
        exc = None
        for i, x in enumerate(rec):
            if x.startswith("Traceback (most recent call last)"):
                # the exception: the first line after the frames (indented)
                j = i + 1
                while j < len(rec) and rec[j].startswith(" "):
                    j += 1
                exc = rec[j] if j < len(rec) else ""
        if exc is not None:
            out.append(f"{rec[0][:200]} ... {exc[:200]}")
    return out


# ---------------------------------------------------------------------------
# the browser
# ---------------------------------------------------------------------------


class Watch:
    """Console errors, page errors and HTTP responses >= 400 of a browser context."""

    def __init__(self) -> None:
        self.errors: list[tuple[float, str, str]] = []  # (time, page url, text)
        self.bad_responses: list[tuple[str, int]] = []
        self._tabs = 0  # pages attached so far

    def attach_context(self, ctx) -> None:
        ctx.on("page", self.attach)
        ctx.on("response", lambda r: r.status >= 400 and self.bad_responses.append((r.url, r.status)))

    def attach(self, page) -> None:
        # (each error names its tab: the pages of one app share its URL, and
        # a reload's window also sees the errors of the app's other open pages)
        self._tabs += 1
        tab = f"[tab {self._tabs}]"
        page.on("console", lambda m: m.type == "error" and self.errors.append(
            (time.monotonic(), page.url, f"{tab} {m.text}")))
        page.on("pageerror", lambda e: self.errors.append((time.monotonic(), page.url,
                                                           f"{tab} pageerror {e}{_first_frame(e)}")))

    def since(self, t: float, page_url_prefix: str | None = None) -> list[str]:
        return [f"{u}: {m}" for tt, u, m in self.errors
                if tt >= t and (page_url_prefix is None or u.startswith(page_url_prefix))]  # fmt: skip


def _first_frame(error: Any) -> str:
    """Where a page error was raised (the first frame of its JavaScript
    stack), or nothing."""
    frames = [ln.strip() for ln in (getattr(error, "stack", None) or "").splitlines() if ln.strip().startswith("at ")]
    return f" ({frames[0]})" if frames else ""


#: setpriv's words that start a program without ``CAP_SYS_NICE``
_NO_SYS_NICE = ["setpriv", "--bounding-set", "-sys_nice", "--inh-caps", "-sys_nice"]


def browser_executable(exe: str, nice: int = 0) -> str:
    """The browser to start, as a user's browser runs: at niceness ``nice``,
    and never above the scheduler's priority. Run as root, Chromium raises
    its own IO and display threads to niceness -8 (it may: root has
    ``CAP_SYS_NICE``), ahead of the scheduler it is measuring. A user's
    browser has no such
    privilege, so the benchmark's browser is started through a script that
    drops the capability (``setpriv``) and applies ``nice``; Playwright's
    pipes to it pass through ``exec``. ``exe``: the browser itself."""
    drop = os.geteuid() == 0 and _can_drop_sys_nice()
    if not drop and not nice:
        return exe
    key = (exe, nice, drop)
    if key not in _scripts:
        words = ["exec", *(_NO_SYS_NICE if drop else ()), *(("nice", "-n", str(int(nice))) if nice else ())]
        path = os.path.join(_script_dir(), f"chromium-{len(_scripts)}.sh")
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + " ".join(words) + f' "{exe}" "$@"\n')
        os.chmod(path, 0o755)
        _scripts[key] = path
    return _scripts[key]


#: (browser, niceness, capability dropped) -> its script
_scripts: dict = {}


@functools.cache
def _script_dir() -> str:
    folder = tempfile.mkdtemp(prefix="slimgraph-browser-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


@functools.cache
def _can_drop_sys_nice() -> bool:
    """Whether ``setpriv`` is there and may drop ``CAP_SYS_NICE`` here (a
    container may refuse to change the bounding set)."""
    return shutil.which("setpriv") is not None and subprocess.run(
        [*_NO_SYS_NICE, "true"], capture_output=True).returncode == 0


def launch_browser(pw, nice: int = 0):
    """``pw.chromium.launch`` (sync or async API) of :func:`browser_executable`."""
    exe = CHROMIUM if os.path.exists(CHROMIUM) else pw.chromium.executable_path
    return pw.chromium.launch(executable_path=browser_executable(exe, nice), args=CHROMIUM_ARGS)


#: the model's data of a named ColumnDataSource (arrays as lists), or null
SOURCE_JS = """(name) => {
    if (!window.Bokeh) return null;
    for (const d of Bokeh.documents) {
        const m = d.get_model_by_name(name);
        if (m && m.data) {
            const out = {};
            for (const [k, v] of Object.entries(m.data)) out[k] = Array.from(v);
            return out;
        }
    }
    return null;
}"""

#: the text of the Panel HTML pane with a css class (escaped HTML), or null
PANE_JS = """(cls) => {
    if (!window.Bokeh) return null;
    for (const d of Bokeh.documents) {
        const all = d.all_models ?? d._all_models.values();
        for (const m of all) if (m.css_classes && m.css_classes.includes(cls)) return m.text;
    }
    return null;
}"""

#: a recorder in the page: every 100 ms, when the RSS chart's latest point,
#: the job status text or the engines banner changed, (Date.now(), value)
OBSERVER_JS = """() => {
    if (window.__sgwatch) return;
    const w = window.__sgwatch = {rss: [], status: [], banner: [], ticks: 0};
    const cache = {};
    const pane = (cls) => {
        if (cache[cls]) return cache[cls];
        for (const d of Bokeh.documents) {
            const all = d.all_models ?? d._all_models.values();
            for (const m of all) if (m.css_classes && m.css_classes.includes(cls)) return cache[cls] = m;
        }
        return null;
    };
    const rss = () => {
        if (cache.rss) return cache.rss;
        for (const d of Bokeh.documents) {
            const m = d.get_model_by_name('sg-rss-stock');
            if (m) return cache.rss = m;
        }
        return null;
    };
    let last = {rss: undefined, status: undefined, banner: undefined};
    setInterval(() => {
        const now = Date.now();
        w.ticks += 1;
        const r = rss();
        if (r) {
            const t = r.data.time;
            const v = t.length ? t[t.length - 1] : null;
            if (v !== last.rss) { last.rss = v; w.rss.push([now, v]); }
        }
        for (const [key, cls] of [['status', 'sg-job-status'], ['banner', 'sg-banner']]) {
            const m = pane(cls);
            if (m && m.text !== last[key]) { last[key] = m.text; w[key].push([now, m.text]); }
        }
    }, 100);
}"""


def source(page, name: str) -> dict | None:
    return page.evaluate(SOURCE_JS, name)


def pane_text(page, cls: str) -> str:
    """The visible text of a Panel HTML pane (tags stripped)."""
    raw = page.evaluate(PANE_JS, cls) or ""
    return plain(raw)


def plain(escaped: str) -> str:
    """The text of a pane's (escaped) HTML: tags become spaces."""
    return re.sub(r"<[^>]+>", " ", html.unescape(html.unescape(escaped or "")))


def wait_model(page, name: str, timeout: float = WAIT_MS) -> None:
    page.wait_for_function(
        "(n) => window.Bokeh && Bokeh.documents.some(d => d.get_model_by_name(n) !== null)",
        arg=name, timeout=timeout,
    )  # fmt: skip


def tasks_box(page):
    return page.locator(".bk-input-group", has_text="Tasks (about").locator("input").first


def answer_seconds(page, preset: str, expected: str, timeout: float = WAIT_MS) -> float:
    """Seconds from choosing a size preset until the server's answer (the
    task count it fills in) is in the page."""
    box = tasks_box(page)
    handle = box.element_handle()
    t0 = time.monotonic()
    page.locator("select").nth(1).select_option(preset)
    page.wait_for_function("([el, v]) => el.value === v", arg=[handle, expected], timeout=timeout)
    return time.monotonic() - t0


BROKEN_TEXTS = ("Traceback (most recent call last)", "500: Internal Server Error",
                "Internal Server Error")  # fmt: skip


def broken_text(page) -> str | None:
    """Error text the page shows (a traceback, an error page), or None."""
    try:
        body = page.evaluate("() => document.body ? document.body.innerText : ''") or ""
    except Exception as e:  # noqa: BLE001
        return f"page unreadable: {e}"
    for t in BROKEN_TEXTS:
        if t in body:
            i = body.index(t)
            return body[i:i + 300]
    return None


def load_ours(ctx_or_page, url: str, watch: Watch, new_page: bool = True) -> dict:
    """Open (or reload) our page; seconds to the Submit button and to the
    plots, the HTTP status, and what broke (None if nothing)."""
    page = ctx_or_page.new_page() if new_page else ctx_or_page
    page.set_default_timeout(WAIT_MS)
    out: dict[str, Any] = {"submit_s": None, "plots_s": None, "status": None, "broken": None}
    t_errors = time.monotonic()
    t0 = time.monotonic()
    try:
        resp = page.goto(url, wait_until="commit", timeout=WAIT_MS)
        out["status"] = resp.status if resp is not None else None
        if out["status"] != 200:
            out["broken"] = f"HTTP {out['status']}"
        page.get_by_role("button", name="Submit").wait_for(state="visible", timeout=WAIT_MS)
        out["submit_s"] = time.monotonic() - t0
        wait_model(page, "sg-rss-stock")
        out["plots_s"] = time.monotonic() - t0
    except Exception as e:  # noqa: BLE001
        out["broken"] = out["broken"] or f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    text = broken_text(page)
    if text and not out["broken"]:
        out["broken"] = text
    errs = watch.since(t_errors, url.rsplit("/", 1)[0])
    if errs and not out["broken"]:
        out["broken"] = "; ".join(errs)[:400]
    out["page"] = page
    return out


def shot(page, shots: list, folder: Path, name: str, tall: bool = True) -> tuple[float, float]:
    """A screenshot to ``folder/name.png``; its start and end (epoch ms).
    ``tall``: our page's template scrolls inside its main area (a full-page
    screenshot stops at the viewport), so the viewport is made tall enough
    for every card for the shot, then restored."""
    path = folder / f"{name}.png"
    t0 = time.time() * 1000
    size = page.viewport_size if tall else None
    try:
        if size:
            page.set_viewport_size({"width": size["width"], "height": TALL})
            page.wait_for_timeout(1000)
        page.screenshot(path=str(path), full_page=True, timeout=WAIT_MS)
        shots.append(str(path))
    except Exception as e:  # noqa: BLE001
        say(f"screenshot {name} failed: {e}")
    finally:
        if size:
            page.set_viewport_size(size)
    return t0, time.time() * 1000


# ---------------------------------------------------------------------------
# the launcher, as a user drives it
# ---------------------------------------------------------------------------


def engines_running(page) -> tuple[str, ...]:
    page.locator(".sg-address[data-kind='stock']").first.wait_for(timeout=300_000)
    if page.get_by_text("slim: not available").count():
        return ("stock",)
    page.locator(".sg-address[data-kind='slim']").first.wait_for(timeout=300_000)
    return ("stock", "slim")


def current_job(page) -> tuple[int | None, str, str]:
    """(job id, its phase, the status text) as the page shows them."""
    text = pane_text(page, "sg-job-status")
    m = re.search(r"job (\d+) \(.*?\)\s*\(.*?\):\s*(\w+)", text)
    if not m:
        return None, "", text
    return int(m.group(1)), m.group(2), text


def submit(page, workload: str, tasks: int, kind: str, after: int | None) -> int:
    """Fill the launcher in and click Submit (ingest only); the job's id."""
    page.locator("select").nth(0).select_option(workload)
    box = tasks_box(page)
    box.fill(str(tasks))
    box.press("Enter")
    page.get_by_role("button", name=kind, exact=True).click()
    ingest = page.get_by_role("checkbox", name=re.compile("ingest only"))
    if not ingest.is_checked():
        ingest.check()
    button = page.get_by_role("button", name="Submit")
    deadline = time.monotonic() + WAIT_MS / 1000
    while not button.is_enabled():
        if time.monotonic() > deadline:
            raise TimeoutError("the Submit button stayed disabled")
        page.wait_for_timeout(200)
    button.click()
    clicked = time.monotonic()
    while True:
        jid, _, text = current_job(page)
        if jid is not None and (after is None or jid > after):
            return jid
        if "already running" in text and time.monotonic() - clicked > 1:
            # the previous job's end was not yet seen by the app: once more
            if button.is_enabled():
                button.click()
            clicked = time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the page did not show a new job after Submit ({text!r})")
        page.wait_for_timeout(200)


def banner_ingesting(escaped: str | None, job: int | None = None, kind: str = "stock") -> bool:
    """Whether the engines banner (a pane's escaped HTML, one line per
    engine) shows ``kind`` ingesting ``job`` (any job if None)."""
    text = html.unescape(escaped or "")
    for line in text.split("<br>"):
        if re.search(rf">{kind}</b>", line) and (
                f"ingesting job {job}:" in line if job is not None else "ingesting job" in line):
            return True
    return False


def ingesting(page, job: int, kind: str = "stock") -> bool:
    return banner_ingesting(page.evaluate(PANE_JS, "sg-banner"), job, kind)


def wait_job_end(page, job: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jid, phase, _ = current_job(page)
        if jid == job and phase != "running":
            return phase
        page.wait_for_timeout(500)
    return "timeout"


# ---------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------


def gaps_overlapping(times_ms: list[float], start_ms: float, end_ms: float) -> list[float]:
    """Seconds between consecutive times, for the gaps that overlap
    [start, end] (a gap that straddles either edge counts)."""
    ts = sorted(t for t in times_ms if t is not None)
    return [(b - a) / 1000 for a, b in zip(ts, ts[1:]) if b >= start_ms and a <= end_ms]


def long_gaps(times_ms: list, start_ms: float, end_ms: float, limit: float,
              busy: list[tuple[float, float]], shooting: list[tuple[float, float]] = ()
              ) -> list[dict]:  # fmt: skip
    """The gaps longer than ``limit`` seconds that overlap [start, end]:
    when (seconds into the window), how long, whether a page load in
    another tab (``busy``: its intervals) overlapped it, and whether a
    screenshot did (the browser busy capturing)."""
    ts = sorted(t for t in times_ms if t is not None)
    out = []
    for a, b in zip(ts, ts[1:]):
        if b >= start_ms and a <= end_ms and (b - a) / 1000 > limit:
            out.append({"at_seconds": round((a - start_ms) / 1000, 2), "seconds": round((b - a) / 1000, 3),
                        "during_page_load": any(x < b and y > a for x, y in busy),
                        "during_screenshot": any(x < b and y > a for x, y in shooting)})  # fmt: skip
    return out


def metric(values: list[float], target: float | None) -> dict:
    d = distribution(values) or {"n": 0, "median": None, "p99": None, "max": None}
    d["target_seconds"] = target
    if target is None or not values:
        d["met"] = None
        d["within_target"] = None
    else:
        d["met"] = d["max"] <= target
        d["within_target"] = sum(v <= target for v in values) / len(values)
    d["values"] = [round(v, 4) for v in values]
    return d


def stock_line(escaped: str | None) -> str:
    """The stock engine's line of the engines banner (HTML)."""
    for line in html.unescape(escaped or "").split("<br>"):
        if ">stock</b>" in line:
            return line
    return ""


def elapsed_changes(banner_log: list, job: int) -> list[float]:
    """When the banner's "ingesting job N: update_graph running, E s" counter
    of stock (whole seconds: it should change every second) changed."""
    out, last = [], None
    for t, text in banner_log:
        m = re.search(rf"ingesting job {job}: update_graph running, (\d+) s", stock_line(text))
        if m and m.group(1) != last:
            last = m.group(1)
            out.append(t)
    return out


def shown_window(banner_log: list, job: int) -> tuple[float | None, float | None]:
    """(start, end) in ms of the page's banner showing ``job``'s stock ingestion."""
    start = end = None
    for t, text in banner_log:
        on = banner_ingesting(text, job, "stock")
        if on and start is None:
            start = t
        elif not on and start is not None:
            end = t
            break
    return start, end


def stock_records(address: str, job_tasks: int) -> list:
    """The stock scheduler's records (slimgraph.instrument.client)."""
    from distributed import Client

    from slimgraph.instrument.client import get_submissions

    with Client(address, timeout="30s", set_as_default=False) as c:
        return [r for r in get_submissions(c) if r.status == "OK" and r.tasks >= job_tasks // 2]


# ---------------------------------------------------------------------------
# the measurement while stock ingests
# ---------------------------------------------------------------------------


def measure_ingestion(page, ctx, url: str, watch: Watch, workload: str, tasks: int,
                      folder: Path, shots: list) -> tuple[dict, dict]:  # fmt: skip
    from slimgraph import workloads

    page.evaluate(OBSERVER_JS)
    jid = submit(page, workload, tasks, "stock", after=current_job(page)[0])
    say(f"job {jid}: {workload}, {tasks:,} tasks, stock, ingest only; building the graph...")
    t_sub = time.monotonic()
    deadline = t_sub + 1800
    while not ingesting(page, jid):
        jj, phase, text = current_job(page)
        if phase not in ("", "running") or time.monotonic() > deadline:
            raise RuntimeError(f"job {jid} never showed the stock ingestion running: {text!r}")
        page.wait_for_timeout(100)
    t_ing = time.monotonic()
    say(f"the page shows the ingestion running ({t_ing - t_sub:.1f} s after Submit); measuring")
    answers: list[float] = []
    loads: list[float] = []
    plots: list[float] = []
    rounds: list[dict] = []
    shooting: list[tuple[float, float]] = []
    unanswered = failures = 0
    presets = ["1k", "10k"]
    i = 0
    while True:
        p = presets[i % 2]
        at = time.time() * 1000
        try:
            answers.append(answer_seconds(page, p, str(workloads.SIZES[p])))
        except Exception as e:  # noqa: BLE001
            unanswered += 1
            answers.append(WAIT_MS / 1000)
            say(f"widget change not answered in {WAIT_MS / 1000:.0f} s: {type(e).__name__}")
        load_at = time.time() * 1000
        r = load_ours(ctx, url, watch)
        rounds.append({"at_ms": at, "widget_s": answers[-1], "load_at_ms": load_at,
                       "load_end_ms": time.time() * 1000, "submit_s": r["submit_s"],
                       "plots_s": r["plots_s"], "broken": r["broken"]})  # fmt: skip
        if r["submit_s"] is not None:
            loads.append(r["submit_s"])
        else:
            failures += 1
        if r["plots_s"] is not None:
            plots.append(r["plots_s"])
        if i in (0, 8):
            shooting.append(shot(r["page"], shots, folder, f"ingesting-{i}-new-page"))
            shooting.append(shot(page, shots, folder, f"ingesting-{i}-main-page"))
        r["page"].close()
        i += 1
        el = time.monotonic() - t_ing
        say(f"  {el:6.1f} s into the ingestion: widget {answers[-1]:.2f} s, page load "
            f"{_s(r['submit_s'])}, plots {_s(r['plots_s'])}"
            + (f" BROKEN: {r['broken']}" if r["broken"] else ""))  # fmt: skip
        if not ingesting(page, jid) or el > 3600:
            break
    t_end = time.monotonic()
    say(f"ingestion no longer shown ({t_end - t_ing:.1f} s, {i} rounds); waiting for job {jid} to end")
    phase = wait_job_end(page, jid, timeout=1800)
    page.wait_for_timeout(1500)  # the next refreshes: the summary strip and the phases chart
    log = page.evaluate("() => window.__sgwatch")
    start, end = shown_window(log["banner"], jid)
    if start is None:  # (the recorder missed it: Python's view of the window)
        start = (time.time() - (time.monotonic() - t_ing)) * 1000
    if end is None:
        end = (time.time() - (time.monotonic() - t_end)) * 1000
    arrivals = [t for t, _ in log["rss"]]
    samples = source(page, "sg-rss-stock")["time"]
    status_changes = [t for t, _ in log["status"]]
    strip = page.locator(".sg-summary td[data-kind='stock'][data-key='update_graph_s']").first
    shown = strip.get_attribute("data-value") if strip.count() else None
    timing = source(page, "sg-timing-stock") or {}
    address = page.locator(".sg-address[data-kind='stock']").first.inner_text()
    rec_s = rec_tasks = None
    try:
        recs = stock_records(address, tasks)
        if recs:
            rec_s, rec_tasks = recs[-1].total_s, recs[-1].tasks
    except Exception as e:  # noqa: BLE001
        say(f"could not read the stock scheduler's records: {e}")
    ingestion = {
        "job": jid,
        "phase": phase,
        "tasks": rec_tasks if rec_tasks is not None else (timing.get("tasks") or [None])[-1],
        "update_graph_seconds": float(shown) if shown else None,
        "chart_update_graph_seconds": (timing.get("total_s") or [None])[-1],
        "record_update_graph_seconds": rec_s,
        "shown_seconds": (end - start) / 1000,
        "iterations": i,
        "widget_unanswered": unanswered,
        "page_load_failures": failures,
        "observer_ticks": log["ticks"],
    }
    ingestion["window_ms"] = [start, end]
    ingestion["rounds"] = rounds
    series = {
        "plot_refresh_gap_seconds": arrivals,
        "live_text_gap_seconds": elapsed_changes(log["banner"], jid),
        "job_status_gap_seconds": status_changes,
        "rss_sample_gap_seconds": samples,
    }
    out = {"widget_answer_seconds": metric(answers, TARGETS["widget_answer_seconds"]),
           "page_load_seconds": metric(loads, TARGETS["page_load_seconds"]),
           "page_plots_seconds": metric(plots, TARGETS["page_plots_seconds"])}  # fmt: skip
    # the new tab's page loads: when another session was being built
    loading = [(r["load_at_ms"], r["load_end_ms"]) for r in rounds]
    for name, times in series.items():
        m = out[name] = metric(gaps_overlapping(times, start, end), TARGETS[name])
        m["over_target"] = long_gaps(times, start, end, TARGETS[name] or 2.0, loading, shooting)
    return ingestion, out


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f} s"


# ---------------------------------------------------------------------------
# the soak
# ---------------------------------------------------------------------------

SOAK_PLAN = [("array", "stock"), ("delayed", "slim"), ("array", "both"),
             ("delayed", "stock"), ("array", "slim"), ("delayed", "both")]  # fmt: skip


def load_dask_page(page, url: str, watch: Watch) -> dict:
    """Load one of dask's dashboard pages: status, seconds until its Bokeh
    document has roots, what broke."""
    t_err = time.monotonic()
    t0 = time.monotonic()
    out: dict[str, Any] = {"url": url, "status": None, "seconds": None, "broken": None}
    try:
        resp = page.goto(url, wait_until="load", timeout=WAIT_MS)
        out["status"] = resp.status if resp is not None else None
        if out["status"] != 200:
            out["broken"] = f"HTTP {out['status']}"
        page.wait_for_function(
            "() => window.Bokeh && Bokeh.documents.length > 0 && Bokeh.documents[0].roots().length > 0",
            timeout=WAIT_MS,
        )  # fmt: skip
        out["seconds"] = time.monotonic() - t0
    except Exception as e:  # noqa: BLE001
        out["broken"] = out["broken"] or f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    errs = watch.since(t_err, url.rsplit("/", 1)[0])
    if errs and not out["broken"]:
        out["broken"] = "; ".join(errs)[:400]
    return out


def engine_pids(page) -> dict[str, int]:
    """kind -> pid of its scheduler process, as the engines banner shows it."""
    out = {}
    for line in html.unescape(page.evaluate(PANE_JS, "sg-banner") or "").split("<br>"):
        m = re.search(r">(\w+)</b>.*?pid (\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def dask_dashboards(page, kinds) -> dict[str, str]:
    """kind -> base URL of that engine's own dask dashboard (the page's links)."""
    out = {}
    for k in kinds:
        href = page.locator("a", has_text=f"{k} dask dashboard").first.get_attribute("href")
        p = urlparse(href)
        out[k] = f"{p.scheme}://{p.netloc}"
    return out


def soak(page, ctx, url: str, watch: Watch, app: AppProcess, minutes: float, tasks: int,
         folder: Path, shots: list) -> dict:  # fmt: skip
    kinds = engines_running(page)
    dask_bases = dask_dashboards(page, kinds)
    rss0 = app.rss_mib()
    rss_max = rss0 or 0.0
    say(f"soak: {minutes:g} min; app RSS {rss0:.0f} MiB; dask dashboards {dask_bases}")
    sizes = [tasks, max(tasks // 2, 1000)]
    plan_i = 0
    job: int | None = None
    outcomes: dict[str, int] = {}
    job_problems: list[str] = []
    jobs_started = 0
    reloads = dask_loads = 0
    broken: list[str] = []
    dask_broken: list[str] = []
    not_200: list[tuple[str, Any]] = []
    reload_s: list[float] = []
    dask_s: list[float] = []
    during = 0
    bad0 = len(watch.bad_responses)
    ours = ctx.new_page()
    dpage = ctx.new_page()
    dpage.set_default_timeout(WAIT_MS)
    t0 = time.monotonic()
    deadline = t0 + minutes * 60
    next_note = t0 + 30
    next_shot = t0 + max(minutes * 60 / 3, 20)

    def ended(phase: str, text: str) -> None:
        outcomes[phase] = outcomes.get(phase, 0) + 1
        if phase != "done":
            job_problems.append(text[:400])

    def maybe_submit() -> None:
        nonlocal job, plan_i, jobs_started
        jid, phase, text = current_job(page)
        if phase == "running":
            return
        if job is not None and jid == job:
            ended(phase, text)
            job = None
        if time.monotonic() >= deadline:
            return
        workload, kind = SOAK_PLAN[plan_i % len(SOAK_PLAN)]
        n = sizes[(plan_i // len(SOAK_PLAN)) % 2]
        if kind != "stock" and len(kinds) == 1:
            kind = "stock"
        plan_i += 1
        try:
            job = submit(page, workload, n, kind, after=jid)
            jobs_started += 1
        except Exception as e:  # noqa: BLE001
            broken.append(f"submission failed: {e}")

    def any_ingesting() -> bool:
        banner = page.evaluate(PANE_JS, "sg-banner")
        return any(banner_ingesting(banner, None, k) for k in kinds)

    while time.monotonic() < deadline:
        maybe_submit()
        busy = any_ingesting()
        r = load_ours(ours, url, watch, new_page=False)
        reloads += 1
        during += busy or any_ingesting()
        if r["submit_s"] is not None:
            reload_s.append(r["submit_s"])
        if r["status"] != 200:
            not_200.append((url, r["status"]))
        if r["broken"]:
            broken.append(r["broken"])
            say(f"  broken session: {r['broken']}")
        maybe_submit()
        shoot_dask = time.monotonic() >= next_shot or reloads == 1
        tag = int((time.monotonic() - t0) / 60)
        for k, base in dask_bases.items():
            for path in ("/status", "/graph"):
                d = load_dask_page(dpage, base + path, watch)
                dask_loads += 1
                if shoot_dask:
                    shot(dpage, shots, folder, f"soak-{tag:02d}min-dask-{k}-{path.strip('/')}", tall=False)
                if d["seconds"] is not None:
                    dask_s.append(d["seconds"])
                if d["status"] != 200:
                    not_200.append((d["url"], d["status"]))
                if d["broken"]:
                    dask_broken.append(f"{k} {path}: {d['broken']}")
                    say(f"  broken dask page {k} {path}: {d['broken']}")
        dpage.goto("about:blank")  # the last dask session is discarded too
        rss = app.rss_mib()
        if rss is not None:
            rss_max = max(rss_max, rss)
        now = time.monotonic()
        if shoot_dask:
            next_shot = now + max(minutes * 60 / 3, 20)
            shot(ours, shots, folder, f"soak-{tag:02d}min-ours")
            shot(page, shots, folder, f"soak-{tag:02d}min-main")
        if now >= next_note:
            next_note = now + 30
            say(f"  soak {(now - t0) / 60:5.1f} min: {reloads} reloads ({len(broken)} broken), "
                f"{dask_loads} dask pages ({len(dask_broken)} broken), {jobs_started} jobs, "
                f"app RSS {rss if rss is not None else float('nan'):.0f} MiB")  # fmt: skip
    loop_minutes = (time.monotonic() - t0) / 60
    shot(ours, shots, folder, "soak-end-ours")
    if job is not None:
        say(f"soak time is up; waiting for job {job} to end")
        wait_job_end(page, job, timeout=900)
        _, phase, text = current_job(page)
        ended(phase if phase != "running" else "timeout", text)
    rss1 = app.rss_mib()
    ours.close()
    dpage.close()
    bad = watch.bad_responses[bad0:]
    ours_host = urlparse(url).netloc
    hosts = {ours_host, *(urlparse(b).netloc for b in dask_bases.values())}
    http_errors = [(u, s) for u, s in bad if urlparse(u).netloc in hosts]
    return {
        "minutes": loop_minutes,
        "reloads": reloads,
        "broken_sessions": len(broken),
        "broken": broken[:50],
        "dask_page_loads": dask_loads,
        "dask_broken": dask_broken[:50],
        "dask_broken_sessions": len(dask_broken),
        "http_not_200": [[u, s] for u, s in not_200][:50],
        "http_not_200_count": len(not_200),
        "http_500": sum(1 for _, s in http_errors if s >= 500),
        "http_errors": [[u, s] for u, s in http_errors][:50],
        "jobs_started": jobs_started,
        "jobs": outcomes,
        "jobs_done": outcomes.get("done", 0),
        "job_problems": job_problems[:20],
        "reloads_during_ingestion": during,
        "app_rss_mib_start": rss0,
        "app_rss_mib_end": rss1,
        "app_rss_mib_max": max(rss_max, rss1 or 0.0),
        "reload_seconds": metric(reload_s, None),
        "dask_page_seconds": metric(dask_s, None),
        "dask_dashboards": dask_bases,
    }


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------


def checkout_commit() -> str | None:
    """The commit of the checkout the app runs from (``+dirty`` with local
    changes), or None outside a git checkout."""
    root = Path(__file__).resolve().parent  # (git finds the checkout's top)
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+dirty" if dirty else "")) or None


def shots_folder(json_path: str | None, shots_dir: str | None = None) -> Path:
    if shots_dir:
        folder = Path(shots_dir)
    elif json_path:
        p = Path(json_path).resolve()
        folder = p.with_name(p.stem + "-shots")
    else:
        folder = Path(tempfile.mkdtemp(prefix="slimgraph-dashboard-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def bench_dashboard(workload: str = "array", tasks: int = 1_000_000, soak_minutes: float = 0.0,
                    json_path: str | None = None, shots_dir: str | None = None) -> dict:  # fmt: skip
    import dask
    import distributed
    from playwright.sync_api import sync_playwright

    from slimgraph.workloads import WORKLOADS, validate_tasks

    if workload not in WORKLOADS:
        raise SystemExit(f"unknown workload {workload!r}; choose from {sorted(WORKLOADS)}")
    validate_tasks(tasks)
    folder = shots_folder(json_path, shots_dir)
    say(f"screenshots and the app's log: {folder}")
    shots: list[str] = []
    app = AppProcess(folder)
    result: dict[str, Any] = {
        "mode": "dashboard", "workload": workload, "requested_tasks": tasks,
        "versions": {"dask": dask.__version__, "distributed": distributed.__version__,
                     "python": platform.python_version()},
        "app": {"url": app.url, "pid": app.pid, "log": str(app.log), "commit": checkout_commit()},
        "shots_dir": str(folder),
    }  # fmt: skip
    try:
        app.wait_ready()
        say(f"app up: {app.url} (pid {app.pid})")
        with sync_playwright() as pw:
            browser = launch_browser(pw)
            ctx = browser.new_context(viewport={"width": 1500, "height": 1300})
            watch = Watch()
            watch.attach_context(ctx)
            page = ctx.new_page()
            page.set_default_timeout(WAIT_MS)
            page.goto(app.url)
            kinds = engines_running(page)
            wait_model(page, "sg-rss-stock")
            result["app"]["engine_pids"] = engine_pids(page)
            say(f"engines running: {', '.join(kinds)}")
            result["ingestion"], result["metrics"] = measure_ingestion(
                page, ctx, app.url, watch, workload, tasks, folder, shots)
            result["soak"] = (soak(page, ctx, app.url, watch, app, soak_minutes, tasks, folder, shots)
                              if soak_minutes > 0 else None)  # fmt: skip
            shot(page, shots, folder, "end-main-page")
            ours_prefix = app.url.rsplit("/", 1)[0]
            hosts = {urlparse(app.url).netloc, *(urlparse(b).netloc for b in dask_dashboards(page, kinds).values())}
            result["http_errors"] = [[u, s] for u, s in watch.bad_responses if urlparse(u).netloc in hosts][:100]
            result["errors"] = {
                "ours": [f"{u}: {m}" for _, u, m in watch.errors if u.startswith(ours_prefix)][:50],
                "dask": [f"{u}: {m}" for _, u, m in watch.errors if not u.startswith(ours_prefix)][:50],
            }
            ctx.close()
            browser.close()
    finally:
        app.stop()
    result["app_log_errors"] = log_errors(app.log)
    result["screenshots"] = shots
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)
    return result


def format_dashboard_table(result: dict) -> str:
    ing = result["ingestion"]
    tasks = ing.get("tasks")
    lines = [
        f"dashboard while stock ingests: {result['workload']}, {result['requested_tasks']:,} tasks requested"
        + (f" ({tasks:,} ingested)" if tasks else ""),
        f"stock update_graph: {_s(ing['update_graph_seconds'])} (summary strip), "
        f"{_s(ing['record_update_graph_seconds'])} (scheduler's record); the page showed it running "
        f"for {ing['shown_seconds']:.1f} s ({ing['iterations']} rounds of widget change + page load)",
        "",
    ]
    head = f"{'metric':<32}{'n':>6}{'median':>10}{'p99':>10}{'max':>10}{'target':>10}{'within':>9}  met"
    lines += [head, "-" * len(head)]
    for name, m in result["metrics"].items():
        t = m["target_seconds"]
        within = "-" if m["within_target"] is None else f"{m['within_target']:.0%}"
        met = "-" if m["met"] is None else ("yes" if m["met"] else "NO")
        lines.append(f"{LABELS.get(name, name):<32}{m['n']:>6}{_f(m['median']):>10}{_f(m['p99']):>10}"
                     f"{_f(m['max']):>10}{_f(t, '<= '):>10}{within:>9}  {met}")  # fmt: skip
    lines.append("(seconds; a gap counts when it overlaps the time the page showed the ingestion)")
    for name, m in result["metrics"].items():
        over = m.get("over_target")
        if over and m["target_seconds"] is not None:
            during = sum(o["during_page_load"] for o in over)
            shooting = sum(o.get("during_screenshot", False) for o in over)
            lines.append(f"  {LABELS.get(name, name)}: {len(over)} over the target, {during} of them while "
                         f"another tab loaded the page, {shooting} during a screenshot")  # fmt: skip
    if ing["widget_unanswered"] or ing["page_load_failures"]:
        lines.append(f"unanswered widget changes: {ing['widget_unanswered']}, "
                     f"page loads that failed: {ing['page_load_failures']}")  # fmt: skip
    s = result.get("soak")
    if s:
        jobs = ", ".join(f"{v} {k}" for k, v in sorted(s["jobs"].items())) or "none ended"
        lines += [
            "",
            f"soak: {s['minutes']:.1f} min; {s['reloads']} reloads of our page "
            f"({s['reloads_during_ingestion']} while an ingestion ran), {s['dask_page_loads']} loads "
            f"of dask's /status and /graph (both engines)",
            f"  broken sessions: ours {s['broken_sessions']}, dask's {s['dask_broken_sessions']}; "
            f"navigations not 200: {s['http_not_200_count']}; HTTP 5xx: {s['http_500']}; "
            f"responses >= 400: {len(s['http_errors'])}",
            f"  jobs: {s['jobs_started']} started, {jobs}",
            f"  app RSS: {_mib(s['app_rss_mib_start'])} at the start, {_mib(s['app_rss_mib_end'])} "
            f"at the end (max {_mib(s['app_rss_mib_max'])})",
            f"  our page reload (Submit visible): median {_f(s['reload_seconds']['median'])} s, "
            f"max {_f(s['reload_seconds']['max'])} s; dask pages: median "
            f"{_f(s['dask_page_seconds']['median'])} s, max {_f(s['dask_page_seconds']['max'])} s",
        ]
    errs = result.get("errors") or {}
    lines.append("")
    lines.append(f"console/page errors: ours {len(errs.get('ours', []))}, dask's {len(errs.get('dask', []))}; "
                 f"tracebacks in the app's log: {len(result.get('app_log_errors', []))}")
    lines.append(f"screenshots: {result['shots_dir']}")
    return "\n".join(x for x in lines if x is not None)


def _f(v: float | None, prefix: str = "") -> str:
    return "-" if v is None else f"{prefix}{v:.2f}"


def _mib(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} MiB"
