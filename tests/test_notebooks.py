"""The notebooks in ``notebooks/`` run top to bottom, and are stored clean.

Each notebook ends its sections with assertion cells on the figures it
shows, so executing it is a test of the analysis, not just of the code
paths: a failing assertion is a ``CellExecutionError`` here. The notebooks
are executed with nbclient in a fresh ``python3`` kernel whose working
directory is the repository root, not ``notebooks/``: they import only
the installed package (``slimgraph.views.notebook``, ``slimgraph.dashboard``),
so they run from any working directory, as ``jupyter execute
notebooks/*.ipynb`` from the root does. They run with their default (small)
parameters unless a test injects others, papermill-style, in a cell right
after the one tagged ``parameters``.

Outputs are never committed: every notebook must have no outputs and no
execution counts (strip with
``jupyter nbconvert --clear-output --inplace notebooks/*.ipynb``).
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = ROOT / "notebooks"
#: the kernels' working directory (where a user runs ``jupyter execute``)
WORKDIR = ROOT

#: notebook -> seconds it may take in total (each cell gets the same bound)
BUDGETS = {
    "walkthrough.ipynb": 120,
    "bring_your_own_graph.ipynb": 120,
    "dashboard.ipynb": 180,
}

BOKEH_EXEC = "application/vnd.bokehjs_exec.v0+json"
PANEL_EXEC = "application/vnd.holoviews_exec.v0+json"


def all_notebooks() -> list[Path]:
    return sorted(p for p in NOTEBOOKS_DIR.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS_DIR / name, as_version=4)


def parameters_index(nb: nbformat.NotebookNode) -> int:
    idx = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(idx) == 1, f"expected one cell tagged 'parameters', found {len(idx)}"
    return idx[0]


def inject(nb: nbformat.NotebookNode, params: dict) -> None:
    """Papermill-style: a cell after the parameters cell overriding them."""
    src = "\n".join(f"{k} = {v!r}" for k, v in params.items())
    cell = nbformat.v4.new_code_cell(src)
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(parameters_index(nb) + 1, cell)


def execute(name: str, params: dict | None = None, prepend: str | None = None,
            budget: float | None = None) -> tuple[nbformat.NotebookNode, float]:
    nb = read(name)
    if params:
        inject(nb, params)
    if prepend:
        nb.cells.insert(parameters_index(nb) + 1, nbformat.v4.new_code_cell(prepend))
    budget = budget or BUDGETS[name]
    client = NotebookClient(
        nb,
        timeout=budget,
        kernel_name="python3",
        resources={"metadata": {"path": str(WORKDIR)}},
    )
    t0 = time.monotonic()
    client.execute()
    return nb, time.monotonic() - t0


def outputs(nb: nbformat.NotebookNode) -> list[dict]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def mime_count(nb: nbformat.NotebookNode, mime: str) -> int:
    return sum(1 for o in outputs(nb) if mime in o.get("data", {}))


def text_of(nb: nbformat.NotebookNode) -> str:
    parts = []
    for o in outputs(nb):
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        for mime in ("text/plain", "text/html"):
            if mime in o.get("data", {}):
                parts.append(o["data"][mime])
    return "\n".join(parts)


def assert_ran_clean(nb: nbformat.NotebookNode, elapsed: float, name: str) -> None:
    errors = [o for o in outputs(nb) if o.get("output_type") == "error"]
    assert not errors, errors
    not_run = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.execution_count is None]
    assert not not_run, f"cells {not_run} did not run"
    assert elapsed < BUDGETS[name], f"{name} took {elapsed:.0f} s (budget {BUDGETS[name]} s)"


# -- stored clean -----------------------------------------------------------------
def test_expected_notebooks_exist():
    assert not list(NOTEBOOKS_DIR.glob("*.py")), "notebook helpers belong in the package"
    names = {p.name for p in all_notebooks()}
    assert set(BUDGETS) <= names, f"missing: {set(BUDGETS) - names}"


@pytest.mark.parametrize("path", all_notebooks(), ids=lambda p: p.name)
def test_notebook_is_stripped(path: Path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [
        i for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.outputs or c.execution_count is not None)
    ]
    assert not dirty, (
        f"{path.name}: cells {dirty} have outputs or execution counts; strip them with "
        "`jupyter nbconvert --clear-output --inplace notebooks/*.ipynb`"
    )
    timing = [i for i, c in enumerate(nb.cells) if "execution" in c.metadata]
    assert not timing, f"{path.name}: cells {timing} carry execution timing metadata"
    assert "widgets" not in nb.metadata, f"{path.name}: stored widget state"
    # the file on disk is nbformat's own serialization (no stray editor state)
    assert json.loads(path.read_text())["nbformat"] == 4


@pytest.mark.parametrize("name", sorted(BUDGETS))
def test_notebook_has_parameters_cell(name: str):
    nb = read(name)
    cell = nb.cells[parameters_index(nb)]
    assert cell.cell_type == "code"
    # only plain assignments, so papermill (or inject above) can override them
    for line in cell.source.splitlines():
        code = line.split("#", 1)[0].strip()
        assert not code or "=" in code, f"{name}: not an assignment in the parameters cell: {line!r}"


def test_walkthrough_states_the_1m_command_and_a_table_that_adds_up():
    """The walkthrough's 1M section gives the benchmark command for a real
    workload, and its table of figures is consistent in itself: each ratio is
    its row's stock over slim (to the rounding of the shown figures).

    The figures are not compared with any other document: prose (the README,
    benchmarks/RESULTS.md) changes with every run, and a test that pins one
    text to another only checks that both were edited together."""
    nb = read("walkthrough.ipynb")
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    cmd = re.search(r"python -m slimgraph bench --workload (\w+) --tasks (\d+)", text)
    assert cmd, "the walkthrough names no benchmark command"
    workload, tasks = cmd.group(1), int(cmd.group(2))
    assert tasks == 1_000_000
    from slimgraph.workloads import WORKLOADS

    assert workload in WORKLOADS, workload

    def number(cell: str) -> float | None:
        m = re.fullmatch(r"([\d,]+(?:\.\d+)?) ?(?:s|B)", cell)
        return float(m.group(1).replace(",", "")) if m else None

    checked = 0
    for line in text.splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[3].endswith("x"):
            continue
        stock, slim = number(cells[1]), number(cells[2])
        if stock is None or not slim:
            continue
        ratio = float(cells[3][:-1])
        assert abs(stock / slim / ratio - 1) < 0.02, (cells[0], stock, slim, ratio)
        checked += 1
    assert checked >= 4, f"only {checked} rows with stock, slim and a ratio in the walkthrough"


# -- executed -----------------------------------------------------------------------
@pytest.mark.timeout(BUDGETS["walkthrough.ipynb"] + 60)
def test_walkthrough_runs(tmp_path):
    nb, elapsed = execute("walkthrough.ipynb", {"MEMRAY_DIR": str(tmp_path)})
    assert_ran_clean(nb, elapsed, "walkthrough.ipynb")
    text = text_of(nb)
    # the sections produced their tables and figures
    for needle in ("stock/slim", "transitions", "run_spec", "containers", "eager model B/task",
                   "peak bytes", "retained bytes", "SlimScheduler", "flamegraph:"):
        assert needle in text, needle
    assert mime_count(nb, BOKEH_EXEC) >= 4, "expected the phase, memory, lazy-set and memray plots"
    assert len(list(tmp_path.glob("*.html"))) == 2, "expected a stock and a slim flamegraph"


@pytest.mark.timeout(BUDGETS["bring_your_own_graph.ipynb"] + 60)
def test_bring_your_own_graph_runs_on_a_local_pair(tmp_path):
    nb, elapsed = execute("bring_your_own_graph.ipynb", {"MEMRAY_DIR": str(tmp_path)})
    assert_ran_clean(nb, elapsed, "bring_your_own_graph.ipynb")
    text = text_of(nb)
    assert "a local stock + slim pair" in text
    assert "slim (eager)" in text and "hook-only" in text and "phases" in text
    assert mime_count(nb, BOKEH_EXEC) >= 4
    assert len(list(tmp_path.glob("*.bin"))) == 2, "expected a stock and a slim memray capture"


@pytest.mark.timeout(BUDGETS["bring_your_own_graph.ipynb"] + 60)
def test_bring_your_own_graph_reads_running_schedulers(tmp_path):
    """The remote mode: schedulers in this (the test) process, the notebook's
    kernel in another, talking over TCP through the client helpers only."""
    from distributed import LocalCluster

    from slimgraph.distributed import SlimLocalCluster

    common = dict(n_workers=0, processes=False, protocol="tcp", host="127.0.0.1",
                  dashboard_address=":0")
    with LocalCluster(**common) as stock, SlimLocalCluster(**common) as slim:
        address = f"{stock.scheduler_address},{slim.scheduler_address}"
        nb, elapsed = execute("bring_your_own_graph.ipynb",
                              {"SCHEDULER": address, "MEMRAY": True,
                               "MEMRAY_DIR": str(tmp_path)})
        assert_ran_clean(nb, elapsed, "bring_your_own_graph.ipynb")
        text = text_of(nb)
        assert stock.scheduler_address in text and slim.scheduler_address in text
        assert "slim (eager)" not in text  # no local clusters were started
        # the notebook measured these very schedulers
        from slimgraph.instrument.recorder import get_history

        for cluster, kind in ((stock, "stock"), (slim, "slim")):
            recs = list(get_history(cluster.scheduler))
            assert len(recs) >= 2, (kind, recs)  # the submission and the memray one
            assert all(r.scheduler == kind and r.status == "OK" for r in recs), recs


@pytest.mark.timeout(BUDGETS["bring_your_own_graph.ipynb"] + 60)
def test_assertion_cells_catch_a_broken_analysis():
    """Make the "lazy" slim scheduler eager behind the notebook's back: the
    lazy-container assertion cell must fail the run."""
    broken = ('from slimgraph import switches\n'
              'switches.set(lazy_containers=False)  # break the comparison')
    with pytest.raises(CellExecutionError) as info:
        execute("bring_your_own_graph.ipynb", {"MEMRAY": False}, prepend=broken)
    msg = str(info.value)
    assert "AssertionError" in msg and "held B/task" in msg, msg[-2000:]


@pytest.mark.timeout(BUDGETS["dashboard.ipynb"] + 60)
def test_dashboard_runs_offline():
    nb, elapsed = execute("dashboard.ipynb")
    assert_ran_clean(nb, elapsed, "dashboard.ipynb")
    assert mime_count(nb, PANEL_EXEC) >= 1, "the app was not displayed"
    # inline resources: BokehJS itself is in the output, not loaded from a CDN
    loads = [o for o in outputs(nb) if "application/javascript" in o.get("data", {})]
    assert any(len(o["data"]["application/javascript"]) > 1_000_000 for o in loads), \
        "BokehJS was not embedded inline"
    text = text_of(nb)
    assert "timing bars" in text and "done" in text
