"""What recording phases costs a stock scheduler, on one big submission.

    python benchmarks/hook_overhead.py --workload array --tasks 1000000 --repeat 2

Replays the same captured submission into fresh stock schedulers, with and
without slimgraph's phase recording (``slimgraph.instrument.stock_recorder``),
alternating, and prints the update_graph wall times and the overhead.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(payload: str, hooks: bool) -> float:
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [sys.executable, "-m", "slimgraph.bench.child", payload, "stock", out]
    if not hooks:
        cmd.append("--no-hooks")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        wall = json.load(f)["wall_seconds"]
    os.unlink(out)
    return wall


def main() -> None:
    from slimgraph.bench import payload as pm
    from slimgraph.workloads import WORKLOADS

    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="array")
    ap.add_argument("--tasks", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    fd, path = tempfile.mkstemp(suffix=".pkl")
    os.close(fd)
    pm.save(pm.capture(WORKLOADS[a.workload](a.tasks)), path)
    plain, hooked = [], []
    try:
        for i in range(a.repeat):
            plain.append(run(path, hooks=False))
            hooked.append(run(path, hooks=True))
            print(f"run {i}: plain {plain[-1]:.2f} s, recorded {hooked[-1]:.2f} s", flush=True)
    finally:
        os.unlink(path)
    p, h = min(plain), min(hooked)
    print(f"best of {a.repeat}: plain {p:.2f} s, recorded {h:.2f} s, overhead {(h - p) / p:+.1%}")


if __name__ == "__main__":
    main()
