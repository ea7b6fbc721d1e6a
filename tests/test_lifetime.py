"""What a scheduler's users hold stays true, and nothing of slimgraph's outlives a scheduler.

distributed and plugins keep references to the scheduler's containers
(``wait_for_state`` takes ``scheduler.tasks`` once; a plugin may keep
``self.tasks = scheduler.tasks``). Stock never rebinds them, so neither may
the slim engine: each test holds every container of a stock and of a slim
scheduler, runs the same submissions on both (staged and in place, a
commit, computation, a release), and checks that each side rebinds exactly
what stock rebinds (nothing, for the containers below) and that a plugin's
held mapping sees what the scheduler sees.

distributed's test harness fails a test whose threads outlive it: the
ingestion pool's threads, slimgraph's timers and its collector and switch
interval settings end when the last slim scheduler of the process closes.
"""
from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
from collections import deque

import dask.array as da
import pytest
from dask import delayed
from distributed import Client, Scheduler, Worker
from distributed.diagnostics.plugin import SchedulerPlugin

from differential import Pair, wait_idle
from slimgraph import switches
from slimgraph.distributed import SlimScheduler
from slimgraph.instrument.recorder import get_history
from slimgraph.runtime import threads
from slimgraph.shim import cpython

#: containers that must stay the same objects for the scheduler's life
MUST_STAY = (
    "tasks", "queued", "unrunnable", "task_groups", "task_prefixes", "replicated_tasks",
    "workers", "running", "idle", "idle_task_count", "saturated", "clients", "host_info",
    "aliases", "transition_log", "computations", "plugins", "extensions",
)


def inc(x):
    return x + 1


def run(coro):
    return asyncio.run(coro)


def _containers(obj) -> dict:
    """Every container attribute of ``obj``, by name (the objects themselves)."""
    out = {}
    names = set(getattr(obj, "__dict__", ()))
    for klass in type(obj).__mro__:
        slots = getattr(klass, "__slots__", ())
        names |= {slots} if isinstance(slots, str) else set(slots)
    for name in sorted(names):
        value = getattr(obj, name, None)
        if isinstance(value, (dict, set, list, deque)) or type(value).__name__ in ("HeapSet", "TaskQueue", "SortedDict", "SortedSet"):
            out[name] = value
    return out


class Held:
    """Every container of a scheduler and of its workers' states, held."""

    def __init__(self, s) -> None:
        self.s = s
        self.own = _containers(s)
        self.workers = {addr: _containers(ws) for addr, ws in s.workers.items()}

    def rebound(self) -> set:
        """The names (``attr`` or ``worker:attr``) now bound to another object."""
        out = {n for n, v in self.own.items() if getattr(self.s, n, None) is not v}
        for addr, held in self.workers.items():
            ws = self.s.workers.get(addr)
            if ws is not None:
                out |= {f"worker:{n}" for n, v in held.items() if getattr(ws, n, None) is not v}
        return out


class HoldsTasks(SchedulerPlugin):
    """The common plugin pattern: the scheduler's mapping kept at start."""

    name = "holds-tasks"

    def __init__(self) -> None:
        self.tasks = None

    def start(self, scheduler) -> None:
        self.tasks = scheduler.tasks


def _tree(n=60):
    xs = [delayed(inc)(i, dask_key_name=("leaf", i)) for i in range(n)]
    while len(xs) > 1:
        xs = [delayed(sum)(xs[i : i + 3]) for i in range(0, len(xs), 3)]
    return xs[0]


def _both_held(p: Pair) -> dict:
    for s in (p.stock, p.slim):
        plugin = HoldsTasks()
        s.add_plugin(plugin)
        plugin.start(s)
    return {"stock": Held(p.stock), "slim": Held(p.slim)}


#: a worker's heartbeat replaces these on both engines, when it comes
HEARTBEAT = {"worker:executing", "worker:metrics"}


def _check(p: Pair, held: dict, when: str) -> None:
    rebound = {tag: h.rebound() - HEARTBEAT for tag, h in held.items()}
    assert not (rebound["stock"] & set(MUST_STAY)), (when, rebound["stock"])  # the premise
    assert rebound["slim"] == rebound["stock"], (when, rebound)
    for tag, s in (("stock", p.stock), ("slim", p.slim)):
        mine = s.plugins["holds-tasks"].tasks
        assert mine is s.tasks, (when, tag)
        assert list(mine) == list(s.tasks), (when, tag)


@pytest.mark.parametrize(
    "staged,swap", [(True, True), (True, False), (False, True)], ids=["staged", "staged-no-swap", "in-place"]
)
def test_held_containers_see_what_the_scheduler_sees(staged, swap, monkeypatch):
    """Submissions staged (built off the loop, committed at once) and in
    place, onto an empty and onto a busy scheduler, computed, released:
    every container held before is still the scheduler's. ``no-swap``: the
    plain path of an interpreter where the table hand-over failed its check."""
    limit = 0 if staged else 10**9
    if not swap:
        monkeypatch.setattr(cpython, "dict_swap_available", lambda: False)

    async def body():
        with switches.set(offload_min_tasks=limit, offload_min_bytes=limit):
            async with Pair(n_workers=2, listen=False) as p:
                held = _both_held(p)
                _check(p, held, "start")
                # onto an empty scheduler (the build's dict is adopted when staged)
                x = da.ones((60, 60), chunks=10) + 1
                fut = {}
                for tag, c in (("stock", p.c_stock), ("slim", p.c_slim)):
                    fut[tag] = c.compute(x.sum())
                for tag, s in (("stock", p.stock), ("slim", p.slim)):
                    while not any(str(k).startswith("('sum") or "sum" in str(k) for k in s.tasks):
                        await asyncio.sleep(0.01)
                _check(p, held, "first submission")
                # onto a scheduler holding tasks (the build's dict seeded)
                persisted = {tag: c.persist(da.zeros((40, 40), chunks=10) * 2) for tag, c in
                             (("stock", p.c_stock), ("slim", p.c_slim))}
                tree = {tag: c.compute(_tree()) for tag, c in (("stock", p.c_stock), ("slim", p.c_slim))}
                for tag in ("stock", "slim"):
                    assert (await fut[tag]) == 60 * 60 * 2
                    assert (await tree[tag]) == sum(range(1, 61))
                _check(p, held, "computed")
                if staged:
                    rec = get_history(p.slim).latest()
                    assert "commit" in {ph.name for ph in rec.phases}, rec.phases
                for tag in ("stock", "slim"):
                    del persisted[tag]
                fut.clear()
                tree.clear()
                for s in (p.stock, p.slim):
                    deadline = time.monotonic() + 10
                    while s.tasks and time.monotonic() < deadline:
                        await asyncio.sleep(0.02)
                    assert not s.tasks
                _check(p, held, "released")

    run(body())


def test_wait_for_state_sees_a_staged_submission():
    """distributed's own helper holds ``scheduler.tasks`` once and waits on it."""
    from distributed.utils_test import wait_for_state

    async def body():
        with switches.set(offload_min_tasks=0, offload_min_bytes=0):
            async with SlimScheduler(dashboard_address=":0", host="127.0.0.1") as s:
                async with Client(s.address, asynchronous=True) as c:
                    before = s.tasks
                    f = c.submit(inc, 1, key="x")
                    await asyncio.wait_for(wait_for_state("x", ("queued", "no-worker"), s), 10)
                    assert s.tasks is before
                    rec = get_history(s).latest()
                    assert "commit" in {ph.name for ph in rec.phases}
                    del f

    run(body())


# -- nothing outlives the scheduler -------------------------------------------
def _ours() -> list:
    return [t for t in threading.enumerate() if t.name.startswith("slimgraph")]


def _process_settings() -> tuple:
    return (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count(), sys.getswitchinterval(),
            [getattr(cb, "__module__", None) for cb in gc.callbacks])


def _our_timers(loop) -> list:
    scheduled = getattr(loop, "_scheduled", [])
    return [h for h in scheduled if not h.cancelled()
            and getattr(getattr(h, "_callback", None), "__module__", "").startswith("slimgraph")]


async def _stage_one(s, c) -> None:
    x = da.ones((40, 40), chunks=10) + 1
    assert (await c.compute(x.sum())) == 40 * 40 * 2
    assert "commit" in {ph.name for ph in get_history(s).latest().phases}


async def _until(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def test_slimgraphs_threads_timers_and_settings_end_with_the_last_slim_scheduler():
    async def body():
        import traceback
        await _until(lambda: not _ours(), 5)
        frames = sys._current_frames()
        assert not _ours(), [(t, "".join(traceback.format_stack(frames[t.ident]))) for t in _ours()]
        before = _process_settings()
        loop = asyncio.get_running_loop()
        with switches.set(offload_min_tasks=0, offload_min_bytes=0):
            a = await SlimScheduler(dashboard_address=":0", host="127.0.0.1")
            b = await SlimScheduler(dashboard_address=":0", host="127.0.0.1")
            async with Worker(a.address, nthreads=1), Worker(b.address, nthreads=1):
                async with Client(a.address, asynchronous=True) as ca, Client(b.address, asynchronous=True) as cb:
                    await _stage_one(a, ca)
                    assert any(t.name.startswith(threads.THREAD_NAME) for t in _ours())
                    await a.close()
                    # b still runs: the pool serves it
                    await _stage_one(b, cb)
            await b.close()
        assert await _until(lambda: not _ours()), _ours()
        assert _process_settings() == before
        assert not _our_timers(loop), _our_timers(loop)

    run(body())


def test_a_scheduler_closed_mid_ingestion_leaves_no_thread():
    """Closed while a staged build runs in the pool: the step finishes, the
    thread ends."""

    async def body():
        with switches.set(offload_min_tasks=0, offload_min_bytes=0):
            s = await SlimScheduler(dashboard_address=":0", host="127.0.0.1")
            c = await Client(s.address, asynchronous=True)
            fut = c.compute(da.ones((400, 400), chunks=4).sum())  # 10k-chunk graph
            assert await _until(lambda: any(t.name.startswith(threads.THREAD_NAME) for t in _ours()), 20)
            await c.close()
            await s.close()
            del fut
        assert await _until(lambda: not _ours(), 10), _ours()

    run(body())


def test_a_stock_scheduler_beside_starts_no_thread_of_ours():
    async def body():
        async with Scheduler(dashboard_address=":0", host="127.0.0.1") as s:
            async with Worker(s.address, nthreads=1), Client(s.address, asynchronous=True) as c:
                assert (await c.compute((da.ones((20, 20), chunks=5) + 1).sum())) == 800
        assert not _ours()

    run(body())
