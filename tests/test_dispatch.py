"""Bulk dispatch (slimgraph.ingest.dispatch): a staged commit sends ready
tasks to workers with distributed's own choices, published in bulk.

Differential: the same captured submission goes to a stock Scheduler, a
slim one (bulk dispatch) and a slim one with ``slimgraph-switches.bulk-dispatch:
false`` (distributed's transitions one by one in the commit). The three
have the *same* workers: WorkerStates with the same addresses and server
ids (so sets of workers iterate alike in all three) added to the
in-process schedulers, so that which worker takes which task, ties
included, is compared exactly: each task's ``processing_on``, every
worker's ``processing`` in iteration order, the ``compute-task`` messages
sent to each worker in order, ``idle``/``idle_task_count``/``saturated``
in iteration order, occupancy counts, work stealing's state, the
transition log entry by entry and the whole task state
(``differential.snapshot``). Then real workers compute a graph to the end.
"""
from __future__ import annotations

import asyncio
import contextlib
import operator

import dask
import dask.array as da
import pytest
from dask import delayed
from distributed import Client, Scheduler
from distributed.scheduler import SchedulerState

from differential import Pair, assert_same, snapshot, wait_idle
from slimgraph import switches, workloads
from slimgraph.bench.payload import arguments, intercept
from slimgraph.bench.statemachine import add_worker_state
from slimgraph.distributed import SlimScheduler
from slimgraph.ingest import dispatch
from slimgraph.instrument.recorder import get_history


@pytest.fixture(autouse=True)
def stage_small_graphs():
    with switches.set(offload_min_tasks=0, offload_min_bytes=0):
        yield


def inc(x):
    return x + 1


class Trio:
    """stock, slim (bulk) and slim one-by-one, with the same workers."""

    KINDS = ("stock", "bulk", "one-by-one")

    def __init__(self, nthreads: tuple = ()):
        self.nthreads = nthreads

    async def __aenter__(self) -> "Trio":
        self._stack = contextlib.AsyncExitStack()
        st = self._stack
        self.s = {
            "stock": await st.enter_async_context(Scheduler(dashboard_address=":0", host="127.0.0.1")),
            "bulk": await st.enter_async_context(SlimScheduler(dashboard_address=":0", host="127.0.0.1")),
            "one-by-one": await st.enter_async_context(SlimScheduler(dashboard_address=":0", host="127.0.0.1")),
        }
        self.client = await st.enter_async_context(Client(self.s["stock"].address, asynchronous=True))
        self.sent = {k: [] for k in self.KINDS}
        for kind, s in self.s.items():
            for i, n in enumerate(self.nthreads):
                add_worker_state(s, i, n)
            orig = s.send_all
            log = self.sent[kind]

            def send_all(client_msgs, worker_msgs, orig=orig, log=log):
                log.append({w: list(m) for w, m in worker_msgs.items()})
                return orig(client_msgs, worker_msgs)

            s.send_all = send_all
        return self

    async def __aexit__(self, *exc) -> None:
        await self._stack.__aexit__(*exc)

    async def submit(self, make) -> dict:
        """Ingest ``make``'s submission on all three; views of each."""
        msgs, _ = intercept(self.client, make)
        assert msgs
        views = {}
        for kind, s in self.s.items():
            counter = s.transition_counter
            for k in self.sent:
                self.sent[k].clear()
            with switches.set(bulk_dispatch=kind != "one-by-one"):
                for msg in msgs:
                    await s.update_graph(client="client", **arguments(msg))
            made = s.transition_counter - counter
            views[kind] = view(s, self.sent[kind], made)
        return views


def _msg(s, m: dict, rank: dict) -> dict:
    out = dict(m)
    if "span_id" in out:  # a random id per scheduler: the span's name
        out["span_id"] = s.extensions["spans"].spans[m["span_id"]].name
    out["run_id"] = rank[m["run_id"]]  # a process-wide counter: compared by order
    assert m["stimulus_id"].startswith("compute-task-")
    out.pop("stimulus_id")  # a time stamp
    spec = out.pop("run_spec")
    out["run_spec"] = repr(spec.data)
    return out


def _sent(s, batches: list, rank: dict) -> dict:
    """Messages sent to each worker, in order (however ``send_all`` calls
    were split: the slim pipeline sends the commit's at once)."""
    out: dict = {}
    for batch in batches:
        for w, ms in batch.items():
            out.setdefault(w, []).extend(_msg(s, m, rank) for m in ms)
    return out


def view(s, sent: list, made: int) -> dict:
    """Everything the dispatch decides, in iteration order."""
    rank = {r: i for i, r in enumerate(sorted(ts.run_id for ts in s.tasks.values() if ts.processing_on))}
    stealing = s.extensions["stealing"]
    log = list(s.transition_log)[-made:] if made else []
    sids = {t.stimulus_id for t in log}
    assert len(sids) <= 1 and all(x.startswith("update-graph-") for x in sids)  # the submission's own
    return {
        "snapshot": snapshot(s, {"client": "client"}),
        "processing_on": {k: ts.processing_on.address for k, ts in s.tasks.items() if ts.processing_on},
        "run_id": {k: rank[ts.run_id] for k, ts in s.tasks.items() if ts.processing_on},
        "processing": {a: [ts.key for ts in ws.processing] for a, ws in s.workers.items()},
        "task_prefix_count": {a: dict(ws.task_prefix_count) for a, ws in s.workers.items()},
        "occupancy": {a: ws.occupancy for a, ws in s.workers.items()},
        "sent": _sent(s, sent, rank),
        "idle": list(s.idle),
        "idle_task_count": [ws.address for ws in s.idle_task_count],
        "saturated": [ws.address for ws in s.saturated],
        "unrunnable": [ts.key for ts in s.unrunnable],
        "n_tasks": s.n_tasks,
        "stealable": {a: [[ts.key for ts in lvl] for lvl in levels] for a, levels in stealing.stealable.items()},
        "key_stealable": [(ts.key, v) for ts, v in stealing.key_stealable.items()],
        "unknown_durations": {n: [ts.key for ts in v] for n, v in stealing.unknown_durations.items()},
        "log": [(t.key, t.start, t.finish, dict(t.recommendations)) for t in log],
    }


def assert_all_same(views: dict, bulk_expected: bool = True) -> None:
    stock = views["stock"]
    for kind in ("bulk", "one-by-one"):
        v = views[kind]
        assert_same(stock["snapshot"], v["snapshot"], ignore=("clients",))  # (the capturing client is on stock)
        for name in stock:
            if name != "snapshot":
                assert stock[name] == v[name], (kind, name)


def _delayed_tree(n: int = 300):
    return workloads.delayed(n)


def _both(*a):
    return a


def _tree_and_array():
    # non-root-ish leaves (the delayed tree's) and root-ish queued ones (the
    # array's), in a fixed order (deterministic keys)
    return delayed(_both, pure=True)(workloads.delayed(200), (da.ones((40, 40), chunks=5) + 1).sum())


def _ready_then_queued():
    # a user priority puts the tree's few ready leaves (long chains: not
    # root-ish) before the array's queued roots: idle workers take some of
    # those after the leaves went out in bulk
    with dask.annotate(priority=10):
        tree = workloads.delayed(200, chain=30)
    return [tree, (da.ones((40, 40), chunks=5) + 1).sum()]


CASES = {
    "no workers": ((), _delayed_tree),
    "one worker": ((1,), _delayed_tree),
    "two workers": ((1, 1), _delayed_tree),
    "uneven threads": ((1, 4, 2), _delayed_tree),
    "many workers": ((1,) * 21, _delayed_tree),  # distributed's other branch (>= 20 workers)
    "queued and ready": ((1, 2), _tree_and_array),
    "ready then queued": ((4, 4), _ready_then_queued),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bulk_dispatch_makes_stocks_choices(case):
    nthreads, make = CASES[case]

    async def body():
        async with Trio(nthreads) as t:
            views = await t.submit(lambda c: c.compute(make()))
            assert_all_same(views)
            bulk = t.s["bulk"]
            if case == "ready then queued":  # some queued ones went to idle workers
                keys = views["stock"]["processing_on"]
                assert any(isinstance(k, tuple) for k in keys) and any(isinstance(k, str) for k in keys)
            assert bulk.slim_dispatched > 0  # the bulk path was taken
            assert t.s["one-by-one"].slim_dispatched == 0
            assert get_history(bulk).latest().ingestion == "staged"
            if nthreads:
                assert views["stock"]["processing_on"]
                assert any(views["stock"]["sent"].values())
            else:
                assert views["stock"]["unrunnable"]

    asyncio.run(body())


def test_second_submission_onto_busy_workers():
    """Workers already hold tasks of an earlier graph (occupancy, prefix
    counts, saturation): the second graph's choices are still stock's."""

    async def body():
        async with Trio((1, 2, 1)) as t:
            assert_all_same(await t.submit(lambda c: c.compute(workloads.delayed(150))))
            assert_all_same(await t.submit(lambda c: c.compute(workloads.delayed(400, chain=2))))
            assert t.s["bulk"].slim_dispatched > 0

    asyncio.run(body())


def test_workers_changed_during_the_build_fall_back_to_one_by_one(monkeypatch):
    """The shadow started from a view that no longer holds at commit (here:
    one more task counted since): distributed's transitions one by one."""
    orig = dispatch.shadow

    def stale(state, b, plan, view):
        if view is not None:  # what the state looked like before a task was dispatched elsewhere
            view = view[:5] + (view[5] - 1,) + view[6:]
        return orig(state, b, plan, view)

    monkeypatch.setattr(dispatch, "shadow", stale)

    async def body():
        async with Trio((1, 1)) as t:
            checks = []
            orig_holds = dispatch.Dispatch.holds

            def holds(self, state):
                checks.append(orig_holds(self, state))
                return checks[-1]

            monkeypatch.setattr(dispatch.Dispatch, "holds", holds)
            assert_all_same(await t.submit(lambda c: c.compute(_delayed_tree())))
            assert checks == [False]
            assert t.s["bulk"].slim_dispatched == 0

    asyncio.run(body())


def test_a_queued_task_elsewhere_than_the_shadow_said_falls_back_from_there(monkeypatch):
    """If distributed sends a queued root-ish task to another worker than
    the shadow predicted, the rest goes one by one: what was published in
    bulk before it is stock's, and so is the end state."""
    orig = dispatch.shadow
    seen = {}

    def wrong(state, b, plan, view):
        d = orig(state, b, plan, view)
        if d is not None:
            for i, (kind, qi, w) in enumerate(d.steps):
                if kind == 1 and i > 0 and d.steps[i - 1][0] == 0:  # after some published in bulk
                    d.steps[i] = (kind, qi, (w + 1) % len(d.workers))
                    seen["step"] = i
                    break
        return d

    monkeypatch.setattr(dispatch, "shadow", wrong)

    async def body():
        async with Trio((4, 4)) as t:
            views = await t.submit(lambda c: c.compute(_ready_then_queued()))
            assert_all_same(views)
            assert "step" in seen
            assert 0 < t.s["bulk"].slim_dispatched < len(views["stock"]["processing_on"])

    asyncio.run(body())


def test_a_plugin_listening_to_transitions_hears_stocks_calls():
    """A plugin that listens to transitions is told of the bulk-dispatched
    ones after the commit (slimgraph.ingest.deliveries), as stock tells it:
    the same calls, in the same order."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class Starts(SchedulerPlugin):
        def __init__(self):
            self.calls = []

        def transition(self, key, start, finish, *args, **kwargs):
            if finish == "processing":
                self.calls.append(key)

    async def body():
        async with Trio((1, 1)) as t:
            plugins = {k: Starts() for k in t.KINDS}
            for k, s in t.s.items():
                s.add_plugin(plugins[k])
            assert_all_same(await t.submit(lambda c: c.compute(_delayed_tree())))
            assert plugins["stock"].calls
            assert plugins["bulk"].calls == plugins["stock"].calls == plugins["one-by-one"].calls
            assert t.s["bulk"].slim_dispatched > 0

    asyncio.run(body())


def test_setting_off():
    async def body():
        with switches.set(bulk_dispatch=False):
            async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
                assert dispatch.take_view(s) is None

    asyncio.run(body())


def _without_future_tokens(views: dict) -> dict:
    """The views without the run_specs' tokens: a run_spec holding a
    ``Future`` (a TaskRef to a key already there) tokenizes with the client
    it was unpickled under, which differs between schedulers in one
    process; what the run_spec holds is still compared (its type and
    dependencies in the snapshot, ``repr(spec.data)`` in the messages)."""
    out = {}
    for kind, v in views.items():
        v = dict(v)
        snap = dict(v["snapshot"])
        snap["tasks"] = {k: {a: b for a, b in t.items() if a != "run_spec_token"} for k, t in snap["tasks"].items()}
        v["snapshot"] = snap
        out[kind] = v
    return out


def _held_keys(t, where, n: int = 12) -> list:
    """Keys already in memory on all three (as ``scatter`` or ``persist``
    leave them): key i on worker ``where(i)``, sizes that differ (work
    stealing files a task by its inputs' size)."""
    keys = [f"held-{i}" for i in range(n)]
    for s in t.s.values():
        addrs = list(s.workers)
        s.update_data(
            who_has={k: [addrs[w] for w in where(i)] for i, k in enumerate(keys)},
            nbytes={k: 10 ** (3 + 3 * (i % 3)) for i, k in enumerate(keys)},
            client="client",
        )
    return keys


@pytest.mark.parametrize(
    "where, bulk",
    [
        (lambda i: [i % 2], True),  # each input on one worker
        (lambda i: [i % 3], True),
        (lambda i: [0, 1] if i == 5 else [i % 2], False),  # one input on two workers
    ],
    ids=["two-workers", "three-workers", "one-replicated"],
)
def test_ready_tasks_on_data_held_by_one_worker(where, bulk):
    """Ready tasks whose inputs are already in memory (persisted or
    scattered data): each goes where its inputs are, as distributed's
    ``decide_worker`` sends it when a single worker holds them, in bulk
    with the same messages (``who_has``, ``nbytes``), processing order,
    counts and work-stealing levels as stock. An input held by two
    workers makes distributed compare them: that commit goes one by one."""
    from distributed import Future

    async def body():
        async with Trio((1, 2, 1)) as t:
            keys = _held_keys(t, where)

            def make(c):
                leaves = [delayed(inc)(Future(k, c), dask_key_name=("on-held", i)) for i, k in enumerate(keys)]
                pairs = [delayed(operator.add)(*leaves[i : i + 2]) for i in range(0, len(leaves), 2)]
                return c.compute(delayed(sum)(pairs))

            views = await t.submit(make)
            assert_all_same(_without_future_tokens(views))
            placed = views["stock"]["processing_on"]
            assert len({placed[("on-held", i)] for i in range(len(keys))}) > 1
            assert all(views["stock"]["stealable"].values())
            assert (t.s["bulk"].slim_dispatched > 0) is bulk
            assert get_history(t.s["bulk"]).latest().ingestion == "staged"

    asyncio.run(body())


def test_held_input_moved_after_the_shadow_goes_one_by_one(monkeypatch):
    """An input the shadow read on one worker is on another by the commit:
    the shadow does not hold, and distributed's transitions decide."""
    from distributed import Future

    import slimgraph.ingest.pipeline as pipeline

    def move(s):
        # as if one worker had lost it and the other had it now
        dts = s.tasks["held-0"]
        old = next(iter(dts.who_has))
        new = next(ws for ws in s.workers.values() if ws is not old)
        s.remove_replica(dts, old)
        s.add_replica(dts, new)
        return new.address

    real = pipeline.Pipeline._rehead_while_clock_moves
    moved = []

    async def after_the_shadow(self, b, plan):  # on the loop, just before the commit
        if self.target is bulk and plan.dispatch is not None:
            moved.append(move(self.target))
        return await real(self, b, plan)

    async def body():
        nonlocal bulk
        async with Trio((1, 1)) as t:
            keys = _held_keys(t, lambda i: [i % 2], n=6)
            bulk = t.s["bulk"]
            for s in (t.s["stock"], t.s["one-by-one"]):  # where the bulk side's will be at its commit
                move(s)
            monkeypatch.setattr(pipeline.Pipeline, "_rehead_while_clock_moves", after_the_shadow)

            def make(c):
                return c.compute([delayed(inc)(Future(k, c), dask_key_name=("on-held", i)) for i, k in enumerate(keys)])

            views = await t.submit(make)
            assert moved  # the bulk side's input moved between its shadow and its commit
            assert_all_same(_without_future_tokens(views))
            assert views["stock"]["processing_on"][("on-held", 0)] == moved[0]
            assert bulk.slim_dispatched == 0

    bulk = None
    asyncio.run(body())


@pytest.mark.parametrize("listen", [False, True], ids=["quiet", "plugins-listening"])
def test_real_workers_compute_the_bulk_dispatched_graph(listen):
    """Real workers: the dispatched tasks run, results equal stock's; with
    plugins listening (a recorder of every call, dask's dashboard plugins)
    they hear stock's calls in stock's order."""

    async def body():
        async with Pair(n_workers=2, listen=listen) as p:
            make = lambda c: c.compute(workloads.delayed(300))  # noqa: E731
            a, b = await p.submit_both(make)
            assert_same(a, b)
            assert p.slim.slim_dispatched > 0
            if listen:
                n = p.calls_at["stock"]
                assert p.rec_stock.calls[:n] == p.rec_slim.calls[:n]
            fa, fb = p.futures_of("stock"), p.futures_of("slim")
            ra = await p.c_stock.gather(fa)
            rb = await p.c_slim.gather(fb)
            assert ra == rb
            await wait_idle(p.slim)
            assert all(ts.state == "memory" for ts in p.slim.tasks.values() if ts.who_wants)

    asyncio.run(body())



def test_shadow_made_again_when_the_workers_changed_while_it_ran(monkeypatch):
    """A busy cluster changes the workers while the shadow runs (here: its
    first view is one task behind): the pipeline takes the view again and
    runs the shadow again, and the commit publishes that one in bulk."""
    orig = dispatch.shadow
    calls = []

    def first_stale(state, b, plan, view):
        calls.append(view is not None)
        if view is not None and len(calls) == 1:
            view = view[:5] + (view[5] - 1,) + view[6:]
        return orig(state, b, plan, view)

    monkeypatch.setattr(dispatch, "shadow", first_stale)

    async def body():
        async with Trio((1, 1)) as t:
            assert_all_same(await t.submit(lambda c: c.compute(_delayed_tree())))
            assert calls == [True, True]  # bulk: twice (one-by-one: no shadow at all)
            assert t.s["bulk"].slim_dispatched > 0

    asyncio.run(body())


@pytest.mark.parametrize(
    "held, moved, bulk",
    [(True, 1, True), (False, 1, False), (False, 2, True)],
    ids=["inputs-held", "no-inputs-moved-by-1", "no-inputs-moved-by-2"],
)
def test_other_clients_tasks_sent_between_shadow_and_commit(monkeypatch, held, moved, bulk):
    """Other clients' tasks sent (and done) between the shadow and the
    commit move the scheduler's ``n_tasks``, which distributed's round-robin
    reads modulo the number of workers it picks from. Tasks on inputs held
    by one worker never read it: the commit goes in bulk, adding its own
    count. A tree's first leaves on two idle workers do: the commit goes in
    bulk if ``n_tasks`` moved by a multiple of two, else one by one. All
    end as stock's, which saw the other tasks first."""
    from distributed import Future

    import slimgraph.ingest.pipeline as pipeline

    real = pipeline.Pipeline._rehead_while_clock_moves
    moduli = []

    async def after_the_shadow(self, b, plan):  # on the loop, just before the commit
        if self.target is slim and plan.dispatch is not None:
            self.target.n_tasks += moved
            moduli.append(plan.dispatch.n_tasks_moduli)
        return await real(self, b, plan)

    async def body():
        nonlocal slim
        async with Trio((1, 1)) as t:
            keys = _held_keys(t, lambda i: [i % 2], n=6) if held else []
            slim = t.s["bulk"]
            for s in (t.s["stock"], t.s["one-by-one"]):  # where the bulk side's will be at its commit
                s.n_tasks += moved
            monkeypatch.setattr(pipeline.Pipeline, "_rehead_while_clock_moves", after_the_shadow)

            def make(c):
                if held:
                    return c.compute([delayed(inc)(Future(k, c), dask_key_name=("on-held", i)) for i, k in enumerate(keys)])
                return c.compute(_delayed_tree(60))

            views = await t.submit(make)
            assert moduli == [frozenset() if held else frozenset({2})]  # what the shadow's choices depend on
            assert_all_same(_without_future_tokens(views) if held else views)
            assert (slim.slim_dispatched > 0) is bulk

    slim = None
    asyncio.run(body())


@pytest.mark.parametrize("sliced", [False, True], ids=["at-the-commit", "in-slices-after-it"])
def test_build_moved_to_a_new_generation_after_its_shadow(monkeypatch, sliced):
    """Another client's submission starts a new generation between the
    shadow and the commit (as the second client of a real-use run does):
    the build's priorities move to it (``apply.rehead``), and the
    ``compute-task`` messages the shadow already made carry the new
    priorities when they are published in bulk, at the commit or by the
    slices after it (which take the shadow's messages), as stock's carry
    the generation it was at."""
    from time import time

    from distributed import Future

    import slimgraph.ingest.apply as applier
    import slimgraph.ingest.pipeline as pipeline
    from slimgraph import shim

    real = pipeline.Pipeline._rehead_while_clock_moves
    real_rehead = applier.rehead
    moved_to = []

    def later(s):
        # the other submission's generation, its clock in the future: the
        # graph's own submission, right after, stays in it (stock's rule)
        gen = shim.generation_clock(s)[0] + 5
        shim.set_generation_clock(s, gen, time() + 600)
        return gen

    async def after_the_shadow(self, b, plan):  # on the loop, just before the commit
        if self.target is bulk and plan.dispatch is not None:
            moved_to.append(later(self.target))
        return await real(self, b, plan)

    reheads = []

    def rehead(b, plan, gen):
        reheads.append((gen, plan.dispatch is not None))
        return real_rehead(b, plan, gen)

    async def body():
        nonlocal bulk
        async with (SlicedTrio if sliced else Trio)((1, 1)) as t:
            keys = _held_keys(t, lambda i: [i % 2], n=60 if sliced else 8)
            bulk = t.s["bulk"]
            for s in (t.s["stock"], t.s["one-by-one"]):
                later(s)
            monkeypatch.setattr(pipeline.Pipeline, "_rehead_while_clock_moves", after_the_shadow)
            monkeypatch.setattr(applier, "rehead", rehead)

            def make(c):
                return c.compute([delayed(inc)(Future(k, c), dask_key_name=("on-held", i)) for i, k in enumerate(keys)])

            views = await t.submit(make)
            assert moved_to and reheads == [(moved_to[0], True)]  # moved once, after the shadow
            views = _without_future_tokens(views)
            if sliced:
                _assert_same_but_log_order(views)
                tails = bulk.slim_tails
                assert tails is not None and tails.slices > 1 and tails.sent > 20
            else:
                assert_all_same(views)
            assert bulk.slim_dispatched > 0  # published in bulk, from the shadow's messages
            prios = [m["priority"] for ms in views["bulk"]["sent"].values() for m in ms]
            assert prios and all(p[1] == moved_to[0] for p in prios)

    bulk = None
    asyncio.run(body())


def test_a_big_commits_messages_reach_each_worker_in_slices_in_order(monkeypatch):
    """Real workers; ``slimgraph-switches.pace-messages: 3``. The commit's
    ``compute-task`` messages reach each worker's stream three at a time
    (distributed serializes each batch on the loop): exactly the messages
    the commit made for that worker, in its order; a message sent to that
    worker while some are still queued (here a ``free-keys``) comes right
    after them; the graph computes to stock's result."""
    from distributed import Future
    from distributed.batched import BatchedSend

    from slimgraph.ingest import pacing

    handed: list = []  # (stream, [(op, key), ...]) per hand-over
    real_send = BatchedSend.send

    def send(self, *msgs):
        handed.append((self, [(m.get("op"), m.get("key")) for m in msgs]))
        return real_send(self, *msgs)

    committed: list = []
    real_send_all = pacing.send_all

    def send_all(state, client_msgs, worker_msgs):
        committed.append({w: [(m.get("op"), m.get("key")) for m in ms] for w, ms in worker_msgs.items()})
        return real_send_all(state, client_msgs, worker_msgs)

    monkeypatch.setattr(BatchedSend, "send", send)
    monkeypatch.setattr(pacing, "send_all", send_all)

    async def body():
        async with Pair(n_workers=2, listen=False) as p:
            args = p.payload(p.capture(lambda c: c.compute(workloads.delayed(300)))[0][0])
            s = p.slim
            address_of = {id(s.stream_comms[a]): a for a in s.workers}
            slices = pacing.Pacer.slices_handed
            # the futures made before the submissions, as Client.compute
            # does: a result reported before its future exists is dropped
            # by the client, and the future would wait for ever
            key = next(iter(args["keys"]))
            f_slim, f_stock = Future(key, p.c_slim), Future(key, p.c_stock)
            await s.update_graph(client=p.c_slim.id, **args)
            (made,) = committed
            paced = [a for a in s.workers if s.stream_comms[a].pacer is not None]
            assert paced, "nothing left to pace after the commit"
            # the pacers are jobs of the scheduler's one executor
            assert any(getattr(j, "__qualname__", "") == "Pacer._steps" for j in s.slim_work.background)
            marked = paced[0]
            s.stream_comms[marked].send({"op": "free-keys", "keys": ["slimgraph-marker"], "stimulus_id": "marker"})
            while any(b.pacer is not None for b in s.stream_comms.values()):
                await asyncio.sleep(0.005)
            assert pacing.Pacer.slices_handed - slices > 10
            seen: dict = {}
            for bs, ms in handed:
                a = address_of.get(id(bs))
                if a is not None:
                    seen.setdefault(a, []).append(ms)
            for a, ms in made.items():
                assert len(ms) > 3 and all(op == "compute-task" for op, _ in ms)
                got = [m for batch in seen[a] for m in batch]
                assert got[: len(ms)] == ms
                assert max(len(b) for b in seen[a][: len(ms) // 3]) <= 3
            assert [m for b in seen[marked] for m in b][len(made[marked])] == ("free-keys", None)
            await p.stock.update_graph(client=p.c_stock.id, **args)
            assert await f_slim.result() == await f_stock.result()

    with switches.set(pace_messages=3):
        asyncio.run(body())


# ---------------------------------------------------------------------------
# ready tasks sent in slices after the commit (slimgraph.ingest.tail)
@contextlib.contextmanager
def _tiny_slices():
    """Every staged commit leaves its ready tasks to a tail of many small
    slices (runs of 20 tasks, slices of about 0.1 ms)."""
    from slimgraph.ingest import tail

    saved = dispatch.RUN_MAX, tail.FIRST_BATCH
    dispatch.RUN_MAX = tail.FIRST_BATCH = 20
    try:
        with switches.set(dispatch_slice_min_tasks=1, dispatch_slice="0.1ms"):
            yield
    finally:
        dispatch.RUN_MAX, tail.FIRST_BATCH = saved


def _validate(s) -> None:
    """distributed's own checks of the whole state, each task by its state
    (``validate_waiting``, ``validate_queued``, ...), without the Scheduler's
    check that every worker has a stream (these have none). Newer releases
    have them on SchedulerState; older ones on the Scheduler and the module."""
    if hasattr(SchedulerState, "validate_state"):
        SchedulerState.validate_state(s)
        return
    from distributed.scheduler import validate_state

    validate_state(s.tasks, s.workers, s.clients)
    for key, ts in s.tasks.items():
        s.validate_key(key, ts)


def _assert_same_but_log_order(views: dict) -> None:
    """Both slim views equal stock's, the transition log compared per key
    (a tail's entries come after the commit's, not interleaved)."""
    stock = views["stock"]
    for kind in ("bulk", "one-by-one"):
        v = views[kind]
        assert_same(stock["snapshot"], v["snapshot"], ignore=("clients",))
        for name in stock:
            if name not in ("snapshot", "log"):
                assert stock[name] == v[name], (kind, name)
        assert sorted(stock["log"], key=repr) == sorted(v["log"], key=repr), kind
        assert _by_key(stock["log"]) == _by_key(v["log"]), kind


def _by_key(log: list) -> dict:
    out: dict = {}
    for key, start, finish, recs in log:
        out.setdefault(key, []).append((start, finish, recs))
    return out


class SlicedTrio(Trio):
    """:class:`Trio` whose slim schedulers send ready tasks in slices after
    the commit; views are taken once every slice is sent. While they are,
    ``validate_state`` runs after every slice. The transition logs keep
    everything (the tail's entries come after the commit's: a log cut to
    its last 1,000 entries would keep other ones than stock's)."""

    async def __aenter__(self) -> "SlicedTrio":
        with dask.config.set({"distributed.admin.low-level-log-length": 100_000}):
            return await super().__aenter__()

    async def submit(self, make) -> dict:
        msgs, _ = intercept(self.client, make)
        views = {}
        self.checked = 0
        for kind, s in self.s.items():
            counter = s.transition_counter
            for k in self.sent:
                self.sent[k].clear()
            with switches.set(bulk_dispatch=kind != "one-by-one"), _tiny_slices():
                for msg in msgs:
                    await s.update_graph(client="client", **arguments(msg))
                while s is not self.s["stock"] and s.slim_tails:
                    _validate(s)  # the state between two slices
                    self.checked += 1
                    await asyncio.sleep(0)
                if getattr(s, "slim_deliveries", None) is not None:
                    await s.slim_deliveries.wait()
            made = s.transition_counter - counter
            views[kind] = view(s, self.sent[kind], made)
        return views


@pytest.mark.parametrize("case", ["no workers", "one worker", "two workers", "uneven threads", "many workers"])
def test_ready_tasks_sent_in_slices_after_the_commit_make_stocks_choices(case):
    """The commit sends none of the ready tasks; a tail sends them in many
    slices. Nothing else happens in between, so every choice, container,
    message and count is stock's; the log has stock's transitions per key
    (the tail's come after the commit's); between slices ``validate_state``
    accepts the state."""
    nthreads, make = CASES[case]

    async def body():
        async with SlicedTrio(nthreads) as t:
            views = await t.submit(lambda c: c.compute(make(2000)))
            _assert_same_but_log_order(views)
            for kind in ("bulk", "one-by-one"):
                tails = t.s[kind].slim_tails
                assert tails is not None and tails.slices > 3 and tails.sent > 100, kind
                assert get_history(t.s[kind]).latest().ingestion == "staged"
            assert t.checked > 3
            assert t.s["bulk"].slim_dispatched > 0  # slices in bulk
            assert t.s["one-by-one"].slim_dispatched == 0

    asyncio.run(body())


def test_plugins_hear_stocks_calls_while_ready_tasks_go_out_in_slices():
    """Plugins listening to every transition (so every call is owed) hear
    stock's calls in stock's order: the owed calls wait for each ready task
    the tail has not sent yet."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class Everything(SchedulerPlugin):
        def __init__(self):
            self.calls = []

        def update_graph(self, scheduler, *, keys, **kwargs):
            self.calls.append(("update_graph", len(keys)))

        def transition(self, key, start, finish, *args, **kwargs):
            self.calls.append((key, start, finish))

    async def body():
        async with SlicedTrio((1, 2)) as t:
            plugins = {k: Everything() for k in t.KINDS}
            for k, s in t.s.items():
                s.add_plugin(plugins[k])
            views = await t.submit(lambda c: c.compute(_delayed_tree(2000)))
            assert _by_key(views["stock"]["log"]) == _by_key(views["bulk"]["log"])
            assert len(plugins["stock"].calls) > 2000
            assert plugins["bulk"].calls == plugins["stock"].calls
            assert plugins["one-by-one"].calls == plugins["stock"].calls
            assert t.s["bulk"].slim_tails.slices > 3

    asyncio.run(body())


@pytest.mark.parametrize("listen", [False, True], ids=["quiet", "plugin-listening"])
def test_ready_tasks_released_before_their_slice_are_passed_over(listen):
    """The client releases the graph while its ready tasks are still being
    sent: the slices pass over released and forgotten tasks, nothing is
    sent for them, and the scheduler ends as stock does after the same
    submission and release. With a plugin listening, forgetting the graph
    makes every owed call at once (the calls stop waiting for the slices):
    the plugin hears every key forgotten, as on stock."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class Forgets(SchedulerPlugin):
        def __init__(self):
            self.forgotten = set()

        def transition(self, key, start, finish, *args, **kwargs):
            if finish == "forgotten":
                self.forgotten.add(key)

    async def body():
        async with SlicedTrio((1, 1)) as t:
            msgs, _ = intercept(t.client, lambda c: c.compute(_delayed_tree(2000)))
            ends = {}
            heard = {}
            for kind, s in t.s.items():
                if listen:
                    heard[kind] = Forgets()
                    s.add_plugin(heard[kind])
                with _tiny_slices():
                    for msg in msgs:
                        await s.update_graph(client="client", **arguments(msg))
                    if kind != "stock":
                        assert s.slim_tails  # some still to send
                    keys = list(arguments(msgs[-1])["keys"])
                    s.client_releases_keys(keys=keys, client="client", stimulus_id="release")
                    if getattr(s, "slim_tails", None):
                        await s.slim_tails.wait()
                    if getattr(s, "slim_deliveries", None) is not None:
                        await s.slim_deliveries.wait()
                _validate(s)
                ends[kind] = (len(s.tasks), sorted(ws.address for ws in s.workers.values() if ws.processing))
            assert ends["stock"] == ends["bulk"] == ends["one-by-one"] == (0, [])
            if listen:
                assert len(heard["stock"].forgotten) > 1500
                assert heard["bulk"].forgotten == heard["one-by-one"].forgotten == heard["stock"].forgotten

    asyncio.run(body())


@pytest.mark.parametrize("nthreads", [(), (1, 1)], ids=["no workers", "two workers"])
def test_a_graph_sent_in_slices_leaves_no_task_state_to_the_cyclic_collector(nthreads):
    """Once a tail has sent every slice and the graph is released, reference
    counting alone frees its task states: with the cyclic collector off
    throughout, a collection afterwards finds none among the garbage. (The
    plan and its tail held each other, and the plan held the build's
    shadow, whose runs list task states: every task of those runs stayed
    alive after it was forgotten, until a full collection.)"""
    import gc

    from slimgraph.model.taskstate import SlimTaskState

    async def body():
        async with SlicedTrio(nthreads) as t:
            msgs, _ = intercept(t.client, lambda c: c.compute(_delayed_tree(2000)))
            s = t.s["bulk"]
            with _tiny_slices():
                for msg in msgs:
                    await s.update_graph(client="client", **arguments(msg))
                assert s.slim_tails  # some still to send
                await s.slim_tails.wait()
                assert s.slim_tails.slices > 1
                if s.slim_deliveries is not None:
                    await s.slim_deliveries.wait()
            assert len(s.tasks) > 1500
            keys = list(arguments(msgs[-1])["keys"])
            s.client_releases_keys(keys=keys, client="client", stimulus_id="release")
            assert not s.tasks
            await asyncio.sleep(0.05)  # (the loop's callbacks of the release run)
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                gc.collect()
                cyclic = sum(1 for o in gc.garbage if type(o) is SlimTaskState)
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
            assert cyclic == 0

    gc.collect()
    gc.disable()
    try:
        asyncio.run(body())
    finally:
        gc.enable()


def test_real_workers_compute_a_graph_sent_in_slices():
    """Real workers, inputs persisted beforehand (every ready task depends
    on data one worker holds), plugins listening: the graph's ready tasks
    go out in slices while the workers already compute the first ones;
    results equal stock's, and the plugins heard stock's calls of the
    ingestion in stock's order."""

    async def body():
        from distributed import Future

        async with Pair(n_workers=2, listen=True) as p:
            data = list(range(8))
            held = [await p.c_stock.scatter(data, hash=True), await p.c_slim.scatter(data, hash=True)]
            keys = [f.key for f in held[0]]
            assert keys == [f.key for f in held[1]]
            make = lambda c: c.compute(workloads.delayed(3000, inputs=[Future(k, c) for k in keys]))  # noqa: E731
            msgs, _ = p.capture(make)
            n = {}
            with _tiny_slices():
                for tag, s, c in (("stock", p.stock, p.c_stock), ("slim", p.slim, p.c_slim)):
                    for msg in msgs:
                        payload = p.payload(msg)
                        await s.update_graph(client=c.id, **payload)
                        p.futures.extend(Future(k, c) for k in payload["keys"])
                    if tag == "slim":
                        assert s.slim_tails  # still sending
                        await s.slim_tails.wait()
                        await s.slim_deliveries.wait()
                    n[tag] = len((p.rec_stock if tag == "stock" else p.rec_slim).calls)
            assert p.slim.slim_tails.slices > 3
            # what plugins heard of the ingestion (and, on slim, of the
            # workers' first results queued behind it): stock's, in order
            assert n["slim"] >= n["stock"] > 3000
            assert p.rec_stock.calls[: n["stock"]] == p.rec_slim.calls[: n["stock"]]
            ra = await p.c_stock.gather(p.futures_of("stock"))
            rb = await p.c_slim.gather(p.futures_of("slim"))
            assert ra == rb
            await wait_idle(p.slim)
            p.slim.validate_state()

    asyncio.run(body())


def test_a_plugin_removed_while_ready_tasks_go_out_hears_everything_first():
    """A plugin removed while the ready tasks are still being sent in
    slices: the rest are sent at once, and the plugin hears everything it
    is owed (stock's calls, in stock's order) before it goes."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class Everything(SchedulerPlugin):
        name = "everything"

        def __init__(self):
            self.calls = []

        def transition(self, key, start, finish, *args, **kwargs):
            self.calls.append((key, start, finish))

    async def body():
        async with SlicedTrio((1, 1)) as t:
            msgs, _ = intercept(t.client, lambda c: c.compute(_delayed_tree(2000)))
            heard = {}
            for kind in ("stock", "bulk"):
                s = t.s[kind]
                plugin = Everything()
                s.add_plugin(plugin)
                with _tiny_slices():
                    for msg in msgs:
                        await s.update_graph(client="client", **arguments(msg))
                    if kind == "bulk":
                        assert s.slim_tails  # still sending
                    s.remove_plugin(name=plugin.name)
                    if kind == "bulk":
                        assert not s.slim_tails
                heard[kind] = plugin.calls
            assert len(heard["stock"]) > 2000
            assert heard["bulk"] == heard["stock"]

    asyncio.run(body())


@pytest.mark.parametrize("rest, others", [(0.0, False), (1.0, False), (1.0, True)],
                         ids=["no-rest", "rest-alone", "rest-with-others"])
def test_slices_leave_the_loop_to_other_handlers_as_long_again(rest, others, monkeypatch):
    """``slimgraph.background-rest``: after each slice of ready tasks whose
    next turn of the loop found other handlers' work, the executor
    (slimgraph.runtime.loopwork) leaves the event loop to others at least
    ``rest`` times as long as the slice held it (another client's round
    trip takes a few turns of the loop; with a slice in every turn, a ping
    took 100-200 ms while a 300k-task graph's ready tasks went out); with
    nothing else to run, the next slice starts at the next turn. What is
    sent, to which worker, in which order, stays stock's. ``others``: a
    handler that wants the loop in every turn (0.5 ms of CPU each)."""
    import time

    from slimgraph.ingest import tail

    spans: list = []
    step = tail.Tails._step

    def timed(self, seconds):
        t0 = time.perf_counter()
        step(self, seconds)
        spans.append((t0, time.perf_counter()))

    monkeypatch.setattr(tail.Tails, "_step", timed)

    async def busy(stop):
        while not stop.is_set():
            t = time.thread_time()
            while time.thread_time() - t < 0.0005:
                pass
            await asyncio.sleep(0)

    async def body():
        async with SlicedTrio((1, 2)) as t:  # (its logs keep every transition; its own submit is not used)
            msgs, _ = intercept(t.client, lambda c: c.compute(_delayed_tree(2000)))
            views = {}
            for kind, s in t.s.items():
                counter = s.transition_counter
                stop = asyncio.Event()
                other = asyncio.ensure_future(busy(stop)) if others and kind != "stock" else None
                with switches.set(bulk_dispatch=kind != "one-by-one"), \
                        dask.config.set({"slimgraph.background-rest": rest}), _tiny_slices():  # fmt: skip
                    for msg in msgs:
                        await s.update_graph(client="client", **arguments(msg))
                    if kind != "stock":
                        assert s.slim_tails, kind  # (the slices are still to come)
                        await s.slim_tails.wait()
                stop.set()
                if other is not None:
                    await other
                views[kind] = view(s, t.sent[kind], s.transition_counter - counter)
            _assert_same_but_log_order(views)

    asyncio.run(body())
    # (pairs within one scheduler's tail: each slice and the one after it)
    pairs = [(a, b) for a, b in zip(spans, spans[1:]) if b[0] - a[1] < 1.0]
    assert len(pairs) > 10
    rested = [b[0] - a[1] >= rest * (a[1] - a[0]) for a, b in pairs]
    if rest and others:
        assert all(rested), [(round(b[0] - a[1], 6), round(a[1] - a[0], 6)) for a, b in pairs]
    else:  # the next slice at the next turn: mostly sooner than a slice lasts
        gaps = sorted(b[0] - a[1] for a, b in pairs)
        assert gaps[len(gaps) // 2] < sorted(a[1] - a[0] for a, _ in pairs)[len(pairs) // 2]
