"""The counted GC pause: overlapping holds never leave the collector off."""
from __future__ import annotations

import asyncio
import gc
import threading

import pytest

from slimgraph import switches
from slimgraph.runtime import gcpause


@pytest.fixture(autouse=True)
def _collector_on():
    assert gcpause.holds() == 0
    gcpause.on_idle()  # a freeze left by an earlier module's slim scheduler
    # each test starts with nothing frozen: not even what the interpreter
    # froze itself (3.12 starts with objects of its own in the permanent
    # generation)
    gc.unfreeze()
    gc.enable()
    yield
    assert gcpause.holds() == 0
    gc.enable()


def test_interleaved_holds_restore_the_collector():
    gcpause.hold()  # A
    gcpause.hold()  # B starts while A holds
    assert not gc.isenabled()
    gcpause.release()  # A ends first
    assert not gc.isenabled(), "B still holds"
    gcpause.release()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    with gcpause.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_unbalanced_release_is_an_error():
    with pytest.raises(RuntimeError, match="without hold"):
        gcpause.release()


def test_holds_from_two_threads():
    barrier = threading.Barrier(2)

    def worker():
        with gcpause.paused():
            barrier.wait()
            barrier.wait()

    t = threading.Thread(target=worker)
    t.start()
    barrier.wait()  # the thread holds
    with gcpause.paused():
        pass
    assert not gc.isenabled(), "the thread still holds"
    barrier.wait()
    t.join()
    assert gc.isenabled()


def test_measuring_a_live_scheduler_leaves_the_collector_on():
    """census_async and memory_tree_async hold the collector across awaits;
    when they overlap each other, both end with it back on."""
    from distributed import Scheduler

    from slimgraph.instrument.lazysets import census_async
    from slimgraph.instrument.memory import memory_tree_async

    async def body():
        async with Scheduler(dashboard_address=":0", host="127.0.0.1") as s:
            for i in range(3000):
                s.new_task(("x", i), None, "released")
            tree, cen = await asyncio.gather(
                memory_tree_async(s, sample=500, budget_s=0.0001),
                census_async(s, budget_s=0.0001),
            )
            assert cen.ntasks == 3000
            assert tree.ntasks == 3000

    asyncio.run(body())
    assert gc.isenabled()


def test_freeze_policy_lasts_until_the_scheduler_is_idle():
    """``slimgraph.gc: freeze`` keeps the ingested objects out of every
    collection, and gives them back when the scheduler forgot its tasks."""
    import dask
    import dask.array as da
    from distributed import Client

    from slimgraph.distributed import SlimScheduler

    before = gc.get_threshold()

    async def body():
        with dask.config.set({"slimgraph.gc": "freeze"}):
            async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
                async with Client(s.address, asynchronous=True) as c:
                    x = c.persist((da.ones((40, 40), chunks=5) + 1).sum(axis=0))
                    while not s.tasks:
                        await asyncio.sleep(0.01)
                    assert gcpause.frozen() and gc.get_freeze_count() > 0
                    assert gc.get_threshold() == before  # (the collector's own thresholds)
                    del x
                    while s.tasks:
                        await asyncio.sleep(0.01)
                    assert not gcpause.frozen()
                    assert gc.get_freeze_count() == 0
                    assert gc.get_threshold() == before
                    # again, and this time the scheduler closes holding tasks
                    y = c.persist((da.ones((40, 40), chunks=5) + 2).sum(axis=0))
                    while not s.tasks:
                        await asyncio.sleep(0.01)
                    assert gcpause.frozen()
            assert not gcpause.frozen() and gc.get_freeze_count() == 0
            del y

    try:
        asyncio.run(body())
    finally:
        gc.unfreeze()


def test_switch_interval_holds_are_counted_and_restored():
    import sys

    from slimgraph.runtime import switching

    before = sys.getswitchinterval()
    switching.hold(0.0005)
    switching.hold(0.0005)  # a second ingestion overlaps
    assert sys.getswitchinterval() == pytest.approx(0.0005)
    switching.release()
    assert sys.getswitchinterval() == pytest.approx(0.0005), "one still in flight"
    switching.release()
    assert sys.getswitchinterval() == before and switching.holds() == 0
    with pytest.raises(RuntimeError):
        switching.release()


def test_drain_empties_containers_in_steps():
    from slimgraph.runtime import disposal

    lst, dct, st = list(range(50_001)), {i: i for i in range(45_000)}, set(range(30_000))
    small = [1, 2]
    chosen = disposal.big(lst, dct, st, small, None)
    assert len(chosen) == 3 and all(c is x for c, x in zip(chosen, (lst, dct, st)))
    disposal.drain(chosen)
    assert chosen == [] and lst == [] and dct == {} and st == set() and small == [1, 2]


class _Run:
    """A structure as the shadow dispatch keeps per run: messages, each a
    dict holding its own objects, freed with the run."""

    def __init__(self, n: int):
        self.msgs = [{"key": ("x", i), "args": (i, [i], {"i": i})} for i in range(n)]


def test_drain_frees_heavy_entries_a_few_at_a_time():
    """Entries that each hold thousands of objects: a 20,000-entry step
    would free all of them in one C call (one GIL hold of ~1 s at 1M
    tasks); steps shrink to what takes about a millisecond."""
    import time

    from slimgraph.runtime import disposal

    runs = [_Run(500) for _ in range(1000)]   # 500k messages, 2M objects
    whole = [_Run(500) for _ in range(1000)]
    t = time.perf_counter()
    del whole[:]                              # the one cascade drain avoids
    cascade = time.perf_counter() - t
    assert cascade > 0.05, "the structure must be heavy enough to tell"
    longest = disposal.drain([runs])
    assert runs == []
    assert longest < cascade / 5, (longest, cascade)


class _Cycle:
    def __init__(self):
        self.me = self


def _garbage():
    """A reference cycle that is garbage at once, and a weak reference to it."""
    import weakref

    c = _Cycle()
    ref = weakref.ref(c)
    del c
    return ref


def test_a_shielded_collection_traverses_nothing_and_the_garbage_waits():
    """While a big ingestion is shielded, an explicit ``gc.collect()`` (Bokeh
    makes one per discarded session) is preceded by a freeze: it finds
    nothing, so it collects nothing. When the shield ends without a freeze
    to keep, the garbage goes at the next collection."""
    gc.collect()
    frozen_before = gc.get_freeze_count()
    with gcpause.paused():
        gcpause.shield()
        try:
            ref = _garbage()
            assert gc.collect() == 0
            assert ref() is not None
            assert gc.get_freeze_count() > frozen_before
        finally:
            gcpause.unshield()
    assert gc.get_freeze_count() == 0  # (the shield's freeze ended: all of it, see below)
    gc.collect()
    assert ref() is None


def test_a_shield_ending_under_a_big_freeze_keeps_it_until_idle():
    gc.collect()
    with gcpause.paused():
        gcpause.shield()
        ref = _garbage()
        gc.collect()
        gcpause.freeze_until_idle()  # the big ingestion's own end
        gcpause.unshield()
    gc.collect()
    assert ref() is not None and gcpause.frozen()
    gcpause.on_idle()
    assert not gcpause.frozen() and gc.get_freeze_count() == 0
    gc.collect()
    assert ref() is None


def test_unbalanced_unshield_is_an_error():
    with pytest.raises(RuntimeError, match="without shield"):
        gcpause.unshield()


def test_the_end_of_a_freeze_ends_one_made_before_it_too():
    """``gc.unfreeze`` is all or nothing: what was frozen before a shield
    (an application's ``gc.freeze()``, or what the interpreter froze at
    startup) is unfrozen when the shield's freeze ends. It stays alive, and
    full collections traverse it again: a cost, not a change of results."""
    keep = [[i] for i in range(100)]
    gc.freeze()
    before = gc.get_freeze_count()
    assert before >= len(keep)
    with gcpause.paused():
        gcpause.shield()
        try:
            gc.collect()
            assert gc.get_freeze_count() >= before
        finally:
            gcpause.unshield()
    assert gc.get_freeze_count() == 0 and all(k == [i] for i, k in enumerate(keep))


def test_no_shield_no_freeze():
    gc.collect()
    # (3.12's collections move the immortal objects they meet into the
    # permanent generation: what a collection freezes by itself)
    frozen = gc.get_freeze_count()
    with gcpause.paused():
        ref = _garbage()
        gc.collect()
        assert ref() is None
    assert gc.get_freeze_count() == frozen


@pytest.mark.parametrize("frozen_after", [True, False], ids=["frozen-after", "not-frozen-after"])
def test_an_explicit_collection_during_a_staged_ingestion(monkeypatch, frozen_after):
    """A real slim scheduler: an explicit ``gc.collect()`` on the event loop
    while a graph unpickled in a thread is staged (as Bokeh makes when a
    dashboard session is discarded) finds nothing to traverse, so it
    collects nothing. The garbage is kept with the ingestion's freeze and
    goes once the scheduler has forgotten its tasks; when the ingestion is
    not frozen at its end (fewer tasks than ``slimgraph-switches.gc-freeze-tasks``),
    the shield's freeze ends with it."""
    import dask
    from distributed import Client

    import slimgraph.ingest.pipeline as pipeline
    from slimgraph import workloads
    from slimgraph.distributed import SlimScheduler

    real = pipeline.Pipeline._shadow
    seen = []

    async def collect_first(self, b, plan):  # on the loop, after the build
        ref = _garbage()
        seen.append((gc.collect(), ref, gcpause.shields()))
        return await real(self, b, plan)

    monkeypatch.setattr(pipeline.Pipeline, "_shadow", collect_first)

    async def body():
        async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
            async with Client(s.address, asynchronous=True) as c:
                fut = c.compute(workloads.delayed(200))
                while not s.tasks:
                    await asyncio.sleep(0.01)
                (collected, ref, shields), = seen
                assert (collected, shields) == (0, 1)
                while s.slim_deliveries or gcpause.shields():  # the ingestion has ended
                    await asyncio.sleep(0.01)
                assert gcpause.frozen() is frozen_after
                if frozen_after:
                    assert ref() is not None
                else:
                    gc.collect()
                    assert ref() is None
                await c.cancel(fut)
                del fut
                while s.tasks:
                    await asyncio.sleep(0.01)
            assert not gcpause.frozen() and gcpause.shields() == 0
            gc.collect()
            assert ref() is None

    with switches.set(gc_freeze_tasks=50 if frozen_after else 10**9, offload_min_tasks=0, offload_min_bytes=0):
        asyncio.run(body())


def _long_lived(n: int) -> list:
    """``n`` tracked objects that survive collections (not garbage)."""
    return [[i] for i in range(n)]


@pytest.mark.parametrize("full_max, refrozen", [(0.0, True), (3600.0, False)], ids=["over-the-limit", "under-it"])
def test_a_long_full_collection_under_a_big_freeze_makes_the_next_freeze_first(full_max, refrozen):
    """While a big ingestion's freeze lasts, objects made afterwards (a tail
    of ready tasks, results) reach the oldest generation unfrozen. A full
    collection longer than ``full_max`` makes the next one freeze first:
    it then traverses nothing, and the survivors join the freeze until
    idle. Young garbage is still collected; shorter collections change
    nothing."""
    gc.collect()
    gcpause.hold()  # only the collections below (none of the allocations')
    gcpause.freeze_until_idle(full_max)
    try:
        gc.collect()  # full, timed: longer than 0 s, shorter than an hour
        frozen = gc.get_freeze_count()
        before = gcpause.refreezes
        keep = _long_lived(200_000)
        ref = _garbage()
        gc.collect(0)  # a young collection: never a freeze
        assert ref() is None and gcpause.refreezes == before
        ref = _garbage()
        gc.collect()
        assert gcpause.refreezes == before + refrozen
        if refrozen:
            unfrozen = {id(o) for o in gc.get_objects()}
            assert not any(id(o) in unfrozen for o in keep)  # every survivor joined the freeze
            assert ref() is not None  # kept with the freeze ...
        else:
            assert gc.get_freeze_count() == frozen
            assert ref() is None
    finally:
        gcpause.release()
        gcpause.on_idle()
    assert gc.get_freeze_count() == 0
    # idle forgets the last full collection: a new freeze starts afresh
    gcpause.freeze_until_idle(0.0)
    try:
        with gcpause.paused():
            gc.collect()
        assert gcpause.refreezes == before + refrozen
    finally:
        gcpause.on_idle()
    gc.collect()
    assert ref() is None  # ... until idle


TRIM = """
import psutil
from slimgraph.runtime import disposal
p = psutil.Process()
big, keep = [], []
for _ in range(50_000):          # 8 KiB chunks from malloc's heap, each
    big.append(bytearray(8192))  # followed by a small one that stays
    keep.append(bytearray(600))
before = p.memory_info().rss
del big
freed = p.memory_info().rss
assert disposal.give_back()
after = p.memory_info().rss
print(before - freed, freed - after)
"""


def test_freed_heap_goes_back_to_the_os_only_when_given_back():
    """Freed chunks between live ones stay mapped (the RSS does not move
    when they are freed); give_back() (glibc's malloc_trim, what the
    pipeline calls after draining an ingestion's temporaries) returns them.
    In a fresh process: the test process's heap is not a clean slate."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", TRIM], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    on_free, on_trim = map(int, out.stdout.split())
    assert on_free < 50 * 2**20, on_free          # freeing alone gave back little of the 400 MiB
    assert on_trim > 150 * 2**20, on_trim         # giving back returned most of it
