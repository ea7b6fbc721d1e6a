"""``python -m slimgraph bench --mode life``: what a graph's whole life costs the scheduler.

The other modes measure a graph's arrival. This one follows it to the end,
stock and slim in the same run, each in a fresh scheduler process with
``--workers`` single-threaded worker processes (:mod:`slimgraph.bench.processes`):

1. **ingest**: from ``client.compute`` until the scheduler's ``update_graph``
   ends (its record's end);
2. **run**: until the result is on the client (dispatch and completions
   interleave here: the workers report finished tasks, the scheduler sends
   the tasks that became ready); with ``--compute-seconds N`` only N seconds,
   then the client cancels the graph;
3. **release**: from the client's release (or cancel) until the scheduler
   holds none of the graph's tasks.

Per stage and engine: the scheduler process's CPU seconds (user + system,
read by pid every 20 ms from outside the process, so nothing in it is
disturbed), per task; the longest ping a second connection saw (an
``identity`` round trip every 20 ms, in a process of its own); the longest
event-loop block the scheduler's loop monitor saw; and the CPU split by
what ran, and the run's CPU into dispatch, completions and other, both from
py-spy sampling the scheduler process from outside
(:mod:`slimgraph.instrument.whatran`, which says how a sample is read).
Where py-spy cannot attach (no ptrace), the split is left out and said so.

JSON (``--json PATH``)::

    {"mode": "life", "workload", "requested_tasks", "workers", "compute_seconds",
     "stock": RUN, "slim": RUN, "ratios": {"cpu_<stage>": slim/stock, "cpu_whole": ...,
               "cpu_dispatch", "cpu_completions", "cpu_other": the run's parts}}

    RUN = {"tasks", "completed", "tasks_per_s", "result", "stages": {stage: STAGE}, "whole": STAGE,
           "peak_rss_bytes", "peak_rss_growth_bytes", "profile": "py-spy" or why not,
           "records": what the figures were computed from}
    STAGE = {"wall_s", "cpu_s", "cpu_us_per_task", "longest_ping_s",
             "longest_block_s", "by_what": {category: cpu seconds}}
    (the run's STAGE also has "parts": {part: {"cpu_s", "cpu_us_per_task",
     "share"}}: dispatch, completions, other; see ``life_figures``)

The stages, the records and the figures are :mod:`slimgraph.instrument.stages`'s
(``LifeRecords``, ``life_figures``), the dashboard's jobs' too: the app's
stage figures are computed as these are.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from typing import Any

from slimgraph.instrument.stages import PARTS, STAGES, LifeRecords, Sampler, completed, life_figures, settled_blocks
from slimgraph.instrument.whatran import Profile

KINDS = ("stock", "slim")


# -- one engine -----------------------------------------------------------------
def _no_tasks(dask_scheduler: Any = None) -> bool:
    return not dask_scheduler.tasks


def _loop_blocks(since: float, dask_scheduler: Any = None) -> list:
    from slimgraph.instrument.recorder import get_extension

    return [(b["wall_end"], b["seconds"]) for b in get_extension(dask_scheduler).loop_blocks(since)]


def run_kind(kind: str, workload: str, tasks: int, workers: int = 2, compute_seconds: float | None = None,
             progress: Any = None, profiles_dir: str | None = None) -> dict:
    """One engine through a graph's whole life (see the module docstring);
    py-spy's raw recordings are kept in ``profiles_dir`` as
    ``{kind}-{stage}.txt`` (flamegraph input) when it is given."""
    from distributed import Client, wait

    from slimgraph.bench.e2e import _Load
    from slimgraph.bench.processes import cluster_processes, wait_for
    from slimgraph.instrument.client import get_status, get_submissions, install
    from slimgraph.workloads import WORKLOADS

    say = progress or (lambda msg: None)
    tmp = tempfile.mkdtemp(prefix=f"slimgraph-life-{kind}-")
    profiles: dict = {}
    try:
        with cluster_processes(kind, workers) as cluster, Client(scheduler_file=cluster.scheduler_file,
                                                                  timeout="60s") as client:
            client.wait_for_workers(workers, timeout=120)
            install(client)
            coll = WORKLOADS[workload](tasks)
            with _Load(client.scheduler.address, None, submit_every=0) as ping, \
                    Sampler(cluster.scheduler_pid) as cpu:
                ping.wait_pinging()
                bounds = {"ingest": [time.time(), None]}
                profiles["ingest"] = Profile(cluster.scheduler_pid, os.path.join(tmp, "ingest.txt"))
                fut = client.compute(coll)
                rec = None
                while rec is None:
                    time.sleep(0.05)
                    recs = [r for r in get_submissions(client) if r.client == client.id]
                    rec = recs[-1] if recs and recs[-1].status != "running" else None
                if rec.status != "OK":
                    raise RuntimeError(f"{kind}: update_graph {rec.status}: {rec.error}")
                bounds["ingest"][1] = bounds.setdefault("run", [rec.start + rec.total_s, None])[0]
                samples = {"ingest": profiles["ingest"].stop()}
                profiles["run"] = Profile(cluster.scheduler_pid, os.path.join(tmp, "run.txt"))
                say(f"{kind}: ingested {rec.tasks:,} tasks in {rec.total_s:.1f} s; running")
                value = None
                if compute_seconds is None:
                    wait(fut)
                    value = fut.result()
                else:
                    time.sleep(max(0.0, bounds["run"][0] + compute_seconds - time.time()))
                bounds["run"][1] = time.time()
                done = completed(rec.tasks, get_status(client)["states"])
                bounds["release"] = [bounds["run"][1], None]
                samples["run"] = profiles["run"].stop()
                profiles["release"] = Profile(cluster.scheduler_pid, os.path.join(tmp, "release.txt"))
                say(f"{kind}: {'computed' if compute_seconds is None else 'cancelling'}; releasing")
                if compute_seconds is None:
                    fut.release()
                else:
                    fut.cancel()
                del fut
                if not wait_for(lambda: client.run_on_scheduler(_no_tasks), 900, every=0.02):
                    raise TimeoutError(f"{kind}: the scheduler still held tasks 900 s after the release")
                bounds["release"][1] = time.time()
                samples["release"] = profiles["release"].stop()
                blocks = settled_blocks(lambda: client.run_on_scheduler(_loop_blocks, since=bounds["ingest"][0]),
                                        bounds["release"][1])
        pings = [(t + s, s) for t, s, *_ in ping.pings]
        records = LifeRecords(tasks=rec.tasks, bounds=bounds, samples=cpu.samples, blocks=blocks, pings=pings,
                              completed=done, run_parts=dict(profiles["run"].parts or {}) or None)
        out: dict = {"result": repr(value)[:200], **life_figures(records), "profile": "py-spy",
                     "records": records.to_dict()}
        for stage in STAGES:
            st = out["stages"][stage]
            used, got = st["cpu_s"], samples[stage]
            st["by_what"] = None
            if got is None:
                out["profile"] = profiles[stage].why_not
            else:  # (empty: a stage too short to be sampled)
                total = sum(got.values())
                st["by_what"] = {c: used * k / total for c, k in got.most_common()} if total else {}
        return out
    finally:
        for p in profiles.values():
            p.stop()
        if profiles_dir is not None:
            os.makedirs(profiles_dir, exist_ok=True)
            for stage, p in profiles.items():
                if os.path.exists(p.path):
                    shutil.copy(p.path, os.path.join(profiles_dir, f"{kind}-{stage}.txt"))
        shutil.rmtree(tmp, ignore_errors=True)


def bench_life(workload: str, tasks: int, workers: int = 2, json_path: str | None = None,
               compute_seconds: float | None = None, profiles_dir: str | None = None) -> dict:
    """Stock then slim, the same workload; ratios slim/stock."""
    import json

    def say(msg: str) -> None:
        print(f"[life] {msg}", file=sys.stderr, flush=True)

    result: dict = {"mode": "life", "workload": workload, "requested_tasks": tasks, "workers": workers,
                    "compute_seconds": compute_seconds}
    for kind in KINDS:
        say(f"{kind}: starting a scheduler process and {workers} worker processes")
        result[kind] = run_kind(kind, workload, tasks, workers, compute_seconds, say, profiles_dir)
    ratios = {}
    for stage in (*STAGES, "whole"):
        a, b = _stage(result["stock"], stage)["cpu_s"], _stage(result["slim"], stage)["cpu_s"]
        ratios[f"cpu_{stage}"] = b / a if a else None
    for p in PARTS:  # (the run's parts, where both runs were sampled)
        a, b = (_part(result[k], p, "cpu_s") for k in KINDS)
        ratios[f"cpu_{p}"] = b / a if a and b is not None else None
    result["ratios"] = ratios
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(result, fh, indent=1)
    return result


def _stage(run: dict, stage: str) -> dict:
    return run["whole"] if stage == "whole" else run["stages"][stage]


def _part(run: dict, part: str, key: str) -> float | None:
    """A figure of one of the run's parts (None: the run was not sampled)."""
    return ((run["stages"]["run"].get("parts") or {}).get(part) or {}).get(key)


def format_life_table(result: dict) -> str:
    def num(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    n = result["stock"]["tasks"]
    how = "computed to the end" if result["compute_seconds"] is None else \
        f"cancelled {result['compute_seconds']:g} s after its ingestion"
    lines = [f"whole life: {result['workload']}, {n:,} tasks, {result['workers']} worker processes, {how}",
             f"{'stage':10} {'':24} {'stock':>10} {'slim':>10} {'slim/stock':>11}"]
    for stage in (*STAGES, "whole"):
        a, b = _stage(result["stock"], stage), _stage(result["slim"], stage)
        for label, key, spec in (("scheduler CPU us/task", "cpu_us_per_task", ",.1f"),
                                 ("wall s", "wall_s", ".2f"), ("longest ping s", "longest_ping_s", ".3f"),
                                 ("longest loop block s", "longest_block_s", ".3f")):
            r = b[key] / a[key] if a[key] else None
            lines.append(f"{stage:10} {label:24} {num(a[key], spec):>10} {num(b[key], spec):>10} {num(r, '.2f'):>11}")
        for p in PARTS if stage == "run" else ():
            # (the run's CPU by part: dispatch and completions interleave)
            x, y = (_part(result[k], p, "cpu_us_per_task") for k in KINDS)
            r = y / x if x and y is not None else None
            lines.append(f"{'  of it ' + p + ', CPU us/task':35} {num(x, ',.1f'):>10} {num(y, ',.1f'):>10} "
                         f"{num(r, '.2f'):>11}")
    lines.append(f"{'tasks completed per s (run)':35} {num(result['stock']['tasks_per_s'], ',.0f'):>10} "
                 f"{num(result['slim']['tasks_per_s'], ',.0f'):>10}")
    lines.append(f"{'peak RSS growth MB':35} {result['stock']['peak_rss_growth_bytes'] / 1e6:>10,.0f} "
                 f"{result['slim']['peak_rss_growth_bytes'] / 1e6:>10,.0f}")
    for stage in STAGES:
        a = result["stock"]["stages"][stage]["by_what"] or {}
        b = result["slim"]["stages"][stage]["by_what"] or {}
        if not (a or b):
            continue
        lines.append(f"{stage}: scheduler CPU us/task by what ran")
        for cat in sorted(set(a) | set(b), key=lambda c: -(a.get(c, 0) + b.get(c, 0))):
            x, y = a.get(cat, 0.0) / n * 1e6, b.get(cat, 0.0) / n * 1e6
            if x + y >= 0.5:
                lines.append(f"  {cat:33} {x:>10,.1f} {y:>10,.1f}")
    for kind in KINDS:
        if result[kind].get("profile") != "py-spy":
            lines.append(f"({kind}: no split by what ran: {result[kind]['profile']})")
    return "\n".join(lines)
