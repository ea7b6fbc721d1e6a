"""A "slimgraph" tab in a scheduler's own dashboard (:8787), by an explicit call.

:func:`add_pages` serves, from one scheduler's dashboard, the ``/slimgraph``
page (a navbar tab next to dask's Status, Workers, ...) and three
``/individual-slimgraph-*`` pages, which ``/individual-plots.json`` lists
(dask-labextension shows exactly that list). The pages are read-only and
plain Bokeh: Panel is never imported into a scheduler for them. They read
the scheduler in process (:class:`~slimgraph.instrument.feed.LocalFeed`), on
its own loop, where Bokeh runs their document callbacks.

Nothing happens at import. Who calls it:

- the preload hook ``slimgraph.distributed.dask_setup`` (``dask scheduler
  --preload slimgraph.distributed``, ``Scheduler(preload=[...])``,
  ``DASK_DISTRIBUTED__SCHEDULER__PRELOAD``), through :func:`setup`;
- ``--preload slimgraph.views.tab``: the same for a stock scheduler, whose
  phases are then recorded (this module's :func:`dask_setup`); the
  dashboard app starts its engine processes with one of these two.

How the pages get into the dashboard. distributed builds the dashboard in
``Scheduler.__init__`` (``distributed.dashboard.scheduler.connect``: one
Bokeh application, a ``BokehTornado``, serving the paths of the module dict
``applications``), and runs a preload's ``dask_setup`` only at the end of
``Scheduler.start``; ``/individual-plots.json`` lists the paths of the
*first* BokehTornado of ``scheduler.http_application``. So :func:`add_pages`
builds a second one the way ``connect`` builds the first (distributed's own
``BokehApplication``, dask's ``applications`` plus ours, this scheduler's
template variables) and puts it in front of the first. Requests go to the
first application that has a handler for them: dask's pages are now served
by the new one, with the slimgraph tab in their navbar; the old one stays
behind it, unused (nothing was served by it yet, and if a page was, its
session keeps working). Nothing global is changed: the navbar entry is
added to this scheduler's own template variables (distributed memoizes them
per scheduler), and no other scheduler in the process is affected.

``import panel`` replaces Bokeh's per-application URL handlers in place,
which leaves any dashboard built afterwards with empty Status/Workers/Tasks
pages. The application built here uses Bokeh's stock handlers whatever
Panel did, so a scheduler in a process that imported Panel (a notebook's
LocalCluster) gets working dask pages as well as ours.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from functools import partial
from typing import Any, Iterator

from slimgraph.instrument.feed import LocalFeed
from slimgraph.instrument.recorder import get_extension, scheduler_kind
from slimgraph.instrument.stock_recorder import records_own_phases

logger = logging.getLogger(__name__)

TAB = "slimgraph"
#: path -> the :class:`~slimgraph.views.figures.Views` layout it shows
INDIVIDUAL = {
    "/individual-slimgraph-timing": "timing_layout",
    "/individual-slimgraph-memory": "memory_layout",
    "/individual-slimgraph-lazy-sets": "lazy_layout",
}
REFRESH_MS = 1000

#: scheduler -> the :class:`~slimgraph.views.refresher.SeriesLog` all its
#: pages share: a page opened later draws what was measured so far, and the
#: pages share one walk of the scheduler
_logs: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def series_log(scheduler):
    """The series measured on ``scheduler`` for its pages (made on first use)."""
    from slimgraph.views.refresher import SeriesLog

    log = _logs.get(scheduler)
    if log is None:
        log = _logs[scheduler] = SeriesLog()
    return log


# -- the pages ------------------------------------------------------------------
def _attach(scheduler, doc, views):
    from slimgraph.views.refresher import Refresher

    feed = LocalFeed(scheduler)
    # a stock scheduler gets its phases recorded once someone looks (as the
    # dashboard's own pages, this runs on the scheduler's loop)
    get_extension(scheduler).install()
    refresher = Refresher(views, {feed.kind: feed}, doc, log=series_log(scheduler))
    refresher.show_log(now=True)  # history on open, in the document before it is sent
    doc.add_periodic_callback(refresher.tick, REFRESH_MS)

    def on_destroy(session_context):
        refresher.stop()

    doc.on_session_destroyed(on_destroy)
    return refresher


def slimgraph_doc(scheduler, extra, doc):
    """The ``/slimgraph`` navbar page."""
    from distributed.dashboard.components.scheduler import BOKEH_THEME, env

    from slimgraph.views.figures import Views

    try:
        kind = scheduler_kind(scheduler)
        views = Views(kinds=(kind,), sizing_mode="stretch_width")
        views.status.text = (
            f"<b>slimgraph</b>: {kind} scheduler; phases, memory and lazy containers, "
            f"refreshed every {REFRESH_MS // 1000} s."
        )
        _attach(scheduler, doc, views)
        doc.add_root(views.page_layout())
        doc.title = "Dask: slimgraph"
        doc.template = env.get_template("simple.html")
        doc.template_variables.update(extra)
        doc.theme = BOKEH_THEME
    except Exception:  # pragma: no cover - shown in the scheduler's log
        logger.exception("slimgraph dashboard page failed")
        raise


def individual_slimgraph_doc(which: str, scheduler, extra, doc):
    """An ``/individual-slimgraph-*`` page: one layout, no navbar (an iframe)."""
    from distributed.dashboard.components.scheduler import BOKEH_THEME

    from slimgraph.views.figures import Views

    views = Views(kinds=(scheduler_kind(scheduler),), sizing_mode="stretch_both")
    _attach(scheduler, doc, views)
    doc.add_root(getattr(views, which)())
    doc.title = f"Dask: slimgraph {which.split('_')[0]}"
    doc.theme = BOKEH_THEME


def pages() -> dict:
    """path -> document function ``(scheduler, extra, doc)``, as in
    ``distributed.dashboard.scheduler.applications``."""
    out: dict[str, Any] = {"/" + TAB: slimgraph_doc}
    for path, which in INDIVIDUAL.items():
        out[path] = partial(individual_slimgraph_doc, which)
    return out


# -- adding them to a scheduler's dashboard ---------------------------------------
@contextlib.contextmanager
def stock_bokeh_handlers() -> Iterator[None]:
    """Bokeh's own per-application URL handlers while a Bokeh application is
    built (``import panel`` replaces them in place; see the module docstring)."""
    from bokeh.server import urls
    from bokeh.server.views.autoload_js_handler import AutoloadJsHandler
    from bokeh.server.views.doc_handler import DocHandler
    from bokeh.server.views.metadata_handler import MetadataHandler
    from bokeh.server.views.ws import WSHandler

    saved = list(urls.per_app_patterns)
    urls.per_app_patterns[:] = [
        (r"/?", DocHandler),
        (r"/ws", WSHandler),
        (r"/metadata", MetadataHandler),
        (r"/autoload.js", AutoloadJsHandler),
    ]
    try:
        yield
    finally:
        urls.per_app_patterns[:] = saved


def _first_bokeh_app(scheduler) -> Any:
    app = getattr(scheduler, "http_application", None)
    if app is None:
        return None
    try:
        from bokeh.server.tornado import BokehTornado
    except ImportError:  # pragma: no cover - bokeh is a dependency
        return None
    return next((a for a in app.applications if isinstance(a, BokehTornado)), None)


def has_pages(scheduler) -> bool:
    """Whether ``scheduler``'s dashboard serves (and lists) slimgraph's pages."""
    first = _first_bokeh_app(scheduler)
    return first is not None and "/" + TAB in first.app_paths


def _add_to_navbar(template_variables: dict) -> None:
    pages_ = template_variables.setdefault("pages", [])
    if TAB not in pages_:
        pos = pages_.index("info") if "info" in pages_ else len(pages_)
        pages_.insert(pos, TAB)
    plots = template_variables.setdefault("plots", [])
    urls = {p["url"] for p in plots}
    for path in INDIVIDUAL:
        url = path.strip("/")
        if url not in urls:
            plots.append({"url": url, "name": " ".join(url.split("-")[1:]).title()})
    plots.sort(key=lambda d: d["name"])


def add_pages(scheduler) -> bool:
    """Serve slimgraph's pages from ``scheduler``'s dashboard (see the module
    docstring). Call on the scheduler's event loop once its dashboard is
    built (a preload's ``dask_setup`` is such a place). Idempotent; False
    when there was nothing to do (pages already there, or no dashboard)."""
    first = _first_bokeh_app(scheduler)
    if first is None or "/" + TAB in first.app_paths:
        return False
    loop = scheduler.loop.asyncio_loop
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not loop:
        raise RuntimeError("add_pages(scheduler) must run on the scheduler's event loop")

    import distributed.dashboard.scheduler as ds
    from distributed.dashboard.core import BokehApplication
    from tornado.ioloop import IOLoop

    # this scheduler's navbar and plot list (memoized per scheduler by
    # distributed, shared by every page of its dashboard): edited in place
    tv = ds.template_variables(scheduler)
    _add_to_navbar(tv)
    with stock_bokeh_handlers():
        bokeh_app = BokehApplication({**ds.applications, **pages()}, scheduler,
                                     prefix=first.prefix, template_variables=tv)  # fmt: skip
    bokeh_app.initialize(IOLoop.current())
    bokeh_app.start()
    apps = scheduler.http_application.applications
    apps.insert(apps.index(first), bokeh_app)
    return True


def setup(scheduler) -> None:
    """What a preload does for slimgraph's measurements on ``scheduler``:
    the ``slimgraph`` extension (its handlers answer clients from the start),
    phase recording if it is a stock scheduler, and the pages. On the
    scheduler's loop (a preload's ``dask_setup`` runs there)."""
    ext = get_extension(scheduler)
    if not records_own_phases(scheduler):
        ext.install()
    add_pages(scheduler)


def dask_setup(scheduler) -> None:
    """``dask scheduler --preload slimgraph.views.tab``: a stock (or any)
    scheduler, measured, with the slimgraph tab. (The slim engine's preload
    is ``slimgraph.distributed``, which calls :func:`setup` itself.)"""
    setup(scheduler)
