"""Stock vs slim on the same submissions: the resulting state must be equal.

Each case builds a submission with a real Client, hands the identical
payload to a stock and a slim scheduler (see ``differential.py``), and
compares tasks, edges, priorities, states, waiting_on/waiters, who_wants,
groups and prefixes with their state counts, queued/unrunnable/processing
placement, the per-key transition sequence, what plugins were told, and
what clients were sent. Every case runs with a listening plugin (slim
ingests synchronously) and without (slim stages new graphs).
"""
from __future__ import annotations

import asyncio
import operator

import dask
import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from dask._task_spec import Alias, DataNode, Task, TaskRef

from differential import Pair, add, assert_same, inc, layout, snapshot, tree, wait_idle
from slimgraph import switches

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True, params=["listening", "listening-staged", "quiet"])
def listening(request, monkeypatch):
    """Every case three times: with plugins listening on both sides (a
    Recorder of every call, and the plugins dask's own dashboard registers
    for its Status and Graph pages), once at the default thresholds (these
    small graphs are then ingested on the event loop, deserialized and
    ordered there too) and once staged (built off the event loop, published
    at once, the plugin calls delivered afterwards: see
    slimgraph.ingest.pipeline); and without plugins, staged. What plugins
    are told is compared call by call, in order."""
    monkeypatch.setattr(Pair, "listen_default", request.param != "quiet")
    if request.param == "listening":
        yield request.param
        return
    with switches.set(offload_min_tasks=0, offload_min_bytes=0):
        yield request.param


def run(coro):
    return asyncio.run(coro)


async def check(pair: Pair, make, ignore=()) -> tuple:
    a, b = await pair.submit_both(make)
    assert a["tasks"], "the submission created no tasks"
    assert_same(a, b, ignore)
    # the debugging dump (dump_cluster_state) lists the same members, never run_specs
    for key, ts in pair.stock.tasks.items():
        dumped = pair.slim.tasks[key]._to_dict_no_nest()
        assert set(dumped) == set(ts._to_dict_no_nest()), key
        assert "run_spec" not in dumped
    if pair.listen:
        assert pair.rec_stock.update_graphs == pair.rec_slim.update_graphs
        # every call plugins heard of by the end of ingestion, in order (with
        # workers, later calls depend on how fast each side's workers ran)
        n = pair.calls_at["stock"]
        assert pair.calls_at["slim"] >= n
        assert pair.rec_stock.calls[:n] == pair.rec_slim.calls[:n]
        for a_plugin, b_plugin in zip(pair.dash_stock, pair.dash_slim):
            if hasattr(a_plugin, "x"):  # GraphLayout
                assert layout(a_plugin) == layout(b_plugin)
    assert pair.reports["stock"] == pair.reports["slim"]
    return a, b


def _df(n=200):
    return pd.DataFrame({"a": np.arange(n) % 7, "b": np.arange(n, dtype=float)})


WORKLOADS = {
    "array-blockwise": lambda: (da.ones((60, 60), chunks=10) + 1) * 2,
    "array-reduction": lambda: (da.ones((60, 60), chunks=10) + 1).sum(axis=0),
    "array-mean": lambda: da.random.default_rng(0).random((80, 80), chunks=10).mean(),
    "array-rechunk": lambda: da.ones((60, 60), chunks=(10, 60)).rechunk((60, 10)),
    "array-map-overlap": lambda: da.ones((60, 60), chunks=20).map_overlap(lambda b: b + 1, depth=1),
    "dataframe-groupby": lambda: dd.from_pandas(_df(), npartitions=8).groupby("a").b.sum(),
    "dataframe-shuffle-tasks": lambda: dd.from_pandas(_df(), npartitions=8).shuffle("a", shuffle_method="tasks"),
    "dataframe-shuffle-p2p": lambda: dd.from_pandas(_df(), npartitions=8).shuffle("a", shuffle_method="p2p"),
    "dataframe-merge": lambda: dd.from_pandas(_df(), npartitions=6).merge(
        dd.from_pandas(_df(90), npartitions=3), on="a", shuffle_method="tasks"
    ),
    "bag": lambda: db.from_sequence(range(200), npartitions=10).map(inc).filter(lambda x: x % 3).fold(operator.add),
    "delayed-tree": tree,
}


@pytest.mark.parametrize("n_workers", [0, 2])
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_collections(workload, n_workers):
    async def body():
        async with Pair(n_workers=n_workers) as p:
            x = WORKLOADS[workload]()
            a, _ = await check(p, lambda c: c.compute(x))
            if n_workers:
                assert a["processing_tasks"], "nothing was sent to a worker"

    run(body())


def test_persist_then_compute_on_top():
    """Second submission depends on keys already in memory.

    One worker: with two, which of two idle workers gets a task is decided
    by the hash order of their addresses (random ports), in stock as in slim.
    """

    async def body():
        async with Pair(n_workers=1) as p:
            x = da.ones((40, 40), chunks=10) + 1
            await check(p, lambda c: c.persist(x))
            await wait_idle(p.stock)
            await wait_idle(p.slim)
            a, b = await check(p, lambda c: c.compute((x * 2).sum()))
            # the persisted chunks are in memory and waited on by no one
            mem = [k for k, t in a["tasks"].items() if t["state"] == "memory"]
            assert mem

    run(body())


def test_resubmit_same_graph_and_overlap():
    async def body():
        async with Pair(n_workers=0) as p:
            x = (da.ones((40, 40), chunks=10) + 1).sum()
            await check(p, lambda c: c.compute(x))
            # identical graph again (keys already waiting/queued)
            await check(p, lambda c: c.compute(x))
            # overlapping graph: shares the blockwise part
            await check(p, lambda c: c.compute((da.ones((40, 40), chunks=10) + 1).mean()))

    run(body())


def test_plain_dict_graphs_with_mixed_keys():
    dsk = {
        "a": (inc, 1),
        ("b", 0): (inc, "a"),
        ("b", 1): (add, "a", ("b", 0)),
        3: (add, ("b", 1), "a"),
        2.5: (inc, 3),
        "unused": (inc, 100),  # culled: not reachable from the requested keys
    }

    async def body():
        async with Pair(n_workers=0) as p:
            a, _ = await check(p, lambda c: c.get(dsk, [2.5, ("b", 0)], sync=False))
            assert "unused" not in a["tasks"]
            assert 3 in a["tasks"] and 2.5 in a["tasks"]

    run(body())


def test_alias_lists_over_shared_data_root():
    """Alias lists over a shared data root: the shape on which a bare
    ``dask.order`` call fails (see test_order's orphaned-data-root test).
    Through a Client the graph reaches the scheduler in a form that orders
    fine; both schedulers must then agree on every task."""
    dsk = {
        "x4": (add, 1, 1),
        ("y", 9): [],
        ("y", 31): (add, 1, 1),
        ("y", 40): 7,
        ("y", 42): (add, 1, 1),
        ("y", 49): [("y", 40), "x4", ("y", 42)],
        ("y", 55): [("y", 40), ("y", 31), ("y", 9)],
        "x56": 3,
        "x68": [("y", 55), ("y", 42)],
        ("y", 69): [("y", 49), "x56"],
    }

    async def body():
        async with Pair(n_workers=0) as p:
            a, _ = await check(p, lambda c: c.get(dsk, [("y", 69), "x68"], sync=False))
            assert ("y", 40) in a["tasks"]

    run(body())

def test_alias_and_datanode():
    dsk = {
        "d": DataNode("d", 41),
        "al": Alias("al", "d"),
        "t": Task("t", inc, TaskRef("al")),
        "u": Task("u", add, TaskRef("t"), TaskRef("d")),
    }

    async def body():
        async with Pair(n_workers=0) as p:
            await check(p, lambda c: c.get(dsk, ["u"], sync=False))

    run(body())


def test_futures_in_graph(listening):
    async def body():
        async with Pair(n_workers=1) as p:
            await check(p, lambda c: c.submit(inc, 1, key="f1"))
            await wait_idle(p.stock)
            await wait_idle(p.slim)
            f1s = [f for f in p.futures if f.key == "f1"]
            assert len(f1s) == 2

            def make(c):
                f = next(f for f in f1s if f.client is c)
                # fifo_timeout: the generation must not depend on how long
                # each side took since its first submission
                return c.submit(add, f, 2, key="g1", fifo_timeout="1h")

            await check(p, make)
            if listening != "listening":  # small graphs forced through staging
                from slimgraph.instrument.recorder import get_history

                assert get_history(p.slim).latest().ingestion == "staged"

    run(body())


def test_key_collision_different_run_spec():
    async def body():
        async with Pair(n_workers=0) as p:
            await check(p, lambda c: c.get({"x": (inc, 1), "y": (inc, "x")}, ["y"], sync=False))
            # same key "y", different dependencies
            await check(p, lambda c: c.get({"z": 5, "y": (inc, "z")}, ["y"], sync=False))

    run(body())


@pytest.mark.parametrize(
    "annot",
    [
        {"priority": 5},
        {"retries": 2},
        {"workers": ["127.0.0.1"]},
        {"resources": {"GPU": 1}},
        {"workers": ["tcp://127.0.0.1:1"], "allow_other_workers": True},
    ],
    ids=lambda a: "-".join(a),
)
def test_annotations(annot):
    async def body():
        async with Pair(n_workers=0) as p:
            with dask.annotate(**annot):
                x = da.ones((30, 30), chunks=10) + 1
            await check(p, lambda c: c.compute(x.sum()))

    run(body())


def test_user_priority_and_fifo_timeout():
    async def body():
        async with Pair(n_workers=0) as p:
            x = da.ones((30, 30), chunks=10) + 1
            await check(p, lambda c: c.compute(x.sum(), priority=10))
            await check(p, lambda c: c.compute(x.mean(), priority=2, fifo_timeout="0ms"))
            await check(p, lambda c: c.compute(x.max(), fifo_timeout="1h"))

    run(body())


class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n


def test_actors_and_restrictions_with_workers():
    """One worker: placement among several equally idle workers follows the
    hash order of their addresses, in stock as in slim. (fifo_timeout 0:
    every submission starts a new generation, whatever the wall time
    between the two schedulers' submissions on a loaded machine.)"""

    async def body():
        async with Pair(n_workers=1, resources={"GPU": 1}) as p:
            async def settle():
                await wait_idle(p.stock, states=("processing",))
                await wait_idle(p.slim, states=("processing",))

            await check(p, lambda c: c.submit(inc, 1, resources={"GPU": 1}, key="r1", fifo_timeout="0ms"))
            await settle()
            await check(p, lambda c: c.submit(inc, 2, resources={"TPU": 1}, key="no-tpu", fifo_timeout="0ms"))
            await settle()
            a, _ = await check(
                p,
                lambda c: c.map(
                    inc, range(6), workers=["tcp://10.0.0.1:1"], allow_other_workers=True,
                    key=[f"m{i}" for i in range(6)], fifo_timeout="0ms",
                ),
            )
            assert a["tasks"]["no-tpu"]["state"] == "no-worker"
            await settle()
            a, _ = await check(p, lambda c: c.submit(Counter, actor=True, key="actor-1", fifo_timeout="0ms"))
            assert a["tasks"]["actor-1"]["actor"]

    run(body())


def test_lost_dependency_is_cancelled_like_stock():
    dsk = {"b": Task("b", inc, TaskRef("never-existed"))}

    async def body():
        async with Pair(n_workers=0) as p:
            a, b = await p.submit_both(lambda c: c.get(dsk, ["b"], sync=False))
            assert_same(a, b)
            assert "b" not in a["tasks"]
            assert p.reports["stock"] == p.reports["slim"]
            assert any(m.get("op") == "cancelled-keys" for m in p.reports["slim"])

    run(body())



def test_releasing_graphs_gives_stocks_transitions_in_stocks_order():
    """Two submissions sharing tasks, released one after the other: the
    first release forgets what only it needed (distributed splits waiting
    -> forgotten into two transitions, and the slim hook runs around both),
    the second forgets the rest. After each, the state is stock's, and the
    transitions made (key, start, finish, recommendations) are stock's, in
    stock's order; with plugins listening, so are their calls."""
    x = da.ones((60, 60), chunks=6) + 1
    first, second = x.sum(), (x * 2).mean()

    async def body():
        async with Pair(n_workers=0) as p:
            await p.submit_both(lambda c: c.compute(first))
            await p.submit_both(lambda c: c.compute(second))
            wanted = [f.key for f in p.futures_of("stock")]  # (the same keys on both)
            assert len(wanted) == 2
            owed = p.slim.slim_deliveries
            if owed:
                await owed.wait()
            ends = {}
            for tag, s, c in (("stock", p.stock, p.c_stock), ("slim", p.slim, p.c_slim)):
                rec = p.rec_stock if tag == "stock" else p.rec_slim
                steps = []
                for i, key in enumerate(wanted):
                    log_at = len(s.transition_log)
                    calls_at = len(rec.calls) if rec is not None else 0
                    s.client_releases_keys(keys=[key], client=c.id, stimulus_id=f"release-{i}")
                    made = [(t.key, t.start, t.finish, dict(t.recommendations)) for t in list(s.transition_log)[log_at:]]
                    steps.append((made, rec.calls[calls_at:] if rec is not None else None,
                                  snapshot(s, p.client_names)))
                ends[tag] = steps
            for (made_a, calls_a, snap_a), (made_b, calls_b, snap_b) in zip(ends["stock"], ends["slim"]):
                assert made_a and made_a == made_b
                assert any(start == "waiting" and finish == "released" for _, start, finish, _ in made_a)
                assert calls_a == calls_b
                assert_same(snap_a, snap_b)
            assert not p.stock.tasks and not p.slim.tasks

    run(body())

def test_eager_containers_give_the_same_state():
    async def body():
        with switches.set(lazy_containers=False):
            async with Pair(n_workers=2) as p:
                x = (da.ones((50, 50), chunks=10) + 1).sum(axis=0)
                a, _ = await check(p, lambda c: c.compute(x))
                for ts in p.slim.tasks.values():
                    assert type(ts.dependencies) is set and type(ts.dependents) is set

    run(body())


@pytest.mark.parametrize("lazy", [pytest.param(False, id="eager"), pytest.param(True, id="lazy")])
def test_dependencies_iterate_in_stock_order(lazy):
    """``ts.dependencies`` must iterate in stock's order, not only hold the
    same tasks.

    released -> waiting recommends a task's dependencies in that order, and
    the recommendations are popped last-in first-out, so it decides which
    root tasks reach the workers' free slots and which are queued. A set
    built by re-inserting another set's iteration order can iterate
    differently when keys collide in its hash table; the outcome depends on
    PYTHONHASHSEED (test_eager_containers_give_the_same_state failed for
    about one seed in ten). With these string keys at least 14 of the 60
    fan-ins of 8-16 iterate differently when rebuilt, for each of
    PYTHONHASHSEED 0..200 (tuples of one name and an int hardly ever do).
    """
    dsk = {f"leaf-{i}": (inc, i) for i in range(300)}
    for j in range(60):
        dsk[f"mid-{j}"] = (add, *[f"leaf-{(j * 7 + m) % 300}" for m in range(8 + j % 9)])
    dsk["top"] = (add, *[f"mid-{j}" for j in range(60)])

    async def body():
        with switches.set(lazy_containers=lazy):
            async with Pair(n_workers=0) as p:
                await check(p, lambda c: c.get(dsk, ["top"], sync=False))
                # dependents too: a finished task recommends its dependents
                # in that order (stock adds them in the culled graph's order)
                for attr in ("dependencies", "dependents"):
                    bad = [
                        k
                        for k, ts in p.stock.tasks.items()
                        if [d.key for d in getattr(ts, attr)]
                        != [d.key for d in getattr(p.slim.tasks[k], attr)]
                    ]
                    assert not bad, f"{attr} iterate differently for {len(bad)} tasks, e.g. {bad[0]!r}"

    run(body())


def test_whole_computation_same_results_and_transitions():
    """Run to completion on in-process workers: same results, same final
    states and the same transition sequence for every key."""

    async def body():
        async with Pair(n_workers=2) as p:
            x = (da.arange(400, chunks=20).reshape(20, 20).rechunk(5) + 1).sum(axis=0)
            await check(p, lambda c: c.compute(x))
            res = {}
            for tag, c in (("stock", p.c_stock), ("slim", p.c_slim)):
                res[tag] = await c.gather(p.futures_of(tag))
            np.testing.assert_array_equal(res["stock"][0], res["slim"][0])
            np.testing.assert_array_equal(res["slim"][0], x.compute(scheduler="sync"))
            await wait_idle(p.stock)
            await wait_idle(p.slim)
            sa = {k: ts.state for k, ts in p.stock.tasks.items()}
            sb = {k: ts.state for k, ts in p.slim.tasks.items()}
            assert sa == sb
            ta = {k: [(t.start, t.finish) for t in p.stock.transition_log if t.key == k] for k in sa}
            tb = {k: [(t.start, t.finish) for t in p.slim.transition_log if t.key == k] for k in sb}
            assert ta == tb

    run(body())
