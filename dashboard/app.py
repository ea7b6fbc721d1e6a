"""The Panel app: launcher on the left, live views on the right.

``build()`` makes one session's app (``main.py`` calls it per browser
session under ``panel serve``; a notebook cell calls it once). Data comes
from the process-wide :mod:`slimgraph.dashboard.clusters` manager: embedded
LocalClusters (stock and slim), or the scheduler named by
``SLIMGRAPH_SCHEDULER``, each read through its feed. The figures and the refresher
are :mod:`slimgraph.views`; this module adds the launcher and the layout.
"""
from __future__ import annotations

import logging
import os
import tempfile

# Import what the job and cluster threads will import, here, on the main
# thread: a module being imported by another thread is seen half-built by
# bokeh (``partially initialized module 'pandas'`` while streaming).
import dask.array  # noqa: F401
import dask.bag  # noqa: F401
import dask.dataframe  # noqa: F401
import distributed  # noqa: F401
import pandas  # noqa: F401
import panel as pn

from slimgraph import workloads
from slimgraph.dashboard import clusters
from slimgraph.dashboard.jobs import Job
from slimgraph.views.figures import Views
from slimgraph.views.refresher import Refresher

logger = logging.getLogger(__name__)

REFRESH_MS = int(os.environ.get("SLIMGRAPH_DASHBOARD_REFRESH_MS", 1000))

#: The job of the whole process (one at a time; every session sees it).
_current_job: Job | None = None


def current_job() -> Job | None:
    return _current_job


def _flamegraph_download(kind: str, html: str, job_id: int) -> pn.widgets.FileDownload:
    """A download button for a flamegraph. ``embed=False``: the file goes to
    the browser only when clicked (over the session's websocket or the
    notebook comm), so the page stays light and no extra route is needed."""
    name = f"slimgraph-memray-{kind}-job{job_id}.html"
    path = os.path.join(tempfile.mkdtemp(prefix="slimgraph-flamegraph-"), name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)
    return pn.widgets.FileDownload(
        file=path, filename=name, embed=False, label=f"memray flamegraph ({kind}, job {job_id})",
        css_classes=["sg-flamegraph"], width=280,
    )  # fmt: skip


class App:
    def __init__(self, notebook: bool = False, manager: clusters.ClusterManager | None = None,
                 start_clusters: bool = True):  # fmt: skip
        self.notebook = notebook
        self.mgr = manager or clusters.manager()
        if self.mgr.remote:
            self.mgr.get("remote")  # connect now: the views need the remote kind
        elif start_clusters:
            self.mgr.start_in_background()
        kinds = self.mgr.kinds()
        self.views = Views(kinds=kinds, width=520)
        if not self.mgr.remote:
            self.views.rss_fig.title.text = "app process RSS (the embedded schedulers run in it)"
        self.doc = pn.state.curdoc
        post = self._notebook_apply if notebook else None
        self.refresher = Refresher(self.views, {}, self.doc, post=post)
        self._shown_job: tuple[int, str] | None = None
        self._build_widgets()
        self.layout = self._layout()

    # -- widgets --------------------------------------------------------------
    def _build_widgets(self) -> None:
        remote = self.mgr.remote
        kind_options = ["stock", "slim", "both"]
        slim_ok = self.mgr.available("slim")
        self.workload = pn.widgets.Select(label="Workload", options=list(workloads.WORKLOADS), value="array")
        # any positive task count; the presets only fill it in
        self.size = pn.widgets.Select(label="Size preset", options=list(workloads.SIZES), value="10k")
        self.tasks = pn.widgets.IntInput(label="Tasks (about; any positive number)",
                                         value=workloads.SIZES["10k"], start=1, step=1000)
        self.size.param.watch(self._on_preset, "value")
        self.kind = pn.widgets.RadioButtonGroup(
            label="Scheduler", options=kind_options, value="stock", visible=not remote,
        )  # fmt: skip
        self.lazy = pn.widgets.Checkbox(label="lazy containers (slimgraph.lazy-containers)", value=True)
        self.memray = pn.widgets.Checkbox(label="memray capture of this submission", value=False)
        self.submit = pn.widgets.Button(label="Submit")
        self.cancel = pn.widgets.Button(label="Cancel", disabled=True)
        self.submit.on_click(self._on_submit)
        self.cancel.on_click(self._on_cancel)
        self.progress = pn.indicators.Progress(value=0, max=100, width=260, active=False)
        # Panes start non-empty: a pane going from "" to text gets its
        # stylesheets recomputed, from the CDN in a notebook (offline: broken).
        self.job_status = pn.pane.HTML("<small>no job yet</small>", width=280)
        self.downloads = pn.Column(width=290)
        self.cluster_status = pn.pane.HTML("<small>clusters: starting</small>", width=280)
        if remote:
            note = f"Reading the scheduler at <code>{self.mgr.address}</code> (SLIMGRAPH_SCHEDULER)."
        elif not slim_ok:
            note = ("<b>slim: not available</b> &mdash; "
                    f"{self.mgr.entries['slim'].error}. Only stock runs.")  # fmt: skip
        else:
            note = "Embedded LocalClusters: one per scheduler kind, started by this app."
        self.mode_note = pn.pane.HTML(f"<small>{note}</small>", width=280)

    def _layout(self):
        launcher = pn.Column(
            pn.pane.HTML("<h3>Workload launcher</h3>"),
            self.mode_note,
            self.workload,
            self.size,
            self.tasks,
            self.kind,
            self.lazy,
            self.memray,
            pn.Row(self.submit, self.cancel),
            self.progress,
            self.job_status,
            self.downloads,
            self.cluster_status,
            width=300,
        )
        views = pn.Column(
            pn.pane.Bokeh(self.views.status),
            pn.pane.HTML("<h3>update_graph phases (one bar per submission)</h3>"),
            pn.pane.Bokeh(self.views.timing_layout()),
            pn.pane.HTML("<h3>Scheduler memory</h3>"),
            pn.pane.Bokeh(self.views.memory_layout()),
            pn.pane.HTML("<h3>Lazy containers</h3>"),
            pn.pane.Bokeh(self.views.lazy_layout()),
        )
        return pn.Column(
            pn.pane.HTML("<h2>slimgraph dashboard</h2>"),
            pn.Row(launcher, views),
        )

    # -- callbacks ------------------------------------------------------------
    def _on_preset(self, event) -> None:
        self.tasks.value = workloads.SIZES[event.new]

    def _on_submit(self, event=None) -> Job | None:
        global _current_job
        job = _current_job
        if job is not None and job.running:
            self.job_status.object = "<b>A job is already running</b>; cancel it first."
            return None
        if self.mgr.remote:
            kinds = ("remote",)
        else:
            kinds = ("stock", "slim") if self.kind.value == "both" else (self.kind.value,)
        kinds = tuple(k for k in kinds if k == "remote" or self.mgr.available(k))
        if not kinds:
            self.job_status.object = "<b>slim: not available</b> in this checkout."
            return None
        try:
            job = Job(self.mgr, self.workload.value, self.tasks.value, kinds,
                      lazy=self.lazy.value, memray=self.memray.value)  # fmt: skip
        except ValueError as e:
            self.job_status.object = f"<b>Cannot submit</b>: {e}"
            return None
        _current_job = job.start()
        self._render_job()
        return job

    def _on_cancel(self, event=None) -> None:
        job = _current_job
        if job is not None and job.running:
            job.cancel()

    # -- refresh ----------------------------------------------------------------
    def _sync_feeds(self) -> None:
        for key, e in self.mgr.entries.items():
            kind = e.kind if key == "remote" else key
            if e.feed is not None and kind in self.views.kinds and self.refresher.feeds.get(kind) is not e.feed:
                self.refresher.set_feed(kind, e.feed)

    def _render_clusters(self) -> None:
        lines = []
        for key, e in self.mgr.entries.items():
            label = e.kind if key == "remote" else key
            link = (f' &middot; <a href="{e.dashboard_link}" target="_blank">dask dashboard</a>'
                    if e.dashboard_link else "")  # fmt: skip
            err = f"<br><small>{e.error}</small>" if e.error and e.status != "unavailable" else ""
            status = "not available" if e.status == "unavailable" else e.status
            lines.append(f"<b>{label}</b>: {status}{link}{err}")
        html = "<small>" + "<br>".join(lines) + "</small>"
        if self.cluster_status.object != html:
            self.cluster_status.object = html

    def _render_job(self) -> None:
        job = _current_job
        if job is None:
            return
        running = job.running
        self.cancel.disabled = not running
        self.submit.disabled = running
        self.progress.active = running and job.phase == "submitting"
        done, total = job.progress
        self.progress.value = int(100 * done / total) if total else (100 if job.phase == "done" else 0)
        text = (f"<b>job {job.id}</b> ({job.workload}, {job.tasks:,} tasks, "
                f"{'+'.join(job.kinds)}, lazy {'on' if job.lazy else 'off'}): "
                f"<span class='sg-phase'>{job.phase}</span><br><small>{job.message}</small>")  # fmt: skip
        if self.job_status.object != text:
            self.job_status.object = text
        key = (job.id, f"{sorted(job.flamegraphs)}{sorted(job.memray_errors)}")
        if key != self._shown_job:
            self._shown_job = key
            items = [_flamegraph_download(k, html, job.id) for k, html in job.flamegraphs.items()]
            items += [pn.pane.HTML(f"<small>memray ({k}): {err}</small>", width=280)
                      for k, err in job.memray_errors.items()]  # fmt: skip
            self.downloads.objects = items

    def _notebook_apply(self, fn=None) -> None:
        """Apply changes in a notebook: hold the comm, make any stylesheet
        Panel (re)computed point at inline CSS instead of the CDN (offline
        notebooks cannot reach it), then push everything at once."""
        from bokeh.models import UIElement
        from panel.io.notebook import block_comm, patch_inline_stylesheets, push_notebook

        with block_comm():
            if fn is not None:
                fn()
            for model, _ in list(self.layout._models.values()):
                for sub in model.select({"type": UIElement}):
                    patch_inline_stylesheets(sub)
        push_notebook(self.layout)

    def _render(self) -> None:
        self._sync_feeds()
        self._render_clusters()
        self._render_job()

    async def tick(self) -> None:
        try:
            if self.notebook:
                self._notebook_apply(self._render)
            else:
                self._render()
        except Exception:  # noqa: BLE001
            logger.exception("dashboard tick")
        await self.refresher.tick()

    def start(self) -> "App":
        cb = pn.state.add_periodic_callback(self.tick, period=REFRESH_MS)
        self._cb = cb
        if not self.notebook:
            try:
                pn.state.on_session_destroyed(lambda ctx: (cb.stop(), self.refresher.stop()))
            except Exception:  # noqa: BLE001
                pass
        return self


def _favicon() -> str:
    import base64

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "icon.svg")
    with open(path, "rb") as f:
        return "data:image/svg+xml;base64," + base64.b64encode(f.read()).decode("ascii")


def build(notebook: bool = False, **kwargs) -> pn.viewable.Viewable:
    """One app (layout) with its refresh running; ``.servable()`` it or display it."""
    doc = pn.state.curdoc
    if not notebook and doc is not None:
        # Panel links "./favicon.ico", which 404s under --prefix (as behind
        # jupyter-server-proxy): inline the icon instead.
        doc.template_variables["app_favicon"] = _favicon()
        doc.template_variables["app_favicon_type"] = "image/svg+xml"
    app = App(notebook=notebook, **kwargs).start()
    layout = app.layout
    layout._slimgraph_app = app  # keep a handle for tests and notebooks
    return layout


def show_in_notebook(**kwargs):
    """For a notebook cell: inline resources (works offline), then the app."""
    pn.extension(inline=True)
    return build(notebook=True, **kwargs)
