"""``python -m slimgraph profile``: one submission, one real scheduler.

Starts a scheduler of the chosen kind in this process (stock with the phase
recorder installed, or slim), submits the workload through a real Client,
and prints what the original hand-made reports showed: a table of time per
phase and the tree of memory per kind of object, per task.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any


def phase_table(rec: Any) -> str:
    n = max(rec.tasks, 1)
    lines = [
        f"{rec.scheduler} update_graph #{rec.submission_id}: {rec.tasks:,} tasks "
        f"({rec.new_tasks:,} new), {rec.edges:,} edges, status {rec.status}",
        f"{'phase':<20}{'wall s':>10}{'cpu s':>10}{'us/task':>10}{'gc s':>9}{'share':>8}",
    ]
    total = rec.total_s or sum(p.wall_s for p in rec.phases) or 1.0
    for p in rec.phases:
        lines.append(
            f"{p.name:<20}{p.wall_s:>10.3f}{p.cpu_s:>10.3f}{p.wall_s / n * 1e6:>10.2f}"
            f"{p.gc_s:>9.3f}{p.wall_s / total:>8.0%}"
        )
    lines.append(f"{'total':<20}{rec.total_s:>10.3f}{'':>10}{rec.total_s / n * 1e6:>10.2f}")
    if rec.longest_block_s is not None:
        lines.append(f"longest event-loop block: {rec.longest_block_s:.3f} s")
        causes = getattr(rec, "block_causes", None)
        if causes is not None:
            if not causes:
                lines.append("  no block of 50 ms or more")
            for cause, c in sorted(causes.items(), key=lambda kv: -kv[1]["seconds"]):
                lines.append(f"  longest of cause {cause}: {c['seconds']:.3f} s  [{c['label']}]")
    if rec.rss_before is not None and rec.rss_after is not None:
        lines.append(f"scheduler RSS growth: {(rec.rss_after - rec.rss_before) / n:,.0f} B/task")
    if getattr(rec, "materialization", None):
        lines.append(f"materialization: {rec.materialization}")
        for r in rec.layers[:20]:
            name = r["name"] if len(r["name"]) <= 40 else r["name"][:37] + "..."
            more = f" (+{r['layers'] - 1} more layers)" if r["layers"] > 1 else ""
            lines.append(f"  {r['path']:<8}{r['type']:<20}{r['tasks']:>10,} tasks  {name}{more}  {r['reason']}".rstrip())
        if len(rec.layers) > 20:
            lines.append(f"  ... {len(rec.layers) - 20} more entries")
    if rec.error:
        lines.append(f"error: {rec.error}")
    return "\n".join(lines)


async def profile(workload: str, tasks: int, kind: str, sample: Any = "auto") -> tuple[Any, Any]:
    from distributed import Client, Scheduler

    from slimgraph.workloads import WORKLOADS
    from slimgraph.distributed import SlimScheduler
    from slimgraph.instrument import stock_recorder as stock_hooks
    from slimgraph.instrument.memory import memory_tree_async
    from slimgraph.instrument.recorder import get_history

    def say(msg: str) -> None:
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()

    say(f"building {workload} graph (~{tasks:,} tasks)...")
    x = WORKLOADS[workload](tasks)
    cls = SlimScheduler if kind == "slim" else Scheduler
    async with cls(dashboard_address=":0", host="127.0.0.1") as s:
        if kind == "stock":
            stock_hooks.install(s)
        hist = get_history(s)
        async with Client(s.address, asynchronous=True) as c:
            say(f"submitting to a {kind} scheduler (no workers: the graph stays queued)...")
            t0 = time.monotonic()
            fut = c.compute(x)
            last = t0
            while not len(hist) or hist.latest().status == "running":
                await asyncio.sleep(0.1)
                if time.monotonic() - last > 5:
                    last = time.monotonic()
                    say(f"  update_graph running for {last - t0:.0f} s")
            rec = hist.latest()
            say(f"  done in {time.monotonic() - t0:.1f} s; walking the memory tree...")
            tree = await memory_tree_async(s, sample=sample)
            del fut
        return rec, tree


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m slimgraph profile", description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="array")
    ap.add_argument("--tasks", type=int, default=20_000)
    ap.add_argument("--scheduler", choices=("stock", "slim"), default="slim")
    ap.add_argument("--exact", action="store_true", help="walk every task (default: sample beyond 50k)")
    a = ap.parse_args(argv)
    rec, tree = asyncio.run(profile(a.workload, a.tasks, a.scheduler, None if a.exact else "auto"))
    print(phase_table(rec))
    print()
    print(tree.render())
