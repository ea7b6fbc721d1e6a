"""One benchmark run: one scheduler kind, one submission, in a fresh process.

``python -m slimgraph.bench.child PAYLOAD KIND OUT [--tracemalloc]``
(KIND: ``stock``, ``slim``, or ``slim-dask``: slim with compact ingestion off)

KIND ``floor`` measures the limits of :mod:`slimgraph.bench.floor` instead.

Starts a scheduler of the given kind (no workers, no dashboard), replays
the pickled update-graph payload into ``update_graph`` and writes a JSON
with the phase record, RSS growth, optionally tracemalloc's retained bytes,
and the scheduler-state memory tree split into engine-owned state and
dask's run_spec/key objects; last, what sending a sample of the tasks to
workers costs the scheduler (:mod:`slimgraph.bench.sending`).
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import sys
import time
import tracemalloc

from slimgraph.bench.scale import peak_rss


async def _run(payload_path: str, kind: str, trace: bool, hooks: bool = True) -> dict:
    from distributed import Scheduler

    from slimgraph import switches
    from slimgraph.bench.payload import load
    from slimgraph.distributed import SlimScheduler
    from slimgraph.instrument.records import rss_bytes

    start = rss_bytes()
    payload = load(payload_path)
    cls = SlimScheduler if kind in SLIM_KINDS else Scheduler
    off = kind == "slim-dask"
    with switches.set(compact_ingestion=False) if off else contextlib.nullcontext():
        out = await _measure(cls, kind, payload, trace, hooks)
    # (what the process held at its peak above its start: what a larger
    # run of the same kind is estimated from, slimgraph.bench.scale)
    out["start_rss_bytes"] = start
    out["peak_rss_bytes"] = peak_rss()
    return out


#: ``slim``: the slim engine as configured (compact ingestion on by
#: default); ``slim-dask``: the same with ``slimgraph-switches.compact-ingestion``
#: off, dask materializing every node (what compact ingestion saves)
SLIM_KINDS = ("slim", "slim-dask")


async def _measure(cls, kind: str, payload: dict, trace: bool, hooks: bool) -> dict:
    from slimgraph.instrument import stock_recorder as stock_hooks
    from slimgraph.instrument.recorder import get_history
    from slimgraph.instrument.records import rss_bytes

    async with cls(dashboard_address=None, dashboard=False, host="127.0.0.1") as s:
        if kind == "stock" and hooks:
            stock_hooks.install(s)
        gc.collect()
        rss0 = rss_bytes()
        if trace:
            tracemalloc.start()
            t0 = tracemalloc.get_traced_memory()[0]
        t = time.perf_counter()
        await s.update_graph(client="bench-client", **payload)
        wall = time.perf_counter() - t
        keys = list(payload["keys"])
        del payload
        gc.collect()
        traced = None
        if trace:
            traced = tracemalloc.get_traced_memory()[0] - t0
            tracemalloc.stop()
        rss1 = rss_bytes()
        ntasks = len(s.tasks)
        if not hooks:
            # only the wall time: measures what recording costs (see
            # benchmarks/hook_overhead.py)
            return {"scheduler": kind, "tasks": ntasks, "wall_seconds": wall, "hooks": False}
        rec = get_history(s).latest()
        assert rec is not None and rec.status == "OK", (rec and rec.status, rec and rec.error)
        from slimgraph.instrument.memory import memory_tree

        sample = None if ntasks <= 200_000 else 200_000
        tree = memory_tree(s, sample=sample)
        split = engine_split(tree)
        del tree
        from slimgraph.bench.sending import sending_cost

        # (last: building messages reads every sampled run_spec)
        sending = sending_cost(s)
        release, release_block, release_cpu = await _release(s, keys)
        return {
            "scheduler": kind,
            "tasks": ntasks,
            "edges": rec.edges,
            "phases": {p.name: p.wall_s for p in rec.phases},
            "phases_cpu": {p.name: p.cpu_s for p in rec.phases},
            "gc_seconds": sum(p.gc_s for p in rec.phases),
            "total_seconds": rec.total_s,
            "wall_seconds": wall,
            "longest_block_seconds": rec.longest_block_s,
            "phase_blocks": {p.name: p.longest_block_s for p in rec.phases},
            "block_causes": rec.block_causes,
            "materialization": rec.materialization,
            "layers": rec.layers[:50],
            "rss_bytes_per_task": (rss1 - rss0) / max(ntasks, 1),
            "tracemalloc_bytes_per_task": None if traced is None else traced / max(ntasks, 1),
            "state_bytes_per_task": split,
            "memory_tree_sample": sample,
            "sending": sending,
            "release_seconds": release,
            "release_block_seconds": release_block,
            "release_cpu_seconds": release_cpu,
        }


async def _release(s, keys: list) -> tuple[float, float, float]:
    """The client's release of the whole graph (what cancelling it costs:
    distributed's release and forget transitions for every task), as the
    client's ``client-releases-keys`` message reaches the scheduler: its
    stream handler. Stock: one call, one block of the loop. Slim: in slices
    (slimgraph.life.release), through its container hook. Starts after any
    ready tasks still to send and plugin calls still owed are done. Returns
    the seconds until the scheduler holds none of the graph's tasks, the
    longest block of the loop it took (the whole call, or the longest
    slice) and the CPU the process spent meanwhile (all threads: what
    slim's release leaves to a thread counts too; the seconds beyond it were
    the loop idle, in slim's rests)."""
    for pending in (getattr(s, "slim_tails", None), getattr(s, "slim_deliveries", None)):
        if pending:
            await pending.wait()
    work = getattr(s, "slim_work", None)
    if work is not None:
        work.longest = 0.0
    t = time.perf_counter()
    cpu = time.process_time()
    s.stream_handlers["client-releases-keys"](keys=keys, client="bench-client", stimulus_id="bench-release")
    block = time.perf_counter() - t
    if work is not None:
        await work.idle()
        block = work.longest
    seconds = time.perf_counter() - t
    cpu = time.process_time() - cpu
    assert not s.tasks, f"{len(s.tasks)} tasks left after releasing the graph"
    return seconds, block, cpu


def engine_split(tree) -> dict:
    """Bytes per task of the scheduler state, split into what the engine
    owns and what dask's run_spec and key objects take."""
    n = max(tree.ntasks, 1)
    out = {"total": tree.total_bytes / n}
    dask_owned = 0
    for name, node in tree.root.children.items():
        out[name] = node.total_bytes / n
        if name in ("run_spec", "keys"):
            dask_owned += node.total_bytes
    out["engine"] = (tree.total_bytes - dask_owned) / n
    return out


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    payload, kind, out = argv[:3]
    trace = "--tracemalloc" in argv
    if kind == "floor":
        from slimgraph.bench.floor import load_and_measure

        with open(out, "w") as f:
            json.dump(load_and_measure(payload), f)
        return
    result = asyncio.run(_run(payload, kind, trace, hooks="--no-hooks" not in argv))
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
