"""TaskQueue against distributed's HeapSet: same answers, operation by operation."""
from __future__ import annotations

import operator

from distributed.collections import HeapSet
from distributed.scheduler import TaskGroup, TaskPrefix
from hypothesis import given, settings
from hypothesis import strategies as st

from slimgraph.model.queue import TaskQueue
from slimgraph.model.taskstate import SlimTaskState

GROUP = TaskGroup("g", TaskPrefix("g"))


class Ref:
    """A stock-like element for HeapSet (which holds weak references)."""

    def __init__(self, i, priority):
        self.i = i
        self.priority = priority


def make_tasks(prios):
    out = []
    for i, (user, gen, order) in enumerate(prios):
        ts = SlimTaskState(("t", i), None, "released", GROUP)
        ts.priority = (user, gen, order)
        out.append(ts)
    return out


def idx(x):
    return x.i if isinstance(x, Ref) else x.key[1]


ops = st.lists(
    st.tuples(
        st.sampled_from(
            ["add", "add_deferred", "merge", "discard", "pop", "peek", "peekn", "popright", "sorted", "len", "in"]
        ),
        st.integers(0, 19),
        st.integers(1, 5),
    ),
    max_size=80,
)
prios = st.lists(
    st.tuples(st.integers(-1, 1), st.integers(0, 2), st.integers(0, 6)), min_size=20, max_size=20
)


@settings(max_examples=300, deadline=None)
@given(prios, ops)
def test_same_as_heapset(prio_list, operations):
    tasks = make_tasks(prio_list)
    refs = [Ref(i, p) for i, p in enumerate(prio_list)]
    ref = HeapSet(key=operator.attrgetter("priority"))
    q = TaskQueue()
    # Tasks taken by ``popright`` are not queued again: HeapSet keeps a
    # discarded element's entry and revives it when the element comes back,
    # TaskQueue's ``popright`` drops its entry. distributed never calls
    # ``popright`` on its queue; the test compares what both guarantee.
    gone: set = set()
    for op, i, n in operations:
        if op in ("add", "add_deferred"):
            if i in gone:
                continue
            ref.add(refs[i])
            getattr(q, op)(tasks[i])
        elif op == "merge":
            # a staged ingestion's run: up to n tasks not queued yet, queued
            # in index order (a number is reserved before some other add)
            # (only tasks never queued here: a staged run is new tasks)
            batch = [t for t in tasks[i : i + n] if t not in q and t._qseq is None and idx(t) not in gone]
            base = q.reserve(len(batch))
            o = (i + 7) % 20
            if i % 2 and tasks[o] not in q and tasks[o] not in batch and o not in gone:
                other = tasks[(i + 7) % 20]  # queued during the build
                ref.add(refs[idx(other)])
                q.add(other)
            for k, t in enumerate(batch):
                t._qseq = base + k
                ref.add(refs[idx(t)])
            q.merge_staged(set(batch), sorted(batch, key=lambda t: (t.priority, t._qseq)), base, len(batch))
        elif op == "discard":
            ref.discard(refs[i])
            q.discard(tasks[i])
        elif op == "pop":
            if ref:
                assert idx(q.pop()) == idx(ref.pop())
            else:
                assert not q
        elif op == "peek":
            if ref:
                assert idx(q.peek()) == idx(ref.peek())
        elif op == "peekn":
            assert [idx(x) for x in q.peekn(n)] == [idx(x) for x in ref.peekn(n)]
        elif op == "popright":
            # "one of the largest (not necessarily the largest)": compare the guarantee
            if ref:
                x = q.popright()
                ref.discard(refs[idx(x)])
                gone.add(idx(x))
                if ref:
                    assert x.priority >= ref.peek().priority
        elif op == "sorted":
            assert [idx(x) for x in q.sorted()] == [idx(x) for x in ref.sorted()]
        elif op == "len":
            assert len(q) == len(ref)
        elif op == "in":
            assert (tasks[i] in q) == (refs[i] in ref)
    assert [idx(x) for x in q.sorted()] == [idx(x) for x in ref.sorted()]
    assert {idx(x) for x in q} == {idx(x) for x in ref}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-2, 2), st.integers(0, 3), st.integers(0, 3000)), max_size=60))
def test_sorted_by_priority_is_sorted_or_refuses_ties(prio_list):
    from slimgraph.model.taskstate import sorted_by_priority

    tasks = make_tasks(prio_list)
    out = sorted_by_priority(tasks)
    if len(set(prio_list)) < len(prio_list):
        assert out is None  # a tie: the caller breaks it
    else:
        orders = [p[2] for p in prio_list]
        if orders and max(orders) - min(orders) <= 1024:  # dense enough for buckets
            assert out is not None
        if out is not None:
            assert [ts.priority for ts in out] == sorted(ts.priority for ts in tasks)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-(2**40), 2**40), min_size=2, max_size=80))
def test_one_heads_run_sorted_by_its_orders(orders):
    """One priority head (one submission): the run is sorted by its orders
    however sparse they are, every task numbered with the one sequence
    number given; a tie, or an order that is not an int, leaves it to the
    general way (None from sorted_by_orders)."""
    from slimgraph.model.queue import SharedSeq
    from slimgraph.model.taskstate import sorted_by_orders, sorted_by_priority

    tasks = make_tasks([(0, 1, o) for o in orders])
    seq = SharedSeq(7)
    out = sorted_by_priority(tasks, qseq=seq)
    if len(set(orders)) < len(orders):
        assert out is None and sorted_by_orders(tasks, orders) is None
    else:
        assert [ts._prio_order for ts in out] == sorted(orders)
        assert all(ts._qseq is seq for ts in tasks)
        assert sorted_by_orders(tasks, orders) == out
    assert sorted_by_orders(tasks, [float(o) for o in orders]) is None
    assert sorted_by_orders(tasks, [2**70] + orders[1:]) is None


def test_a_task_queued_again_comes_out_where_heapset_puts_it():
    """Found by hypothesis: add t0, add t1, discard t0, add t0. HeapSet keeps
    t0's old entry, so t0 comes out first; a task queued again while its
    old entry is still in the heap is where its smallest entry is."""
    tasks = make_tasks([(0, 0, 0)] * 3)
    ref = HeapSet(key=operator.attrgetter("priority"))
    refs = [Ref(i, (0, 0, 0)) for i in range(3)]
    q = TaskQueue()
    for op, i in [("add", 0), ("add", 1), ("discard", 0), ("add", 0), ("add", 2)]:
        getattr(q, op)(tasks[i])
        getattr(ref, op)(refs[i])
    assert idx(q.peek()) == idx(ref.peek()) == 0
    assert [idx(x) for x in q.sorted()] == [idx(x) for x in ref.sorted()] == [0, 1, 2]
    assert idx(q.pop()) == idx(ref.pop()) == 0
    # t0's newer entry is stale now; queued once more, it is again at its smallest live entry
    q.add(tasks[0])
    ref.add(refs[0])
    assert [idx(x) for x in q.sorted()] == [idx(x) for x in ref.sorted()]
    while ref:
        assert idx(q.pop()) == idx(ref.pop())
    assert not q


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=30, unique=True),
    st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=6),
    st.lists(st.integers(0, 40), max_size=4),
)
def test_staged_runs_merged_after_other_adds_as_heapset(run_orders, meanwhile, before):
    """A staged run of distinct priorities shares one sequence number
    (``staged_run``); tasks queued between its reservation and its merge
    (some with a priority equal to one of the run's) were queued first and
    win the ties, as in HeapSet, where the run's tasks are added at the
    merge. ``merge_staged`` moves the shared number in one step."""
    from slimgraph.model.queue import SharedSeq, staged_run

    prios = [(0, 1, o) for o in before] + [(0, 1, o) for o, _ in meanwhile] + [(0, 1, o) for o in run_orders]
    tasks = make_tasks(prios)
    refs = [Ref(i, p) for i, p in enumerate(prios)]
    q = TaskQueue()
    ref = HeapSet(key=operator.attrgetter("priority"))
    nb, nm = len(before), len(meanwhile)
    for i in range(nb):
        q.add(tasks[i])
        ref.add(refs[i])
    run = tasks[nb + nm:]
    base = q.reserve(len(run))
    ordered = staged_run(run, base)
    assert all(type(ts._qseq) is SharedSeq for ts in run) and len({id(ts._qseq) for ts in run}) == 1
    for k, (_, deferred) in enumerate(meanwhile):  # queued during the build
        i = nb + k
        (q.add_deferred if deferred else q.add)(tasks[i])
        ref.add(refs[i])
    q.merge_staged(set(run), ordered, base, len(run))
    for i in range(nb + nm, len(tasks)):
        ref.add(refs[i])
    assert [idx(x) for x in q.sorted()] == [idx(x) for x in ref.sorted()]
    while ref:
        assert idx(q.pop()) == idx(ref.pop())
    assert not q


def test_a_big_queue_emptied_frees_what_it_held_off_the_event_loop(monkeypatch):
    """Removal is lazy: the heap still holds every task discarded since it
    was built. When the last one goes, the heap is handed to a worker
    thread that empties it (slimgraph.runtime.disposal), not emptied inside
    the discard on the loop."""
    import asyncio
    import sys
    import threading

    from slimgraph.runtime import disposal

    drained_in: list = []
    drain = disposal.drain_and_give_back

    def recording(containers, trim):
        drained_in.append((threading.current_thread() is threading.main_thread(), sum(map(len, containers))))
        return drain(containers, trim)

    monkeypatch.setattr(disposal, "drain_and_give_back", recording)

    async def body():
        tasks = make_tasks([(0, i % 7, i) for i in range(20_000)])
        q = TaskQueue()
        for ts in tasks:
            q.add_deferred(ts)
        q.peek()  # (the pending entries sorted into the heap)
        probe = tasks[1234]
        held = sys.getrefcount(probe)
        for ts in tasks:
            q.discard(ts)
        del ts
        tasks.clear()
        assert not q and len(q._heap) == 0
        # the heap it sat in still holds it, until the worker thread empties it
        # (held by: ``probe``, the list ``tasks``, the queue's set and heap)
        assert sys.getrefcount(probe) == held - 2
        while disposal._freeing:
            await asyncio.sleep(0.01)
        assert sys.getrefcount(probe) == held - 3
        assert drained_in == [(False, 20_000)]

    asyncio.run(body())
