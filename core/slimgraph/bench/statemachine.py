"""A graph's whole life through the scheduler's state machine alone.

Why. ``--mode life`` measures a real scheduler process with worker
processes: the figure users get, but with the network, serialization and
the workers' own timing in it, and too noisy on two cores to tell a few
microseconds per transition apart. This runs the same life in one process,
with nothing but the scheduler's state machine: what the slim engine's
model (its task state, containers and the hook around each transition)
costs against stock's, stage by stage.

What. A fresh in-process scheduler of each kind with ``workers`` workers
that have no process (the WorkerState distributed's ``add_worker`` makes,
registered directly: messages to them are built, then dropped, as for a
worker that is gone). The submission is replayed into ``update_graph``;
then, round after round, every worker reports each task it is processing
as finished (``handle_task_finished`` with the fields a worker sends),
until the graph's outputs are in memory; then the client releases them.
The CPU seconds of each stage (``time.process_time``) are reported per
task. Both kinds carry slimgraph's recorder (``stock_recorder.install``,
which a slim scheduler has anyway), so its costs are on both sides. Both
kinds see the same messages in the same order, and their transition
counts are compared: a different count fails the run.
"""
from __future__ import annotations

import gc
import os
import time
from typing import Any

from slimgraph.instrument.stages import STAGES

__all__ = ["statemachine_life", "format_statemachine_table", "add_worker_state", "instructions_life",
           "format_instructions_table"]

#: what a worker's ``task-finished`` carries besides key, run_id,
#: stimulus_id and startstops (distributed.worker_state_machine.TaskFinishedMsg)
_FINISHED = {"nbytes": 28, "typename": "int", "metadata": {}, "thread": 1}


def add_worker_state(s: Any, i: int, nthreads: int) -> Any:
    """A running worker without a process: the WorkerState distributed's
    ``add_worker`` makes, with a fixed address and server id (``i``), so
    that two schedulers given the same workers iterate them alike."""
    from distributed.core import Status

    from slimgraph import shim

    address = f"tcp://10.0.0.{i + 1}:4000"
    ws = shim.WorkerState(address=address, status=Status.running, pid=0, name=f"w{i}", nthreads=nthreads,
                          memory_limit=0, local_directory="", nanny=None, server_id=f"worker-{i}", scheduler=s)
    ws.metrics = {"memory": 0, "spilled_bytes": {"memory": 0, "disk": 0}}
    s.workers[address] = ws
    s.aliases[ws.name] = address
    s.total_nthreads += nthreads
    s.running.add(ws)
    s.check_idle_saturated(ws)
    for plugin in list(s.plugins.values()):  # (work stealing keeps a table per worker)
        if hasattr(plugin, "add_worker"):
            plugin.add_worker(scheduler=s, worker=address)
    return ws


def _no_mark(stage: str) -> None:
    pass


async def _one(cls: Any, payload: dict, workers: int, mark: Any = None) -> dict:
    """One life on a fresh scheduler of class ``cls``. With ``mark``
    (counting instructions), ``mark(stage)`` is called as each stage ends
    (and ``mark("setup")`` as the first begins), and no loop monitor runs:
    its thread samples by the clock, which under valgrind runs ~50x slow."""
    import pickle

    from slimgraph.instrument import stock_recorder

    finished = dict(_FINISHED, type=pickle.dumps(int))
    mark = mark or _no_mark
    async with cls(dashboard_address=None, dashboard=False, host="127.0.0.1") as s:
        # both kinds with the same instruments (as engine mode's child): a
        # slim scheduler records its submissions, and the recorder's loop
        # monitor samples the loop's stack while a block lasts, which this
        # bench's stages are from end to end (~6 us/task of the run stage)
        stock_recorder.install(s)
        if mark is not _no_mark:
            stock_recorder.get_extension(s).loop_monitor.stop()
        addresses = [add_worker_state(s, i, 1).address for i in range(workers)]
        gc.collect()
        keys = list(payload["keys"])
        mark("setup")
        c0 = time.process_time()
        await s.update_graph(client="bench-client", **payload)
        for pending in (getattr(s, "slim_tails", None), getattr(s, "slim_deliveries", None)):
            if pending:
                await pending.wait()
        c1 = time.process_time()
        mark("ingest")
        ntasks = len(s.tasks)
        rounds = 0
        while True:
            batch = [(ts.key, ts.run_id, a) for a in addresses for ts in list(s.workers[a].processing)]
            if not batch:
                break
            rounds += 1
            for key, run_id, address in batch:
                # (a compute of 1 ms: the duration a worker reports sets the
                # prefix's; with none, work stealing would weigh every
                # processing task of that prefix again at each completion)
                now = time.time()
                s.handle_task_finished(key=key, worker=address, stimulus_id=f"task-finished-{rounds}",
                                       run_id=run_id,
                                       startstops=[{"action": "compute", "start": now - 0.001, "stop": now}],
                                       **finished)
        c2 = time.process_time()
        mark("run")
        left = sum(1 for k in keys if s.tasks[k].state != "memory")
        s.client_releases_keys(keys=keys, client="bench-client", stimulus_id="bench-release")
        c3 = time.process_time()
        mark("release")
        return {"tasks": ntasks, "rounds": rounds, "not_in_memory": left, "transitions": s.transition_counter,
                "left_after_release": len(s.tasks),
                "cpu_s": {"ingest": c1 - c0, "run": c2 - c1, "release": c3 - c2}}


def statemachine_life(payload: dict, workers: int = 2, repeat: int = 3, progress: Any = None) -> dict:
    """Stock and slim, alternately, ``repeat`` times each on ``payload``
    (from :func:`slimgraph.bench.payload.capture`; see the module
    docstring). Each stage's figure is the median of the runs: on a shared
    two-core machine one run's CPU time varies by tens of percent."""
    import asyncio
    import logging
    import statistics

    from distributed import Scheduler
    from distributed.protocol.serialize import Serialized

    from slimgraph.distributed import SlimScheduler

    say = progress or (lambda msg: None)
    # (distributed's INFO lines for every scheduler started and closed)
    log = logging.getLogger("distributed")
    level = log.level
    log.setLevel(logging.WARNING)
    runs: dict = {"stock": [], "slim": []}
    try:
        for i in range(repeat):
            for kind, cls in (("stock", Scheduler), ("slim", SlimScheduler)):
                args = dict(payload)
                ser = args["expr_ser"]  # (as slimgraph.bench.payload.capture keeps it)
                args["expr_ser"] = Serialized(ser["header"], list(ser["frames"]))
                runs[kind].append(asyncio.run(_one(cls, args, workers)))
                say(f"{kind}: run {i + 1} of {repeat}")
    finally:
        log.setLevel(level)
    out: dict = {"mode": "statemachine", "workers": workers, "repeat": repeat}
    same = ("tasks", "rounds", "not_in_memory", "transitions", "left_after_release")
    for kind, rs in runs.items():
        first = rs[0]
        for r in rs:
            if any(r[k] != first[k] for k in same):
                raise AssertionError(f"{kind}: two runs of the same graph differ: {first} / {r}")
        n = first["tasks"]
        out[kind] = {k: first[k] for k in same}
        out[kind]["cpu_us_per_task"] = {
            stage: statistics.median(r["cpu_s"][stage] for r in rs) / n * 1e6 for stage in STAGES}
        out[kind]["cpu_us_per_task"]["whole"] = sum(out[kind]["cpu_us_per_task"].values())
    a, b = out["stock"], out["slim"]
    if (a["transitions"], a["rounds"], a["not_in_memory"]) != (b["transitions"], b["rounds"], b["not_in_memory"]):
        raise AssertionError(f"stock and slim lived different lives: {a} / {b}")
    out["ratios"] = {stage: b["cpu_us_per_task"][stage] / a["cpu_us_per_task"][stage]
                     for stage in (*STAGES, "whole") if a["cpu_us_per_task"][stage]}
    return out



def format_statemachine_table(result: dict, workload: str) -> str:
    a, b = result["stock"], result["slim"]
    lines = [f"the state machine alone, in-process: {workload}, {a['tasks']:,} tasks, "
             f"{result['workers']} workers without processes, {a['rounds']} rounds of completions, "
             f"{a['transitions']:,} transitions; median of {result['repeat']} runs",
             f"{'scheduler CPU, us/task':<24}{'stock':>10}{'slim':>10}{'slim/stock':>12}"]
    for stage in (*STAGES, "whole"):
        x, y = a["cpu_us_per_task"][stage], b["cpu_us_per_task"][stage]
        r = result["ratios"].get(stage)
        lines.append(f"{stage:<24}{x:>10.1f}{y:>10.1f}{'' if r is None else f'{r:.2f}':>12}")
    return "\n".join(lines)


# -- instructions: the same life counted by callgrind ---------------------------
#
# Why. On this machine the CPU time of the same run moves by a fifth from one
# run to the next (a bare Python loop too), more than most changes to the
# engine move it. The instructions a run executes hardly move: valgrind's
# callgrind counts them, per stage (a dump as each stage ends). It runs the
# process ~50x slower, so it suits a few thousand tasks, and it counts
# instructions, not cache misses: a tool for comparing code, beside the CPU
# seconds, not a replacement of them.

#: what each kind's child runs under
_CALLGRIND = ("valgrind", "--tool=callgrind", "--dump-instr=no", "--collect-jumps=no")


def _child(kind: str, payload_path: str, workers: int, out: str) -> None:
    """``python -m slimgraph.bench.statemachine``: one life of ``kind``,
    under callgrind, dumping its counts as each stage ends."""
    import asyncio
    import json
    import logging
    import subprocess

    from distributed import Scheduler

    from slimgraph.bench.payload import load
    from slimgraph.distributed import SlimScheduler

    logging.getLogger("distributed").setLevel(logging.WARNING)
    pid = str(os.getpid())

    def mark(stage: str) -> None:
        subprocess.run(["callgrind_control", "--dump=" + stage, pid], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    cls = SlimScheduler if kind == "slim" else Scheduler
    result = asyncio.run(_one(cls, load(payload_path), workers, mark))
    with open(out, "w") as f:
        json.dump(result, f)


def _dumps(directory: str) -> dict:
    """stage -> instructions, from the dump files callgrind wrote in
    ``directory`` (each dump counts what ran since the one before)."""
    counts: dict = {}
    for name in os.listdir(directory):
        stage = total = None
        with open(os.path.join(directory, name)) as f:
            for line in f:
                if line.startswith("desc: Trigger: "):
                    stage = line.rsplit(" ", 1)[-1].strip()
                elif line.startswith(("summary: ", "totals: ")):
                    total = int(line.split()[1])
                    break
        if stage in (*STAGES, "setup") and total is not None:
            counts[stage] = total
    return counts


def instructions_life(payload: dict, workers: int = 2, progress: Any = None) -> dict:
    """Stock's and slim's life on ``payload`` (as :func:`statemachine_life`),
    each once under callgrind, side by side (a child process each, with a
    fixed hash seed): instructions per task by stage."""
    import json
    import shutil
    import subprocess
    import sys
    import tempfile

    from slimgraph.bench.payload import save

    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise RuntimeError("--instructions counts with valgrind's callgrind, which is not installed here")
    say = progress or (lambda msg: None)
    with tempfile.TemporaryDirectory(prefix="slimgraph-callgrind-") as tmp:
        path = os.path.join(tmp, "payload.pickle")
        save(payload, path)
        procs = {}
        for kind in ("stock", "slim"):
            d = os.path.join(tmp, kind)
            os.mkdir(d)
            cmd = [*_CALLGRIND, f"--callgrind-out-file={d}/callgrind.out", sys.executable, "-m",
                   "slimgraph.bench.statemachine", kind, path, str(workers), os.path.join(tmp, kind + ".json")]
            env = dict(os.environ, PYTHONHASHSEED="0")
            procs[kind] = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            say(f"{kind}: started under callgrind")
        out: dict = {"mode": "statemachine", "counted": "instructions", "workers": workers}
        for kind, proc in procs.items():
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"{kind} under callgrind failed (exit status {proc.returncode}):\n{err[-3000:]}")
            with open(os.path.join(tmp, kind + ".json")) as f:
                run = json.load(f)
            counts = _dumps(os.path.join(tmp, kind))
            missing = [s for s in STAGES if s not in counts]
            if missing:
                raise RuntimeError(f"{kind}: callgrind wrote no count for {missing}")
            n = run["tasks"]
            out[kind] = {k: run[k] for k in ("tasks", "rounds", "not_in_memory", "transitions", "left_after_release")}
            per = {stage: counts[stage] / n for stage in STAGES}
            per["whole"] = sum(per.values())
            out[kind]["instructions_per_task"] = per
            say(f"{kind}: counted")
    a, b = out["stock"], out["slim"]
    if (a["transitions"], a["rounds"], a["not_in_memory"]) != (b["transitions"], b["rounds"], b["not_in_memory"]):
        raise AssertionError(f"stock and slim lived different lives: {a} / {b}")
    out["ratios"] = {stage: b["instructions_per_task"][stage] / a["instructions_per_task"][stage]
                     for stage in (*STAGES, "whole")}
    return out


def format_instructions_table(result: dict, workload: str) -> str:
    a, b = result["stock"], result["slim"]
    lines = [f"the state machine alone, in-process, under callgrind: {workload}, {a['tasks']:,} tasks, "
             f"{result['workers']} workers without processes, {a['transitions']:,} transitions",
             f"{'instructions per task':<24}{'stock':>12}{'slim':>12}{'slim/stock':>12}"]
    for stage in (*STAGES, "whole"):
        x, y = a["instructions_per_task"][stage], b["instructions_per_task"][stage]
        lines.append(f"{stage:<24}{x:>12,.0f}{y:>12,.0f}{result['ratios'][stage]:>12.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    _child(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
