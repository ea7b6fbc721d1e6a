"""The executor of work on the event loop (slimgraph.runtime.loopwork).

A real asyncio loop and the executor alone: jobs are plain generators that
note what ran when. The release's jobs through a real scheduler are in
test_release.py, the tail's and the owed calls' in test_dispatch.py and
test_staging.py.
"""
from __future__ import annotations

import asyncio
import time

from slimgraph.runtime import loopwork


def _job(name: str, steps: int, ran: list, seconds: float = 0.0):
    """A job of ``steps`` steps of ``seconds`` each."""
    for i in range(steps):
        t = time.perf_counter()
        while time.perf_counter() - t < seconds:
            pass
        ran.append((name, i))
        yield


def test_background_jobs_take_turns_and_a_holding_job_goes_first():
    """Two background jobs share the executor in turns, in the order they
    were spawned; a holding job started meanwhile runs its first slice at
    once (in the handler that starts it) and its other slices before any
    further background step, and only it holds stimuli."""
    ran: list = []

    async def main():
        work = loopwork.LoopWork()
        step = loopwork.SLICE / 2.5   # two steps to a slice
        work.spawn(_job("a", 6, ran, step))
        work.spawn(_job("b", 6, ran, step))
        assert not work.busy and not work.holds()  # background jobs hold nothing
        while len(ran) < 2:
            await asyncio.sleep(0)   # (the executor's first slice)
        before = len(ran)
        assert before < 12
        work.run(_job("hold", 3, ran, loopwork.SLICE * 1.2))  # a step a slice
        assert ran[before:] == [("hold", 0)]  # its first slice, now
        assert work.busy
        await work.idle()
        held_done = len(ran)
        while work.background:
            await asyncio.sleep(0.001)
        return before, held_done

    before, held_done = asyncio.run(main())
    # the holding job's steps follow each other, nothing in between
    assert [r for r in ran if r[0] == "hold"] == [("hold", 0), ("hold", 1), ("hold", 2)]
    holds = [i for i, r in enumerate(ran) if r[0] == "hold"]
    assert holds == list(range(holds[0], holds[0] + 3)), ran
    # every background step ran, each job's in order, a's and b's in turns
    assert [r for r in ran if r[0] == "a"] == [("a", i) for i in range(6)]
    assert [r for r in ran if r[0] == "b"] == [("b", i) for i in range(6)]
    rest = [r[0] for r in ran if r[0] != "hold"]
    assert rest == ["a", "b"] * 6, ran


def test_a_waiting_background_job_is_looked_at_again_later_not_spun():
    """A background job whose next step waits on something yields WAITING:
    the executor comes back a few milliseconds later (it does not spin a
    turn of the loop per check), and runs it on once it can."""
    gate = {"open": False}
    looks = [0]
    done: list = []

    def waiter():
        while not gate["open"]:
            looks[0] += 1
            yield loopwork.WAITING
        done.append(True)
        yield

    async def main():
        work = loopwork.LoopWork()
        work.spawn(waiter())
        await asyncio.sleep(0.1)
        seen = looks[0]
        gate["open"] = True
        while work.background:
            await asyncio.sleep(0.005)
        return seen

    seen = asyncio.run(main())
    assert done == [True]
    assert 2 <= seen <= 0.1 / loopwork.RECHECK + 5, seen


def test_a_failing_background_job_is_dropped_and_the_others_go_on():
    ran: list = []

    def bad():
        yield
        raise RuntimeError("boom")

    async def main():
        work = loopwork.LoopWork()
        work.spawn(bad())
        work.spawn(_job("ok", 3, ran))
        while work.background:
            await asyncio.sleep(0.001)

    asyncio.run(main())
    assert ran == [("ok", 0), ("ok", 1), ("ok", 2)]


def _spin(seconds: float) -> None:
    t = time.thread_time()
    while time.thread_time() - t < seconds:
        pass


def test_a_rest_lasts_while_others_use_the_loop_and_ends_when_they_stop():
    """The rest after a slice (``_rest``): a step of it in which nobody
    else used the loop ends it (a periodic callback's turn costs one step,
    not a rest as long as the slice); others using the loop in every turn
    get all of it; others who stop part way get it until they stop."""

    async def busy(until: float) -> None:
        while time.perf_counter() < until:
            _spin(0.0005)
            await asyncio.sleep(0)

    async def rest(seconds: float, others_for: float | None) -> float:
        other = None
        if others_for is not None:
            other = asyncio.ensure_future(busy(time.perf_counter() + others_for))
            await asyncio.sleep(0)
        t = time.perf_counter()
        await loopwork._rest(seconds)
        took = time.perf_counter() - t
        if other is not None:
            await other
        return took

    async def main():
        alone = await rest(0.5, None)
        always = await rest(0.1, 0.3)
        stopping = await rest(2.0, 0.1)
        return alone, always, stopping

    alone, always, stopping = asyncio.run(main())
    assert alone < 0.25, alone            # one step, nobody else there
    assert always >= 0.1, always          # others in every step: all of it
    assert 0.1 <= stopping < 1.0, stopping  # until they stopped
