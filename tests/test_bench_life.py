"""The benchmark's whole-life mode: a graph ingested, computed and released on
real scheduler and worker processes, stock beside slim, the scheduler's CPU
per stage and by what ran (slimgraph.bench.life)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slimgraph.instrument.stages import PARTS, STAGES, LifeRecords, completed, cpu_at, life_figures, settled_blocks
from slimgraph.instrument.whatran import IDLE, categorize, parse_parts, parse_raw, part

S = "distributed/scheduler.py"


def test_a_sample_is_put_down_to_its_innermost_named_frame():
    root = [("_run_module_as_main", "<frozen runpy>"), ("BaseEventLoop._run_once", "asyncio/base_events.py")]
    handler = root + [("Scheduler.handle_task_finished", S), ("SchedulerState._transitions", S)]
    # a transition's helpers count as the transition, by its kind
    assert categorize(handler + [("SchedulerState._transition_processing_memory", S),
                                 ("SchedulerState._add_to_memory", S)]) == "transition processing->memory"
    # ... but what it calls that is named (slimgraph's containers) is that
    assert categorize(handler + [("SchedulerState._transition_memory_released", S),
                                 ("thaw", "slimgraph/model/containers.py")]) == "slimgraph model"
    assert categorize(root + [("BatchedSend._background_send", "distributed/batched.py"),
                              ("dumps", "distributed/protocol/core.py")]) == "serialization"
    assert categorize(root + [("Scheduler.handle_task_finished", S)]) == "task-finished handling"
    # distributed's own dispatch around a transition is named alike on both
    # engines, whether slim's container hook sits above it or not
    dispatch = "transitions: distributed's dispatch"
    assert categorize(handler + [("SchedulerState._transition", S)]) == dispatch
    assert categorize(handler + [("TransitionHook._transition", "slimgraph/shim/__init__.py"),
                                 ("SlimSchedulerState._thawed_transition", "slimgraph/model/state.py"),
                                 ("SchedulerState._transition", S)]) == dispatch
    assert categorize(handler + [("TransitionHook._transition", "slimgraph/shim/__init__.py"),
                                 ("SlimSchedulerState._thawed_transition", "slimgraph/model/state.py")]
                      ) == "slimgraph model"
    assert categorize(root + [("WorkStealing.balance", "distributed/stealing.py")]) == "work stealing"
    thread = [("Thread._bootstrap", "threading.py"), ("Thread.run", "threading.py")]
    assert categorize(thread + [("build", "slimgraph/ingest/build.py")]) == "slimgraph ingestion"
    assert categorize(thread + [("work", "concurrent/futures/thread.py")]) == "threads off the loop (other)"
    assert categorize(root + [("Scheduler.heartbeat_worker", S)]) == "heartbeats"
    assert categorize(root + [("EpollSelector.select", "selectors.py")]) == IDLE
    assert categorize(root + [("helper", S)]) == "scheduler (other)"
    assert categorize(root) == "other"


def test_py_spy_raw_lines_are_counted_by_category_and_idle_samples_dropped():
    text = "\n".join([
        "main (distributed/cli/dask_scheduler.py:1);EpollSelector.select (selectors.py:468) 40",
        f"main (x.py:1);Scheduler.handle_task_finished ({S}:5);"
        f"SchedulerState._transition_waiting_processing ({S}:9) 7",
        "main (x.py:1);dumps (distributed/protocol/pickle.py:3) 3",
    ])
    got = parse_raw(text)
    assert got == {"transition waiting->processing": 7, "serialization": 3}


def test_a_run_sample_is_dispatch_or_completions_by_the_innermost_step_it_is_in():
    """Dispatch and completions interleave: a sample is dispatch inside one of
    the steps of sending a ready task (distributed's or slimgraph's),
    completions inside the handling of a worker's results, else other."""
    root = [("_run_module_as_main", "<frozen runpy>"), ("BaseEventLoop._run_once", "asyncio/base_events.py")]
    handler = root + [("Scheduler.handle_task_finished", S), ("SchedulerState._transitions", S),
                      ("SchedulerState._transition", S)]
    # a finished task's own transition, and the machinery between transitions
    assert part(handler + [("SchedulerState._transition_processing_memory", S)]) == "completions"
    assert part(handler + [("SchedulerState._transition_memory_released", S),
                           ("TaskState.__hash__", S)]) == "completions"
    assert part(handler) == "completions"
    # a dependent made ready and sent, down to the message and dask's code in it
    assert part(handler + [("SchedulerState._transition_waiting_processing", S)]) == "dispatch"
    assert part(handler + [("SchedulerState._transition_waiting_processing", S), ("SchedulerState._add_to_processing", S),
                           ("SchedulerState._task_to_msg", S), ("Task.__init__", "dask/_task_spec.py")]) == "dispatch"
    assert part(root + [("Scheduler.handle_task_finished", S),
                        ("SchedulerState.stimulus_queue_slots_maybe_opened", S)]) == "dispatch"
    # slimgraph's slices of ready tasks after a commit, its messages
    assert part(root + [("Tails.step", "slimgraph/ingest/tail.py"), ("decide", "slimgraph/shim/__init__.py")]) == "dispatch"
    assert part(handler + [("task_to_msg", "slimgraph/model/messages.py")]) == "dispatch"
    # neither: the batched messages going out, heartbeats; idle is no sample
    assert part(root + [("BatchedSend._background_send", "distributed/batched.py"),
                        ("dumps", "distributed/protocol/core.py")]) == "other"
    assert part(root + [("Scheduler.heartbeat_worker", S)]) == "other"
    assert part(root + [("EpollSelector.select", "selectors.py")]) is None
    text = "\n".join([
        "main (x.py:1);EpollSelector.select (selectors.py:468) 40",
        f"main (x.py:1);Scheduler.handle_task_finished ({S}:5);SchedulerState._transition_waiting_processing ({S}:9) 7",
        f"main (x.py:1);Scheduler.handle_task_finished ({S}:5);SchedulerState._transition_processing_memory ({S}:9) 5",
        "main (x.py:1);dumps (distributed/protocol/pickle.py:3) 3",
    ])
    assert parse_parts(text) == {"dispatch": 7, "completions": 5, "other": 3}


def test_stage_figures_come_from_the_records():
    """The whole-life figures the bench and the app show, from records made
    up here: CPU between the stage bounds (interpolated between samples),
    the longest block ending in each stage, tasks per second over the run."""
    samples = [(0.0, 1.0, 100), (1.0, 1.5, 300), (2.0, 3.5, 250), (4.0, 4.0, 120)]
    assert cpu_at(samples, 1.5) == pytest.approx(2.5) and cpu_at(samples, 9.0) == 4.0
    rec = LifeRecords(tasks=1000, bounds={"ingest": [0.0, 1.0], "run": [1.0, 2.0], "release": [2.5, 4.0]},
                      samples=samples, blocks=[(0.5, 0.2), (1.0, 0.3), (1.4, 0.5), (1.2, 0.1), (3.0, 0.07)],
                      completed=400)  # fmt: skip
    f = life_figures(rec)
    assert [f["stages"][s]["cpu_s"] for s in STAGES] == pytest.approx([0.5, 2.0, 0.375])
    assert f["stages"]["run"]["cpu_us_per_task"] == pytest.approx(2000.0)
    # a block counts in the stage it began in (one ending after the ingestion is its)
    assert [f["stages"][s]["longest_block_s"] for s in STAGES] == [0.5, 0.1, 0.07]
    assert f["tasks_per_s"] == pytest.approx(400.0) and f["completed"] == 400
    # the run not sampled: no parts; sampled: its CPU in proportion
    assert f["stages"]["run"]["parts"] is None
    rec.run_parts = {"dispatch": 30, "completions": 50, "other": 20}
    parts = life_figures(rec)["stages"]["run"]["parts"]
    assert [parts[p]["cpu_s"] for p in PARTS] == pytest.approx([0.6, 1.0, 0.4])
    assert parts["completions"]["cpu_us_per_task"] == pytest.approx(1000.0) and parts["other"]["share"] == 0.2
    assert LifeRecords.from_dict(rec.to_dict()) == rec
    assert f["peak_rss_bytes"] == 300 and f["peak_rss_growth_bytes"] == 200
    # the whole is the stages lived (not the pause between run and release)
    assert f["whole"]["cpu_s"] == pytest.approx(2.875) and f["whole"]["wall_s"] == pytest.approx(3.5)
    assert f["whole"]["longest_ping_s"] is None
    # an "ingest only" life: no run, no rate; the JSON form gives the same figures
    only = LifeRecords(tasks=1000, bounds={"ingest": [0.0, 1.0], "release": [2.0, 4.0]}, samples=samples)
    g = life_figures(only)
    assert set(g["stages"]) == {"ingest", "release"} and g["tasks_per_s"] is None
    assert life_figures(LifeRecords.from_dict(json.loads(json.dumps(only.to_dict())))) == g
    # tasks completed: those no longer pending (released ones ran)
    assert completed(1000, {"memory": 5, "released": 300, "forgotten": 90, "processing": 2, "waiting": 600}) == 398


def test_blocks_are_read_once_the_monitor_has_closed_them():
    """A block that ended before the release's end but was closed later (by
    the monitor's next wake-up) is in the blocks read; a later one changes
    nothing (the release ended at 2.0 here)."""
    reads = iter([[(1.0, 0.2)], [(1.0, 0.2), (1.5, 0.8)], [(1.0, 0.2), (1.5, 0.8), (9.0, 1.0)], []])
    assert settled_blocks(lambda: next(reads), after=2.0, every=0.01) == [(1.0, 0.2), (1.5, 0.8), (9.0, 1.0)]


@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_life_mode_measures_every_stage_for_both_engines(tmp_path):
    out = tmp_path / "life.json"
    proc = subprocess.run(
        [sys.executable, "-m", "slimgraph", "bench", "--mode", "life", "--workload", "delayed",
         "--tasks", "4000", "--workers", "1", "--json", str(out), "--profiles", str(tmp_path / "prof")],
        capture_output=True, text=True, timeout=540,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["mode"] == "life" and r["compute_seconds"] is None
    stock, slim = r["stock"], r["slim"]
    assert stock["tasks"] == slim["tasks"] > 1000
    assert stock["result"] == slim["result"] != "None"  # the same value computed
    for run in (stock, slim):
        assert set(run["stages"]) == set(STAGES)
        cpu = [run["stages"][s]["cpu_s"] for s in STAGES]
        assert all(c >= 0 for c in cpu) and run["stages"]["run"]["cpu_s"] > 0
        # the stages follow each other: together they are the whole life
        assert sum(cpu) == pytest.approx(run["whole"]["cpu_s"], rel=1e-9, abs=1e-9)
        assert sum(run["stages"][s]["wall_s"] for s in STAGES) == pytest.approx(run["whole"]["wall_s"])
        assert run["whole"]["cpu_us_per_task"] == pytest.approx(run["whole"]["cpu_s"] / run["tasks"] * 1e6)
        assert run["peak_rss_growth_bytes"] > 0
        assert run["profile"] == "py-spy", run["profile"]
        split = run["stages"]["run"]["by_what"]
        assert sum(split.values()) == pytest.approx(run["stages"]["run"]["cpu_s"])
        # the run completes tasks: their transitions are seen (by kind, or
        # in distributed's dispatch between them: py-spy samples a short
        # run only a few dozen times, and a loaded machine gave a dozen)
        assert any(c.startswith("transition") for c in split), split
        # the run's CPU by part: all of it, and the workers' results handled
        parts = run["stages"]["run"]["parts"]
        assert set(parts) == set(PARTS) and sum(p["share"] for p in parts.values()) == pytest.approx(1.0)
        assert sum(p["cpu_s"] for p in parts.values()) == pytest.approx(run["stages"]["run"]["cpu_s"])
        assert parts["completions"]["cpu_s"] > 0, parts
        # the figures are those of the records kept beside them (the
        # dashboard's jobs compute theirs alike: slimgraph.instrument.stages)
        figures = life_figures(LifeRecords.from_dict(run["records"]))
        for stage in STAGES:
            assert {k: v for k, v in run["stages"][stage].items() if k != "by_what"} == figures["stages"][stage]
        assert run["whole"] == figures["whole"] and run["tasks_per_s"] == figures["tasks_per_s"]
        assert run["completed"] == run["tasks"] and run["tasks_per_s"] > 0
    assert r["ratios"]["cpu_whole"] == pytest.approx(slim["whole"]["cpu_s"] / stock["whole"]["cpu_s"])
    assert "whole life: delayed" in proc.stdout and "by what ran" in proc.stdout
    assert "of it completions, CPU us/task" in proc.stdout and "of it dispatch, CPU us/task" in proc.stdout
    assert r["ratios"]["cpu_completions"] == pytest.approx(
        slim["stages"]["run"]["parts"]["completions"]["cpu_s"] / stock["stages"]["run"]["parts"]["completions"]["cpu_s"])
    # py-spy's recordings kept: what the table was made of
    for kind in ("stock", "slim"):
        assert parse_raw((tmp_path / "prof" / f"{kind}-run.txt").read_text())


@pytest.mark.timeout(600)
def test_statemachine_mode_lives_the_same_life_on_both_engines(tmp_path):
    out = tmp_path / "sm.json"
    proc = subprocess.run(
        [sys.executable, "-m", "slimgraph", "bench", "--mode", "statemachine", "--workload", "delayed",
         "--tasks", "3000", "--json", str(out)],
        capture_output=True, text=True, timeout=540,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    stock, slim = r["stock"], r["slim"]
    assert stock["tasks"] == slim["tasks"] > 2000
    # every task completed and released, with as many transitions on both
    assert stock["not_in_memory"] == slim["not_in_memory"] == 0
    assert stock["left_after_release"] == slim["left_after_release"] == 0
    assert stock["transitions"] == slim["transitions"] >= 4 * stock["tasks"]
    assert stock["rounds"] == slim["rounds"] > 1
    for run in (stock, slim):
        cpu = run["cpu_us_per_task"]
        assert all(cpu[s] > 0 for s in ("ingest", "run", "release"))
        assert cpu["whole"] == pytest.approx(cpu["ingest"] + cpu["run"] + cpu["release"])
    assert r["ratios"]["run"] == pytest.approx(slim["cpu_us_per_task"]["run"] / stock["cpu_us_per_task"]["run"])
    assert "the state machine alone" in proc.stdout


@pytest.mark.timeout(600)
def test_statemachine_mode_counts_instructions_under_callgrind(tmp_path):
    """``--instructions``: the same life, each engine once under valgrind's
    callgrind, its instructions per stage read from a dump as each stage
    ends."""
    out = tmp_path / "ins.json"
    proc = subprocess.run(
        [sys.executable, "-m", "slimgraph", "bench", "--mode", "statemachine", "--instructions",
         "--workload", "delayed", "--tasks", "600", "--json", str(out)],
        capture_output=True, text=True, timeout=540,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["counted"] == "instructions"
    stock, slim = r["stock"], r["slim"]
    assert stock["tasks"] == slim["tasks"] > 400
    assert stock["transitions"] == slim["transitions"] >= 4 * stock["tasks"]
    assert stock["left_after_release"] == slim["left_after_release"] == 0
    for run in (stock, slim):
        per = run["instructions_per_task"]
        # (a Python-level transition alone is thousands of instructions)
        assert all(per[s] > 1000 for s in ("ingest", "run", "release"))
        assert per["whole"] == pytest.approx(per["ingest"] + per["run"] + per["release"])
    assert r["ratios"]["run"] == pytest.approx(slim["instructions_per_task"]["run"] / stock["instructions_per_task"]["run"])
    assert "under callgrind" in proc.stdout and "instructions per task" in proc.stdout


def test_instructions_are_for_statemachine_mode():
    proc = subprocess.run([sys.executable, "-m", "slimgraph", "bench", "--mode", "life", "--instructions"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--instructions is for --mode statemachine" in proc.stderr
