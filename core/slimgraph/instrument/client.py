"""Client-side helpers for a (remote) scheduler's slimgraph instruments.

Each helper is a :class:`~slimgraph.instrument.feed.RemoteFeed` call: the
scheduler side is the ``slimgraph`` extension's ``slimgraph_*`` handlers.
A scheduler started with ``--preload slimgraph.distributed`` (slim) or
``--preload slimgraph.views.tab`` (stock) has them from the start; on any
other scheduler call :func:`install` first, which registers a
:class:`~slimgraph.instrument.stock_recorder.StockRecorderPlugin` there (the scheduler
must be able to import slimgraph). Before that, every other helper raises
:class:`~slimgraph.instrument.feed.NotInstalled` saying so.

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

from slimgraph.instrument.feed import NotInstalled, RemoteFeed  # noqa: F401  (re-exported)
from slimgraph.instrument.memory import MemoryTree
from slimgraph.instrument.records import History, SubmissionRecord, row_columns


def _run(client: Any, method_name: str, *args: Any, **kwargs: Any) -> Any:
    """``RemoteFeed(client).<method_name>(...)``, synchronously for a
    synchronous client, as an awaitable for an asynchronous one."""
    feed = RemoteFeed(client)
    return client.sync(getattr(feed, method_name), *args, **kwargs)


def _then(client: Any, coro_fn, *args: Any) -> Any:
    return client.sync(coro_fn, RemoteFeed(client), *args)


# -- install ------------------------------------------------------------------
def install(client: Any, record_phases: bool | str = "auto") -> str:
    """Hook the scheduler's update_graph (phases for stock schedulers).

    Returns ``"phases"`` when stock phases are recorded, ``"hook-only"`` for
    schedulers that record their own (slim).
    """
    return _run(client, "install", record_phases)


def get_status(client: Any) -> dict:
    """``{"kind", "rss", "tasks", "states", "latest", "recording"}`` of the
    scheduler (see :meth:`SlimgraphExtension.status`)."""
    return _run(client, "status")


# -- records ------------------------------------------------------------------
def records_frame(records: list[SubmissionRecord]):
    """One row per (submission, phase) (:meth:`SubmissionRecord.rows`)."""
    import pandas as pd

    cols = None
    rows = [row for r in records for row in r.rows()]
    if not rows:
        cols = row_columns()
    return pd.DataFrame(rows, columns=cols)


async def _records_frame(feed: RemoteFeed, since: int = 0):
    return records_frame(await feed.records(since))


def get_records(client: Any, since: int = 0):
    """Phase records as a DataFrame: one row per (submission, phase)."""
    return _then(client, _records_frame, since)


def get_submissions(client: Any, since: int = 0) -> list[SubmissionRecord]:
    """Phase records as :class:`SubmissionRecord` objects."""
    return _run(client, "records", since)


def _write(df, path: Path) -> Path:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        df.to_csv(path, index=False)
    elif suffix in (".parquet", ".pq"):
        df.to_parquet(path, index=False)
    else:
        raise ValueError(f"export to .csv or .parquet, not {path.suffix!r}")
    return path


async def _export(feed: RemoteFeed, path, since=0):
    df = await _records_frame(feed, since)
    return await asyncio.to_thread(_write, df, Path(path))


def export_records(client: Any, path: str | os.PathLike, since: int = 0) -> Path:
    """Write the records to ``path``: CSV or Parquet by suffix."""
    return _then(client, _export, path, since)


async def _history(feed: RemoteFeed, since: int = 0) -> History:
    h = History()
    for r in await feed.records(since):
        h.append(r)
    return h


def get_history(client: Any, since: int = 0) -> History:
    """A local :class:`~slimgraph.instrument.records.History` copy of the scheduler's records."""
    return _then(client, _history, since)


# -- memory -------------------------------------------------------------------
def get_memory_tree(client: Any, sample: int | None | str = "auto", budget_s: float = 0.02
                    ) -> MemoryTree:
    """The scheduler's memory tree, walked in slices of ``budget_s`` loop time.

    ``sample="auto"``: exact up to 50k tasks, else 20k sampled tasks;
    ``None``: exact; an int: that many sampled tasks.
    """
    return _run(client, "memory_tree", sample, budget_s)


async def _lazysets_frame(feed: RemoteFeed):
    return (await feed.lazysets()).to_frame()


async def _series_frame(feed: RemoteFeed, start, interval):
    import pandas as pd

    return pd.DataFrame(await feed.lazysets_series(start, interval))


def get_lazysets(client: Any):
    """Lazy-container census (one row per container attribute)."""
    return _then(client, _lazysets_frame)


def lazysets_series(client: Any, start: bool | None = None, interval: float = 0.5):
    """Census time series; ``start=True`` starts the sampler, ``False`` stops it."""
    return _then(client, _series_frame, start, interval)


# -- memray -------------------------------------------------------------------
def arm_memray(client: Any, directory: str | None = None, native_traces: bool = False) -> str:
    """Capture the scheduler's next update_graph; returns the capture path."""
    return _run(client, "memray_arm", directory, native_traces)


def get_memray_results(client: Any, top: int = 20, flamegraph: bool = True) -> list[dict]:
    """Summaries (dicts) of the finished captures, oldest first."""
    return _run(client, "memray_results", top, flamegraph)


def get_loop_monitor(client: Any) -> dict:
    """The scheduler's event-loop monitor summary (ticks, longest block...)."""
    return _run(client, "loop_summary")
