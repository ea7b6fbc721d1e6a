"""The shapes benchmark: every shape users submit, on both engines.

The end-to-end test runs the mode as a user does, from the command line, at
a small size on one worker (real scheduler and worker processes, no mocks):
every shape must have both engines' figures, equal results, and slim's
figures measured. The formatting test reads a JSON as the mode writes it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from slimgraph.bench.shapes import SHAPES, format_shapes_table, parse_shapes, sent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.timeout(400)
def test_shapes_mode_from_the_command_line(tmp_path):
    out = tmp_path / "shapes.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (os.path.join(ROOT, "core"), os.environ.get("PYTHONPATH")) if p))
    run = subprocess.run(
        [sys.executable, "-m", "slimgraph", "bench", "--mode", "shapes", "--tasks", "600",
         "--workers", "1", "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=380)
    assert run.returncode == 0, run.stderr[-3000:]
    # progress on stderr, the table on stdout
    assert "slim: many-clients" in run.stderr
    result = json.loads(out.read_text())
    assert [r["shape"] for r in result["shapes"]] == list(SHAPES)
    for row in result["shapes"]:
        assert row["same_result"] is True, row
        for kind in ("stock", "slim"):
            fig = row[kind]
            assert fig["tasks"] > 0 and fig["submissions"] >= 1, (kind, row)
            assert fig["update_graph_seconds"] > 0, (kind, row)
            assert fig["rss_bytes_per_task"] is not None, (kind, row)
            assert fig["result"], (kind, row)
        assert row["stock"]["tasks"] == row["slim"]["tasks"], row
        assert row["ratios"]["update_graph_seconds"] > 0
        assert row["slim"]["longest_block_seconds"] >= 0
    many = next(r for r in result["shapes"] if r["shape"] == "many-clients")
    assert many["slim"]["submissions"] >= 8  # (4 clients, several graphs each)
    for row in result["shapes"]:
        assert row["shape"] in run.stdout
    assert "stock/" in run.stdout


def _run(tasks: int, seconds: float, rss: float | None, own: float | None = None,
         tails: list | None = None) -> dict:
    return {"tasks": tasks, "submissions": 1, "update_graph_seconds": seconds,
            "rss_bytes_per_task": rss, "ingestion_block_seconds": own,
            "longest_block_seconds": own or 0.01, "sent_in_slices": tails or [],
            "ingestion": {"staged": 1}, "wall_seconds": 1.0, "result": "42"}


def test_table_from_json():
    result = json.loads(json.dumps({
        "mode": "shapes", "requested_tasks": 20000, "workers": 2, "shapes": [
            {"shape": "map", "same_result": True, "stock": _run(20000, 2.0, 3000.0),
             "slim": _run(20000, 0.5, 700.0, 0.061, [{"tasks": 15000, "in_bulk": 15000, "slices": 9,
                                                       "seconds": 0.4, "longest_slice_s": 0.03,
                                                       "done": True}]),
             "ratios": {"update_graph_seconds": 4.0, "rss_bytes_per_task": 3000 / 700}},
            {"shape": "bag", "same_result": False, "stock": _run(14000, 1.0, None),
             "slim": _run(14001, 0.4, 500.0),
             "ratios": {"update_graph_seconds": 2.5, "rss_bytes_per_task": None}},
        ]}))
    table = format_shapes_table(result)
    lines = table.splitlines()
    assert "about 20,000 tasks" in lines[0] and "2 worker processes" in lines[0]
    row = next(line for line in lines if line.startswith("map "))
    for cell in ("20,000", "2.000", "0.500", "4.00x", "3,000", "700", "61", "15,000 in 9 slices", "yes"):
        assert cell in row, (cell, row)
    bag = next(line for line in lines if line.startswith("bag "))
    # a missing figure is a dash, no block of its own of 50 ms is "<50", unequal results say so
    assert " - " in bag and "<50" in bag and bag.rstrip().endswith("NO") and "in the commit" in bag
    assert "tasks differ between the engines for: bag (stock 14,000)" in table


def test_shape_names_and_sending():
    assert parse_shapes(None) == list(SHAPES)
    assert parse_shapes("map, bag") == ["map", "bag"]
    with pytest.raises(ValueError, match="nope"):
        parse_shapes("map,nope")
    assert sent({"sent_in_slices": []}) == "in the commit"
    assert sent({"sent_in_slices": [{"tasks": 10, "slices": 2, "in_bulk": 0}]}) == "10 in 2 slices"
