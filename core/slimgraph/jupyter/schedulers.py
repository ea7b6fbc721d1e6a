"""Which schedulers the JupyterLab sidebar shows, and one Client to each.

Sources, in the order shown:

- ``slimgraph dashboard``: the engines of a running ``slimgraph dashboard``
  (or ``panel serve dashboard``, or the launcher tile's app) on this
  machine. The app starts each engine with ``--scheduler-file`` in a
  temporary directory ``slimgraph-dashboard-<kind>-*`` and removes it when it
  stops (:mod:`slimgraph.dashboard.clusters`); those files are read, so the
  app needs no hook for this. A file whose scheduler does not answer (an app
  killed before it could clean up) is not shown.
- ``SLIMGRAPH_SCHEDULER``: the scheduler the Jupyter server's environment
  names (the one the launcher tile's app reads too).
- ``entered``: a scheduler address (``tcp://host:8786``) or a dashboard URL
  (``http://host:8787/status``; its scheduler's address is asked from the
  dashboard's ``/json/identity.json``) typed into the sidebar.
- ``dask-labextension``: the clusters dask-labextension's server extension
  manages (when it is installed), and the dashboard URL its sidebar is set
  to (the browser sends it, as ``entered`` with that source).

Every scheduler is read through an asynchronous ``distributed.Client`` on
the Jupyter server's own event loop and a
:class:`~slimgraph.instrument.feed.RemoteFeed` (the ``slimgraph_*``
handlers). A scheduler that has no slimgraph extension (a notebook's stock
``LocalCluster``) gets the recorder installed, as the dashboard app does
with ``SLIMGRAPH_SCHEDULER``
(:meth:`~slimgraph.instrument.feed.RemoteFeed.install`; the scheduler must
be able to import slimgraph, else the sidebar says so).
"""
from __future__ import annotations

import asyncio
import glob
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

#: how long one call to a scheduler may take before the sidebar says it has
#: not answered (a stock scheduler's loop is blocked for a whole ingestion)
CALL_TIMEOUT_S = 3.0
#: how long to wait before connecting again to a scheduler that refused
RETRY_S = 5.0

DASHBOARD_DIR = re.compile(r"slimgraph-dashboard-(stock|slim)-")

SOURCES = ("slimgraph dashboard", "SLIMGRAPH_SCHEDULER", "entered", "dask-labextension")


@dataclass
class Scheduler:
    address: str
    source: str
    #: what the sidebar calls it ("stock engine", the address...)
    label: str
    #: schedulers of one group are compared (stock beside slim, ratios)
    group: str
    kind: str | None = None
    #: http://host:port of its dashboard, None if it has none (or not known yet)
    dashboard: str | None = None
    client: Any = None
    feed: Any = None
    error: str = ""
    #: not shown until it has answered once (a stale scheduler file)
    hide_until_connected: bool = False
    connected_once: bool = False
    next_try: float = 0.0
    status: dict | None = None
    answered: float | None = None  # time.monotonic() of the last answer
    latest: Any = None  # the newest SubmissionRecord
    pending: asyncio.Task | None = None
    connecting: asyncio.Task | None = None
    extras: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.address


def dashboard_engines(tmpdir: str | None = None) -> list[tuple[str, str]]:
    """``(kind, address)`` of the engines of running slimgraph dashboards on
    this machine (their scheduler files; see the module docstring)."""
    out = []
    base = tmpdir or tempfile.gettempdir()
    for path in sorted(glob.glob(os.path.join(base, "slimgraph-dashboard-*", "scheduler.json"))):
        m = DASHBOARD_DIR.search(os.path.basename(os.path.dirname(path)))
        if not m:
            continue
        try:
            with open(path) as f:
                address = json.load(f)["address"]
        except (OSError, ValueError, KeyError):
            continue  # being written, or gone
        out.append((m.group(1), address))
    return out


def labextension_clusters() -> list[tuple[str, str]]:
    """``(name, scheduler address)`` of dask-labextension's clusters, when its
    server extension runs in this process (else none)."""
    import sys

    mod = sys.modules.get("dask_labextension.manager")
    if mod is None:
        return []
    out = []
    try:
        models = mod.manager.list_clusters()
        if not isinstance(models, list):  # (a version whose manager is asynchronous)
            return []
        for model in models:
            if model.get("scheduler_address"):
                out.append((model.get("name") or model["id"], model["scheduler_address"]))
    except Exception:  # noqa: BLE001 - its API is not ours: show what it gives
        return []
    return out


async def address_of(text: str) -> str:
    """A scheduler address from what the user typed: an address as is (a
    bare ``host:port`` as ``tcp://host:port``), a dashboard URL through the
    dashboard's ``/json/identity.json`` (distributed's own JSON route)."""
    text = text.strip()
    if not text:
        raise ValueError("nothing entered")
    u = urlparse(text)
    if u.scheme in ("http", "https"):
        from tornado.httpclient import AsyncHTTPClient

        path = u.path
        # a dashboard proxied by jupyter-server-proxy: <base>proxy/<port>/status
        m = re.search(r"/proxy/(\d+)(/|$)", path)
        if m:
            origin = f"http://127.0.0.1:{m.group(1)}"
        else:
            origin = f"{u.scheme}://{u.netloc}"
            # a dashboard under a prefix: what comes before its page's name
            prefix = re.sub(r"/(status|workers|tasks|system|profile|graph|groups|info|"
                            r"individual-[\w-]+|slimgraph)(/.*)?$", "", path).rstrip("/")
            origin += prefix
        resp = await AsyncHTTPClient().fetch(origin + "/json/identity.json", request_timeout=5)
        ident = json.loads(resp.body)
        address = ident.get("address")
        if not address:
            raise ValueError(f"{origin}/json/identity.json names no scheduler address")
        return address
    if "://" not in text:
        text = "tcp://" + text
    return text


def has_extension(dask_scheduler: Any) -> bool:
    """On the scheduler (``Client.run_on_scheduler``): has it slimgraph's handlers?"""
    from slimgraph.instrument.recorder import HANDLER_PREFIX

    return HANDLER_PREFIX + "status" in dask_scheduler.handlers


class Registry:
    """The schedulers shown, and reading them (one per Jupyter server)."""

    def __init__(self, log: Any = None):
        self.log = log
        self.schedulers: dict[str, Scheduler] = {}

    # -- which ----------------------------------------------------------------
    def discover(self) -> None:
        """Add the schedulers of every source that is found, drop the
        dashboard engines whose files are gone."""
        seen = set()
        for kind, address in dashboard_engines():
            seen.add(address)
            if address not in self.schedulers:
                self.schedulers[address] = Scheduler(
                    address, "slimgraph dashboard", f"{kind} engine", "slimgraph dashboard",
                    kind=kind, hide_until_connected=True)  # fmt: skip
        for address, s in list(self.schedulers.items()):
            if s.source == "slimgraph dashboard" and address not in seen:
                self._drop(address)
        env = os.environ.get("SLIMGRAPH_SCHEDULER")
        if env and env not in self.schedulers:
            self.schedulers[env] = Scheduler(env, "SLIMGRAPH_SCHEDULER", env, env)
        for name, address in labextension_clusters():
            if address not in self.schedulers:
                self.schedulers[address] = Scheduler(
                    address, "dask-labextension", f"{name}", address)

    async def add(self, text: str, source: str = "entered") -> Scheduler:
        if source not in SOURCES:
            raise ValueError(f"unknown source {source!r}")
        address = await address_of(text)
        s = self.schedulers.get(address)
        if s is None:
            s = self.schedulers[address] = Scheduler(address, source, address, address)
        return s

    def remove(self, address: str) -> bool:
        s = self.schedulers.get(address)
        if s is None or s.source == "slimgraph dashboard":
            return False
        self._drop(address)
        return True

    def _drop(self, address: str) -> None:
        s = self.schedulers.pop(address, None)
        if s is not None and s.client is not None:
            asyncio.ensure_future(_close(s.client))

    # -- reading ----------------------------------------------------------------
    async def _connect(self, s: Scheduler) -> None:
        from distributed import Client

        from slimgraph.instrument.feed import RemoteFeed

        try:
            client = await Client(s.address, asynchronous=True, set_as_default=False,
                                  timeout=f"{CALL_TIMEOUT_S}s")  # fmt: skip
        except Exception as e:  # noqa: BLE001
            s.error = f"cannot connect: {type(e).__name__}: {e}"
            s.next_try = time.monotonic() + RETRY_S
            return
        feed = RemoteFeed(client)
        try:
            # a stock scheduler nobody measured gets the recorder; slim's
            # preload and the dashboard's engines have it already. Asked
            # first, not tried: distributed logs a call to a handler it does
            # not have as a warning with a traceback, in the scheduler's
            # process (a notebook's LocalCluster: red in the user's notebook)
            has = await asyncio.wait_for(client.run_on_scheduler(has_extension), CALL_TIMEOUT_S * 3)
            if not has:
                from slimgraph.instrument.stock_recorder import StockRecorderPlugin

                await asyncio.wait_for(client.register_plugin(StockRecorderPlugin()), 30)
            await asyncio.wait_for(feed.install(), 30)
            st = await asyncio.wait_for(feed.status(), CALL_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001
            s.error = f"no slimgraph extension there: {type(e).__name__}: {e}"
            s.next_try = time.monotonic() + RETRY_S
            await _close(client)
            return
        s.client, s.feed, s.error = client, feed, ""
        s.connected_once = True
        s.kind = st["kind"]
        s.status, s.answered = st, time.monotonic()
        try:
            info = client.scheduler_info()
            port = (info.get("services") or {}).get("dashboard")
            host = urlparse(s.address).hostname
            if port and host:
                host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
                s.dashboard = f"http://{host}:{port}"
        except Exception:  # noqa: BLE001
            s.dashboard = None

    async def _read(self, s: Scheduler) -> None:
        """One status call and, when a newer record exists, the records."""
        from slimgraph.instrument.feed import NotInstalled

        try:
            st = await asyncio.wait_for(s.feed.status(), CALL_TIMEOUT_S)
            newest = st["latest"]  # the newest finished record's id (0: none)
            if newest and (s.latest is None or s.latest.submission_id != newest):
                recs = await asyncio.wait_for(s.feed.records(newest - 1), CALL_TIMEOUT_S)
                if recs:
                    s.latest = recs[-1]
            s.status, s.answered, s.error = st, time.monotonic(), ""
        except asyncio.TimeoutError:
            pass  # not answering: the sidebar says for how long
        except (NotInstalled, OSError, Exception) as e:  # noqa: BLE001
            if s.client is not None and s.client.status in ("closed", "closing", "failed"):
                await _close(s.client)
                s.client = s.feed = None
                s.error = "the scheduler has gone"
                s.next_try = time.monotonic() + RETRY_S
            else:
                s.error = f"{type(e).__name__}: {e}"

    async def poll(self) -> None:
        """Read every scheduler once: connect what is not connected, ask the
        others for their status; a call still running is not repeated behind
        itself, nothing waits longer than :data:`CALL_TIMEOUT_S`."""
        self.discover()
        tasks = []
        now = time.monotonic()
        for s in list(self.schedulers.values()):
            if s.client is None:
                if (s.connecting is None or s.connecting.done()) and now >= s.next_try:
                    s.connecting = asyncio.ensure_future(self._connect(s))
                tasks.append(s.connecting)
            elif s.pending is None or s.pending.done():
                s.pending = asyncio.ensure_future(self._read(s))
                tasks.append(s.pending)
        if tasks:
            await asyncio.wait([t for t in tasks if t is not None], timeout=CALL_TIMEOUT_S + 0.5)

    def shown(self) -> list[Scheduler]:
        out = [s for s in self.schedulers.values()
               if not (s.hide_until_connected and not s.connected_once)]
        order = {src: i for i, src in enumerate(SOURCES)}
        kinds = {"stock": 0, "slim": 1}
        return sorted(out, key=lambda s: (order.get(s.source, 9), s.group, kinds.get(s.kind or "", 2)))

    async def close(self) -> None:
        for s in list(self.schedulers.values()):
            if s.client is not None:
                await _close(s.client)
        self.schedulers.clear()


async def _close(client: Any) -> None:
    try:
        await asyncio.wait_for(client.close(), 5)
    except Exception:  # noqa: BLE001
        pass
