"""The client-mode benchmark: real scheduler and worker processes, both kinds.

Small graph: checks that every reported figure is measured (not missing,
plausible), that both kinds computed the same result, and that the slim run
really ran on the slim engine (its record carries the slim phases).
"""
from __future__ import annotations

import json

import pytest

from slimgraph.bench.e2e import bench_client, format_client_table

pytestmark = pytest.mark.timeout(300)


def test_client_mode_measures_both_kinds(tmp_path):
    import dask

    out = tmp_path / "e2e.json"
    scheduler = dask.config.get("scheduler", None)
    result = bench_client("delayed", 3000, workers=2, json_path=str(out))
    # its clients leave dask's config as they found it (a shut-down default
    # client once left it naming the distributed scheduler)
    assert dask.config.get("scheduler", None) == scheduler
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["same_result"]
    # (dask's Status page built again every 5 s: the default load)
    assert result["dashboard_pages"] == "reload"
    for kind in ("stock", "slim"):
        run = result[kind]
        assert run["tasks"] > 2000
        assert 0 < run["update_graph_seconds"] <= run["submit_seconds"] <= run["compute_seconds"]
        assert run["longest_block_seconds"] is not None and run["longest_block_seconds"] >= 0
        assert run["pings"] > 0 and run["longest_ping_seconds"] > 0
        assert run["rss_bytes_per_task"] is not None
        # what other users saw, as distributions
        for k in ("ping_seconds", "second_client_submit_seconds", "dashboard_page_seconds",
                  "heartbeat_gap_seconds"):
            d = run[k]
            assert d["n"] > 0 and 0 < d["median"] <= d["p99"] <= d["max"], (kind, k, d)
        assert run["dashboard_page_errors"] == 0
        assert run["heartbeat_gap_seconds"]["max"] < run["worker_ttl_seconds"]
        # every ping is in the timeline; the figures are those from the
        # submission on (before it, the load's pages were opening) answered
        # by the cut (after it, the bench reads the scheduler)
        cut = run["cut_seconds"]
        assert run["compute_seconds"] - 1 <= cut <= run["compute_seconds"] + 1e-6
        counted = [(t, d) for t, d in run["ping_timeline"] if t >= 0 and t + d <= cut]
        assert len(counted) == run["pings"]
        before = [t for t, _ in run["ping_timeline"] if t < 0]
        assert run["ping_before_submission_seconds"]["n"] == len(before) > 0
        assert run["worker_niceness"] == [0, 0]
        assert len([1 for t, d in run["second_client_submit_timeline"] if t + d <= cut]) == \
            run["second_client_submit_seconds"]["n"]
        assert len([1 for t, d in run["dashboard_page_timeline"] if t + d <= cut]) == \
            run["dashboard_page_seconds"]["n"]
        # the longest ping split into the scheduler's blocks and the pinger's own CPU wait
        lp = run["longest_ping"]
        assert lp["seconds"] == run["longest_ping_seconds"] == max(d for t, d in counted)
        assert 0 <= lp["loop_blocked_seconds"] <= lp["seconds"] and lp["pinger_cpu_wait_seconds"] >= 0
        # every block kept is attributed: a known cause, a label, and the
        # record's causes are a subset of the whole window's
        from slimgraph.instrument.blame import CAUSES

        assert run["block_causes"] is not None
        for key in ("block_causes", "window_block_causes", "cancel_block_causes"):
            for cause, c in run[key].items():
                assert cause in CAUSES and c["seconds"] >= 0.05 and c["label"], (kind, key, cause, c)
        own = run["ingestion_block_seconds"]
        assert own is None or own <= run["longest_block_seconds"] + 0.02
    # the slim scheduler process ran the slim engine's own phases
    # (stock's record is made from outside and books uncovered time to "other")
    assert "task_states" in result["slim"]["phases"] and "other" not in result["slim"]["phases"]
    # ... staged: built off the event loop, published by one commit
    assert "commit" in result["slim"]["phases"]
    assert "other" in result["stock"]["phases"]
    table = format_client_table(result)
    assert "stock/slim" in table and "longest ping" in table and "median / p99 / max" in table
    assert "the pinger waited for a CPU" in table


def test_client_mode_real_use_is_staged():
    """``--real-use``: inputs scattered beforehand, the compute inside a
    span, dask's dashboard pages open (here in a headless Chromium, kept
    open: ``--dashboard-pages browser``): the slim scheduler still stages the
    submission. The computation is cut short (``--compute-seconds``: one
    worker takes minutes), and the cancel is timed until the scheduler
    answers without the graph. (Real-use results equal to stock's on real
    workers: tests/test_staging.py and tests/test_dispatch.py.)"""
    compute = 1.0
    result = bench_client("delayed", 6000, workers=1, real_use=True, compute_seconds=compute,
                          pages="browser", nice=5)
    assert result["real_use"] and result["dashboard_pages"] == "browser"
    # (--background-nice: the worker processes at that niceness, the
    # scheduler not)
    assert result["background_nice"] == 5
    assert [r["worker_niceness"] for r in (result["stock"], result["slim"])] == [[5], [5]]
    for kind in ("stock", "slim"):
        # the Graph and the Status page, each loaded once in the browser
        # (HTTP 200, no JavaScript error), and kept open
        assert result[kind]["dashboard_page_seconds"]["n"] == 2
        assert result[kind]["dashboard_page_errors"] == 0
    assert result["same_result"] is None
    assert result["slim"]["ingestion"] == "staged"
    assert result["stock"]["tasks"] == result["slim"]["tasks"] > 4000
    table = format_client_table(result)
    assert "inputs persisted beforehand" in table
    assert "open in a headless Chromium" in table and "(2, kept open)" in table
    assert "the workers and the browser at niceness 5" in table
    assert result["compute_cut_after_seconds"] == compute
    for kind in ("stock", "slim"):
        run = result[kind]
        assert run["compute_seconds"] is None and run["result"] is None
        assert run["pings"] > 0
        assert run["cancel_answer_seconds"] is not None and run["cancel_answer_seconds"] >= 0
        # the scheduler saw the key gone before the client heard it was
        assert 0 <= run["cancel_release_seconds"] <= run["cancel_answer_seconds"], run
        # what the cancel released, counted just before it: the whole graph
        states = run["cancel_task_states"]
        assert sum(states.values()) >= run["tasks"], states
        assert f"{kind} released " + ", ".join(f"{n:,} {st}" for st, n in states.items()) in table
    assert result["slim"]["sent_in_slices"] is None  # (too few ready tasks for slices)
    assert f"cancelled {compute:g} s after" in table
    assert "cancel -> key released" in table


def test_longest_ping_is_split_into_loop_blocks_and_the_pingers_wait():
    from slimgraph.bench.e2e import longest_ping

    pings = [(100.0, 0.5, 0.1), (101.0, 2.0, 0.3), (104.0, 0.01, 0.0)]
    blocks = [{"wall_end": 102.0, "seconds": 1.5},   # 100.5-102.0: 1.0 s inside the longest ping
              {"wall_end": 103.5, "seconds": 0.2},   # 103.3-103.5: outside (it ends at 103.0)
              {"wall_end": 50.0, "seconds": 1.0}]
    lp = longest_ping(pings, blocks, t0=90.0)
    assert lp == {"seconds": 2.0, "at_seconds": 11.0, "loop_blocked_seconds": 1.0,
                  "pinger_cpu_wait_seconds": 0.3}
    assert longest_ping([], blocks, 0.0) is None


def test_other_users_figures_end_with_the_answers_before_the_cut():
    """A ping sent before the cut but answered after it (it met the bench's
    own reading of the scheduler, or the cancel) is not another user's
    figure; nor one sent before the submission."""
    from slimgraph.bench.e2e import answered_within

    pings = [(9.0, 0.1, 0.0), (10.0, 0.2, 0.0), (19.5, 0.4, 0.0), (19.8, 0.47, 0.0), (20.5, 0.01, 0.0)]
    assert answered_within(pings, 10.0, 20.0) == [(10.0, 0.2, 0.0), (19.5, 0.4, 0.0)]
    assert answered_within([(1.0, 2.0)], 0.0, 3.0) == [(1.0, 2.0)]
    assert answered_within([(1.0, 2.5)], 0.0, 3.0) == []


def test_the_browser_runs_at_the_niceness_asked_and_never_above_the_scheduler():
    """``--background-nice`` reaches the browser through a script that
    ``exec``s it (Playwright starts the browser itself); run as root, the
    script also takes away the privilege Chromium uses to raise its own
    threads above everything else (niceness -8)."""
    import os
    import subprocess

    from slimgraph.bench.browser import browser_executable

    script = browser_executable("/bin/sh", 7)
    out = subprocess.run([script, "-c", "nice; grep CapEff /proc/self/status"], capture_output=True,
                         text=True, check=True)
    niceness, caps = out.stdout.split("\n", 1)
    assert int(niceness) == os.nice(0) + 7
    if os.geteuid() == 0:
        assert not int(caps.split()[1], 16) & (1 << 23)  # CAP_SYS_NICE
