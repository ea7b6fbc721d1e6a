"""The schedulers the app submits to and reads: one process-wide manager.

Engine processes (default): per scheduler kind, a real scheduler *process*
(``python -m distributed.cli.dask_scheduler``; slim with ``--preload
slimgraph.distributed``, stock with ``--preload slimgraph.views.tab`` so its
phases are recorded; both get the slimgraph tab in their own dashboard) and
one ``dask worker`` process with ``SLIMGRAPH_WORKERS`` x ``SLIMGRAPH_THREADS``
workers (2 x 1 by default), the way the client benchmark
(:func:`slimgraph.bench.e2e.run_kind`) runs them. No scheduler runs in the
app's process, so

- each engine's RSS, update_graph time and event-loop blocks are its own
  (nothing of Panel, Bokeh, the other engine or the client-side graph build
  shares its process or its GIL); the app reads each scheduler process's RSS
  with psutil from its pid (the same figure as the process's own
  ``/proc/self/statm``, and available while a stock ingestion blocks its loop);
- bokeh's process-wide ``Property._should_validate`` flag, which
  distributed's dashboard toggles without thread safety, is never touched by
  a scheduler thread in the Panel process (the cause of broken sessions and
  HTTP 500s on dask's ``/status`` seen when schedulers ran in the app's
  process).

The processes are this app's children; :meth:`ClusterManager.close` stops
them (terminate, then kill after 10 s), and an ``atexit`` hook does so when
the app exits.

Remote: when ``SLIMGRAPH_SCHEDULER`` names a scheduler address, the app
connects one Client to it and reads everything through the client
(:class:`slimgraph.instrument.feed.RemoteFeed`), after installing the
recorder there (:meth:`RemoteFeed.install`); its kind (stock/slim) is asked
from the scheduler.

Either way the app talks to a scheduler only through its entry's ``feed``
(the ``slimgraph`` extension's handlers) and ``client`` (submissions), and
the shared poller (:mod:`slimgraph.dashboard.poller`) through clients of
its own.

The manager lives in this module, so it survives the per-session re-runs
of ``main.py`` under ``panel serve``.
"""
from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from slimgraph.bench.processes import wait_scheduler_file
from slimgraph.instrument.feed import Feed, RemoteFeed
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
    #: the scheduler process's pid (engines the app started; None for a remote one)
    pid: int | None = None
    #: the child processes (scheduler, workers) and their log directory
    procs: list = field(default_factory=list)
    tmp: str = ""
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
        from distributed import Client

        if e.kind == "slim":
            cls, why = slim_scheduler_class()
            if cls is None:
                e.status, e.error = "unavailable", why
                return
        e.tmp = tempfile.mkdtemp(prefix=f"slimgraph-dashboard-{e.kind}-")
        sfile = os.path.join(e.tmp, "scheduler.json")
        preload = "slimgraph.distributed" if e.kind == "slim" else "slimgraph.views.tab"
        py = sys.executable
        log = open(os.path.join(e.tmp, "processes.log"), "w")
        env = dict(os.environ, SLIMGRAPH_DASHBOARD_PARENT=str(os.getpid()))
        sched = subprocess.Popen(
            [py, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
             "--dashboard-address", "127.0.0.1:0", "--scheduler-file", sfile, "--preload", preload,
             "--preload", "slimgraph.dashboard.watchdog"],
            stdout=log, stderr=subprocess.STDOUT, env=env)  # fmt: skip
        e.procs.append(sched)
        e.pid = sched.pid
        wait_scheduler_file(sfile, sched)
        e.procs.append(subprocess.Popen(
            [py, "-m", "distributed.cli.dask_worker", "--scheduler-file", sfile,
             "--nworkers", str(self.n_workers), "--nthreads", str(self.threads_per_worker),
             "--no-dashboard", "--host", "127.0.0.1", "--memory-limit", "0", "--death-timeout", "30"],
            stdout=log, stderr=subprocess.STDOUT, env=env))  # fmt: skip
        log.close()
        client = Client(scheduler_file=sfile, set_as_default=False, timeout="60s")
        e.client = client
        client.wait_for_workers(self.n_workers, timeout=120)
        feed = RemoteFeed(client, e.kind)
        feed.sync(feed.install, timeout=60)  # stock: record its phases (the preload did)
        e.feed = feed
        e.address = client.scheduler.address
        port = client.scheduler_info().get("services", {}).get("dashboard")
        e.dashboard_link = f"http://127.0.0.1:{port}/status" if port else ""

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
                stop_processes(e.procs)
                e.procs = []
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
        """``slimgraph-switches.lazy-containers`` for the next submissions to ``e``."""
        return e.feed.sync(e.feed.set_lazy, flag, timeout=60)

    def close(self) -> None:
        for e in self.entries.values():
            if e.client is not None:
                try:
                    e.client.close(timeout=10)
                except Exception:  # noqa: BLE001
                    pass
            stop_processes(e.procs)
            e.procs = []
            if e.tmp:
                shutil.rmtree(e.tmp, ignore_errors=True)
            e.client = e.cluster = e.feed = None
            e.pid = None
            if e.status == "running":
                e.status = "not started"


def stop_processes(procs: list, grace: float = 10.0) -> None:
    """Terminate our child processes (workers first), then kill what is left."""
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace
    for p in reversed(procs):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)


_manager: ClusterManager | None = None
_manager_lock = threading.Lock()


def manager() -> ClusterManager:
    global _manager
    with _manager_lock:
        if _manager is None:
            _manager = ClusterManager()
            atexit.register(reset_manager)
        return _manager


def reset_manager() -> None:
    global _manager
    with _manager_lock:
        if _manager is not None:
            _manager.close()
        _manager = None
