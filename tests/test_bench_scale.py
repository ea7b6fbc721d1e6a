"""The benchmark's scale mode (slimgraph.bench.scale): sizes up to --tasks,
each engine's peak memory estimated first, an engine that would not fit
not started."""
from __future__ import annotations

import json
import subprocess
import sys

from slimgraph.bench import scale


def test_sizes_are_the_ladder_below_the_largest_then_the_largest():
    assert scale.sizes(10_000_000) == [100_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000]
    assert scale.sizes(3_000_000) == [100_000, 1_000_000, 2_500_000, 3_000_000]
    assert scale.sizes(5_000) == [5_000]


def test_an_estimate_scales_the_largest_measured_peak_per_task():
    need, source = scale.estimate("slim", "array", 10_000_000, {"slim": (1_000_000, 700_000_000)})
    assert need == int(scale.BASE + 700 * 10_000_000 * scale.HEADROOM)
    assert "700 B/task measured at 1,000,000 tasks" in source
    # nothing measured yet for the engine: the first guess, said so
    need, source = scale.estimate("stock", "array", 1_000_000, {"slim": (1_000_000, 700_000_000)})
    assert need == int(scale.BASE + scale.FIRST_GUESS["stock"] * 1_000_000 * scale.HEADROOM)
    assert "first guess" in source


def test_what_the_machine_has_available_is_read_from_meminfo():
    free = scale.available()
    with open("/proc/meminfo") as f:
        total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    assert 0 < free <= total


def test_an_engine_that_would_not_fit_is_not_started_and_the_next_size_estimates_from_the_last(monkeypatch):
    # stock guessed at a petabyte per task: never started; slim at two sizes,
    # the second estimated from the first's measured peak
    monkeypatch.setitem(scale.FIRST_GUESS, "stock", 10**15)
    monkeypatch.setattr(scale, "LADDER", (2_000,))
    result = scale.bench_scale("array", 4_000, ("stock", "slim"))
    first, second = result["sizes"]
    assert [first["requested_tasks"], second["requested_tasks"]] == [2_000, 4_000]
    for row in (first, second):
        stock, slim = row["runs"]["stock"], row["runs"]["slim"]
        assert "tasks" not in stock and stock["skipped"].startswith("not run: needs ~")
        assert stock["estimate_bytes"] > stock["available_bytes"]
        assert slim["tasks"] == row["tasks"] > 1_000
        assert slim["peak_rss_bytes"] > slim["start_rss_bytes"] > 0
        assert slim["estimate_bytes"] <= slim["available_bytes"]
        assert row["build"]["peak_rss_bytes"] > row["build"]["start_rss_bytes"] > 0
    assert "first guess" in first["runs"]["slim"]["estimate_from"]
    assert f"measured at {first['tasks']:,} tasks" in second["runs"]["slim"]["estimate_from"]
    table = scale.format_scale_table(result)
    assert table.count("not run: needs ~") == 2
    assert f"{second['tasks']:,}" in table


def test_scale_mode_from_the_command_line(tmp_path):
    out = tmp_path / "s.json"
    proc = subprocess.run(
        [sys.executable, "-m", "slimgraph", "bench", "--mode", "scale", "--workload", "delayed",
         "--tasks", "3000", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    (row,) = result["sizes"]
    stock, slim = row["runs"]["stock"], row["runs"]["slim"]
    assert stock["tasks"] == slim["tasks"] == row["tasks"] > 2_000
    assert stock["total_seconds"] > 0 and slim["total_seconds"] > 0
    assert "stock/slim" in proc.stdout and "scale: delayed" in proc.stdout
