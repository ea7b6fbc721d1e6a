"""Client-side helpers for a (remote) scheduler's slimgraph instruments.

The scheduler side is the ``slimgraph`` extension
(:class:`~slimgraph.instrument.recorder.SlimgraphExtension`), which registers
``scheduler.handlers["slimgraph_*"]``. If the scheduler has no extension yet
(a stock scheduler started without the plugin), the first call installs it
with ``run_on_scheduler`` (the scheduler must be able to import slimgraph).

Every function works with synchronous and asynchronous clients (with an
asynchronous client, ``await`` the result)::

    install(client)                       # start recording a stock scheduler
    df = get_records(client)              # one row per (submission, phase)
    tree = get_memory_tree(client)        # MemoryTree; print(tree)
    export_records(client, "runs.parquet")  # or .csv
    arm_memray(client); ...submit...; get_memray_results(client)
"""
from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from slimgraph.instrument.memory import MemoryTree
from slimgraph.instrument.records import _ROW_CLASHES, PhaseRecord, SubmissionRecord


def _remote_ensure(dask_scheduler=None, install_hooks=False, record_phases="auto"):
    from slimgraph.instrument.recorder import get_extension

    ext = get_extension(dask_scheduler)
    ext.register_handlers()
    ext.ensure_monitor()
    if install_hooks:
        from slimgraph.instrument.stock import install as _install

        hooks = _install(dask_scheduler, record_phases=record_phases)
        return "phases" if hooks.record_phases else "hook-only"
    return "extension"


async def _call(client: Any, op: str, **kwargs) -> Any:
    try:
        return await getattr(client.scheduler, op)(**kwargs)
    except Exception as e:
        # no handler yet: install the extension, retry once
        if "slimgraph" not in str(e) and "handler" not in str(e).lower():
            raise
    await client._run_on_scheduler(_remote_ensure)
    return await getattr(client.scheduler, op)(**kwargs)


def _run(client: Any, coro_fn, *args, **kwargs):
    return client.sync(coro_fn, client, *args, **kwargs)


# -- install ------------------------------------------------------------------
async def _install(client, record_phases="auto"):
    return await client._run_on_scheduler(_remote_ensure, install_hooks=True,
                                          record_phases=record_phases)


def install(client: Any, record_phases: bool | str = "auto") -> str:
    """Hook the scheduler's update_graph (phases for stock schedulers).

    Returns ``"phases"`` when stock phases are recorded, ``"hook-only"`` for
    schedulers that record their own (slim).
    """
    return _run(client, _install, record_phases)


# -- records ------------------------------------------------------------------
def records_from_dicts(rows: list[dict]) -> list[SubmissionRecord]:
    out = []
    for d in rows:
        d = dict(d)
        phases = [PhaseRecord(**p) for p in d.pop("phases", [])]
        out.append(SubmissionRecord(phases=phases, **d))
    return out


def records_frame(records: list[SubmissionRecord]):
    import pandas as pd

    cols = None
    rows = [row for r in records for row in r.rows()]
    if not rows:
        import dataclasses

        cols = [f.name for f in dataclasses.fields(SubmissionRecord) if f.name != "phases"]
        cols += [f"phase_{f.name}" if f.name in _ROW_CLASHES else f.name
                 for f in dataclasses.fields(PhaseRecord)]
    return pd.DataFrame(rows, columns=cols)


async def _get_records(client, since=0, as_records=False):
    rows = await _call(client, "slimgraph_records", since=since)
    recs = records_from_dicts(rows)
    return recs if as_records else records_frame(recs)


def get_records(client: Any, since: int = 0):
    """Phase records as a DataFrame: one row per (submission, phase)."""
    return _run(client, _get_records, since)


def get_submissions(client: Any, since: int = 0) -> list[SubmissionRecord]:
    """Phase records as :class:`SubmissionRecord` objects."""
    return _run(client, _get_records, since, True)


def _write(df, path: Path) -> Path:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        df.to_csv(path, index=False)
    elif suffix in (".parquet", ".pq"):
        df.to_parquet(path, index=False)
    else:
        raise ValueError(f"export to .csv or .parquet, not {path.suffix!r}")
    return path


async def _export(client, path, since=0):
    df = await _get_records(client, since)
    return await asyncio.to_thread(_write, df, Path(path))


def export_records(client: Any, path: str | os.PathLike, since: int = 0) -> Path:
    """Write the records to ``path``: CSV or Parquet by suffix."""
    return _run(client, _export, path, since)


# -- memory -------------------------------------------------------------------
async def _get_memory_tree(client, sample="auto", budget_s=0.02):
    d = await _call(client, "slimgraph_memory_tree", sample=sample, budget_s=budget_s)
    return MemoryTree.from_dict(d)


def get_memory_tree(client: Any, sample: int | None | str = "auto", budget_s: float = 0.02
                    ) -> MemoryTree:
    """The scheduler's memory tree, walked in slices of ``budget_s`` loop time.

    ``sample="auto"``: exact up to 50k tasks, else 20k sampled tasks;
    ``None``: exact; an int: that many sampled tasks.
    """
    return _run(client, _get_memory_tree, sample, budget_s)


async def _get_lazysets(client, series=False, start=None, interval=0.5):
    import pandas as pd

    if series:
        rows = await _call(client, "slimgraph_lazysets_series", start=start, interval=interval)
    else:
        rows = await _call(client, "slimgraph_lazysets")
    return pd.DataFrame(rows)


def get_lazysets(client: Any):
    """Lazy-container census (one row per container attribute)."""
    return _run(client, _get_lazysets)


def lazysets_series(client: Any, start: bool | None = None, interval: float = 0.5):
    """Census time series; ``start=True`` starts the sampler, ``False`` stops it."""
    return _run(client, _get_lazysets, True, start, interval)


# -- memray -------------------------------------------------------------------
async def _arm(client, directory=None, native_traces=False):
    return await _call(client, "slimgraph_memray_arm", directory=directory,
                       native_traces=native_traces)


def arm_memray(client: Any, directory: str | None = None, native_traces: bool = False) -> str:
    """Capture the scheduler's next update_graph; returns the capture path."""
    return _run(client, _arm, directory, native_traces)


async def _memray_results(client, top=20, flamegraph=True):
    return await _call(client, "slimgraph_memray_results", top=top, flamegraph=flamegraph)


def get_memray_results(client: Any, top: int = 20, flamegraph: bool = True) -> list[dict]:
    """Summaries (dicts) of the finished captures, oldest first."""
    return _run(client, _memray_results, top, flamegraph)


def get_loop_monitor(client: Any) -> dict:
    async def f(client):
        return await _call(client, "slimgraph_loop")
    return _run(client, f)


async def _get_history(client, since=0):
    from slimgraph.instrument.records import History

    recs = await _get_records(client, since, True)
    h = History()
    for r in recs:
        h.append(r)
    return h


def get_history(client: Any, since: int = 0):
    """A local :class:`~slimgraph.instrument.records.History` copy of the scheduler's records."""
    return _run(client, _get_history, since)
