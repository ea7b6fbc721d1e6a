"""The slim engine's ``compute-task`` messages (slimgraph.model.messages)
equal distributed's own ``SchedulerState._task_to_msg``, task by task.

For every task of real submissions ingested by a slim scheduler (an array
with reductions and fused blocks, a delayed tree, tasks with annotations,
resource restrictions, an actor, dependencies held by workers or not, a
span), both messages are built on the same task: the same fields in the
same order, equal values, the same objects where distributed passes the
task's own (key, annotations, restrictions), an equal run_spec, and the
run id taken from distributed's counter and set on the task.
"""
from __future__ import annotations

import asyncio

import dask
import dask.array as da
import pytest
from dask import delayed
from distributed import Client, span
from distributed.scheduler import SchedulerState

from slimgraph import shim
from slimgraph.bench.payload import arguments, intercept
from slimgraph.distributed import SlimScheduler
from slimgraph.model import messages
from slimgraph.model.taskstate import NO_EXTRA, SlimTaskState
from slimgraph.bench.statemachine import add_worker_state


def run(coro):
    return asyncio.run(coro)


def inc(x):
    return x + 1


def add(*xs):
    return sum(xs)


class Counter:
    n = 0


def _submissions(client):
    x = da.ones((12, 12), chunks=2) + 1
    yield lambda c: c.compute(x.sum(axis=0))
    leaves = [delayed(inc)(i, dask_key_name=f"leaf-{i}") for i in range(6)]
    yield lambda c: c.compute(delayed(add)(*leaves))
    with dask.annotate(resources={"GPU": 1}, retries=2, priority=3):
        y = delayed(inc)(delayed(inc)(1))
    yield lambda c: c.compute(y)
    yield lambda c: c.submit(Counter, actor=True)

    def in_span(c):
        with span("a-span"):
            return c.compute(da.arange(10, chunks=2) * 2)

    yield in_span


def _compare(s, ts) -> None:
    before = shim.next_run_id()
    ours = messages.compute_task_msg(s, ts)
    assert ours["run_id"] == before + 1 == ts.run_id
    theirs = SchedulerState._task_to_msg(s, ts)
    assert theirs["run_id"] == ours["run_id"] + 1 == ts.run_id
    assert list(ours) == list(theirs) == list(messages.FIELDS)
    for name in messages.FIELDS:
        a, b = ours[name], theirs[name]
        if name == "run_id":
            continue
        if name == "stimulus_id":
            assert a.startswith("compute-task-") and b.startswith("compute-task-")
            assert float(a.rsplit("-", 1)[1]) <= float(b.rsplit("-", 1)[1])
        elif name == "run_spec":
            assert a.data == b.data and a.data.key == b.data.key
            assert dask.base.tokenize(a.data) == dask.base.tokenize(b.data)
        else:
            assert type(a) is type(b) and a == b, (name, a, b)
            if name in ("key", "resource_restrictions") or (name == "annotations" and b):
                assert a is b, name
    assert list(ours["who_has"]) == list(theirs["who_has"]) == list(ours["nbytes"])


def test_messages_equal_distributeds_for_every_task():
    assert messages.ENABLED, "the installed distributed builds other fields"

    async def body():
        async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
            ws = add_worker_state(s, 0, 2)
            async with Client(s.address, asynchronous=True) as c:
                seen = 0
                kept = []  # (the futures: the client would release the keys)
                for make in _submissions(c):
                    msgs, futures = intercept(c, make)
                    kept.append(futures)
                    for msg in msgs:
                        await s.update_graph(client=c.id, **arguments(msg))
                held = 0
                for i, ts in enumerate(list(s.tasks.values())):
                    assert type(ts) is SlimTaskState
                    if ts.priority is None:
                        continue
                    if i % 3 == 0 and ts.state != "memory":
                        # held by a worker: who_has and nbytes of its dependents' messages
                        ts.who_has = {ws}
                        ts.nbytes = 100 + i
                        held += 1
                try:
                    for ts in s.tasks.values():
                        if ts.priority is not None:
                            _compare(s, ts)
                            seen += 1
                    kinds = {(bool(ts.annotations), bool(ts.resource_restrictions), ts.actor,
                              any(d.who_has for d in ts.dependencies)) for ts in s.tasks.values()}
                finally:
                    for ts in s.tasks.values():  # (not on the worker's books)
                        ts.who_has = None
                assert seen > 60 and held
                assert (True, True, False, False) in kinds  # annotated, restricted
                assert any(k[2] for k in kinds)  # the actor
                assert any(k[3] for k in kinds)  # dependencies held

    run(body())


def test_a_task_without_extra_gets_one_and_the_shared_default_stays():
    """The run id is the first Extra attribute most tasks get: the message
    gives the task its own Extra and leaves the shared default untouched."""

    async def body():
        async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
            ts = s.new_task("solo", None, "released")
            ts.priority = (0, 0, 1)
            assert ts._x is NO_EXTRA
            msg = messages.compute_task_msg(s, ts)
            assert ts._x is not NO_EXTRA and ts.run_id == msg["run_id"]
            assert NO_EXTRA.run_id is None
            assert msg["who_has"] == {} and msg["nbytes"] == {} and msg["annotations"] == {}
            bare = s.new_task("no-priority", None, "released")
            with pytest.raises(AssertionError):
                messages.compute_task_msg(s, bare)  # as distributed's: a task without a priority

    run(body())


def test_fields_are_read_from_distributed_and_other_fields_fall_back(monkeypatch):
    """The check at import reads distributed's own field list; with other
    fields (a future release), every message is distributed's own."""
    assert shim.compute_task_fields() == messages.FIELDS

    calls = []

    def stock(state, ts):
        calls.append(ts.key)
        return SchedulerState._task_to_msg(state, ts)

    monkeypatch.setattr(messages, "_stock_msg", stock)

    async def body():
        async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
            ts = s.new_task("t", None, "released")
            ts.priority = (0, 0, 1)
            s._task_to_msg(ts)
            assert calls == []  # the scheduler's own method is the slim one
            monkeypatch.setattr(messages, "ENABLED", False)
            msg = s._task_to_msg(ts)
            assert calls == ["t"] and msg["key"] == "t"

    run(body())


def test_a_computed_task_is_released_without_building_its_node_and_plugins_see_the_node(monkeypatch):
    """distributed's ``memory -> released`` reads ``ts.run_spec`` once, for
    its truth (pure data is forgotten). On a slim scheduler that read is
    answered from the compact graph without building the node
    (slimgraph.model.state: every computed task's node would be built
    once more as it is released); the transition is distributed's own,
    and a plugin hearing of it still reads the real node. A twin stock
    scheduler fed the same messages ends with the same transition log."""
    from distributed.diagnostics.plugin import SchedulerPlugin
    from distributed.scheduler import Scheduler

    from slimgraph.ingest.compact.graph import TRUTHY
    from slimgraph.model import state as slim_state

    assert slim_state.MEMORY_RELEASED_BY_TRUTH
    assert SlimScheduler._TRANSITIONS_TABLE[("memory", "released")] is slim_state._memory_released
    assert SchedulerState._TRANSITIONS_TABLE[("memory", "released")] is shim.stock_memory_released

    inside: list = []
    stock_fn = slim_state._stock_memory_released

    def seeing(st, key, stimulus_id, **kw):
        inside.append(st.tasks[key].run_spec)
        return stock_fn(st, key, stimulus_id, **kw)

    class Reader(SchedulerPlugin):
        def __init__(self, s):
            self.s, self.read = s, []

        def transition(self, key, start, finish, *args, **kwargs):
            if (start, finish) == ("memory", "released"):
                self.read.append(self.s.tasks[key].run_spec)

    def chain():
        x = delayed(inc)(0, dask_key_name="c-0")
        for i in range(1, 12):
            x = delayed(inc)(x, dask_key_name=f"c-{i}")
        return x

    async def life(cls):
        async with cls(dashboard_address=":0", host="127.0.0.1") as s:
            reader = Reader(s)
            s.add_plugin(reader, name="reader")
            addr = add_worker_state(s, 0, 1).address
            async with Client(s.address, asynchronous=True) as c:
                (msg,), fut = intercept(c, lambda c: c.compute(chain()))
                await s.update_graph(client=c.id, **arguments(msg))
                for pending in (getattr(s, "slim_tails", None), getattr(s, "slim_deliveries", None)):
                    if pending:
                        await pending.wait()
                import pickle
                import time as _time
                while s.workers[addr].processing:
                    ts = next(iter(s.workers[addr].processing))
                    now = _time.time()
                    s.handle_task_finished(key=ts.key, worker=addr, stimulus_id=f"done-{ts.key}",
                                           run_id=ts.run_id, nbytes=28, type=pickle.dumps(int),
                                           typename="int", metadata={}, thread=1,
                                           startstops=[{"action": "compute", "start": now - 0.001, "stop": now}])
                # (update_graph's stimulus id carries the time: the rest must match)
                log = [(k, a, b, stim if stim.startswith("done-") else None)
                       for k, a, b, _, stim, *_ in s.transition_log]
                del fut
            return log, reader.read, s

    monkeypatch.setattr(slim_state, "_stock_memory_released", seeing)
    slim_log, slim_read, s = run(life(SlimScheduler))
    monkeypatch.setattr(slim_state, "_stock_memory_released", stock_fn)
    stock_log, stock_read, _ = run(life(Scheduler))
    assert slim_log == stock_log
    released = [e for e in slim_log if e[1:3] == ("memory", "released")]
    assert len(released) == 11 == len(inside) == len(slim_read)  # every link but the last
    assert all(x is TRUTHY for x in inside)  # no node built for the truth test
    # the plugin read real nodes, equal to stock's
    assert all(type(x) is type(y) and x == y for x, y in zip(slim_read, stock_read)), (slim_read, stock_read)
    assert not any(x is TRUTHY for x in slim_read)
