"""The schedulers the app submits to and reads: one process-wide manager.

Embedded (default): one LocalCluster per scheduler kind, started on demand
by the app, with ``processes=True`` workers (2 workers x 1 thread unless
``SLIMGRAPH_WORKERS``/``SLIMGRAPH_THREADS`` say otherwise). Each scheduler runs
in this process, on the cluster's own event-loop thread, so the app reads its
state directly (:class:`slimgraph.instrument.feed.LocalFeed`) while its loop
stays free of Panel's work; each gets the slimgraph tab in its own dashboard
(:func:`slimgraph.views.tab.add_pages`).

Remote: when ``SLIMGRAPH_SCHEDULER`` names a scheduler address, the app
connects one Client to it and reads everything through the client
(:class:`slimgraph.instrument.feed.RemoteFeed`), after installing the
recorder there (:meth:`RemoteFeed.install`); its kind (stock/slim) is asked
from the scheduler.

Either way the app talks to a scheduler only through its entry's ``feed``
(the ``slimgraph`` extension's handlers) and ``client`` (submissions).

The manager lives in this module, so it survives the per-session re-runs
of ``main.py`` under ``panel serve``.
"""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from slimgraph.instrument.feed import Feed, LocalFeed, RemoteFeed
from slimgraph.views.figures import KINDS

logger = logging.getLogger(__name__)

ENV_ADDRESS = "SLIMGRAPH_SCHEDULER"


def slim_scheduler_class():
    """``slimgraph.distributed.SlimScheduler`` or None (with the reason)."""
    try:
        from slimgraph.distributed import SlimScheduler  # type: ignore
    except Exception as e:  # noqa: BLE001 - ImportError or a half-built module
        return None, f"slimgraph.distributed.SlimScheduler is not available ({e})"
    return SlimScheduler, ""


@dataclass
class Entry:
    kind: str
    cluster: Any = None
    client: Any = None
    feed: Feed | None = None
    status: str = "not started"  # not started / starting / running / error / unavailable
    error: str = ""
    dashboard_link: str = ""
    address: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


class ClusterManager:
    def __init__(self, address: str | None = None, n_workers: int | None = None,
                 threads_per_worker: int | None = None):
        self.address = address if address is not None else os.environ.get(ENV_ADDRESS) or None
        self.n_workers = n_workers or int(os.environ.get("SLIMGRAPH_WORKERS", 2))
        self.threads_per_worker = threads_per_worker or int(os.environ.get("SLIMGRAPH_THREADS", 1))
        self.entries: dict[str, Entry] = {}
        self._lock = threading.Lock()
        if self.address:
            self.entries["remote"] = Entry("remote")
        else:
            for kind in KINDS:
                self.entries[kind] = Entry(kind)
            cls, why = slim_scheduler_class()
            if cls is None:
                self.entries["slim"].status = "unavailable"
                self.entries["slim"].error = why

    @property
    def remote(self) -> bool:
        return bool(self.address)

    def kinds(self) -> tuple[str, ...]:
        """Kinds shown in the views (the remote scheduler's kind once known)."""
        if self.remote:
            e = self.entries["remote"]
            return (e.kind if e.kind != "remote" else "stock",)
        return KINDS

    def available(self, kind: str) -> bool:
        e = self.entries.get(kind)
        return e is not None and e.status != "unavailable"

    # -- starting -----------------------------------------------------------
    def _start_local(self, e: Entry) -> None:
        from distributed import Client, LocalCluster

        common = dict(
            n_workers=self.n_workers,
            threads_per_worker=self.threads_per_worker,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.WARNING,
        )
        if e.kind == "slim":
            cls, why = slim_scheduler_class()
            if cls is None:
                e.status, e.error = "unavailable", why
                return
            from slimgraph.distributed import SlimLocalCluster

            cluster = SlimLocalCluster(**common)
        else:
            cluster = LocalCluster(**common)
        client = Client(cluster, set_as_default=False)
        e.cluster, e.client = cluster, client
        feed = LocalFeed(cluster.scheduler, e.kind)
        feed.sync(feed.install, timeout=60)  # stock: record its phases
        feed.sync(_add_pages, cluster.scheduler, timeout=60)
        e.feed = feed
        e.address = cluster.scheduler_address
        port = cluster.scheduler.http_server.port
        e.dashboard_link = f"http://127.0.0.1:{port}/status"

    def _start_remote(self, e: Entry) -> None:
        from distributed import Client

        client = Client(self.address, set_as_default=False, timeout="10s")
        feed = RemoteFeed(client)
        # the app records what it shows: a stock scheduler's phases too
        feed.sync(feed.install, timeout=60)
        e.kind = feed.sync(feed.status, timeout=60)["kind"]
        e.client = client
        e.feed = feed
        e.address = self.address
        e.dashboard_link = client.dashboard_link or ""

    def get(self, kind: str) -> Entry:
        """The running entry for ``kind`` (blocking: starts it if needed)."""
        key = "remote" if self.remote else kind
        e = self.entries[key]
        with e.lock:
            if e.status in ("running", "unavailable"):
                return e
            e.status, e.error = "starting", ""
            try:
                if self.remote:
                    self._start_remote(e)
                else:
                    self._start_local(e)
                if e.status == "starting":
                    e.status = "running"
            except Exception as ex:  # noqa: BLE001
                logger.exception("slimgraph dashboard: starting %s failed", key)
                e.status, e.error = "error", f"{type(ex).__name__}: {ex}"
        return e

    def start_all(self) -> None:
        for key in list(self.entries):
            if self.entries[key].status != "unavailable":
                self.get(key if not self.remote else "remote")

    def start_in_background(self) -> threading.Thread:
        t = threading.Thread(target=self.start_all, name="slimgraph-clusters", daemon=True)
        t.start()
        return t

    def set_lazy(self, e: Entry, flag: bool) -> bool:
        """``slimgraph.lazy-containers`` for the next submissions to ``e``."""
        return e.feed.sync(e.feed.set_lazy, flag, timeout=60)

    def close(self) -> None:
        for e in self.entries.values():
            for obj in (e.client, e.cluster):
                if obj is not None:
                    try:
                        obj.close()
                    except Exception:  # noqa: BLE001
                        pass
            e.client = e.cluster = e.feed = None
            if e.status == "running":
                e.status = "not started"


async def _add_pages(scheduler) -> bool:
    """The slimgraph tab in an embedded scheduler's dashboard (on its loop)."""
    from slimgraph.views.tab import add_pages

    return add_pages(scheduler)


_manager: ClusterManager | None = None
_manager_lock = threading.Lock()


def manager() -> ClusterManager:
    global _manager
    with _manager_lock:
        if _manager is None:
            _manager = ClusterManager()
        return _manager


def reset_manager() -> None:
    global _manager
    with _manager_lock:
        if _manager is not None:
            _manager.close()
        _manager = None
