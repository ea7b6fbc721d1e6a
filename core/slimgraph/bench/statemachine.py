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
import time
from typing import Any

from slimgraph.instrument.stages import STAGES

__all__ = ["statemachine_life", "format_statemachine_table", "add_worker_state"]

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


async def _one(cls: Any, payload: dict, workers: int) -> dict:
    import pickle

    from slimgraph.instrument import stock_recorder

    finished = dict(_FINISHED, type=pickle.dumps(int))
    async with cls(dashboard_address=None, dashboard=False, host="127.0.0.1") as s:
        # both kinds with the same instruments (as engine mode's child): a
        # slim scheduler records its submissions, and the recorder's loop
        # monitor samples the loop's stack while a block lasts, which this
        # bench's stages are from end to end (~6 us/task of the run stage)
        stock_recorder.install(s)
        addresses = [add_worker_state(s, i, 1).address for i in range(workers)]
        gc.collect()
        keys = list(payload["keys"])
        c0 = time.process_time()
        await s.update_graph(client="bench-client", **payload)
        for pending in (getattr(s, "slim_tails", None), getattr(s, "slim_deliveries", None)):
            if pending:
                await pending.wait()
        c1 = time.process_time()
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
        left = sum(1 for k in keys if s.tasks[k].state != "memory")
        s.client_releases_keys(keys=keys, client="bench-client", stimulus_id="bench-release")
        c3 = time.process_time()
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
