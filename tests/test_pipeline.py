"""The ingestion pipeline on a scheduler state without a server.

``OfflineScheduler`` is a slim SchedulerState with no network: the same
``Pipeline`` that runs inside ``SlimScheduler.update_graph`` runs on it, its
messages collected. The state it builds must equal what a stock Scheduler
builds from the same submission, both staged and in place.
"""
from __future__ import annotations

import asyncio

import dask.array as da
import dask.bag as db
import pytest
from dask import delayed
from distributed import Scheduler

from differential import diff, snapshot
from slimgraph import switches
from slimgraph.bench.payload import arguments, intercept
from slimgraph.ingest.offline import OfflineScheduler
from slimgraph.ingest.pipeline import Pipeline
from slimgraph.instrument.records import SubmissionRecord


def inc(x):
    return x + 1


def _tree(n=50):
    xs = [delayed(inc)(i) for i in range(n)]
    while len(xs) > 1:
        xs = [delayed(sum)(xs[i : i + 4]) for i in range(0, len(xs), 4)]
    return xs[0]


WORKLOADS = {
    "array": lambda: (da.ones((60, 60), chunks=5) + 1).sum(axis=0),
    "tree": _tree,
    "bag": lambda: db.from_sequence(range(100), npartitions=20).map(inc).sum(),
}


async def _payload(s: Scheduler, make) -> dict:
    from distributed import Client

    async with Client(s.address, asynchronous=True) as c:
        (msg,), _ = intercept(c, lambda c: c.compute(make()))
        return arguments(msg)


def _comparable(snap: dict) -> dict:
    # no spans extension offline: every group's span is the default on stock
    for g in snap["groups"].values():
        g.pop("span")
    snap.pop("clients")  # the offline state has no connected client
    return snap


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
@pytest.mark.parametrize("staged", [True, False], ids=["staged", "in-place"])
def test_offline_pipeline_builds_stock_state(workload, staged):
    async def body():
        with switches.set(offload_min_tasks=0, offload_min_bytes=0, staging=staged):
            async with Scheduler(dashboard_address=":0", host="127.0.0.1") as stock:
                payload = await _payload(stock, WORKLOADS[workload])
                await stock.update_graph(client="c", **payload)
                off = OfflineScheduler()
                rec = SubmissionRecord(scheduler="slim")
                await Pipeline(off, rec).run(client="c", **payload)
                assert rec.status == "OK", rec.error
                names = {"c": "client"}
                d = diff(_comparable(snapshot(stock, names)), _comparable(snapshot(off, names)))
                assert not d, "\n".join(d[:20])
                assert [t[:4] for t in stock.transition_log] == [t[:4] for t in off.transition_log]
                assert [ts.key for ts in stock.queued.sorted()] == [ts.key for ts in off.queued.sorted()]
                assert off.events[-1][1]["status"] == "OK"
                assert off.metrics["update-graph-duration"] > 0
                assert rec.phase_seconds().keys() >= {"materialize", "order", "task_states", "transitions"}
                return rec

    rec = asyncio.run(body())
    assert ("commit" in rec.phase_seconds()) == staged


def test_offline_pipeline_reports_an_error_and_changes_nothing():
    """A graph with a cycle: task-erred for the requested key, nothing built."""
    async def body():
        async with Scheduler(dashboard_address=":0", host="127.0.0.1") as stock:
            from distributed import Client

            dsk = {"a": (inc, "b"), "b": (inc, "a"), "c": (inc, "a")}
            async with Client(stock.address, asynchronous=True) as c:
                (msg,), _ = intercept(c, lambda c: c.get(dsk, ["c"], sync=False))
            payload = arguments(msg)
        off = OfflineScheduler()
        rec = SubmissionRecord(scheduler="slim")
        await Pipeline(off, rec).run(client="c", **payload)
        assert rec.status == "error" and "Cycle" in rec.error
        assert not off.tasks and not off.task_groups and off.transition_counter == 0
        assert [m["op"] for _, m in off.reports] == ["task-erred"]
        from distributed.protocol import pickle

        exc = pickle.loads(off.reports[0][1]["exception"].data)
        assert isinstance(exc, RuntimeError)  # as stock's dask.order raises

    asyncio.run(body())


def test_offline_pipeline_with_validation_on():
    """``validate=True`` (distributed checks every transition as it happens;
    the pipeline then ingests in place with distributed's own transitions)
    works without a server too, on every supported release."""

    async def body():
        async with Scheduler(dashboard_address=":0", host="127.0.0.1") as stock:
            payload = await _payload(stock, WORKLOADS["tree"])
        off = OfflineScheduler(validate=True)
        rec = SubmissionRecord(scheduler="slim")
        await Pipeline(off, rec).run(client="c", **payload)
        assert rec.status == "OK", rec.error
        assert off.tasks and all(ts.state in ("waiting", "no-worker", "queued") for ts in off.tasks.values())
        for key in off.tasks:
            off.validate_key(key)

    asyncio.run(body())


@pytest.mark.parametrize("distinct", [True, False], ids=["by-priority", "by-index"])
def test_compact_task_states_are_named_by_their_priority_int(distinct, monkeypatch):
    """A task state made from a compact graph names its task there by the
    int its priority holds (no int of its own for the index): the same
    object. Priorities that are not distinct (dask.order's always are; here
    forced) fall back to naming by index. Either way every task reads the
    run_spec stock holds for it."""
    from slimgraph.ingest import index as index_mod

    if not distinct:
        real = index_mod.compute_order

        def clashing(index):
            prio = real(index)
            assert type(prio) is list and len(prio) > 30
            prio = list(prio)
            prio[20] = prio[10]  # two tasks, one priority
            return prio

        monkeypatch.setattr(index_mod, "compute_order", clashing)

    async def body():
        with switches.set(offload_min_tasks=0, offload_min_bytes=0, compact_ingestion=True):
            async with Scheduler(dashboard_address=":0", host="127.0.0.1") as stock:
                payload = await _payload(stock, WORKLOADS["array"])
                await stock.update_graph(client="c", **payload)
                off = OfflineScheduler()
                rec = SubmissionRecord(scheduler="slim")
                await Pipeline(off, rec).run(client="c", **payload)
                assert rec.status == "OK", rec.error
                compact = [ts for ts in off.tasks.values() if ts._graph is not None]
                assert len(compact) == len(off.tasks)
                (graph,) = {id(ts._graph): ts._graph for ts in compact}.values()
                if distinct:
                    assert graph.handles is not None
                    assert all(ts._spec is ts._prio_order for ts in compact)
                else:
                    assert graph.handles is None
                    assert [graph.keys[ts._spec] for ts in compact] == [ts.key for ts in compact]
                for ts in compact:
                    spec = ts.run_spec
                    assert spec.key == ts.key
                    assert spec == stock.tasks[ts.key].run_spec
                    assert ts.has_run_spec() and ts.spec_data_producer() == bool(
                        spec.data_producer
                    )

    asyncio.run(body())
