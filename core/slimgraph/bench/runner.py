"""``python -m slimgraph bench``: stock and slim, same submission, one table.

JSON schema written by ``--json PATH`` (also documented in docs/benchmarks.md)::

    {
      "workload": "array", "requested_tasks": 1000000, "tasks": 1001234,
      "edges": 2000000, "versions": {"dask": ..., "distributed": ..., "python": ...},
      "config": {"slimgraph.ordering": "fast", "slimgraph.gc": "auto",
                 "slimgraph-switches.lazy-containers": true, ...},
      "stock": RUN, "slim": RUN, "slim-dask": RUN (slim, compact ingestion off),
      "ratios": {"total": stock/slim, "owned_phases": ..., "order": ...,
                 "rss_bytes_per_task": ..., "engine_bytes_per_task": ...},
      "floor": {"tasks", "dask_rss_bytes_per_task", "bare_loop_seconds",
                "deserialize_stall_seconds", "materialize_stall_seconds"}
    }

``config`` holds the user settings that shape a run and every engine switch
(:mod:`slimgraph.switches`; ``--without NAME`` and ``--switch NAME=VALUE``
set them, in every process the bench starts). ``floor`` (absent with
``--no-floor``) holds the limits of
:mod:`slimgraph.bench.floor`: RSS growth of dask's deserialize and
materialize alone, the time of a bare CPython loop that builds the fewest
possible task objects and edges, and the longest stall dask's deserialize
and materialize cause to another thread when they run in a worker thread.

    RUN = {"phases": {name: seconds}, "phases_cpu": {...}, "total_seconds",
           "wall_seconds", "gc_seconds", "longest_block_seconds",
           "phase_blocks": {name: longest block overlapping the phase},
           "block_causes": {cause: {"seconds", "label"}} (the longest block
           of >= 50 ms per cause: slimgraph.instrument.blame),
           "rss_bytes_per_task", "tracemalloc_bytes_per_task" (or null),
           "state_bytes_per_task": {"engine", "total", "<tree node>": ...},
           "tasks", "edges", "materialization" (slim), "layers" (slim),
           "sending": {"tasks", "message_seconds", "serialize_seconds",
           "seconds"} (slimgraph.bench.sending: building and
           serializing compute-task messages for a sample of the tasks),
           "release_seconds" (the client releasing the whole graph: its
           cancel, until the scheduler holds none of its tasks),
           "release_block_seconds" (the longest block of the loop in it),
           "release_cpu_seconds" (the process's CPU in it, all threads)}
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from slimgraph.instrument.records import OWNED_PHASES, PHASES
from slimgraph.bench.e2e import PAGES


def _progress(label: str, proc: subprocess.Popen, every: float = 10.0) -> None:
    """Show elapsed time while a long child runs (stderr, one line)."""
    t0 = time.monotonic()
    tty = sys.stderr.isatty()
    while proc.poll() is None:
        time.sleep(0.2)
        el = time.monotonic() - t0
        if tty:
            sys.stderr.write(f"\r  {label}: running {el:6.1f} s")
            sys.stderr.flush()
        elif int(el / every) != int((el - 0.2) / every) and el > every:
            sys.stderr.write(f"  {label}: running {el:.0f} s\n")
    if tty:
        sys.stderr.write(f"\r  {label}: done in {time.monotonic() - t0:.1f} s      \n")


def run_child(payload: str, kind: str, trace: bool = False) -> dict:
    """One engine's replay of ``payload`` in a fresh process
    (:mod:`slimgraph.bench.child`): its JSON."""
    flags = ["--tracemalloc"] if trace else []
    return run_json(lambda out: ["slimgraph.bench.child", payload, kind, out, *flags],
                    f"{kind}{' (tracemalloc)' if trace else ''}")


def run_json(args: Any, label: str) -> dict:
    """``python -m ARGS`` in a child process, ``args(out)`` given the path
    of the JSON file it writes; returns that JSON, showing progress under
    ``label`` meanwhile (a child that fails raises, with its stderr)."""
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    # (-X faulthandler: a child that crashes says where, in the error below)
    cmd = [sys.executable, "-X", "faulthandler", "-m", *args(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err: list = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    _progress(label, proc)
    reader.join()
    try:
        if proc.returncode != 0:
            raise RuntimeError(f"{label} failed (exit status {proc.returncode}):\n{''.join(err)[-4000:]}")
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def owned(run: dict) -> float:
    return sum(run["phases"].get(p, 0.0) for p in OWNED_PHASES)


def bench(workload: str, tasks: int, json_path: str | None = None, tracemalloc: bool | None = None,
          kinds: tuple = ("stock", "slim"), floor: bool = True) -> dict:
    import dask
    import distributed

    from slimgraph import config, switches
    from slimgraph.bench import payload as payload_mod
    from slimgraph.workloads import WORKLOADS

    if workload not in WORKLOADS:
        raise SystemExit(f"unknown workload {workload!r}; choose from {sorted(WORKLOADS)}")
    if tracemalloc is None:
        tracemalloc = tasks <= 200_000
    t0 = time.perf_counter()
    sys.stderr.write(f"building {workload} graph (~{tasks:,} tasks) and capturing its submission...\n")
    collection = WORKLOADS[workload](tasks)
    payload = payload_mod.capture(collection)
    del collection
    fd, path = tempfile.mkstemp(suffix=".pkl")
    os.close(fd)
    payload_mod.save(payload, path)
    del payload
    sys.stderr.write(f"  built in {time.perf_counter() - t0:.1f} s\n")
    runs: dict[str, dict] = {}
    try:
        for kind in kinds:
            runs[kind] = run_child(path, kind, trace=False)
            if tracemalloc and kind != "slim-dask":
                traced = run_child(path, kind, trace=True)
                runs[kind]["tracemalloc_bytes_per_task"] = traced["tracemalloc_bytes_per_task"]
        limits = run_child(path, "floor") if floor else None
    finally:
        os.unlink(path)
    first = runs[kinds[0]]
    result: dict[str, Any] = {
        "workload": workload,
        "requested_tasks": tasks,
        "tasks": first["tasks"],
        "edges": first["edges"],
        "versions": {
            "dask": dask.__version__,
            "distributed": distributed.__version__,
            "python": platform.python_version(),
        },
        "config": {**{f"slimgraph.{k}": config.get(k) for k in ("ordering", "gc")},
                   **{f"{switches.NAMESPACE}.{k}": v for k, v in switches.current().items()}},
        **runs,
    }
    if limits is not None:
        result["floor"] = limits
    if "stock" in runs and "slim" in runs:
        s, m = runs["stock"], runs["slim"]
        result["ratios"] = {
            "total": _ratio(s["total_seconds"], m["total_seconds"]),
            "owned_phases": _ratio(owned(s), owned(m)),
            "order": _ratio(s["phases"].get("order"), m["phases"].get("order")),
            "rss_bytes_per_task": _ratio(s["rss_bytes_per_task"], m["rss_bytes_per_task"]),
            "engine_bytes_per_task": _ratio(
                s["state_bytes_per_task"]["engine"], m["state_bytes_per_task"]["engine"]
            ),
            "tracemalloc_bytes_per_task": _ratio(
                s.get("tracemalloc_bytes_per_task"), m.get("tracemalloc_bytes_per_task")
            ),
            "sending": _ratio((s.get("sending") or {}).get("seconds"), (m.get("sending") or {}).get("seconds")),
            "release": _ratio(s.get("release_seconds"), m.get("release_seconds")),
            "release_block": _ratio(s.get("release_block_seconds"), m.get("release_block_seconds")),
            "release_cpu": _ratio(s.get("release_cpu_seconds"), m.get("release_cpu_seconds")),
        }
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)
    return result


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


#: column titles of the runs (``slim-dask``: slim with compact ingestion off)
TITLES = {"stock": "stock", "slim": "slim", "slim-dask": "slim/dask-mat"}


def format_table(result: dict) -> str:
    kinds = [k for k in ("stock", "slim", "slim-dask") if k in result]
    pair = "stock" in result and "slim" in result
    n = result["tasks"]
    lines = [
        f"workload={result['workload']}  tasks={n:,}  edges={result['edges']:,}  "
        f"dask={result['versions']['dask']}  ordering={result['config']['slimgraph.ordering']}  "
        f"gc={result['config']['slimgraph.gc']}",
        "",
    ]
    moved = _switched(result["config"])
    if moved:
        lines[-1:-1] = ["engine switches: " + "  ".join(f"{k}={v!r}" for k, v in moved.items())]
    head = f"{'phase':<20}" + "".join(f"{TITLES[k] + ' s':>15}{'us/task':>10}" for k in kinds)
    if pair:
        head += f"{'stock/slim':>12}"
    lines.append(head)
    lines.append("-" * len(head))
    names = [p for p in PHASES if any(p in result[k]["phases"] for k in kinds)]
    names += sorted({p for k in kinds for p in result[k]["phases"]} - set(names))

    def row(label: str, vals: list) -> str:
        line = f"{label:<20}"
        for v in vals:
            line += f"{_fmt(v, '.3f'):>15}{_fmt(None if v is None else v / n * 1e6, '.2f'):>10}"
        if pair:
            r = _ratio(vals[0], vals[1])
            line += f"{_fmt(r, '.1f') + 'x' if r else '-':>12}"
        return line

    for p in names:
        lines.append(row(p, [result[k]["phases"].get(p) for k in kinds]))
    lines.append("-" * len(head))
    lines.append(row("owned phases", [owned(result[k]) for k in kinds]))
    lines.append(row("update_graph total", [result[k]["total_seconds"] for k in kinds]))
    lines.append(row("  of which GC", [result[k]["gc_seconds"] for k in kinds]))
    lines.append("")
    mem = f"{'memory per task':<20}" + "".join(f"{TITLES[k]:>25}" for k in kinds)
    if pair:
        mem += f"{'stock/slim':>12}"
    lines.append(mem)

    def mrow(label: str, vals: list) -> str:
        line = f"{label:<20}" + "".join(f"{_fmt(v, ',.0f') + ' B':>25}" for v in vals)
        if pair:
            r = _ratio(vals[0], vals[1])
            line += f"{_fmt(r, '.1f') + 'x' if r else '-':>12}"
        return line

    lines.append(mrow("RSS growth", [result[k]["rss_bytes_per_task"] for k in kinds]))
    lines.append(mrow("tracemalloc retained", [result[k].get("tracemalloc_bytes_per_task") for k in kinds]))
    lines.append(mrow("state: engine-owned", [result[k]["state_bytes_per_task"]["engine"] for k in kinds]))
    lines.append(mrow("state: total", [result[k]["state_bytes_per_task"]["total"] for k in kinds]))
    lines.append("")
    lines += format_sending(result, kinds, pair)
    lines.append(row("release the graph", [result[k].get("release_seconds") for k in kinds]))
    lines.append(row("  its longest block", [result[k].get("release_block_seconds") for k in kinds]))
    lines.append(row("  its CPU (process)", [result[k].get("release_cpu_seconds") for k in kinds]))
    blocks = [result[k].get("longest_block_seconds") for k in kinds]
    lines.append("")
    lines.append(f"{'longest loop block':<20}" + "".join(f"{_fmt(b, '.3f') + ' s':>25}" for b in blocks))
    lines.append(f"{'  most of it in':<20}" + "".join(f"{block_phase(result[k]):>25}" for k in kinds))
    for cause in ("ingestion", "dask's own", "other handler", "other thread"):
        vals = [((result[k].get("block_causes") or {}).get(cause) or {}).get("seconds") for k in kinds]
        if any(v is not None for v in vals):
            lines.append(f"{'  ' + cause:<20}" + "".join(
                f"{(_fmt(v, '.3f') + ' s') if v is not None else '< 0.050 s':>25}" for v in vals))
    for k in kinds:
        for cause, c in sorted((result[k].get("block_causes") or {}).items(), key=lambda kv: -kv[1]["seconds"]):
            lines.append(f"    {TITLES[k]}, {cause}: {c['label']}")
    for k in kinds:
        if result[k].get("materialization"):
            lines += ["", *format_layers(TITLES[k], result[k])]
    if result.get("floor"):
        lines += ["", *format_floor(result)]
    return "\n".join(lines)


def _switched(cfg: dict) -> dict:
    """The engine switches a run's config holds at other than their default."""
    from slimgraph import switches

    prefix = switches.NAMESPACE + "."
    return {k[len(prefix):]: v for k, v in cfg.items()
            if k.startswith(prefix) and v != switches.DEFAULTS.get(k[len(prefix):])}


def switch_values(without: list | None, given: list | None) -> dict:
    """The engine switches ``--without NAME`` and ``--switch NAME=VALUE`` ask for."""
    from slimgraph import switches

    values = {name: switches.OFF[name] for name in without or ()}
    values.update(switches.parse(text) for text in given or ())
    return values


def apply_switches(values: dict) -> None:
    """Set engine switches in this process and, through the environment, in
    every process it starts from now on (schedulers, workers, the engine
    mode's children): the bench's processes inherit its environment."""
    from slimgraph import switches

    if not values:
        return
    os.environ.update(switches.environ(values))
    switches.set(values)
    sys.stderr.write("engine switches: " + "  ".join(f"{k}={v!r}" for k, v in values.items()) + "\n")


def _record_switches(json_path: str | None, values: dict) -> None:
    """Add the switches set to a mode's JSON (the engine mode's ``config``
    has them already)."""
    if not json_path or not values:
        return
    with open(json_path) as f:
        result = json.load(f)
    result["switches"] = values
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)


def format_sending(result: dict, kinds: list, pair: bool) -> list:
    """What sending tasks to workers costs the scheduler, per task (a sample
    of the tasks; :mod:`slimgraph.bench.sending`)."""
    runs = [result[k].get("sending") for k in kinds]
    if not any(runs):
        return []
    n = next(r["tasks"] for r in runs if r)
    head = f"{'sending, us/task':<20}" + "".join(f"{TITLES[k]:>25}" for k in kinds)
    if pair:
        head += f"{'stock/slim':>12}"
    lines = [head + f"   ({n:,} tasks by priority)"]
    for label, field in (("  build messages", "message_seconds"), ("  serialize", "serialize_seconds"),
                         ("  total", "seconds")):
        vals = [None if not r or not r["tasks"] else r[field] / r["tasks"] * 1e6 for r in runs]
        line = f"{label:<20}" + "".join(f"{_fmt(v, '.1f'):>25}" for v in vals)
        if pair:
            ratio = _ratio(vals[0], vals[1])
            line += f"{_fmt(ratio, '.2f') + 'x' if ratio else '-':>12}"
        lines.append(line)
    return lines


def format_layers(title: str, run: dict) -> list:
    """Which path the run's graph took: the summary, then the layers (as
    many as the record kept), folded by (type, path, reason)."""
    out = [f"{title} materialization: {run['materialization']}"]
    folded: dict = {}
    for r in run.get("layers") or ():
        k = (r["type"], r["path"], r["reason"])
        f = folded.setdefault(k, [0, 0])
        f[0] += r["layers"]
        f[1] += r["tasks"]
    for (type_, path, reason), (layers, tasks) in folded.items():
        out.append(f"  {path:<8}{type_:<22}{layers:>8,} layers{tasks:>11,} tasks  {reason}".rstrip())
    return out


def block_phase(run: dict) -> str:
    """The phase in which the run's longest loop block happened."""
    blocks = {p: b for p, b in (run.get("phase_blocks") or {}).items() if b}
    if not blocks:
        return "-"
    name = max(blocks, key=blocks.get)
    return f"{name} ({blocks[name]:.3f} s)"


def format_floor(result: dict) -> list:
    """The limits (slimgraph.bench.floor) beside the issues' targets."""
    fl = result["floor"]
    n = max(fl["tasks"], 1)
    out = ["limits, same submission, fresh process (slimgraph.bench.floor)"]
    out.append(f"  dask deserialize+materialize alone: RSS growth {fl['dask_rss_bytes_per_task']:,.0f} B/task")
    out.append(f"  bare CPython task objects + edges:  {fl['bare_loop_seconds']:.3f} s "
               f"({fl['bare_loop_seconds'] / n * 1e6:.2f} us/task)")
    out.append(f"  another thread stalled by dask:     deserialize {fl['deserialize_stall_seconds']:.3f} s, "
               f"materialize {fl['materialize_stall_seconds']:.3f} s (longest; target block 0.200 s)")
    stock = result.get("stock")
    if stock:
        out.append(f"  target RSS growth 1/3 of stock:     {stock['rss_bytes_per_task'] / 3:,.0f} B/task")
        out.append(f"  target owned phases stock/15:       {owned(stock) / 15:.3f} s")
    return out


def main(argv: list[str] | None = None) -> None:
    from slimgraph.switches import DEFAULTS, OFF

    ap = argparse.ArgumentParser(prog="python -m slimgraph bench", description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="array")
    ap.add_argument("--tasks", type=int, default=None,
                    help="about this many tasks (default 20,000; 1,000,000 in dashboard mode; "
                         "in scale mode the largest size, default 10,000,000)")
    ap.add_argument("--json", dest="json_path")
    ap.add_argument("--tracemalloc", dest="tracemalloc", action="store_true", default=None,
                    help="also measure retained bytes with tracemalloc (default: on up to 200k tasks)")
    ap.add_argument("--no-tracemalloc", dest="tracemalloc", action="store_false")
    ap.add_argument("--only", choices=("stock", "slim", "slim-dask"),
                    help="run one kind only (engine and client modes; client mode: stock or slim, "
                         "e.g. slim at a size stock cannot hold)")
    ap.add_argument("--no-compact-off", dest="compact_off", action="store_false",
                    help="skip the third run: slim with slimgraph-switches.compact-ingestion off "
                         "(dask materializes every node), which shows what compact ingestion saves")
    ap.add_argument("--without", action="append", metavar="SWITCH", choices=sorted(OFF),
                    help="turn an engine mechanism off, in every mode (repeatable; slimgraph.switches): "
                         + ", ".join(sorted(OFF)))
    ap.add_argument("--switch", action="append", metavar="NAME=VALUE",
                    help="set an engine switch (repeatable; slimgraph.switches), the value a Python "
                         "literal or text such as 0.1ms: " + ", ".join(DEFAULTS))
    ap.add_argument("--no-floor", dest="floor", action="store_false",
                    help="skip the limits run (slimgraph.bench.floor)")
    ap.add_argument("--mode", choices=("engine", "client", "dashboard", "life", "statemachine", "scale", "shapes"),
                    default="engine",
                    help="engine: one replayed submission per fresh in-process scheduler "
                         "(default); client: end to end through a real Client to scheduler "
                         "and worker processes, including the computation; dashboard: the "
                         "dashboard app in headless Chromium while stock ingests (page loads, "
                         "widget answers, refresh gaps; issue #15's targets), and a soak; life: "
                         "a graph's whole life (ingest, run, release) on scheduler and worker "
                         "processes, the scheduler's CPU per stage and by what ran; statemachine: "
                         "the same life through the scheduler's state machine alone, in-process "
                         "(workers without processes report every task they process as done), "
                         "the CPU per stage; scale: engine mode at 100k, 1M, 2.5M, 5M and 10M "
                         "tasks up to --tasks, each engine only where its estimated peak memory "
                         "fits in what the machine has available; shapes: the shapes users submit (maps, "
                         "dataframes, a bag, map_blocks, persisted inputs, many clients), each computed "
                         "to the end on scheduler and worker processes, per shape update_graph, memory "
                         "and the engine's own longest block")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (client, life and shapes modes)")
    ap.add_argument("--shapes", default=None, metavar="A,B,...",
                    help="shapes mode: which shapes, comma-separated (default: all; see slimgraph.bench.shapes)")
    ap.add_argument("--compute-seconds", type=float, default=None,
                    help="client and life modes: stop computing this long after the submission "
                         "(cancel; the ping keeps running until then); default: compute to the end")
    ap.add_argument("--profiles", metavar="DIR", default=None,
                    help="life mode: keep py-spy's raw recordings of each engine's stages in DIR "
                         "(STOCK-or-SLIM-STAGE.txt, input for a flamegraph)")
    ap.add_argument("--instructions", action="store_true",
                    help="statemachine mode: count each stage's instructions with valgrind's callgrind "
                         "(both engines once, side by side; ~50x slower: a few thousand tasks) "
                         "instead of timing it")
    ap.add_argument("--no-load", dest="load", action="store_false",
                    help="client mode: only ping (no second client's submissions, "
                         "no dashboard page loads)")
    ap.add_argument("--real-use", action="store_true",
                    help="client mode: the graph depends on inputs persisted beforehand "
                         "(array) or scattered (delayed), and is computed inside a "
                         "distributed.span, with dask's dashboard pages open (unless --no-load)")
    ap.add_argument("--dashboard-pages", choices=PAGES, default="reload",
                    help="client mode: how the load opens dask's dashboard: reload (default: "
                         "/graph once, /status loaded again every 5 s, each load a new Bokeh "
                         "session built on the scheduler's loop) or browser (both pages open "
                         "in a headless Chromium, updating over their websockets)")
    ap.add_argument("--background-nice", type=int, default=0, metavar="N",
                    help="client mode: run the worker processes and the load's browser at "
                         "niceness N, as on a cluster where they have cores of their own "
                         "(default 0: they compete with the scheduler for this machine's cores)")
    ap.add_argument("--soak-minutes", type=float, default=0.0,
                    help="dashboard mode: then this long, submit jobs while reloading our page "
                         "and dask's /status and /graph of both engines (default 0: no soak)")
    a = ap.parse_args(argv)
    try:
        values = switch_values(a.without, a.switch)
    except (KeyError, ValueError) as e:
        ap.error(str(e))
    apply_switches(values)
    if a.tasks is None:
        a.tasks = {"dashboard": 1_000_000, "scale": 10_000_000}.get(a.mode, 20_000)
    if a.mode != "client" and a.background_nice:
        ap.error("--background-nice is for --mode client")
    if a.mode != "life" and a.profiles:
        ap.error("--profiles is for --mode life")
    if a.instructions and a.mode != "statemachine":
        ap.error("--instructions is for --mode statemachine")
    if a.mode != "dashboard" and a.soak_minutes:
        ap.error("--soak-minutes is for --mode dashboard")
    if a.mode != "shapes" and a.shapes:
        ap.error("--shapes is for --mode shapes")
    if a.mode == "dashboard":
        if a.only:
            ap.error("--only is for --mode engine")
        from slimgraph.bench.browser import bench_dashboard, format_dashboard_table

        print(format_dashboard_table(bench_dashboard(a.workload, a.tasks, a.soak_minutes, a.json_path)))
        _record_switches(a.json_path, values)
        return
    if a.mode == "statemachine":
        if a.only:
            ap.error("--only is for --mode engine: statemachine mode runs stock and slim for its ratios")
        from slimgraph.bench import statemachine
        from slimgraph.bench.payload import capture
        from slimgraph.workloads import build

        say = lambda msg: print(f"[statemachine] {msg}", file=sys.stderr, flush=True)  # noqa: E731
        payload = capture(build(a.workload, a.tasks))
        if a.instructions:
            result = statemachine.instructions_life(payload, a.workers, progress=say)
            table = statemachine.format_instructions_table(result, a.workload)
        else:
            result = statemachine.statemachine_life(payload, a.workers, progress=say)
            table = statemachine.format_statemachine_table(result, a.workload)
        if a.json_path:
            with open(a.json_path, "w") as fh:
                json.dump(result, fh, indent=1)
        print(table)
        _record_switches(a.json_path, values)
        return
    if a.mode == "life":
        if a.only:
            ap.error("--only is for --mode engine: life mode runs stock and slim for its ratios")
        from slimgraph.bench.life import bench_life, format_life_table

        print(format_life_table(bench_life(a.workload, a.tasks, a.workers, a.json_path, a.compute_seconds,
                                           a.profiles)))
        _record_switches(a.json_path, values)
        return
    if a.mode == "client":
        if a.only == "slim-dask":
            ap.error("--only slim-dask is for --mode engine")
        from slimgraph.bench.e2e import bench_client, format_client_table

        print(format_client_table(
            bench_client(a.workload, a.tasks, a.workers, a.json_path, a.compute_seconds, a.load,
                         a.real_use, a.dashboard_pages, a.background_nice, a.only)))
        _record_switches(a.json_path, values)
        return
    if a.mode == "shapes":
        if a.only:
            ap.error("--only is for --mode engine: shapes mode runs stock and slim for its ratios")
        from slimgraph.bench.shapes import bench_shapes, format_shapes_table, parse_shapes

        try:
            names = parse_shapes(a.shapes)
        except ValueError as e:
            ap.error(str(e))
        print(format_shapes_table(bench_shapes(a.tasks, names, a.workers, a.json_path)))
        _record_switches(a.json_path, values)
        return
    if a.mode == "scale":
        from slimgraph.bench.scale import bench_scale, format_scale_table

        print(format_scale_table(bench_scale(a.workload, a.tasks, (a.only,) if a.only else ("stock", "slim"),
                                             a.json_path)))
        return
    kinds = (a.only,) if a.only else ("stock", "slim", *(("slim-dask",) if a.compact_off else ()))
    result = bench(a.workload, a.tasks, a.json_path, a.tracemalloc, kinds, a.floor)
    print(format_table(result))
