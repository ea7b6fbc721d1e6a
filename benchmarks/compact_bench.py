"""Compact materialization vs. stock's, on the bench's own submissions.

    python benchmarks/compact_bench.py --workload array --tasks 200000 [--repeat 3] [--json out.json]

For each workload it captures the exact ``update-graph`` message a real
Client sends (``slimgraph.bench.payload``), then runs every measurement in
a fresh subprocess with the cyclic collector off (as the engines ingest):

* ``time``: wall and CPU seconds of ``deserialize`` and of materializing:
  stock's ``_materialize_graph`` (+ ``_cull`` for low-level graphs) vs.
  ``slimgraph.ingest.compact.materialize``;
* ``rss``: RSS growth per task of doing only that and keeping what an
  engine must keep: stock's ``(key, run_spec)`` pairs (as
  ``slimgraph.bench.floor`` measures dask's floor), vs. the compact graph
  (keys, CSR dependencies, per-task source codes, layer factories and kept
  values); after a full collection and ``malloc_trim``;
* ``run_spec``: what dispatching the graph to workers pays per task: the
  time to build each run_spec from the compact graph, and to pickle it
  (stock pickles the run_spec it holds; the compact path builds, then
  pickles).

The machine is shared: prefer the CPU seconds, and compare ratios measured
in the same run.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)


def _trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _rss() -> int:
    import psutil

    return psutil.Process(os.getpid()).memory_info().rss


def child(path: str, engine: str, measure: str) -> dict:
    from dask._expr import LLGExpr
    from distributed.protocol.serialize import deserialize
    from distributed.scheduler import _cull, _materialize_graph

    from slimgraph.bench.payload import load
    from slimgraph.ingest.compact import materialize

    payload = load(path)
    ser = payload.pop("expr_ser")
    keys = set(payload.pop("keys"))
    payload.clear()
    gc.collect()
    _trim()
    rss0 = _rss()
    gc.disable()
    w0, c0 = time.perf_counter(), time.process_time()
    expr = deserialize(ser.header, ser.frames)
    w1, c1 = time.perf_counter(), time.process_time()
    del ser
    cull = isinstance(expr, LLGExpr)
    if engine == "stock":
        dsk, ann = _materialize_graph(expr=expr, validate=False)
        if cull:
            dsk = _cull(dsk, keys)
        w2, c2 = time.perf_counter(), time.process_time()
        del expr, ann
        kept = list(dsk.items())
        n = len(kept)
        del dsk
    else:
        kept = materialize(expr, keys, cull)
        w2, c2 = time.perf_counter(), time.process_time()
        del expr
        n = len(kept)
    out = {
        "engine": engine,
        "tasks": n,
        "deserialize_wall": w1 - w0,
        "deserialize_cpu": c1 - c0,
        "materialize_wall": w2 - w1,
        "materialize_cpu": c2 - c1,
    }
    if engine != "stock":
        out["report"] = [
            {"name": r.name[:60], "type": r.type, "path": r.path, "tasks": r.tasks, "reason": r.reason}
            for r in kept.report
        ]
    if measure == "rss":
        gc.enable()
        gc.collect()
        _trim()
        out["rss_bytes_per_task"] = (_rss() - rss0) / max(n, 1)
    elif measure == "run_spec":
        if engine == "stock":
            specs = [v for _, v in kept]
            t0 = time.process_time()
            for s in specs:
                pickle.dumps(s, protocol=5)
            out["pickle_us_per_task"] = (time.process_time() - t0) / n * 1e6
        else:
            g = kept
            t0 = time.process_time()
            specs = [g.run_spec(i) for i in range(n)]
            t1 = time.process_time()
            for s in specs:
                pickle.dumps(s, protocol=5)
            t2 = time.process_time()
            out["build_us_per_task"] = (t1 - t0) / n * 1e6
            out["pickle_us_per_task"] = (t2 - t1) / n * 1e6
            # per source kind: build cost of a sample
            codes = g.codes
            from slimgraph.ingest.compact.graph import SHIFT

            samples: dict = {}
            for i in range(n):
                name = type(g.segments[codes[i] >> SHIFT]).__name__
                lst = samples.setdefault(name, [])
                if len(lst) < 20000:
                    lst.append(i)
            out["build_us_by_source"] = {}
            for name, idx in samples.items():
                done = 0
                t0 = time.process_time()
                while True:  # at least 50 ms of CPU, for a stable figure
                    for i in idx:
                        g.run_spec(i)
                    done += len(idx)
                    if time.process_time() - t0 > 0.05:
                        break
                out["build_us_by_source"][name] = {
                    "tasks": sum(1 for i in range(n) if type(g.segments[codes[i] >> SHIFT]).__name__ == name),
                    "us": (time.process_time() - t0) / done * 1e6,
                }
    return out


def run_child(path: str, engine: str, measure: str) -> dict:
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, HERE, "--child", path, engine, measure],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(*sys.argv[2:5])))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", action="append", default=None)
    ap.add_argument("--tasks", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.tasks > 200_000:
        print("note: the shared machine's limit is 200,000 tasks; the lead runs 1M", file=sys.stderr)
    from slimgraph.bench import payload as payload_mod
    from slimgraph import workloads

    results = {}
    for w in args.workload or ["array", "delayed"]:
        coll = workloads.WORKLOADS[w](args.tasks)
        pl = payload_mod.capture(coll)
        del coll
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "payload.pkl")
            payload_mod.save(pl, path)
            del pl
            res: dict = {"time": {}, "rss": {}, "run_spec": {}}
            for measure in ("time", "rss", "run_spec"):
                for engine in ("stock", "compact"):
                    runs = [run_child(path, engine, measure) for _ in range(args.repeat if measure == "time" else 1)]
                    res[measure][engine] = runs
        results[w] = res
        _print(w, res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def _best(runs: list, k: str) -> float:
    return min(r[k] for r in runs)


def _print(w: str, res: dict) -> None:
    st, co = res["time"]["stock"], res["time"]["compact"]
    n = st[0]["tasks"]
    print(f"\n{w}: {n:,} tasks (best of {len(st)}; CPU seconds, wall in brackets)")
    for k in ("deserialize", "materialize"):
        s_c, c_c = _best(st, f"{k}_cpu"), _best(co, f"{k}_cpu")
        s_w, c_w = _best(st, f"{k}_wall"), _best(co, f"{k}_wall")
        print(f"  {k:12s} stock {s_c:7.3f} ({s_w:6.3f})  compact {c_c:7.3f} ({c_w:6.3f})  x{s_c / max(c_c, 1e-9):.1f}")
    s_t = _best(st, "deserialize_cpu") + _best(st, "materialize_cpu")
    c_t = _best(co, "deserialize_cpu") + _best(co, "materialize_cpu")
    print(f"  {'dask side':12s} stock {s_t:7.3f}           compact {c_t:7.3f}           x{s_t / max(c_t, 1e-9):.1f}")
    rs, rc = res["rss"]["stock"][0], res["rss"]["compact"][0]
    print(f"  RSS growth   stock {rs['rss_bytes_per_task']:7.0f} B/task  compact {rc['rss_bytes_per_task']:7.0f} B/task")
    ps, pc = res["run_spec"]["stock"][0], res["run_spec"]["compact"][0]
    print(
        f"  dispatch     stock pickle {ps['pickle_us_per_task']:.2f} us/task;"
        f" compact build {pc['build_us_per_task']:.2f} + pickle {pc['pickle_us_per_task']:.2f} us/task"
    )
    for name, v in pc["build_us_by_source"].items():
        print(f"    build {name:12s} {v['tasks']:8,} tasks  {v['us']:.2f} us each")
    paths = {}
    for r in co[0]["report"]:
        paths[(r["type"], r["path"])] = paths.get((r["type"], r["path"]), 0) + r["tasks"]
    print("  layers: " + ", ".join(f"{t}/{p}: {c:,}" for (t, p), c in paths.items()))


if __name__ == "__main__":
    main()
