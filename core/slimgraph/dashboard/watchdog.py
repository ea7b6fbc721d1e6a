"""A preload for the app's scheduler processes: exit when the app is gone.

The app stops its engines on a normal exit (``atexit``, Ctrl-C), but a
killed app runs no handler; its scheduler processes would live on. Each is
started with ``--preload slimgraph.dashboard.watchdog`` and the app's pid in
``SLIMGRAPH_DASHBOARD_PARENT``: a daemon thread checks once a second that
its parent is still that process and otherwise sends itself SIGTERM (dask's
command line closes the scheduler cleanly on it). The workers follow by
``--death-timeout``: they close when their scheduler is gone.
"""
from __future__ import annotations

import os
import signal
import threading
import time

ENV = "SLIMGRAPH_DASHBOARD_PARENT"


def _watch(parent: int, interval: float) -> None:
    while True:
        time.sleep(interval)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)
            return


def dask_setup(server) -> None:
    parent = os.environ.get(ENV)
    if parent:
        threading.Thread(target=_watch, args=(int(parent), 1.0), name="slimgraph-watchdog",
                         daemon=True).start()  # fmt: skip
