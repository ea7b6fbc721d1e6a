"""Benchmark slimgraph.order against dask.order.order.

    python benchmarks/order_bench.py [--size S] [--repeat R] [--no-memory] [--numbered]

Workloads (each ~200k tasks at the default size):

- ``array``: ``(da.ones((N, N), chunks=1) + 1).sum(axis=0)``
- ``tree``:  a tree reduction (fan-in 4) of 25k chains of 8 delayed-style tasks
- ``overlap``: ``map_overlap`` followed by a mean (many splitters)

Times are CPU seconds (``time.process_time``, best of ``--repeat`` runs,
interleaved) so that a busy machine distorts them less; memory is the tracemalloc peak of one call.
Every run also checks that both orderings are equal. ``--numbered`` times
``order_numbered`` on the graph numbered as the engine's ingest numbers it
(the path ``compute_order`` takes) instead of ``order(dsk)``.
"""
from __future__ import annotations

import argparse
import gc
import time
import tracemalloc


def _graph(c):
    from dask._task_spec import convert_legacy_graph

    return convert_legacy_graph(dict(c.__dask_graph__()))


def array_graph(scale: float = 1.0):
    import dask.array as da

    n = int(270 * scale**0.5)
    x = da.ones((n, n), chunks=(1, 1))
    return _graph((x + 1).sum(axis=0))


def _f(*args):
    return 0


def tree_graph(scale: float = 1.0, depth: int = 8, fan: int = 4):
    import dask

    f = dask.delayed(_f, pure=True)
    leaves = []
    for i in range(int(25000 * scale)):
        v = f(i)
        for j in range(depth - 1):
            v = f(v, j)
        leaves.append(v)
    while len(leaves) > 1:
        leaves = [f(*leaves[i : i + fan]) for i in range(0, len(leaves), fan)]
    return _graph(leaves[0])


def overlap_graph(scale: float = 1.0):
    import dask.array as da

    n = int(200 * scale**0.5)
    x = da.ones((n, n), chunks=(2, 2))
    return _graph(x.map_overlap(lambda b: b, depth=1).mean(axis=0))


WORKLOADS = {"array": array_graph, "tree": tree_graph, "overlap": overlap_graph}


def _cpu_pair(fa, fb, dsk, repeat):
    """Best CPU time of each function, runs interleaved (a, b, a, b, ...)
    so that load from other processes hits both alike."""
    best = [float("inf"), float("inf")]
    res = [None, None]
    for _ in range(repeat):
        for j, fn in enumerate((fa, fb)):
            gc.collect()
            t = time.process_time()
            res[j] = fn(dsk)
            best[j] = min(best[j], time.process_time() - t)
    return best[0], res[0], best[1], res[1]


def _peak(fn, dsk):
    gc.collect()
    tracemalloc.start()
    try:
        fn(dsk)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _numbered(dsk):
    """``order`` through the engine's path: number the graph as ingest
    does (outside the timing), then ``order_numbered``; returns a dict."""
    from slimgraph.ingest.index import index_graph
    from slimgraph.order import order, order_numbered

    index = index_graph(dsk, list(dsk), cull=False)
    values = list(dsk.values())

    def run(_dsk):
        prio = order_numbered(index.keys, index.deps, values, index.pos)
        if prio is None:  # a graph compute_order hands to order()
            return order(_dsk)
        return dict(zip(index.keys, prio))

    return run


def main(argv=None):
    from dask.order import order as dask_order

    from slimgraph.order import order as slim_order

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=float, default=1.0, help="scale (1.0 = ~200k tasks)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--numbered", action="store_true", help="time order_numbered (the engine's path)")
    ap.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    args = ap.parse_args(argv)
    for name in args.workloads:
        dsk = WORKLOADS[name](args.size)
        slim = _numbered(dsk) if args.numbered else slim_order
        td, rd, ts, rs = _cpu_pair(dask_order, slim, dsk, args.repeat)
        line = (
            f"{name:8s} tasks={len(dsk):8d}  dask {td:6.2f}s ({td / len(dsk) * 1e6:5.1f} us/task)"
            f"  slim {ts:6.2f}s ({ts / len(dsk) * 1e6:5.1f} us/task)  speedup {td / ts:5.1f}x"
            f"  equal={rd == rs}"
        )
        del rd, rs
        if not args.no_memory:
            md = _peak(dask_order, dsk)
            ms = _peak(slim, dsk)
            line += f"  peak dask {md / 2**20:6.1f} MiB slim {ms / 2**20:6.1f} MiB ({ms / md:4.2f}x)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
