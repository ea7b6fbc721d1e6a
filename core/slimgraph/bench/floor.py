"""What no scheduler engine can go below, measured on the same submission.

Three limits bound what any engine inside ``Scheduler.update_graph`` can
achieve, whatever it does with its own state:

* **dask's own objects.** Both schedulers must deserialize the submission
  and materialize it with dask (``_materialize_graph``), and must keep every
  task's key and run_spec for as long as the task lives. The RSS growth of
  doing only that (materialize, keep the ``(key, run_spec)`` pairs, drop
  everything else, collect, and even hand free heap back to the OS) is the
  least RSS growth per task any engine can show. The memory left over is
  partly live objects, partly heap that dask's temporaries freed but that
  stays mapped because survivors sit in the same arenas.

* **CPython's per-object cost.** Whatever an engine does, a scheduler that
  distributed can run needs one Python object per task, reachable from a
  dict by key, linked to its dependencies and dependents, and with a state.
  :func:`bare_loop` does only that, with the fewest possible Python
  operations (no groups, prefixes, priorities, queue, who_wants,
  annotations, validation or lost-dependency check), over the real keys and
  run_specs. Its time is a lower bound for the engine's own phases.

* **dask's uninterruptible calls.** The slim scheduler deserializes and
  materializes in a worker thread so the event loop keeps running, but the
  loop only runs when that thread lets go of the GIL, which C code such as
  ``pickle.loads`` does not do. :func:`stall` runs a call in a thread while
  this thread ticks every 2 ms, with the ingestion's switch interval, and
  reports the longest time the ticking thread could not run: the least
  event-loop block any engine calling dask's own functions can show
  (distributed's ``deserialize``; the slim engine unpickles through a
  Python-level reader instead, which lets the loop in at every frame:
  :mod:`slimgraph.ingest.decode`).

``python -m slimgraph bench`` runs :func:`measure` in a third fresh process
beside the stock and slim runs and prints the limits next to the targets.
"""
from __future__ import annotations

import gc
import time
from typing import Any

from slimgraph.runtime import disposal


class _BareTask:
    """The least a task object can carry and still be scheduled."""

    __slots__ = (
        "key", "run_spec", "group", "priority", "state",
        "dependencies", "dependents", "waiting_on", "waiters", "who_wants",
    )


def bare_loop(items: list) -> tuple[float, dict]:
    """Build the bare task objects, dict and edges for ``items`` (``(key,
    run_spec)`` pairs in graph order); the seconds it took, and the dict."""
    group = object()
    t0 = time.perf_counter()
    tasks: dict = {}
    for i, (key, spec) in enumerate(items):
        ts = _BareTask()
        ts.key = key
        ts.run_spec = spec
        ts.group = group
        ts.priority = i
        ts.state = "released"
        ts.dependents = None
        ts.waiting_on = None
        ts.waiters = None
        ts.who_wants = None
        tasks[key] = ts
    for ts in tasks.values():
        deps = ts.run_spec.dependencies
        if deps:
            dl = tuple([tasks[d] for d in deps])
            ts.dependencies = dl
            for d in dl:
                lst = d.dependents
                if lst is None:
                    d.dependents = [ts]
                else:
                    lst.append(ts)
            ts.waiting_on = list(dl)
            ts.state = "waiting"
        else:
            ts.dependencies = ()
            ts.state = "queued"
    return time.perf_counter() - t0, tasks


def stall(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``fn(*args, **kwargs)`` in a thread; its result and the longest gap
    between two 2 ms ticks of the calling thread meanwhile (seconds)."""
    import threading

    from slimgraph import switches
    from slimgraph.runtime import switching

    out: list = []
    err: list = []

    def work() -> None:
        try:
            out.append(fn(*args, **kwargs))
        except BaseException as e:  # re-raised below, in the caller
            err.append(e)

    switching.hold(switches.get("switch-interval"))  # as during an ingestion
    try:
        th = threading.Thread(target=work, daemon=True)
        last = time.perf_counter()
        worst = 0.0
        th.start()
        while th.is_alive():
            time.sleep(0.002)
            now = time.perf_counter()
            worst = max(worst, now - last - 0.002)
            last = now
        # the last gap too: a call that holds the GIL from its thread's start
        # can end before this thread ticks once (start() returns only when
        # it gets the GIL back)
        worst = max(worst, time.perf_counter() - last - 0.002)
        th.join()
    finally:
        switching.release()
    if err:
        raise err[0]
    return out[0], worst


def measure(payload: dict) -> dict:
    """The limits for one update-graph payload (as the benchmark replays it).

    Runs with the collector off, as both engines' ingestion effectively
    does (stock's collections cost time, not retained memory)."""
    from slimgraph import shim
    from slimgraph.instrument.records import rss_bytes

    ser = payload.pop("expr_ser")
    keys = set(payload.pop("keys"))
    payload.clear()
    gc.collect()
    disposal.give_back()  # (glibc: free heap back to the OS)
    rss0 = rss_bytes()
    gc.disable()
    try:
        expr, deserialize_stall = stall(shim.deserialize, ser.header, ser.frames)
        del ser
        (dsk, _annotations), materialize_stall = stall(shim.materialize, expr, False)
        if shim.culls_explicitly(expr):  # as update_graph does
            dsk = shim.cull(dsk, keys)
        del expr, _annotations, keys
        items = list(dsk.items())
        del dsk
    finally:
        gc.enable()
    gc.collect()
    disposal.give_back()  # (glibc: free heap back to the OS)
    rss1 = rss_bytes()
    n = len(items)
    gc.disable()
    try:
        seconds, _tasks = bare_loop(items)
    finally:
        gc.enable()
    return {
        "tasks": n,
        "dask_rss_bytes_per_task": (rss1 - rss0) / max(n, 1),
        "bare_loop_seconds": seconds,
        "deserialize_stall_seconds": deserialize_stall,
        "materialize_stall_seconds": materialize_stall,
    }


def load_and_measure(payload_path: str) -> dict[str, Any]:
    from slimgraph.bench.payload import load

    return measure(load(payload_path))
