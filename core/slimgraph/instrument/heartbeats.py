"""When the scheduler heard its workers' heartbeats.

A worker sends a heartbeat every fraction of a second; the scheduler
removes a worker it has not heard from for ``distributed.scheduler.worker-ttl``
(5 minutes by default). While the event loop is blocked, heartbeats wait:
the gaps between the moments the scheduler *handles* consecutive heartbeats
of one worker show what a long block costs the cluster, stock or slim.

:func:`watch` wraps the scheduler's ``heartbeat_worker`` handler (on this
scheduler object only; distributed is not modified) to note the time each
heartbeat is handled; :func:`gaps` returns the gaps per worker. Both take
``dask_scheduler=`` so they can be run through ``Client.run_on_scheduler``
on a scheduler of either kind.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any

#: heartbeats kept per worker
MAXLEN = 100_000


def watch(dask_scheduler: Any = None) -> bool:
    """Start noting heartbeat times (idempotent). Run on the scheduler."""
    s = dask_scheduler
    if getattr(s, "_slimgraph_heartbeats", None) is not None:
        return False
    seen: dict = {}
    s._slimgraph_heartbeats = seen
    handler = s.handlers["heartbeat_worker"]

    def heartbeat_worker(*args: Any, **kwargs: Any) -> Any:
        addr = kwargs.get("address")
        times = seen.get(addr)
        if times is None:
            times = seen[addr] = deque(maxlen=MAXLEN)
        times.append(time.monotonic())
        return handler(*args, **kwargs)

    s.handlers["heartbeat_worker"] = heartbeat_worker
    return True


def gaps(dask_scheduler: Any = None, since: float | None = None) -> dict:
    """``{worker address: [seconds between consecutive heartbeats]}``, for
    heartbeats handled after ``since`` (``time.monotonic()`` on the
    scheduler; None: all), and the worker-ttl in force."""
    import dask.config
    from dask.utils import parse_timedelta

    seen = getattr(dask_scheduler, "_slimgraph_heartbeats", None) or {}
    out = {}
    for addr, times in seen.items():
        ts = [t for t in times if since is None or t >= since]
        out[addr] = [b - a for a, b in zip(ts, ts[1:])]
    ttl = dask.config.get("distributed.scheduler.worker-ttl")
    return {"gaps": out, "worker_ttl": parse_timedelta(ttl) if ttl else None, "now": time.monotonic()}


def now(dask_scheduler: Any = None) -> float:
    """The scheduler's ``time.monotonic()`` (to pass as ``since``)."""
    return time.monotonic()
