"""Compact ingestion in the pipeline: stock and slim on the same submissions.

With ``slimgraph-switches.compact-ingestion`` on (the default), the slim scheduler
materializes a submission as a compact graph, and its task states keep the
graph and their index instead of a dask node. These tests hand the same
payload to a stock and a slim scheduler (``differential.py``) and check:
the same resulting state (the harness compares every task's run_spec token
too), each task's run_spec as read equal to stock's node by node (``==``
and the same token), that the slim tasks really hold no node until read,
which path each layer took in the record, and, on real workers, the
computed results, a recomputation after a lost worker, work stealing,
``get_runspec`` and the different-run_spec warning.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time

import dask
import dask.array as da
import dask.bag as db
import numpy as np
import pytest
from dask import delayed
from dask.base import tokenize
from distributed import Client, LocalCluster, Scheduler, Worker

from differential import Pair, assert_same
from slimgraph import switches, workloads
from slimgraph.distributed import SlimLocalCluster, SlimScheduler
from slimgraph.instrument.recorder import get_history
from test_compact import assert_same_node

pytestmark = pytest.mark.timeout(180)


def run(coro):
    return asyncio.run(coro)


def inc(x):
    return x + 1


def add(*args):
    return sum(args)


def slow_inc(x, delay=0.1):
    time.sleep(delay)
    return x + 1


CASES = {
    "array": lambda: workloads.array(3000),
    "array-fancy": lambda: (
        da.from_array(np.arange(576.0).reshape(24, 24), chunks=(5, 7))[2:20:2, ::-1].rechunk(6).map_overlap(
            lambda b: b + 1, depth=1, boundary="none"
        )
        + da.random.default_rng(1).random((9, 24), chunks=6)
    ).sum(axis=0),
    "delayed": lambda: workloads.delayed(2000),
    # not covered by the compact path: dask materializes the whole graph
    "bag": lambda: db.from_sequence(range(100), npartitions=8).map(inc).fold(add),
}


def _source(ts) -> str:
    """The kind of compact source a slim task's run_spec comes from."""
    from slimgraph.ingest.compact.graph import SHIFT

    g = ts._graph
    return type(g.segments[g.codes[g.index_of(ts._spec)] >> SHIFT]).__name__


def assert_run_specs_equal(stock: Scheduler, slim: Scheduler) -> None:
    assert stock.tasks.keys() == slim.tasks.keys()
    for k, ts in stock.tasks.items():
        mine = slim.tasks[k].run_spec
        assert mine == ts.run_spec, k
        assert tokenize(mine) == tokenize(ts.run_spec), k
        assert_same_node(mine, ts.run_spec, f"tasks[{k!r}].run_spec")


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_state_and_run_specs(case):
    async def body():
        async with Pair(listen=False) as p:
            x = CASES[case]()
            a, b = await p.submit_both(lambda c: c.compute(x))
            assert a["tasks"]
            assert_same(a, b)
            rec = get_history(p.slim).latest()
            # every task holds (graph, index), no node, until something reads it
            graphs = {id(ts._graph) for ts in p.slim.tasks.values()}
            assert None not in {ts._graph for ts in p.slim.tasks.values()}
            assert len(graphs) == 1
            assert all(type(ts._spec) is int for ts in p.slim.tasks.values())
            if case == "bag":
                assert rec.materialization.startswith("dask: optimizer dask.bag"), rec.materialization
                assert [r["path"] for r in rec.layers] == ["dask"]
            else:
                assert rec.materialization == "compact", rec.layers
                assert {r["path"] for r in rec.layers} <= {"compact", "kept"}
            assert sum(r["tasks"] for r in rec.layers) >= len(p.slim.tasks)
            if case == "array":
                assert any(r["type"] == "Blockwise" and r["path"] == "compact" for r in rec.layers)
            assert_run_specs_equal(p.stock, p.slim)

    run(body())


def test_compact_ingestion_off_is_stocks_materialization():
    async def body():
        async with Pair(listen=False) as p:
            x = workloads.array(2000)
            with switches.set(compact_ingestion=False):
                a, b = await p.submit_both(lambda c: c.compute(x))
            assert_same(a, b)
            rec = get_history(p.slim).latest()
            assert rec.materialization == "dask (compact-ingestion off)" and rec.layers == []
            assert all(ts._graph is None for ts in p.slim.tasks.values())
            assert_run_specs_equal(p.stock, p.slim)

    run(body())


def test_reading_a_run_spec_builds_it_and_setting_one_replaces_the_reference():
    async def body():
        async with Pair(listen=False) as p:
            x = (da.ones((20, 20), chunks=5) + 1).sum(axis=0)
            await p.submit_both(lambda c: c.compute(x))
            # tasks of a Blockwise layer: nothing is kept per task, a read builds
            built = [ts for ts in p.slim.tasks.values() if _source(ts) == "BlockSource"]
            assert len(built) > 2
            a, b = built[:2]
            first = a.run_spec
            assert a.run_spec is first  # reads in a row share one build
            b.run_spec
            again = a.run_spec
            assert again is not first and again == first and tokenize(again) == tokenize(first)
            assert a.spec_data_producer() == bool(first.data_producer)
            assert a.has_run_spec() is True
            a.run_spec = None  # what stock code may write: no graph reference left
            assert a.run_spec is None and a._graph is None and not a.has_run_spec()
            a.run_spec = first
            assert a.run_spec is first

    run(body())


def test_get_runspec_and_dump_read_the_built_node():
    async def body():
        async with Pair(listen=False) as p:
            x = workloads.delayed(300)
            await p.submit_both(lambda c: c.compute(x))
            for k in list(p.stock.tasks)[:50]:
                # distributed's own handler, through each client's connection
                got = await p.c_slim.scheduler.get_runspec(key=k)
                want = await p.c_stock.scheduler.get_runspec(key=k)
                assert got == want and tokenize(got) == tokenize(want)
            dump_stock = p.stock._to_dict(exclude=("run_spec",))
            dump_slim = p.slim._to_dict(exclude=("run_spec",))
            assert dump_stock["tasks"].keys() == dump_slim["tasks"].keys()

    run(body())


def test_different_run_spec_warning_on_a_compact_graph(caplog):
    """A key resubmitted with other dependencies: stock's warning, with the
    old run_spec as read from the compact graph."""

    def first():
        return delayed(inc)(1, dask_key_name="y")

    def second():
        a = delayed(inc)(5, dask_key_name="a")
        return delayed(add)(a, 1, dask_key_name="y")

    async def body():
        async with Pair(listen=False) as p:
            x = first()
            await p.submit_both(lambda c: c.compute(x))
            assert p.slim.tasks["y"]._graph is not None
            y = second()
            with caplog.at_level(logging.WARNING, logger="distributed.scheduler"):
                caplog.clear()
                a, b = await p.submit_both(lambda c: c.compute(y))
            assert_same(a, b)
            msgs = [r.getMessage() for r in caplog.records if "Detected different `run_spec`" in r.getMessage()]
            assert len(msgs) == 2, msgs  # one per scheduler
            assert msgs[0] == msgs[1]

    run(body())


# ---------------------------------------------------------------------------
# real workers
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clusters():
    kw = dict(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", host="127.0.0.1")
    with LocalCluster(**kw) as stock, SlimLocalCluster(**kw) as slim:
        with Client(stock) as cs, Client(slim) as cm:
            yield {"stock": (stock, cs), "slim": (slim, cm)}


def _last_record(cluster):
    return get_history(cluster.scheduler).latest()


def test_results_on_worker_processes(clusters):
    def make():
        x = da.arange(4000, chunks=100).reshape(40, 100).rechunk(20)
        arr = (x.map_overlap(lambda b: b * 2, depth=1, boundary="none") + x.T[:, :40].rechunk(20).sum()).mean(axis=0)
        tree = workloads.delayed(300)
        return arr, tree

    with dask.config.set({"array.rechunk.method": "tasks"}):  # (P2P rechunks go to dask)
        arr, tree = make()
    want = dask.compute(arr, tree, scheduler="sync")
    for tag in ("stock", "slim"):
        cluster, client = clusters[tag]
        with client.as_current():
            got = client.compute([arr, tree], sync=True)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1] == want[1]
        if tag == "slim":
            assert _last_record(cluster).materialization == "compact"


def test_lost_worker_recomputes_from_the_compact_graph(clusters):
    """A worker process dies holding persisted results: the scheduler sends
    their run_specs (read from the compact graph) again."""
    expected = int(((np.arange(400) + 1) * 3).sum())
    for tag in ("stock", "slim"):
        cluster, client = clusters[tag]
        with client.as_current():
            y = (da.arange(400, chunks=10) + 1) * 3
            y = client.persist(y)
            from distributed import wait

            wait(y)
            s = cluster.scheduler
            keys = [k for k in s.tasks if isinstance(k, tuple) and k[0] == y.name]
            assert len(keys) == 40
            if tag == "slim":
                assert all(s.tasks[k]._graph is not None for k in keys)
                assert _last_record(cluster).materialization == "compact"
            victim = next(iter(s.tasks[keys[0]].who_has)).address
            client.run(lambda: os._exit(1), workers=[victim], on_error="ignore")
            total = int(client.compute(y.sum()).result(timeout=120))
            assert total == expected
            wanted = set(keys)
            # (the scheduler runs in its own thread: read its log there)
            recomputed = client.run_on_scheduler(
                lambda dask_scheduler: {
                    t.key for t in dask_scheduler.transition_log
                    if t.key in wanted and t.start == "memory" and t.finish == "released"
                }
            )
            assert recomputed, "no persisted result was lost"
            del y
            client.wait_for_workers(2, timeout=60)


def test_work_stealing_sends_compact_run_specs():
    """Tasks piled on one worker are stolen by a second one that joins: the
    thief gets their run_specs from the compact graph and computes them."""

    async def body():
        with dask.config.set(
            {
                "distributed.scheduler.worker-saturation": float("inf"),
                "distributed.scheduler.work-stealing-interval": "20ms",
            }
        ):
            async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
                async with Worker(s.address, nthreads=1, host="127.0.0.1") as a:
                    async with Client(s.address, asynchronous=True) as c:
                        xs = [delayed(slow_inc)(i, dask_key_name=("slow", i)) for i in range(40)]
                        futs = c.compute(xs)
                        while not a.state.executing:
                            await asyncio.sleep(0.01)
                        assert all(ts._graph is not None for ts in s.tasks.values())
                        async with Worker(s.address, nthreads=1, host="127.0.0.1") as b:
                            results = await c.gather(futs)
                            assert results == [i + 1 for i in range(40)]
                            on_b = [k for k, ts in s.tasks.items() if any(ws.address == b.address for ws in ts.who_has or ())]
                            assert on_b, "the second worker computed nothing"
                            # the stealing extension's log: moves the victim confirmed
                            confirmed = [m for _, m in s.get_events("stealing") if m[0] == "confirm"]
                            assert confirmed, "nothing was stolen"

    run(body())
