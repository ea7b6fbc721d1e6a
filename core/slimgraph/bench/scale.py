"""``python -m slimgraph bench --mode scale``: the engine benchmark from 100k
tasks up to ten million, each engine only where it fits in memory.

The sizes are the ladder :data:`LADDER` up to ``--tasks`` (and ``--tasks``
itself). At each size the submission is built and captured in a process of
its own (a ten-million-task client graph takes gigabytes, which a process
gives back when it ends), then each engine replays it in a fresh process,
as ``--mode engine`` does (:mod:`slimgraph.bench.child`).

Never swap. Before each process starts, its peak resident memory is
estimated and compared with what the machine has available at that moment
(``MemAvailable`` less :data:`MARGIN`); a process that would not fit is not
started, and the table says so with the estimate. An estimate scales the
bytes per task of the peak measured at the largest smaller size of the
same run (what the process held above its start, times
:data:`HEADROOM`); before any size has run, it uses :data:`FIRST_GUESS`
(bytes per task above a fresh interpreter, generous on purpose: the first
size is small).

The table gives, per size and engine, update_graph's seconds and
microseconds per task, RSS growth per task, the process's peak, the longest
event-loop block and the release; for the slim engine, microseconds per
task relative to its own at one million (how far from linear it grows).
"""
from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from typing import Any

#: The sizes a scale run visits (those up to ``--tasks``).
LADDER = (100_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000)
#: Memory kept free for everything else on the machine (bytes).
MARGIN = 2 << 30
#: Factor over a linear extrapolation of the last measured peak.
HEADROOM = 1.15
#: Bytes per task above a fresh interpreter before anything was measured:
#: the build of the submission per workload, and each engine's replay.
FIRST_GUESS = {
    "build": {"array": 600, "delayed": 2_500},
    "build-other": 3_000,
    "stock": 6_000,
    "slim": 2_500,
    "slim-dask": 4_000,
}
#: What a fresh interpreter with dask and distributed imported holds.
BASE = 250 << 20


def available() -> int:
    """``MemAvailable`` of /proc/meminfo (bytes): what can be allocated
    without swapping."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def estimate(what: str, workload: str, tasks: int, measured: dict) -> tuple[int, str]:
    """Peak bytes a process of ``what`` (``build`` or an engine) needs for
    ``tasks`` tasks, and where the figure comes from. ``measured`` maps
    ``what`` to (tasks, bytes held above the start at the peak) of the
    largest size run so far."""
    if what in measured:
        n, held = measured[what]
        per = held / max(n, 1)
        source = f"{per:,.0f} B/task measured at {n:,} tasks"
    else:
        per = FIRST_GUESS["build"].get(workload, FIRST_GUESS["build-other"]) if what == "build" else FIRST_GUESS[what]
        source = f"{per:,.0f} B/task, a first guess"
    return int(BASE + per * tasks * HEADROOM), source


def fits(what: str, workload: str, tasks: int, measured: dict) -> tuple[bool, dict]:
    need, source = estimate(what, workload, tasks, measured)
    free = available() - MARGIN
    return need <= free, {"estimate_bytes": need, "available_bytes": free, "estimate_from": source}


def skipped_text(info: dict) -> str:
    return (f"not run: needs ~{info['estimate_bytes'] / 2**30:.1f} GiB ({info['estimate_from']}), "
            f"{info['available_bytes'] / 2**30:.1f} GiB available")


def build(workload: str, tasks: int, path: str) -> dict:
    """Build and capture the submission in a process of its own; returns
    its peak and start RSS (bytes)."""
    from slimgraph.bench.runner import run_json

    return run_json(lambda out: ["slimgraph.bench.scale", "--build", workload, str(tasks), path, out],
                    f"build {tasks:,}")


def _build_here(workload: str, tasks: int, path: str, out: str) -> None:
    from slimgraph.bench import payload as payload_mod
    from slimgraph.instrument.records import rss_bytes
    from slimgraph.workloads import build as build_workload

    start = rss_bytes()
    t = time.perf_counter()
    payload_mod.save(payload_mod.capture(build_workload(workload, tasks)), path)
    with open(out, "w") as f:
        json.dump({"start_rss_bytes": start, "peak_rss_bytes": peak_rss(),
                   "seconds": time.perf_counter() - t}, f)


def peak_rss() -> int:
    """This process's peak resident memory so far (bytes; Linux counts
    ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def sizes(tasks: int) -> list[int]:
    out = [n for n in LADDER if n < tasks]
    return out + [tasks]


def bench_scale(workload: str, tasks: int, kinds: tuple, json_path: str | None = None) -> dict:
    from slimgraph.bench.runner import run_child
    from slimgraph.workloads import WORKLOADS

    if workload not in WORKLOADS:
        raise SystemExit(f"unknown workload {workload!r}; choose from {sorted(WORKLOADS)}")
    measured: dict = {}
    rows: list = []
    result = {"workload": workload, "kinds": list(kinds), "sizes": rows}
    for n in sizes(tasks):
        row: dict = {"requested_tasks": n, "runs": {}}
        rows.append(row)
        ok, info = fits("build", workload, n, measured)
        if not ok:
            row["build"] = {"skipped": skipped_text(info), **info}
            sys.stderr.write(f"{n:,} tasks: the submission's build {skipped_text(info)}\n")
            for kind in kinds:
                row["runs"][kind] = {"skipped": "the submission was not built", **info}
            continue
        fd, path = tempfile.mkstemp(suffix=".pkl")
        os.close(fd)
        try:
            sys.stderr.write(f"{n:,} tasks: building the {workload} submission...\n")
            b = build(workload, n, path)
            row["build"] = b
            measured["build"] = (n, b["peak_rss_bytes"] - b["start_rss_bytes"])
            for kind in kinds:
                ok, info = fits(kind, workload, n, measured)
                if not ok:
                    row["runs"][kind] = {"skipped": skipped_text(info), **info}
                    sys.stderr.write(f"  {kind}: {skipped_text(info)}\n")
                    continue
                run = run_child(path, kind)
                run.update(info)
                row["runs"][kind] = run
                measured[kind] = (run["tasks"], run["peak_rss_bytes"] - run["start_rss_bytes"])
        finally:
            os.unlink(path)
        done = [r for r in row["runs"].values() if "tasks" in r]
        row["tasks"] = done[0]["tasks"] if done else None
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    return result


def _us(run: dict) -> float:
    return run["total_seconds"] / run["tasks"] * 1e6


def format_scale_table(result: dict) -> str:
    kinds = result["kinds"]
    # microseconds per task at (about) a million tasks, per engine: the
    # reference of "x 1M"
    ref: dict = {}
    for row in result["sizes"]:
        for kind, run in row["runs"].items():
            if "tasks" in run and row["requested_tasks"] == 1_000_000:
                ref[kind] = _us(run)
    head = (f"{'tasks':>12}  {'engine':<6}{'update_graph':>14}{'us/task':>9}{'x 1M':>7}{'RSS growth':>13}"
            f"{'peak RSS':>11}{'longest block':>15}{'release':>10}")
    lines = [f"scale: {result['workload']}, engine mode (a fresh process per run)", "", head, "-" * len(head)]
    for row in result["sizes"]:
        label = f"{row['tasks']:,}" if row.get("tasks") else f"~{row['requested_tasks']:,}"
        for kind in kinds:
            run = row["runs"][kind]
            if "skipped" in run:
                lines.append(f"{label:>12}  {kind:<6}  {run['skipped']}")
                continue
            us = _us(run)
            rel = f"{us / ref[kind]:.2f}" if kind in ref else "-"
            lines.append(
                f"{label:>12}  {kind:<6}{run['total_seconds']:>12.1f} s{us:>9.2f}{rel:>7}"
                f"{run['rss_bytes_per_task']:>11,.0f} B{run['peak_rss_bytes'] / 2**30:>7.2f} GiB"
                f"{run['longest_block_seconds']:>13.3f} s{run.get('release_seconds') or 0:>8.1f} s")
            label = ""
        stock, slim = row["runs"].get("stock", {}), row["runs"].get("slim", {})
        if "tasks" in stock and "tasks" in slim:
            lines.append(f"{'':>12}  {'stock/slim':<10}{stock['total_seconds'] / slim['total_seconds']:>8.1f}x"
                         f"{'':>16}{stock['rss_bytes_per_task'] / slim['rss_bytes_per_task']:>11.1f}x")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--build"]:
        workload, tasks, path, out = argv[1:5]
        _build_here(workload, int(tasks), path, out)


if __name__ == "__main__":
    main(sys.argv[1:])
