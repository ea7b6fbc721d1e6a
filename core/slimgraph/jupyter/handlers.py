"""The server extension's handlers, under ``<base_url>slimgraph-lab/api/``.

- ``GET  summary``     reads every scheduler once (at most about a second:
  a scheduler that has not answered by then is shown as waiting, its call
  left running) and answers :func:`slimgraph.jupyter.summary.snapshot`;
- ``POST schedulers``  ``{"address": <address or dashboard URL>, "source":
  "entered" | "dask-labextension"}`` adds a scheduler; ``DELETE
  schedulers?address=...`` removes one the user added;
- ``GET  views``       slimgraph's views: the app (through jupyter-server-proxy's
  launcher entry, when it is installed) and, per scheduler with a dashboard,
  the pages its ``/individual-plots.json`` lists as slimgraph's (distributed's
  JSON list, the one dask-labextension reads) and its "slimgraph" tab.

Every handler needs the Jupyter server's authentication.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

import tornado
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from slimgraph.jupyter import URL_PREFIX
from slimgraph.jupyter.schedulers import Registry
from slimgraph.jupyter.summary import snapshot

#: the individual pages in the order the sidebar lists them
PAGE_ORDER = {"/individual-slimgraph-timing": 0, "/individual-slimgraph-memory": 1,
              "/individual-slimgraph-lazy-sets": 2}  # fmt: skip

#: how long ``GET summary`` waits for the schedulers' answers
ANSWER_WAIT_S = 1.0


def app_url(base_url: str) -> str | None:
    """The launcher tile's app under this server, if jupyter-server-proxy
    (which serves it) is installed."""
    try:
        import jupyter_server_proxy  # noqa: F401
    except ImportError:
        return None
    return url_path_join(base_url, "slimgraph", "dashboard")


class _Base(APIHandler):
    @property
    def registry(self) -> Registry:
        return self.settings["slimgraph_registry"]

    def app_url(self) -> str | None:
        return app_url(self.settings.get("base_url", "/"))

    async def _snapshot(self, wait: float = ANSWER_WAIT_S) -> dict:
        poll = asyncio.ensure_future(self.registry.poll())
        await asyncio.wait([poll], timeout=wait)
        return snapshot(self.registry, self.app_url())


class SummaryHandler(_Base):
    @tornado.web.authenticated
    async def get(self) -> None:
        self.finish(json.dumps(await self._snapshot()))


class SchedulersHandler(_Base):
    @tornado.web.authenticated
    async def post(self) -> None:
        body = self.get_json_body() or {}
        try:
            s = await self.registry.add(str(body.get("address", "")), body.get("source", "entered"))
        except Exception as e:  # noqa: BLE001 - said to the user
            self.set_status(400)
            self.finish(json.dumps({"error": f"{type(e).__name__}: {e}"}))
            return
        out = await self._snapshot(wait=3.0)  # a first connection takes a moment
        out["added"] = s.id
        self.finish(json.dumps(out))

    @tornado.web.authenticated
    async def delete(self) -> None:
        removed = self.registry.remove(self.get_argument("address", ""))
        self.finish(json.dumps({"removed": removed}))


class ViewsHandler(_Base):
    @tornado.web.authenticated
    async def get(self) -> None:
        from tornado.httpclient import AsyncHTTPClient

        views: list[dict[str, Any]] = []
        app = self.app_url()
        if app:
            views.append({"group": "the slimgraph dashboard app", "title": "slimgraph dashboard",
                          "url": app, "scheduler": None})  # fmt: skip
        http = AsyncHTTPClient()
        for s in self.registry.shown():
            if not s.dashboard:
                continue
            try:
                resp = await http.fetch(s.dashboard + "/individual-plots.json", request_timeout=3)
                plots = json.loads(resp.body)
            except Exception:  # noqa: BLE001 - a dashboard that does not answer lists nothing
                continue
            pages = sorted(((title, path) for title, path in plots.items() if "slimgraph" in path),
                           key=lambda tp: (PAGE_ORDER.get(tp[1], 9), tp[1]))  # fmt: skip
            if not pages:
                continue
            group = f"{s.label} ({s.kind})" if s.kind and s.kind not in s.label else s.label
            for title, path in pages:
                name = title.replace("Individual Slimgraph", "").strip() or title
                views.append({"group": group, "title": name.lower(),
                              "url": s.dashboard + path, "scheduler": s.id})  # fmt: skip
            # the scheduler dashboard's "slimgraph" tab (all of them, dask's navbar)
            views.append({"group": group, "title": "slimgraph tab",
                          "url": s.dashboard + "/slimgraph", "scheduler": s.id})  # fmt: skip
        self.finish(json.dumps({"views": views}))


def setup_handlers(server_app: Any) -> None:
    web_app = server_app.web_app
    web_app.settings["slimgraph_registry"] = Registry(server_app.log)
    base = url_path_join(web_app.settings["base_url"], URL_PREFIX, "api")
    web_app.add_handlers(".*$", [
        (url_path_join(base, "summary"), SummaryHandler),
        (url_path_join(base, "schedulers"), SchedulersHandler),
        (url_path_join(base, "views"), ViewsHandler),
    ])  # fmt: skip
