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
what ran. The split comes from py-spy sampling the scheduler process from
outside, 100 times a second, the thread holding the GIL (a thread waiting
for work holds none, so idle threads are not counted as busy): each sample is put down to the innermost frame
that names what it was doing (message serialization, comms, a transition by
its kind, work stealing, heartbeats, plugins, slimgraph's own ingestion or
model, dask's task specs) or, failing that, to the handler it ran under
(task-finished, update_graph, release), or to "threads off the loop" for
another thread's unnamed work. distributed's own profiler would
do this from inside, but it is off on Python 3.11 and would add its own
CPU to the figure measured. Where py-spy cannot attach (no ptrace), the
split is left out and said so.

JSON (``--json PATH``)::

    {"mode": "life", "workload", "requested_tasks", "workers", "compute_seconds",
     "stock": RUN, "slim": RUN, "ratios": {"cpu_<stage>": slim/stock, "cpu_whole": ...}}

    RUN = {"tasks", "completed", "tasks_per_s", "result", "stages": {stage: STAGE}, "whole": STAGE,
           "peak_rss_bytes", "peak_rss_growth_bytes", "profile": "py-spy" or why not,
           "records": what the figures were computed from}
    STAGE = {"wall_s", "cpu_s", "cpu_us_per_task", "longest_ping_s",
             "longest_block_s", "by_what": {category: cpu seconds}}

The stages, the records and the figures are :mod:`slimgraph.instrument.stages`'s
(``LifeRecords``, ``life_figures``), the dashboard's jobs' too: the app's
stage figures are computed as these are.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any

from slimgraph import shim
from slimgraph.instrument.stages import STAGES, LifeRecords, Sampler, completed, life_figures, settled_blocks

KINDS = ("stock", "slim")


# -- what ran -----------------------------------------------------------------
#: innermost frames that name what a sample was doing: (category, test on
#: the function's name and its file); the first match from the leaf wins
_LEAF_RULES: tuple = (
    ("serialization", lambda fn, f: "/distributed/protocol/" in f or f.endswith(("/pickle.py", "/pickletools.py"))
     or "msgpack" in f or fn in ("dumps", "loads")),
    ("comms", lambda fn, f: "/distributed/comm/" in f or f.endswith(("/batched.py", "/tornado/iostream.py"))),
    ("work stealing", lambda fn, f: f.endswith("/distributed/stealing.py")),
    ("heartbeats", lambda fn, f: fn in ("heartbeat_worker", "check_worker_ttl")),
    ("plugins", lambda fn, f: "/distributed/diagnostics/" in f or "/distributed/spans.py" in f),
    ("compute-task messages", lambda fn, f: fn in ("_task_to_msg", "task_to_msg")
     or f.endswith("/slimgraph/model/messages.py")),
    ("slimgraph ingestion", lambda fn, f: "/slimgraph/ingest/" in f or f.endswith("/slimgraph/order.py")),
    ("slimgraph model", lambda fn, f: "/slimgraph/model/" in f or "/slimgraph/runtime/" in f),
    ("dask (task specs, keys)", lambda fn, f: "/dask/" in f),
    ("instruments", lambda fn, f: "/slimgraph/instrument/" in f or "/slimgraph/views/" in f
     or "/distributed/http/" in f or "/bokeh/" in f),
)
#: handlers a sample ran under, when no leaf rule named it
_HANDLERS = {
    "handle_task_finished": "task-finished handling", "stimulus_task_finished": "task-finished handling",
    "handle_task_erred": "task-erred handling", "update_graph": "update_graph (other)",
    "client_releases_keys": "release handling", "_client_releases_keys": "release handling",
    "remove_client": "release handling", "handle_long_running": "other handlers",
}
#: distributed's transition machinery around each transition function
#: (the log, plugin calls, recommendations)
_DISPATCH = shim.TRANSITION_DISPATCH
_FRAME = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")
_TRANSITION = re.compile(r"^_?transition_([a-z_-]+)$")


def categorize(stack: list) -> str:
    """What a sample (``[(function, file), ...]``, root first) was doing.
    py-spy names a function by its qualified name and its file by the path
    below its ``sys.path`` entry (``distributed/scheduler.py``); both forms
    are read here."""
    stack = [(fn.rsplit(".", 1)[-1], "/" + f.lstrip("/")) for fn, f in stack]
    if stack and stack[-1][0] in ("select", "poll") and stack[-1][1].endswith("/selectors.py"):
        return IDLE
    thread = bool(stack) and stack[0][0] == "_bootstrap"
    for fn, f in reversed(stack):
        if f.endswith("/distributed/scheduler.py"):
            m = _TRANSITION.match(fn)
            if m:
                return "transition " + m.group(1).replace("_", "->", 1)
            if fn in _DISPATCH:
                # (named here, not by the handler above it: on the slim
                # engine the container hook sits between the two)
                return "transitions: distributed's dispatch"
        for name, test in _LEAF_RULES:
            if test(fn, f):
                return name
    if thread:
        return "threads off the loop (other)"
    for fn, _ in reversed(stack):
        if fn in _HANDLERS:
            return _HANDLERS[fn]
    return "scheduler (other)" if stack and stack[-1][1].endswith("/distributed/scheduler.py") else "other"


#: a sample of the loop waiting for events (py-spy, not blocking the
#: process, cannot always tell a thread in ``epoll_wait`` idle): no CPU
IDLE = "idle"


def parse_raw(text: str) -> Counter:
    """py-spy's raw output (``frame;frame;... count`` a line) by category."""
    out: Counter = Counter()
    for line in text.splitlines():
        line = line.strip()
        if not line or " " not in line:
            continue
        frames, _, count = line.rpartition(" ")
        stack = []
        for fr in frames.split(";"):
            m = _FRAME.match(fr)
            stack.append((m.group(1), m.group(2)) if m else (fr, ""))
        out[categorize(stack)] += int(count)
    out.pop(IDLE, None)
    return out


class Profile:
    """py-spy recording the scheduler process for one stage (see the module docstring)."""

    def __init__(self, pid: int, tmp: str, stage: str) -> None:
        self.path = os.path.join(tmp, f"{stage}.txt")
        self.proc: subprocess.Popen | None = None
        self._got: Counter | None = None
        self._stopped = False
        exe = shutil.which("py-spy", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        if exe is None:
            self.why_not = "py-spy is not installed (pip install py-spy)"
            return
        self.why_not = None
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--rate", "100", "--nonblocking", "--gil", "--format", "raw",
             "--output", self.path],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        # py-spy writes its output on Control-C only once its handler is set,
        # just after it announces on stdout that it samples; a stage ended
        # before that would kill it with nothing written, so the stage starts
        # a moment after the announcement.
        self._err: list[bytes] = []
        sampling = threading.Event()

        def read_output() -> None:
            for line in self.proc.stdout:
                self._err.append(line)
                if b"Sampling process" in line:
                    sampling.set()
            sampling.set()

        self._reader = threading.Thread(target=read_output, name="py-spy output", daemon=True)
        self._reader.start()
        sampling.wait(60)
        time.sleep(0.25)

    def stop(self) -> Counter | None:
        """The stage's samples by category (None: see ``why_not``); ends the
        recording (again: the same answer)."""
        if self.proc is None or self._stopped:
            return self._got
        self._stopped = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._reader.join(10)
        if os.path.exists(self.path):
            with open(self.path) as fh:
                self._got = parse_raw(fh.read())
        else:
            err = b"".join(self._err).decode(errors="replace").strip()[-300:]
            self.why_not = f"py-spy could not sample the scheduler (exit {rc}): {err}"
        return self._got


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
                profiles["ingest"] = Profile(cluster.scheduler_pid, tmp, "ingest")
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
                profiles["run"] = Profile(cluster.scheduler_pid, tmp, "run")
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
                profiles["release"] = Profile(cluster.scheduler_pid, tmp, "release")
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
                              completed=done)
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
    result["ratios"] = ratios
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(result, fh, indent=1)
    return result


def _stage(run: dict, stage: str) -> dict:
    return run["whole"] if stage == "whole" else run["stages"][stage]


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
