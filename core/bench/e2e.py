"""``python -m slimgraph bench --mode client``: end to end, through a real Client.

The engine benchmark (:mod:`slimgraph.bench.runner`) replays one pickled
submission into ``update_graph`` of an in-process scheduler without workers:
it isolates the scheduler's own cost. This mode measures what a user sees.
For each kind (stock, then slim, same run, same workload):

1. start a real scheduler process (``dask scheduler``; the slim one with
   ``--preload slimgraph.distributed``, the drop-in) and ``--workers``
   single-threaded worker processes (``dask worker``);
2. connect a :class:`distributed.Client`, install the recorder (stock's
   ``update_graph`` is instrumented from outside, see
   :mod:`slimgraph.instrument.stock`);
3. while a second connection pings the scheduler every 20 ms (``identity``,
   a plain RPC: the latency another client or a heartbeat sees), submit the
   collection with ``client.compute`` and wait for the result, or with
   ``compute_seconds`` only that long after the submission returned, then
   cancel (a 1M-task computation takes half an hour on two workers; what
   follows an ingestion, such as a first garbage collection, still falls in
   the pinged window).

Reported per kind: end-to-end submit time (``compute`` call to the end of
the scheduler's ``update_graph``), the update_graph phases and total,
the longest event-loop block (scheduler-side loop monitor) and the longest
ping latency (client side), scheduler RSS growth per task over the
submission, and the time until the result is back on the client (the graph
computed on the workers).

JSON (``--json PATH``)::

    {"mode": "client", "workload", "requested_tasks", "tasks", "workers",
     "stock": RUN, "slim": RUN, "ratios": {...}}

    RUN = {"submit_seconds", "update_graph_seconds", "phases": {name: s},
           "longest_block_seconds", "phase_blocks", "longest_ping_seconds",
           "rss_bytes_per_task", "compute_seconds" (None when cut short),
           "tasks", "result"}
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

KINDS = ("stock", "slim")


class _Pinger:
    """A second connection that asks the scheduler for ``identity`` every
    ``interval`` seconds, in its own thread and event loop, and keeps the
    longest round trip: how long the scheduler made another caller wait."""

    def __init__(self, address: str, interval: float = 0.02):
        self.address = address
        self.interval = interval
        self.longest = 0.0
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="slimgraph-pinger", daemon=True)

    def __enter__(self) -> "_Pinger":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        from distributed.core import rpc

        r = rpc(self.address)
        try:
            while not self._stop.is_set():
                t = time.perf_counter()
                await r.identity()
                self.longest = max(self.longest, time.perf_counter() - t)
                self.count += 1
                await asyncio.sleep(self.interval)
        finally:
            await r.close_rpc()


def _wait_file(path: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    t0 = time.monotonic()
    while not os.path.exists(path) or os.path.getsize(path) == 0:
        if proc.poll() is not None:
            raise RuntimeError(f"scheduler exited with {proc.returncode}")
        if time.monotonic() - t0 > timeout:
            raise TimeoutError("scheduler did not start")
        time.sleep(0.1)


def run_kind(kind: str, workload: str, tasks: int, workers: int = 2,
             progress: Any = None, compute_seconds: float | None = None) -> dict:
    """One kind, end to end, in fresh scheduler and worker processes."""
    from distributed import Client, wait

    from slimgraph.workloads import WORKLOADS
    from slimgraph.instrument.client import get_submissions, install

    say = progress or (lambda msg: None)
    tmp = tempfile.mkdtemp(prefix=f"slimgraph-e2e-{kind}-")
    sfile = os.path.join(tmp, "scheduler.json")
    py = sys.executable
    cmd = [py, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
           "--port", "0", "--dashboard-address", ":0", "--scheduler-file", sfile]
    if kind == "slim":
        cmd += ["--preload", "slimgraph.distributed"]
    logs = open(os.path.join(tmp, "processes.log"), "w")
    ok = False
    procs = [subprocess.Popen(cmd, stdout=logs, stderr=subprocess.STDOUT)]
    try:
        _wait_file(sfile, procs[0])
        procs.append(subprocess.Popen(
            [py, "-m", "distributed.cli.dask_worker", "--scheduler-file", sfile,
             "--nworkers", str(workers), "--nthreads", "1", "--no-dashboard",
             "--memory-limit", "0"],
            stdout=logs, stderr=subprocess.STDOUT))
        with Client(scheduler_file=sfile, timeout="60s") as client:
            client.wait_for_workers(workers, timeout=120)
            install(client)
            coll = WORKLOADS[workload](tasks)
            say(f"{kind}: submitting")
            with _Pinger(client.scheduler.address) as ping:
                t0 = time.time()
                fut = client.compute(coll)
                rec = None
                while rec is None:
                    time.sleep(0.2)
                    recs = [r for r in get_submissions(client)
                            if r.status != "running"]
                    rec = recs[-1] if recs else None
                say(f"{kind}: ingested in {rec.start + rec.total_s - t0:.1f} s, computing")
                if compute_seconds is None:
                    wait(fut)
                    t_done = time.time()
                    value = fut.result()
                else:
                    time.sleep(max(0.0, rec.start + rec.total_s + compute_seconds - time.time()))
                    t_done = value = None
                    fut.cancel()
            del fut
        if rec.status != "OK":
            raise RuntimeError(f"{kind}: update_graph {rec.status}: {rec.error}")
        rss = None
        if rec.rss_before is not None and rec.rss_after is not None and rec.tasks:
            rss = (rec.rss_after - rec.rss_before) / rec.tasks
        out = {
            "tasks": rec.tasks,
            "submit_seconds": rec.start + rec.total_s - t0,
            "update_graph_seconds": rec.total_s,
            "phases": {p.name: p.wall_s for p in rec.phases},
            "longest_block_seconds": rec.longest_block_s,
            "phase_blocks": {p.name: p.longest_block_s for p in rec.phases},
            "longest_ping_seconds": ping.longest,
            "pings": ping.count,
            "rss_bytes_per_task": rss,
            "compute_seconds": None if t_done is None else t_done - t0,
            "result": None if t_done is None else repr(value)[:200],
        }
        ok = True
        return out
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        logs.close()
        if ok:  # on failure the processes' log stays for a look
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"  {kind}: scheduler and worker logs in {tmp}", file=sys.stderr)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def bench_client(workload: str, tasks: int, workers: int = 2,
                 json_path: str | None = None, compute_seconds: float | None = None) -> dict:
    def say(msg: str) -> None:
        print(f"  {msg}", file=sys.stderr, flush=True)

    runs = {kind: run_kind(kind, workload, tasks, workers, say, compute_seconds) for kind in KINDS}
    st, sl = runs["stock"], runs["slim"]
    result = {
        "mode": "client",
        "workload": workload,
        "requested_tasks": tasks,
        "tasks": sl["tasks"],
        "workers": workers,
        "stock": st,
        "slim": sl,
        "same_result": None if st["result"] is None else st["result"] == sl["result"],
        "compute_cut_after_seconds": compute_seconds,
        "ratios": {
            k: _ratio(st[k], sl[k])
            for k in ("submit_seconds", "update_graph_seconds", "longest_block_seconds",
                      "longest_ping_seconds", "rss_bytes_per_task", "compute_seconds")
        },
    }
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)
    return result


def format_client_table(result: dict) -> str:
    rows = [
        ("end-to-end submit (s)", "submit_seconds", "{:.2f}"),
        ("update_graph (s)", "update_graph_seconds", "{:.2f}"),
        ("longest loop block (ms)", "longest_block_seconds", "ms"),
        ("longest ping from 2nd client (ms)", "longest_ping_seconds", "ms"),
        ("scheduler RSS growth (B/task)", "rss_bytes_per_task", "{:,.0f}"),
        (f"submit + compute on {result['workers']} workers (s)", "compute_seconds", "{:.2f}"),
    ]

    def fmt(v: Any, spec: str) -> str:
        if v is None:
            return "-"
        if spec == "ms":
            return f"{v * 1e3:,.1f}"
        return spec.format(v)

    out = [f"{result['workload']}: {result['tasks']:,} tasks through a real Client "
           f"(scheduler process, {result['workers']} worker processes)",
           f"{'':38} {'stock':>12} {'slim':>12} {'stock/slim':>11}"]
    for label, k, spec in rows:
        r = result["ratios"][k]
        out.append(f"{label:38} {fmt(result['stock'][k], spec):>12} "
                   f"{fmt(result['slim'][k], spec):>12} {'-' if r is None else f'{r:.2f}x':>11}")
    from slimgraph.bench.runner import block_phase

    out.append(f"longest block, most of it in: stock {block_phase(result['stock'])}, "
               f"slim {block_phase(result['slim'])}")
    if result.get("compute_cut_after_seconds") is not None:
        out.append(f"computation cancelled {result['compute_cut_after_seconds']:g} s after the submission")
    else:
        out.append(f"same result: {result['same_result']}")
    return "\n".join(out)
