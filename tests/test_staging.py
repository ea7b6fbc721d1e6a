"""Staged ingestion (slimgraph.ingest.pipeline): built off the loop, published at once.

Each submission goes to a stock and a slim scheduler (no plugin listening,
so the slim one stages it); the slim record must show the staged phases,
and the resulting state must equal stock's, including the transition log
entry by entry (order and recommendations), the queue's order and counters.
"""
from __future__ import annotations

import asyncio
import time
from operator import add

import dask
import dask.array as da
import dask.bag as db
import numpy as np
import pandas as pd
import pytest
from dask import delayed
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.utils import offload

from differential import Pair, assert_same, cpython_checks_failed, layout, snapshot, wait_idle
from slimgraph import switches
from slimgraph.ingest import apply as applier
from slimgraph.ingest.apply import add_tasks, commit, still_valid
from slimgraph.ingest.build import build
from slimgraph.ingest.index import compute_order, index_graph
from slimgraph.ingest.pipeline import refusal
from slimgraph.ingest.replay import replay
from slimgraph.ingest.submission import Submission
from slimgraph.instrument.recorder import get_history


@pytest.fixture(autouse=True)
def stage_small_graphs():
    """These graphs are small; stage them all the same (by default
    submissions under ``slimgraph-switches.offload-min-tasks`` stay on the loop)."""
    with switches.set(offload_min_tasks=0, offload_min_bytes=0):
        yield


def inc(x):
    return x + 1


def run(coro):
    return asyncio.run(coro)


def _drop_recorders(p: Pair) -> None:
    for s in (p.stock, p.slim):
        for name, plugin in list(s.plugins.items()):
            if type(plugin).__name__ == "Recorder":
                s.remove_plugin(name=name)


def _log(s) -> list:
    return [(t.key, t.start, t.finish, dict(t.recommendations)) for t in s.transition_log]


def _queue(s) -> list:
    return [ts.key for ts in s.queued.sorted()]


async def staged_check(p: Pair, make, expect_staged: bool = True) -> tuple:
    """Ingest on both; snapshot, log and queue order of each are taken right
    after its own ``update_graph`` (before its workers can act)."""
    from distributed import Future

    msgs, _ = p.capture(make)
    assert msgs
    views = {}
    for tag, s, c in (("stock", p.stock, p.c_stock), ("slim", p.slim, p.c_slim)):
        counter = s.transition_counter
        for msg in msgs:
            args = p.payload(msg)
            await s.update_graph(client=c.id, **args)
            p.futures.extend(Future(k, c) for k in args["keys"])
        # the log entries this submission made (earlier ones depend on how
        # fast each side's workers ran)
        made = s.transition_counter - counter
        views[tag] = (snapshot(s, p.client_names), _log(s)[-made:] if made else [], _queue(s))
        rec = p.rec_stock if tag == "stock" else p.rec_slim
        if rec is not None:  # calls plugins had heard of by the end of ingestion
            p.calls_at[tag] = len(rec.calls)
    rec = get_history(p.slim).latest()
    phases = {ph.name: ph.where for ph in rec.phases}
    assert ("commit" in phases) is expect_staged, (phases, rec.status, rec.error)
    if expect_staged:
        assert phases["task_states"] == "offload" and phases["transitions"] == "offload"
    (a, log_a, q_a), (b, log_b, q_b) = views["stock"], views["slim"]
    assert a["tasks"]
    assert_same(a, b)
    assert log_a == log_b
    assert q_a == q_b
    assert p.reports["stock"] == p.reports["slim"]
    return a, b


def _df():
    return pd.DataFrame({"a": np.arange(300) % 7, "b": np.arange(300, dtype=float)})


def _tree(n=40):
    xs = [delayed(inc)(i, dask_key_name=("leaf", i)) for i in range(n)]
    while len(xs) > 1:
        xs = [delayed(add)(*xs[i : i + 3]) for i in range(0, len(xs), 3)]
    return xs[0]


def _mixed():
    # a big root-ish group beside a few roots too small to be root-ish
    big = da.ones((80, 80), chunks=10).sum()
    small = [delayed(inc)(i, dask_key_name=f"small-{i}") for i in range(3)]
    return delayed(lambda *a: a)(big, *small)


WORKLOADS = {
    "array-reduction": lambda c: c.compute((da.ones((60, 60), chunks=10) + 1).sum(axis=0)),
    "array-rechunk": lambda c: c.compute(da.ones((60, 60), chunks=(10, 60)).rechunk((60, 10))),
    "array-overlap": lambda c: c.compute(da.ones((60, 60), chunks=20).map_overlap(lambda b: b + 1, depth=1)),
    "dataframe-groupby": lambda c: c.compute(
        __import__("dask.dataframe", fromlist=["x"]).from_pandas(_df(), npartitions=6).groupby("a").b.sum()
    ),
    "bag": lambda c: c.compute(db.from_sequence(range(100), npartitions=10).map(inc).sum()),
    "delayed-tree": lambda c: c.compute(_tree()),
    "mixed-roots": lambda c: c.compute(_mixed()),
    "persist-array": lambda c: c.persist(da.ones((40, 40), chunks=10) * 2),
}


@pytest.mark.parametrize("n_workers", [0, 2])
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_staged_ingestion_matches_stock(workload, n_workers):
    async def body():
        async with Pair(n_workers=n_workers) as p:
            _drop_recorders(p)
            await staged_check(p, WORKLOADS[workload])

    run(body())


@pytest.mark.parametrize("workload", ["array-reduction", "delayed-tree", "mixed-roots"])
def test_staged_ingestion_matches_stock_where_the_cpython_checks_failed(workload, monkeypatch):
    """On an interpreter where every check of slimgraph.shim.cpython fails,
    the plain paths build stock's state, and every plugin (dask's Graph
    page among them) hears what it hears on stock."""
    cpython_checks_failed(monkeypatch)
    run(_listening_check(WORKLOADS[workload], 2))


@pytest.mark.parametrize("listening", [False, True], ids=["quiet", "plugins-listening"])
def test_staged_log_tail_when_the_log_is_short(listening):
    """A log shorter than the submission: the published tail is stock's tail,
    also when idle workers took root-ish tasks early in the replay. With
    plugins listening to every transition the replay keeps all its entries,
    and the commit makes records only for the log's tail."""

    async def body():
        with dask.config.set({"distributed.admin.low-level-log-length": 37}):
            async with Pair(n_workers=2) as p:
                if not listening:
                    _drop_recorders(p)
                await staged_check(p, WORKLOADS["mixed-roots"])
                assert len(p.slim.transition_log) == 37

    run(body())


TAIL_GRAPHS = {
    "reduction": lambda: (da.ones((120, 120), chunks=10) + 1).sum(axis=0),
    # shared dependencies: some are visited before a later dependent
    "overlap": lambda: da.ones((120, 120), chunks=10).map_overlap(lambda b: b + 1, depth=1).sum(),
    "rechunk": lambda: da.ones((120, 120), chunks=(10, 120)).rechunk((120, 10)).sum(),
}


@pytest.mark.parametrize("graph", sorted(TAIL_GRAPHS))
@pytest.mark.parametrize("workers", [0, 2])
def test_compact_replay_log_tail_beyond_its_slack(workers, graph, monkeypatch):
    """A compact array graph whose replay makes more log entries than the
    kept tail (the log's length plus the replay's slack): the replay by
    graph index, which makes only the tail's entries afterwards, publishes
    stock's tail, with and without idle workers taking root-ish tasks."""
    from slimgraph.ingest import replay as replay_mod

    monkeypatch.setattr(replay_mod, "LOG_SLACK", 50)
    paths = []
    real = replay_mod._Replay._run_compact

    def spy(self, *args):
        paths.append("compact")
        return real(self, *args)

    monkeypatch.setattr(replay_mod._Replay, "_run_compact", spy)

    async def body():
        with dask.config.set({"distributed.admin.low-level-log-length": 37}):
            async with Pair(n_workers=workers) as p:
                _drop_recorders(p)
                for s in (p.stock, p.slim):  # (it hears every transition: a complete log)
                    for name in [n for n in s.plugins if n.startswith("graph-layout")]:
                        s.remove_plugin(name=name)
                await staged_check(p, lambda c: c.compute(TAIL_GRAPHS[graph]()))
                assert len(p.slim.transition_log) == 37
        assert paths == ["compact"]

    run(body())


def test_second_staged_submission_ties_in_the_queue():
    """Two graphs in one generation: equal priorities across them are
    broken by queue insertion order, as stock's HeapSet does."""

    async def body():
        async with Pair(n_workers=0) as p:
            _drop_recorders(p)
            await staged_check(p, lambda c: c.compute(da.ones((50, 50), chunks=10) + 1))
            await staged_check(p, lambda c: c.compute(da.zeros((50, 50), chunks=10) + 2))
            # overlapping keys: not stageable, the synchronous path takes it
            await staged_check(p, lambda c: c.compute(da.ones((50, 50), chunks=10) + 1), expect_staged=False)

    run(body())


@pytest.mark.parametrize("n_workers", [0, 2])
@pytest.mark.parametrize("workload", ["array-reduction", "delayed-tree", "mixed-roots"])
def test_listening_plugins_are_staged_and_told_everything_in_order(workload, n_workers):
    """A Recorder of every call and the plugins dask's dashboard registers
    (task stream, graph layout) listen: the graph is staged all the same,
    and they hear stock's calls, in stock's order, with stock's arguments."""

    run(_listening_check(WORKLOADS[workload], n_workers))


async def _listening_check(make, n_workers: int) -> None:
    """:func:`staged_check` with a Recorder of every call and dask's
    dashboard plugins listening: the calls plugins had heard of by the end
    of stock's ingestion, and the graph layout, are the same on both."""
    async with Pair(n_workers=n_workers) as p:
        await staged_check(p, make)
        n = p.calls_at["stock"]
        assert p.rec_stock.calls[:n] == p.rec_slim.calls[:n]
        assert p.rec_stock.update_graphs == p.rec_slim.update_graphs
        assert layout(p.dash_stock[1]) == layout(p.dash_slim[1])


@pytest.mark.parametrize("kind", ["tuple", "str"])
def test_growing_a_dict_ahead_keeps_it(kind):
    """Growing a dict ahead (tuple keys, and str keys: two kinds of table)
    gives it the room asked for and keeps its keys, values, order and kind
    of table."""
    import sys

    from slimgraph.ingest.deliveries import grow_ahead
    from slimgraph.shim.cpython import dict_room

    make = (lambda i: ("t", i)) if kind == "tuple" else (lambda i: f"t-{i}")
    big = {make(i): i for i in range(100_000)}
    twin = {make(i): i for i in range(100_000)}
    room = dict_room(big)
    assert 0 < room < 1_000_000
    assert grow_ahead(big, room + 10)
    assert dict_room(big) >= room + 10 and not grow_ahead(big, room + 10)
    assert list(big.items()) == list(twin.items())
    for i in range(100_000, 100_000 + room + 5):  # (the room it now has)
        size = sys.getsizeof(big)
        big[make(i)] = twin[make(i)] = i
        assert sys.getsizeof(big) == size
    # a str-keyed table stays one (no bigger than the same dict grown by its keys)
    assert sys.getsizeof(big) == sys.getsizeof(twin) and list(big.items()) == list(twin.items())


def test_the_graph_layout_grows_between_its_slices(monkeypatch):
    """dask's Graph page's layout, delivered in slices: each of its dicts
    that a slice would make grow grows in a turn of its own before it, and
    the layout is the one a single call makes, in the same order."""
    import sys

    from distributed.diagnostics.graph_layout import GraphLayout

    from slimgraph.ingest import deliveries

    monkeypatch.setattr(deliveries, "LAYOUT_SLICE", 200)
    monkeypatch.setattr(deliveries, "GROW_AHEAD", 1_600)
    monkeypatch.setattr(deliveries, "GROW_AHEAD_MIN", 1_000)

    async def body():
        from distributed import Client, Scheduler

        async with Scheduler(dashboard_address=None, dashboard=False, host="127.0.0.1") as s:
            async with Client(s.address, asynchronous=True) as c:
                x = da.ones((160, 160), chunks=4).map_overlap(lambda b: b + 1, depth=1).sum(axis=0)
                fut = c.compute(x)  # (no worker: the tasks stay)
                while len(s.tasks) < 10_000:
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.2)
                one = GraphLayout(s)  # (lays out what the scheduler holds in one call)
                sliced = GraphLayout.__new__(GraphLayout)
                tasks = s.tasks
                s.tasks = {}
                GraphLayout.__init__(sliced, s)  # (empty)
                s.tasks = tasks
                kwargs = {"tasks": list(tasks), "priority": {k: ts.priority for k, ts in tasks.items()},
                          "dependencies": {k: [d.key for d in ts.dependencies] for k, ts in tasks.items()}}
                sizes = lambda: {n: sys.getsizeof(getattr(sliced, n)) for n in deliveries.LAYOUT_DICTS}
                lens = lambda: {n: len(getattr(sliced, n)) for n in deliveries.LAYOUT_DICTS}
                call = sliced.update_graph
                grown_in_a_slice = []

                def update_graph(*args, **kw):
                    before, n = sizes(), lens()
                    call(*args, **kw)
                    after = sizes()
                    grown_in_a_slice.extend(k for k in before if after[k] != before[k] and n[k] >= 1_000)

                sliced.update_graph = update_graph
                turns = grows = 0
                size, length = sizes(), lens()
                for _ in deliveries.update_graph_hooks(s, [sliced], kwargs):
                    now, n_now = sizes(), lens()
                    turns += 1
                    grows += now != size and n_now == length  # (a turn that only grew a table)
                    size, length = now, n_now
                assert grown_in_a_slice == []
                assert turns > 50 and grows >= 5
                for name in ("x", "y", "index", "collision", "index_edge"):
                    assert list(getattr(sliced, name).items()) == list(getattr(one, name).items()), name
                assert sliced.new == one.new and sliced.new_edges == one.new_edges
                fut.cancel()

    run(body())


class Calls(SchedulerPlugin):
    """A plugin that does little per call: it notes each one."""

    def __init__(self):
        self.calls = []

    def update_graph(self, scheduler, *, tasks, **kwargs):
        self.calls.append(("update_graph", len(tasks)))

    def transition(self, key, start, finish, *args, **kwargs):
        self.calls.append(("transition", key, start, finish))


def test_owed_plugin_calls_are_delivered_in_slices_while_the_loop_runs():
    """After a staged commit the plugin calls are owed, and delivered in
    short slices: the event loop runs in between, every call arrives, in
    stock's order, and a later transition is heard only after them."""
    from differential import dashboard_plugins

    from slimgraph.ingest import deliveries

    async def body():
        # (gc: freeze keeps a collection of the new objects out of the gaps)
        with dask.config.set({"slimgraph.gc": "freeze"}):
            await inner()

    async def inner():
        async with Pair(n_workers=0, listen=False) as p:
            p.rec_stock, p.rec_slim = Calls(), Calls()
            p.stock.add_plugin(p.rec_stock)
            p.slim.add_plugin(p.rec_slim)
            p.dash_stock = dashboard_plugins(p.stock)
            p.dash_slim = dashboard_plugins(p.slim)
            make = lambda c: c.compute((da.ones((300, 300), chunks=2) + 1).sum(axis=0))  # noqa: E731
            msgs, _ = p.capture(make)
            args = p.payload(msgs[0])
            await p.stock.update_graph(client=p.c_stock.id, **args)
            expected = list(p.rec_stock.calls)
            await p.slim.update_graph(client=p.c_slim.id, **args)
            owed = p.slim.slim_deliveries
            assert owed, "nothing owed: the calls were made inside the commit"
            assert len(p.rec_slim.calls) < len(expected)
            ticks = 0
            gaps = []
            # a slice's length is the loop thread's CPU time between two ticks:
            # wall time also counts the moments a loaded machine (CI's other
            # lane) gives the core to another process
            last = time.thread_time()
            while owed:
                await asyncio.sleep(0)
                now = time.thread_time()
                gaps.append(now - last)
                last = now
                ticks += 1
            assert ticks > 3  # the loop ran while they were delivered
            assert max(gaps) < 5 * deliveries.SLICE
            assert p.rec_slim.calls == expected
            assert layout(p.dash_stock[1]) == layout(p.dash_slim[1])

            # owed calls come before any later transition's
            args2 = p.payload(p.capture(lambda c: c.compute((da.zeros((300, 300), chunks=2) + 1).sum(axis=0)))[0][0])
            await p.stock.update_graph(client=p.c_stock.id, **args2)
            expected = list(p.rec_stock.calls)
            await p.slim.update_graph(client=p.c_slim.id, **args2)
            assert p.slim.slim_deliveries
            key = next(k for k, ts in p.slim.tasks.items() if ts.state == "queued")
            n_before = len(p.rec_slim.calls)
            p.slim.transitions({key: "released"}, stimulus_id="test")
            # no flush: the transition's calls wait behind the owed ones
            assert p.slim.slim_deliveries and len(p.rec_slim.calls) == n_before
            await p.slim.slim_deliveries.wait()
            assert p.rec_slim.calls[: len(expected)] == expected
            assert p.rec_slim.calls[len(expected)] == ("transition", key, "queued", "released")

    run(body())


def test_persisted_inputs_futures_spans_and_actors_are_staged():
    """What real users do: persist, compute on top of persisted data inside
    ``span(...)``, with actors: all staged, all as stock."""
    from distributed import span

    class Acc:
        def __init__(self):
            self.n = 0

    async def body():
        async with Pair(n_workers=1) as p:
            _drop_recorders(p)
            x = da.ones((60, 60), chunks=10) + 1
            await staged_check(p, lambda c: c.persist(x))
            await wait_idle(p.stock)
            await wait_idle(p.slim)

            def on_top(c):
                with span("user-span"):
                    return c.compute((x * 2).sum())

            a, b = await staged_check(p, on_top)
            named = {t["annotations"].get("span", {}).get("name") for t in b["tasks"].values()}
            assert ("user-span",) in named
            rec = get_history(p.slim).latest()
            assert rec.ingestion == "staged"

            # (futures in graphs: test_equivalence.py::test_futures_in_graph)
            await wait_idle(p.stock)
            await wait_idle(p.slim)
            await staged_check(p, lambda c: c.submit(Acc, actor=True, key="acc-1"))

    run(body())


def test_a_refused_staging_says_why_in_the_record_and_the_log(caplog):
    import logging

    async def body():
        async with Pair(n_workers=0) as p:
            _drop_recorders(p)
            await staged_check(p, lambda c: c.compute(da.ones((50, 50), chunks=10) + 1))
            with caplog.at_level(logging.INFO, logger="slimgraph.ingest"):
                await staged_check(p, lambda c: c.compute(da.ones((50, 50), chunks=10) + 1), expect_staged=False)
            rec = get_history(p.slim).latest()
            assert rec.ingestion == "in place: the graph has keys the scheduler already has"
            assert any("not staged: the graph has keys" in r.getMessage() for r in caplog.records)

    run(body())


def test_staging_off_by_config():
    async def body():
        with switches.set(staging=False):
            async with Pair(n_workers=0) as p:
                _drop_recorders(p)
                await staged_check(p, WORKLOADS["array-reduction"], expect_staged=False)

    run(body())


async def _built(s, dsk: dict, keys: list) -> tuple:
    """A staged build and its plan, made in a worker thread, not committed."""
    from time import time

    from slimgraph.instrument.records import SubmissionRecord

    index = index_graph(dsk, keys, False)
    sub = Submission(
        client="c",
        keys=set(keys),
        stimulus_id="test",
        start=time(),
        index=index,
        priorities=compute_order(index),
        annotations_by_type={},
        global_annotations=None,
        user_priority=0,
        submitting_task=None,
        actors=None,
        fifo_timeout=0.0,
        code=(),
        span_metadata=None,
    )
    assert refusal(s, sub) is None
    rec = SubmissionRecord(scheduler="slim")
    seq_base = s.queued.reserve(len(index.reached))

    def off_loop():
        b = build(s, sub, rec, where="offload")
        return b, replay(s, b, seq_base)

    b, plan = await offload(off_loop)
    assert not b.existing and not plan.stock
    return b, plan


def _graph(prefix: str, n: int = 30) -> tuple[dict, list]:
    from dask._task_spec import convert_legacy_graph

    dsk = {(prefix, i): (inc, i) for i in range(n)}
    dsk[f"{prefix}-total"] = (sum, [(prefix, i) for i in range(n)])
    return convert_legacy_graph(dsk), [f"{prefix}-total"]


@pytest.mark.parametrize("change", ["same key", "same group", "generation", "threads"])
def test_commit_refuses_when_the_state_changed_during_the_build(change):
    """Whatever the build read must still hold at commit; else the caller
    ingests synchronously. Nothing is published by a refused commit."""
    from distributed import Scheduler

    from slimgraph.distributed import SlimScheduler

    async def body():
        async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
            dsk, keys = _graph("x")
            b, plan = await _built(s, dsk, keys)
            assert still_valid(s, b, plan)
            if change == "same key":
                s.new_task(("x", 3), None, "released")
            elif change == "same group":
                s.new_task(("x", 999), None, "released")  # another key of group "x"
            elif change == "generation":
                s.generation += 1
            else:
                s.total_nthreads += 4
            before = (set(s.tasks), set(s.task_groups), len(s.queued), s.transition_counter)
            assert not still_valid(s, b, plan)
            assert (set(s.tasks), set(s.task_groups), len(s.queued), s.transition_counter) == before
            assert Scheduler  # the class stock uses is untouched by staging

    run(body())


def test_unrelated_new_keys_during_the_build_do_not_refuse():
    from slimgraph.distributed import SlimScheduler

    async def body():
        async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
            dsk, keys = _graph("x")
            b, plan = await _built(s, dsk, keys)
            s.new_task("y-1", None, "released")
            assert still_valid(s, b, plan)
            assert commit(s, b, plan) is not None
            assert len(s.tasks) == len(dsk) + 1
            assert s.tasks["x-total"].state == "waiting"
            assert len(s.queued) == 30

    run(body())


@pytest.mark.parametrize("reseeded", [False, True], ids=["as seeded", "reseeded"])
@pytest.mark.parametrize("change", [None, "added", "forgotten", "re-added"])
def test_commit_adopts_the_build_s_task_dict_seeded_with_the_scheduler_s(change, reseeded):
    """A scheduler that holds a few tasks before a bigger staged build: the
    build's dict begins with a copy of the scheduler's entries, and the
    commit takes its table over (into the scheduler's own dict, which stays
    the same object) while the scheduler's entries are still the ones
    copied (or copied again by ``reseed`` after they changed), else it
    updates its own; either way the scheduler's dict ends with
    ``update``'s entries in ``update``'s order, and the build's own tasks
    are told from the copied ones."""
    from slimgraph.distributed import SlimScheduler

    async def body():
        async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
            for i in range(3):
                s.new_task(f"pre-{i}", None, "released")
            before = list(s.tasks.values())
            dsk, keys = _graph("x")
            b, plan = await _built(s, dsk, keys)
            made = b.tasks
            assert b.seed is not None and list(made)[:3] == ["pre-0", "pre-1", "pre-2"]
            assert len(made) == 3 + len(dsk) and made is not s.tasks
            assert not any(b.is_new(ts) for ts in before)
            assert all(b.is_new(ts) for ts in b.new) and len(b.new) == len(dsk)
            if change == "added":
                s.new_task("y-1", None, "released")
            elif change == "forgotten":
                s.transitions({"pre-1": "forgotten"}, stimulus_id="test")
            elif change == "re-added":  # the same keys, another order
                s.transitions({"pre-0": "forgotten"}, stimulus_id="test")
                s.new_task("pre-0", None, "released")
            expected = list(s.tasks.items()) + [(ts.key, ts) for ts in b.new]
            assert applier.seed_current(s, b) is (change is None)
            if reseeded:  # (what the pipeline does before the commit)
                if not applier.seed_current(s, b):
                    await asyncio.to_thread(applier.reseed, s, b)
                    assert b.tasks is not made and applier.seed_current(s, b)
                    made = b.tasks
                    assert not any(b.is_new(ts) for ts in s.tasks.values())
            own, had = s.tasks, list(s.tasks.values())
            how = add_tasks(s, b)
            adopted = change is None or reseeded
            assert how == ("seeded" if adopted else "updated")
            assert s.tasks is own
            # taken over: the build's dict object now holds the scheduler's old table
            assert (list(made.values()) == had) is adopted
            assert list(s.tasks.items()) == expected
            # what the build leaves to be freed is never the scheduler's dict
            assert not any(c is s.tasks for c in b.temporaries())

    run(body())


def test_a_key_of_the_graph_added_meanwhile_refuses_a_seeded_build():
    """Another submission adds one of the graph's keys during a seeded
    build: the commit sees it (the copied entries do not count)."""
    from slimgraph.distributed import SlimScheduler

    async def body():
        async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
            for i in range(3):
                s.new_task(f"pre-{i}", None, "released")
            dsk, keys = _graph("x")
            b, plan = await _built(s, dsk, keys)
            assert b.seed is not None
            assert applier.added_keys_of(s, b) is False
            s.new_task(keys[0], None, "released")
            assert applier.added_keys_of(s, b) is True
            assert not still_valid(s, b, plan)

    run(body())


def test_an_empty_scheduler_adopts_the_build_s_task_dict():
    """Nothing to merge with: the build's table becomes the scheduler's (no
    copy on the loop; the scheduler's dict stays the same object), and it is
    not freed with the build's temporaries."""
    from slimgraph.distributed import SlimScheduler

    async def body():
        async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
            dsk, keys = _graph("x")
            b, plan = await _built(s, dsk, keys)
            assert b.seed is None
            made, own = b.tasks, s.tasks
            assert commit(s, b, plan) is not None
            assert s.tasks is own and b.adopted and not made  # the table moved, not copied
            assert len(s.tasks) == 31 and set(s.tasks) == set(dsk)
            assert not any(c is s.tasks for c in b.temporaries())
            assert s.tasks["x-total"].state == "waiting"

    run(body())


def test_seeded_only_for_a_build_much_bigger_than_the_scheduler():
    from slimgraph.distributed import SlimScheduler

    async def body():
        async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
            for i in range(10):
                s.new_task(f"pre-{i}", None, "released")
            dsk, keys = _graph("x")  # 31 tasks
            b, plan = await _built(s, dsk, keys)
            assert b.seed is None and len(b.tasks) == 31  # 31 < 4 x 10
            own = s.tasks
            assert commit(s, b, plan) is not None
            assert s.tasks is own
            assert list(s.tasks)[:10] == [f"pre-{i}" for i in range(10)] and len(s.tasks) == 41

    run(body())


def test_a_big_graph_on_few_persisted_inputs_adopts_the_seeded_dict_as_stock(monkeypatch):
    """Through the whole pipeline, against stock: a graph many times bigger
    than what the scheduler holds (persisted inputs) is committed by
    adopting the build's seeded dict, and both schedulers' task dicts have the same
    keys in the same order, and the same state."""
    from slimgraph.ingest import apply as applier

    ways = []
    real = applier.add_tasks

    def spy(state, b):
        ways.append(real(state, b))
        return ways[-1]

    monkeypatch.setattr(applier, "add_tasks", spy)

    async def body():
        async with Pair(n_workers=1) as p:
            _drop_recorders(p)
            y = da.ones(20, chunks=10) + 1
            await staged_check(p, lambda c: c.persist(y))
            assert ways == ["adopted"]
            await wait_idle(p.stock)
            await wait_idle(p.slim)
            ways.clear()
            x = da.ones((60, 60), chunks=10)
            await staged_check(p, lambda c: c.compute((x + y.sum()).sum()))
            assert ways == ["seeded"]
            assert list(p.stock.tasks) == list(p.slim.tasks)

    run(body())


def test_ingestion_is_atomic_and_the_loop_keeps_running():
    """While a staged graph is built, the loop keeps serving (a ticker runs)
    and never sees part of the graph: the task count jumps from 0 to all."""
    from slimgraph.distributed import SlimScheduler
    from slimgraph.bench.payload import intercept, arguments
    from distributed import Client

    async def body():
        async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
            async with Client(s.address, asynchronous=True) as c:
                x = da.ones((300, 300), chunks=2).sum()  # ~40k tasks
                msgs, _ = intercept(c, lambda c: c.compute(x))
                seen: list = []
                done = asyncio.Event()

                async def ticker():
                    while not done.is_set():
                        seen.append(len(s.tasks))
                        await asyncio.sleep(0)

                t = asyncio.create_task(ticker())
                await s.update_graph(client=c.id, **arguments(msgs[0]))
                done.set()
                await t
                n = len(s.tasks)
                assert n > 20_000
                rec = get_history(s).latest()
                assert "commit" in {ph.name for ph in rec.phases}
                assert set(seen) <= {0, n}, sorted(set(seen))[:5]
                assert seen.count(0) > 10  # the loop ran during the build

    run(body())


def test_another_client_s_small_submit_does_not_wait_behind_a_big_build(monkeypatch):
    """A one-task submit of a second client is ingested (and computed) while
    a big submission's build holds one of slimgraph's threads
    (slimgraph.runtime.threads). In distributed's single offload thread its
    materialize waited behind the build: 1.5-3.8 s per submit while a
    200k-task array was staged."""
    import threading

    from distributed import Client, Worker

    from slimgraph.distributed import SlimScheduler
    from slimgraph.ingest import pipeline

    entered, go = threading.Event(), threading.Event()
    real_build = pipeline.build

    def held_build(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():  # (the staged one's)
            entered.set()
            go.wait(60)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(pipeline, "build", held_build)

    async def body():
        async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s, \
                Worker(s.address, nthreads=1):
            async with Client(s.address, asynchronous=True) as a, \
                    Client(s.address, asynchronous=True) as b:
                big = a.compute(da.ones((120, 120), chunks=2).sum())  # 3,600 blocks: staged
                while not entered.is_set():
                    await asyncio.sleep(0.01)
                try:
                    small = b.submit(add, 1, 2, key="small")
                    assert await asyncio.wait_for(small, 30) == 3
                    # ... while the big one was still being built
                    assert not big.done() and big.key not in s.tasks
                finally:
                    go.set()
                assert await big == 120 * 120
                recs = {r.client: r for r in get_history(s)}
                assert recs[a.id].ingestion == "staged"
                assert recs[b.id].ingestion.startswith("in place")

    # (the default sizes: the one-task graph is ingested on the loop)
    with switches.set(offload_min_tasks=2000, offload_min_bytes=262144):
        run(body())


def _tree_named(name: str, n: int = 40):
    xs = [delayed(inc)(i, dask_key_name=(name, i)) for i in range(n)]
    while len(xs) > 1:
        xs = [delayed(add)(*xs[i : i + 3]) for i in range(0, len(xs), 3)]
    return xs[0]


def test_staged_into_existing_task_groups():
    """Delayed keys share groups across submissions ("add"): the build reads
    the scheduler's group, the commit adds the counts and edges. (No
    workers: with workers, how far each side got with the first graph
    before the second arrives is a matter of timing.)"""

    async def body():
        async with Pair(n_workers=0) as p:
            _drop_recorders(p)
            await staged_check(p, lambda c: c.compute(_tree_named("a")))
            groups_before = set(p.slim.task_groups)
            await staged_check(p, lambda c: c.compute(_tree_named("b")))
            assert "add" in groups_before

    run(body())


def test_staged_into_a_group_made_inside_a_span():
    """A group first made under ``span("outer")`` keeps that span: tasks a
    later, unannotated submission adds to it are annotated with it."""
    from distributed import span

    async def body():
        async with Pair(n_workers=0) as p:
            _drop_recorders(p)

            def first(c):
                with span("outer"):
                    return c.compute(_tree_named("a"))

            await staged_check(p, first)  # span annotations: staged too
            a, b = await staged_check(p, lambda c: c.compute(_tree_named("b")))
            spans = {t["annotations"].get("span", {}).get("name") for t in b["tasks"].values()}
            assert ("outer",) in spans

    run(body())


def test_tasks_forgotten_while_calls_are_owed():
    """Calls still owed when the graph is released: before a task is
    forgotten everything owed is delivered (dask's graph layout looks the
    tasks up when it hears of them), and the plugins end as on stock."""

    async def body():
        async with Pair(n_workers=0) as p:  # Recorder + dashboard plugins listen
            make = lambda c: c.compute((da.ones((300, 300), chunks=3) + 1).sum())  # noqa: E731
            msgs, _ = p.capture(make)
            args = p.payload(msgs[0])
            for s, c in ((p.stock, p.c_stock), (p.slim, p.c_slim)):
                await s.update_graph(client=c.id, **args)
                s.client_releases_keys(keys=list(args["keys"]), client=c.id, stimulus_id="release")
            owed = p.slim.slim_deliveries
            assert not p.slim.tasks and not p.stock.tasks
            if owed:
                await owed.wait()
            assert p.rec_slim.calls == p.rec_stock.calls
            gl_stock, gl_slim = p.dash_stock[1], p.dash_slim[1]
            for attr in ("x", "y", "index", "visible_updates", "visible_edge_updates", "state_updates"):
                assert getattr(gl_stock, attr) == getattr(gl_slim, attr), attr

    with dask.config.set({"slimgraph.gc": "pause"}):
        run(body())


def test_owed_to_plugins_hear_of_later_transitions_behind_the_owed_calls_once():
    """While calls are owed, a plugin owed them hears of a later transition
    only behind them (distributed's transition runs with it withheld, its
    call queued); inside ``told_by_caller`` the caller queues the calls
    itself, so the transition is not queued a second time; the plugin table
    is whole again after each."""
    from dask._task_spec import Task
    from slimgraph import shim
    from slimgraph.distributed import SlimScheduler

    class Heard(SchedulerPlugin):
        name = "heard"

        def __init__(self):
            self.heard = []

        def transition(self, key, start, finish, *args, **kwargs):
            self.heard.append((key, start, finish))

    def owed_call(p):
        p.heard.append("owed")
        yield

    async def body():
        async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
            p = Heard()
            s.add_plugin(p)
            names = list(s.plugins)
            s.new_task("x", Task("x", inc, 1), "released")
            owed = applier.owing(s)
            owed.add(owed_call(p), {id(p): p})
            shim.transition(s, "x", "waiting", "test")
            assert p.heard == [] and len(owed.steps) == 2 and list(s.plugins) == names
            with owed.told_by_caller():
                shim.transition(s, "x", "released", "test")
            assert p.heard == [("x", "waiting", "released")] and len(owed.steps) == 2
            with pytest.raises(RuntimeError), owed.told_by_caller():
                raise RuntimeError
            shim.transition(s, "x", "waiting", "test")  # (queued again)
            assert len(owed.steps) == 3
            owed.flush()
            later = ("x", "released", "waiting")
            assert p.heard == [("x", "waiting", "released"), "owed", later, later]
            assert not owed and list(s.plugins) == names

    run(body())


def test_a_lone_task_forgotten_while_calls_are_owed_waits_behind_them():
    """A second client's one-task submission, released while a big graph's
    plugin calls are still owed (dask's Graph page open), is forgotten at
    once: nothing owed is delivered early (that blocked the loop for
    seconds), its calls wait behind the big graph's, and when they come
    the plugins find it as stock's did (a ghost in ``scheduler.tasks``,
    only while they run). Plugins and layout end as on stock; a task with
    edges forgotten meanwhile still has everything delivered first."""

    async def body():
        async with Pair(n_workers=0) as p:  # Recorder + dashboard plugins listen
            big = p.payload(p.capture(lambda c: c.compute((da.ones((300, 300), chunks=3) + 1).sum()))[0][0])
            lone = p.payload(p.capture(lambda c: c.submit(inc, 1, key="lone-1"))[0][0])
            for s, c in ((p.stock, p.c_stock), (p.slim, p.c_slim)):
                await s.update_graph(client=c.id, **big)
                await s.update_graph(client=c.id, **lone)
                s.client_releases_keys(keys=["lone-1"], client=c.id, stimulus_id="release-lone")
            owed = p.slim.slim_deliveries
            assert "lone-1" not in p.slim.tasks and "lone-1" not in p.stock.tasks
            assert owed and "lone-1" in owed.ghosts  # forgotten without delivering everything owed
            n = len(p.rec_slim.calls)
            assert n < len(p.rec_stock.calls)
            await owed.wait()
            assert "lone-1" not in p.slim.tasks and not owed.ghosts
            assert p.rec_slim.calls == p.rec_stock.calls
            gl_stock, gl_slim = p.dash_stock[1], p.dash_slim[1]
            assert layout(gl_stock) == layout(gl_slim)
            for attr in ("visible_updates", "visible_edge_updates", "state_updates"):
                assert getattr(gl_stock, attr) == getattr(gl_slim, attr), attr

    with dask.config.set({"slimgraph.gc": "pause"}):
        run(body())


@pytest.mark.parametrize("workload", ["array-reduction", "delayed-tree", "dataframe-groupby", "array-overlap"])
def test_containers_iterate_as_stocks_also_once_thawed(workload):
    """distributed makes choices while iterating dependencies, dependents,
    waiting_on and waiters: each slim container iterates in the order of
    stock's set, and so does the set it thaws into (where the hashes of two
    items collide, a set rebuilt from another set's order can iterate
    differently: such containers are kept as stock's own sets)."""

    async def body():
        async with Pair(n_workers=0, listen=False) as p:
            await staged_check(p, WORKLOADS[workload])
            n = 0
            for key, a in p.stock.tasks.items():
                b = p.slim.tasks[key]
                for attr in ("dependencies", "dependents", "waiting_on", "waiters"):
                    ka = [t.key for t in (getattr(a, attr) or ())]
                    cb = getattr(b, attr) or ()
                    assert [t.key for t in cb] == ka, (key, attr)
                    assert [t.key for t in set(list(cb))] == [t.key for t in set(list(getattr(a, attr) or ()))]
                    n += len(ka) > 1
            assert n  # containers of several items were compared

    run(body())


@pytest.mark.parametrize("n_workers", [0, 2])
def test_submissions_during_the_build_start_a_new_generation(n_workers, monkeypatch):
    """Another client's submission commits while a big graph is staged
    (after its build, before its commit), and starts a new generation
    (its ``fifo_timeout`` ran out).
    The staged commit is not refused: the build's priorities move to the
    new generation in a thread (slimgraph.ingest.apply.rehead), and the
    state equals stock's when stock ingests the other submission first:
    priorities, queue order, transition log and worker messages."""
    from distributed import Future, wait

    import slimgraph.ingest.pipeline as pipeline

    async def body():
        async with Pair(n_workers=n_workers) as p:
            _drop_recorders(p)
            # the captured futures stay alive (dropping them would release the keys on stock)
            first, kept1 = p.capture(lambda c: c.compute(da.ones((20, 20), chunks=10).sum()))
            big, kept2 = p.capture(lambda c: c.compute((da.ones((60, 60), chunks=10) + 1).sum(axis=0)))
            # no worker has the resource: it waits on both sides, whatever the timing
            other, kept3 = p.capture(
                lambda c: c.submit(inc, 41, key="other-1", fifo_timeout="10ms", resources={"R": 1})
            )
            (first,), (big,), (other,) = first, big, other
            assert p.payload(big)["fifo_timeout"] != p.payload(other)["fifo_timeout"]

            async def ingest(s, c, msg):
                args = p.payload(msg)
                await s.update_graph(client=c.id, **args)
                futs = [Future(k, c) for k in args["keys"]]
                p.futures.extend(futs)
                return futs

            async def start(s, c):
                futs = await ingest(s, c, first)
                if n_workers:
                    await wait(futs)
                await asyncio.sleep(0.1)  # the first generation's fifo_timeout runs out
                return s.transition_counter

            def view(s):
                return (
                    {k: ts.priority for k, ts in s.tasks.items()},
                    _queue(s),
                    snapshot(s, p.client_names),
                    _log(s)[-(s.transition_counter - counter) :],
                    s.generation,
                )

            # stock: the other client's submission, then the big graph
            counter = await start(p.stock, p.c_stock)
            await ingest(p.stock, p.c_stock, other)
            await ingest(p.stock, p.c_stock, big)
            stock = view(p.stock)

            # slim: the big graph waits between its build and its commit
            # until the other submission has committed on the loop
            counter = await start(p.slim, p.c_slim)
            started, go = asyncio.Event(), asyncio.Event()
            real_shadow = pipeline.Pipeline._shadow

            async def slow_shadow(self, b, plan):
                if len(b.new) > 50:
                    started.set()
                    await go.wait()
                return await real_shadow(self, b, plan)

            monkeypatch.setattr(pipeline.Pipeline, "_shadow", slow_shadow)
            big_task = asyncio.create_task(ingest(p.slim, p.c_slim, big))
            await started.wait()
            gen_before = p.slim.generation
            await ingest(p.slim, p.c_slim, other)
            assert p.slim.generation == gen_before + 1  # it started a new generation
            go.set()
            await big_task
            slim = view(p.slim)

            rec = get_history(p.slim).latest()
            assert rec.to_dict()["tasks"] > 50
            assert rec.ingestion == "staged", rec.ingestion
            assert [ph.name for ph in rec.phases].count("commit") == 1
            assert slim[0] == stock[0]  # priorities
            assert slim[1] == stock[1]  # queue order
            assert_same(stock[2], slim[2])
            assert slim[3] == stock[3]  # transition log
            assert slim[4] == stock[4]  # generation
            assert p.reports["stock"] == p.reports["slim"]
            del kept1, kept2, kept3

    run(body())


class Keeper(SchedulerPlugin):
    """A plugin that keeps the ``tasks`` list and ``priority`` dict its
    ``update_graph`` hook was given, and listens to every transition."""

    def __init__(self):
        self.kept = []
        self.transitions = 0

    def update_graph(self, scheduler, *, tasks, priority, **kwargs):
        self.kept.append((tasks, priority, len(tasks), len(priority)))

    def transition(self, key, start, finish, *args, **kwargs):
        self.transitions += 1


@pytest.mark.parametrize("kept", [False, True], ids=["dropped", "kept-by-a-plugin"])
def test_the_owed_calls_free_the_log_entries_and_hook_arguments_off_the_loop(kept, monkeypatch):
    """With plugins listening, a staged ingestion keeps a log entry for each
    of its transitions and builds the hooks' arguments (a million of each
    at 1M tasks: dropping them on the loop was a block of 0.34 s). Once the
    owed calls are made, those containers are freed in steps in a worker
    thread; containers a plugin kept are never emptied."""
    import threading

    from differential import dashboard_plugins

    from slimgraph.runtime import disposal

    drained = []
    real_drain = disposal.drain

    def first(c):
        if type(c) is list and c:
            return c[0]
        if type(c) is dict and c:
            return next(iter(c.values()))
        return None

    def watched(containers):
        drained.append((threading.current_thread().name,
                        [(type(c).__name__, len(c), first(c)) for c in containers]))
        return real_drain(containers)

    monkeypatch.setattr(disposal, "drain", watched)

    async def body():
        async with Pair(n_workers=0, listen=False) as p:
            keeper, calls = Keeper(), Calls()
            p.slim.add_plugin(keeper if kept else calls)
            dashboard_plugins(p.slim)  # task stream, graph layout
            make = lambda c: c.compute((da.ones((240, 240), chunks=2) + 1).sum(axis=0))  # noqa: E731
            args = p.payload(p.capture(make)[0][0])
            counter = p.slim.transition_counter
            await p.slim.update_graph(client=p.c_slim.id, **args)
            assert "commit" in {ph.name for ph in get_history(p.slim).latest().phases}
            await p.slim.slim_deliveries.wait()
            made = p.slim.transition_counter - counter
            n = len(p.slim.tasks)
            assert n > 14_400

            def entries():  # (key, start, finish, recommendations), one per transition
                return [ln for _, cs in drained for name, ln, f in cs
                        if name == "list" and type(f) is tuple and len(f) == 4 and isinstance(f[1], str)]

            for _ in range(300):  # the drains run in the offload thread
                if entries():
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            loop_thread = threading.current_thread().name
            seen = [c for thread, cs in drained for c in cs]
            assert seen and all(thread != loop_thread for thread, _ in drained)
            assert entries() and max(entries()) >= n, seen
            # the hooks' arguments: key -> priority (a tuple), the keys in priority order
            priorities = [ln for name, ln, f in seen if name == "dict" and type(f) is tuple]
            if kept:
                # what the plugin kept is whole, and was not drained
                ((tasks, priority, n_tasks, n_priority),) = keeper.kept
                assert len(tasks) == n_tasks == n and len(priority) == n_priority == n
                assert keeper.transitions == made
                assert priorities == []
            else:
                assert priorities == [n], seen
                assert calls.calls[0] == ("update_graph", n)
                assert sum(1 for c in calls.calls if c[0] == "transition") == made

    run(body())
