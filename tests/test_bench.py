"""The engine-mode benchmark command and its limits run (slimgraph.bench.floor)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import dask
from dask.delayed import delayed

from slimgraph.bench.floor import bare_loop, load_and_measure, stall
from slimgraph.bench.payload import capture, save
from slimgraph.instrument.records import OWNED_PHASES


def test_bench_command_writes_both_kinds_and_the_limits(tmp_path):
    out = tmp_path / "b.json"
    proc = subprocess.run(
        [sys.executable, "-m", "slimgraph", "bench", "--workload", "delayed", "--tasks", "3000",
         "--json", str(out), "--no-tracemalloc"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    n = result["tasks"]
    assert n > 1000
    for kind in ("stock", "slim"):
        run = result[kind]
        assert run["tasks"] == n
        assert run["edges"] == result["edges"] > 0
        assert run["total_seconds"] > 0 and run["rss_bytes_per_task"] is not None
        assert set(run["phases"]) & set(OWNED_PHASES)
        assert run["state_bytes_per_task"]["engine"] > 0
        # every task (fewer than the sample) built into a message and serialized
        sending = run["sending"]
        assert sending["tasks"] == n
        assert sending["message_seconds"] > 0 and sending["serialize_seconds"] > 0
        assert sending["seconds"] == sending["message_seconds"] + sending["serialize_seconds"]
        # then the whole graph released (the child checks that no task is left)
        assert run["release_seconds"] > 0
        assert 0 < run["release_block_seconds"] <= run["release_seconds"]
        # the process's CPU while it released: some, and no more than two
        # cores could give in that time
        assert 0 < run["release_cpu_seconds"] <= 2 * run["release_seconds"] + 0.05
    assert "its longest block" in proc.stdout
    assert "order" in result["slim"]["phases"] and "order" in result["stock"]["phases"]
    assert result["ratios"]["total"] > 0
    floor = result["floor"]
    assert floor["tasks"] == n
    assert floor["dask_rss_bytes_per_task"] > 0 and floor["bare_loop_seconds"] > 0
    assert floor["deserialize_stall_seconds"] >= 0 and floor["materialize_stall_seconds"] >= 0
    # run_spec and key objects survive in every engine, the floor among them
    assert floor["dask_rss_bytes_per_task"] < result["stock"]["rss_bytes_per_task"]
    assert "limits, same submission" in proc.stdout
    assert "stock/slim" in proc.stdout
    assert "sending, us/task" in proc.stdout and result["ratios"]["sending"] > 0
    assert "release the graph" in proc.stdout and result["ratios"]["release"] > 0
    assert "its CPU (process)" in proc.stdout and result["ratios"]["release_cpu"] > 0


def _tree(n: int):
    leaves = [delayed(lambda i: i, pure=True)(i, dask_key_name=f"leaf-{i}") for i in range(n)]
    level = leaves
    while len(level) > 1:
        level = [delayed(sum, pure=True)(level[i:i + 2]) for i in range(0, len(level), 2)]
    return level[0]


def test_bare_loop_builds_every_task_and_edge():
    dsk = dict(dask.base.collections_to_expr([_tree(64)]).__dask_graph__())
    seconds, tasks = bare_loop(list(dsk.items()))
    assert seconds > 0
    assert set(tasks) == set(dsk)
    for key, ts in tasks.items():
        deps = dsk[key].dependencies
        assert {d.key for d in ts.dependencies} == set(deps)
        assert ts.state == ("waiting" if deps else "queued")
        for d in ts.dependencies:
            assert ts in d.dependents
    roots = [ts for ts in tasks.values() if not ts.dependencies]
    assert len(roots) == 64


def test_stall_sees_a_call_that_holds_the_gil():
    import pickle

    blob = pickle.dumps(list(range(3_000_000)))
    # one C call that never runs Python code: the ticking thread waits
    _, held = stall(pickle.loads, blob)
    # Python code gives the GIL up at every switch interval
    _, free = stall(lambda: sum(i for i in range(3_000_000)))
    assert held > 0.02
    assert free < held / 2


def test_floor_materializes_what_the_scheduler_keeps(tmp_path):
    save(capture(_tree(128)), str(tmp_path / "p.pkl"))
    floor = load_and_measure(str(tmp_path / "p.pkl"))
    # a real scheduler ingesting the same collection keeps the same tasks
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        fut = c.compute(_tree(128))
        # read on the scheduler's event loop: from this thread the task dict
        # can be seen while update_graph is still filling it (once: 198 of 255)
        deadline = time.monotonic() + 30
        ntasks = 0
        while not ntasks and time.monotonic() < deadline:
            ntasks = c.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))
            time.sleep(0.01)
        del fut
    assert ntasks >= 2 * 128 - 1
    assert floor["tasks"] == ntasks
    assert floor["bare_loop_seconds"] > 0


def test_client_mode_runs_one_engine_with_only(tmp_path, capsys):
    """``--only slim`` in client mode runs the slim engine alone (a size
    stock cannot hold on this machine, such as 10M tasks): the slim
    figures are there, stock's and the ratios are None, the table shows
    "-" for them; ``--only slim-dask`` is engine mode's and refused."""
    import json

    import pytest

    from slimgraph.bench.runner import main

    with pytest.raises(SystemExit) as e:
        main(["--mode", "client", "--only", "slim-dask", "--tasks", "10"])
    assert e.value.code == 2
    out = tmp_path / "client.json"
    main(["--mode", "client", "--only", "slim", "--workload", "delayed", "--tasks", "2000",
          "--workers", "1", "--no-load", "--compute-seconds", "0.5", "--json", str(out)])
    result = json.loads(out.read_text())
    assert result["stock"] is None
    slim = result["slim"]
    assert slim["tasks"] == result["tasks"] > 1000
    assert slim["update_graph_seconds"] > 0 and slim["cancel_answer_seconds"] is not None
    assert all(r is None for r in result["ratios"].values())
    table = capsys.readouterr().out
    line = next(l for l in table.splitlines() if l.startswith("update_graph (s)"))
    assert line.split()[2] == "-" and line.split()[-1] == "-", line
