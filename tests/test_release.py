"""A client's release and cancel in slices (slimgraph.life.release), against
stock's one call.

The same graph, ingested by a stock and a slim scheduler, then released or
cancelled through each scheduler's own stream handler (what a client's
message reaches): the slim one runs it in slices (here as short as they go:
one transition each), stock in one call. Compared: the transitions made
(key, start, finish, recommendations) in order, what plugins heard in
order, the messages each worker and client was sent in order, and the state
at the end; between every two slices, every task without a pending
recommendation passes distributed's ``validate_task_state``; and stimuli that
arrive while the slim one is still releasing (a resubmission, a client's
wish for a key, another release) end as stock's, which handled them after
its release.
"""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import dask
import dask.array as da
import numpy as np
import pytest
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.scheduler import validate_task_state

from differential import Pair, assert_same, snapshot, tree, wait_idle

from slimgraph.runtime import gcpause, loopwork

pytestmark = pytest.mark.timeout(180)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(autouse=True)
def whole_transition_log():
    """Every transition stays in the log (distributed keeps the last 1,000)."""
    with dask.config.set({"distributed.admin.low-level-log-length": 1_000_000}):
        yield


@pytest.fixture
def one_transition_slices(monkeypatch):
    """Every slice of a job ends after its first transition."""
    monkeypatch.setattr(loopwork, "SLICE", 0.0)


GRAPHS = {
    "array-reduction": lambda: (da.ones((60, 60), chunks=6) + 1).sum(axis=0),
    "array-mean": lambda: (da.ones((40, 40), chunks=5) * 2).mean(),
    "delayed-tree": lambda: tree(81),
}


def _no_stimulus(msg: dict) -> dict:
    return {k: (sorted(map(str, v)) if k == "keys" else v) for k, v in msg.items() if k != "stimulus_id"}


def record_messages(s, names: dict) -> list:
    """Every message ``s`` sends through ``send_all``, per destination
    (workers by name, clients as ``client``), stimulus ids left out."""
    sent: list = []
    orig = s.send_all

    def send_all(client_msgs, worker_msgs):
        for c, msgs in client_msgs.items():
            sent.extend(("client", _no_stimulus(m)) for m in msgs)
        for w, msgs in worker_msgs.items():
            sent.extend((names.get(w, w), _no_stimulus(m)) for m in msgs)
        return orig(client_msgs, worker_msgs)

    s.send_all = send_all
    return sent


def per_destination(sent: list) -> dict:
    """Clients' messages in order; workers' as what each key was told, in
    order (which worker holds a key follows stock's tie-breaks between
    equally busy workers, which differ between two stock schedulers too)."""
    out: dict = {"client": [], "keys": {}}
    for dest, m in sent:
        if dest == "client":
            out["client"].append(m)
            continue
        keys = m.get("keys") or ([m["key"]] if "key" in m else [None])
        for k in keys:
            told = out["keys"].setdefault(k, [])
            said = {f: v for f, v in m.items() if f not in ("keys", "key")}
            if not told or told[-1] != said:  # (once per key: a replica's worker is told too)
                told.append(said)
    return out


def transitions_since(s, at: int) -> list:
    return [(t.key, t.start, t.finish, dict(t.recommendations)) for t in list(s.transition_log)[at:]]


async def settle(p: Pair) -> None:
    for s in (p.stock, p.slim):
        for pending in (getattr(s, "slim_tails", None), getattr(s, "slim_deliveries", None)):
            if pending:
                await pending.wait()


async def released_both_ways(p: Pair, op: str, args_of) -> dict:
    """Send ``op`` (``client-releases-keys`` or ``cancel-keys``) through each
    scheduler's stream handler table; wait for slim's slices to end. Returns
    per side: transitions, plugin calls, messages, slices."""
    out = {}
    for tag, s, c in (("stock", p.stock, p.c_stock), ("slim", p.slim, p.c_slim)):
        names = {ws.address: ws.name for ws in s.workers.values()}
        rec = p.rec_stock if tag == "stock" else p.rec_slim
        log_at, calls_at = len(s.transition_log), len(rec.calls) if rec is not None else 0
        reports_at = len(p.reports[tag])
        sent = record_messages(s, names)
        slices_at = s.slim_work.slices if tag == "slim" else 0
        shields_before = gcpause.shields()
        s.stream_handlers[op](**args_of(c))
        if tag == "slim":
            assert s.slim_work.busy, "the release ended within its first slice"
            # collections meanwhile freeze first (runtime.gcpause.shield)
            assert gcpause.shields() == shields_before + 1
            await s.slim_work.idle()
            assert gcpause.shields() == shields_before
        out[tag] = {
            "transitions": transitions_since(s, log_at),
            "calls": rec.calls[calls_at:] if rec is not None else None,
            "messages": per_destination(sent),
            "reports": p.reports[tag][reports_at:],
            "slices": s.slim_work.slices - slices_at if tag == "slim" else 1,
            "state": snapshot(s, p.client_names),
        }
        del s.send_all
    return out


def validate_between_slices(s) -> SimpleNamespace:
    """Between every two of ``s``'s slices: every task without a pending
    recommendation passes ``validate_task_state``; the task groups' counts
    are their tasks' states."""
    checked = SimpleNamespace(times=0, failures=[])

    def check():
        pending = s.slim_work.pending or {}
        try:
            for key, ts in s.tasks.items():
                if key not in pending:
                    validate_task_state(ts)
            for tg in s.task_groups.values():
                assert sum(tg.states.values()) == len(tg), tg
            checked.times += 1
        except AssertionError as e:
            checked.failures.append(repr(e)[:300])

    s.slim_work.between = check
    return checked


def assert_released_alike(out: dict) -> None:
    a, b = out["stock"], out["slim"]
    assert a["transitions"], "the release made no transition"
    assert b["slices"] > 3, b["slices"]
    assert a["transitions"] == b["transitions"]
    assert a["calls"] == b["calls"]
    assert a["messages"] == b["messages"]
    assert a["reports"] == b["reports"]
    assert_same(a["state"], b["state"])


@pytest.mark.parametrize("n_workers", [0, 2])
@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_a_release_in_slices_makes_stocks_transitions_messages_and_calls(graph, n_workers, one_transition_slices):
    async def body():
        async with Pair(n_workers=n_workers, validate=True) as p:
            await p.submit_both(lambda c: c.compute(GRAPHS[graph]()))
            if n_workers:
                for s in (p.stock, p.slim):
                    await wait_idle(s)  # some tasks in memory on workers: free-keys
            await settle(p)
            keys = sorted({f.key for f in p.futures_of("stock")}, key=str)
            checked = validate_between_slices(p.slim)
            out = await released_both_ways(
                p, "client-releases-keys", lambda c: {"keys": keys, "client": c.id, "stimulus_id": "release"}
            )
            assert_released_alike(out)
            assert checked.failures == [] and checked.times > 3
            assert not p.stock.tasks and not p.slim.tasks

    run(body())


@pytest.mark.parametrize("force", [False, True])
def test_a_cancel_in_slices_is_stocks_cancel(force, one_transition_slices):
    """``Client.cancel``'s ``cancel-keys``: stock's walk over the dependents,
    its releases and its ``cancelled-keys`` report, with results in memory
    on two workers."""

    async def body():
        async with Pair(n_workers=2, validate=True) as p:
            x = da.ones((60, 60), chunks=6) + 1
            await p.submit_both(lambda c: c.compute(x.sum() + x.mean()))
            for s in (p.stock, p.slim):
                await wait_idle(s)
            await settle(p)
            keys = sorted({f.key for f in p.futures_of("stock")}, key=str)
            checked = validate_between_slices(p.slim)
            out = await released_both_ways(
                p, "cancel-keys",
                lambda c: {"keys": keys, "client": c.id, "force": force, "reason": "test", "msg": None},
            )
            assert_released_alike(out)
            assert checked.failures == [] and checked.times > 3
            assert any(r.get("op") == "cancelled-keys" for r in out["slim"]["reports"])

    run(body())


def test_a_client_closing_releases_what_it_wanted_in_slices_like_stock(one_transition_slices):
    """``remove_client`` (a client's comm closing): its keys released in
    slices with stock's transitions and plugin calls, then stock's removal
    of the client (plugins' ``remove_client`` heard after the release on
    both)."""

    async def body():
        async with Pair(n_workers=2) as p:
            await p.submit_both(lambda c: c.compute(tree(81)))
            for s in (p.stock, p.slim):
                await wait_idle(s)
            await settle(p)
            out = {}
            for tag, s, c in (("stock", p.stock, p.c_stock), ("slim", p.slim, p.c_slim)):
                rec = p.rec_stock if tag == "stock" else p.rec_slim
                heard = []
                s.add_plugin(RemovedClients(heard))
                log_at, calls_at = len(s.transition_log), len(rec.calls) if rec is not None else 0
                s.remove_client(client=c.id, stimulus_id="bye")
                if tag == "slim":
                    assert s.slim_work.busy and c.id in s.clients
                    await s.slim_work.idle()
                out[tag] = (transitions_since(s, log_at), rec.calls[calls_at:] if rec is not None else None,
                            heard, snapshot(s, p.client_names))
                assert c.id not in s.clients and not s.tasks
            a, b = out["stock"], out["slim"]
            assert a[0] and a[0] == b[0]
            assert a[1] == b[1]
            assert a[2] == b[2] == [("remove_client", 0)]
            assert_same(a[3], b[3])

    run(body())


class RemovedClients(SchedulerPlugin):
    name = "removed-clients"

    def __init__(self, heard: list):
        self.heard = heard

    def remove_client(self, scheduler, client):
        # (the tasks it still held: none, after the release, as on stock)
        self.heard.append(("remove_client", len(scheduler.tasks)))


def test_stimuli_that_arrive_during_the_release_end_as_stocks(one_transition_slices):
    """While slim is still releasing: the same graph submitted again (an
    update-graph, a coroutine handler), a client's wish for a key and a
    second release (plain handlers). Stock handles them after its release;
    slim holds them until its release is done, then handles them in the
    order they arrived: the same transitions, calls and state."""

    async def body():
        async with Pair(n_workers=0) as p:
            x = (da.ones((60, 60), chunks=6) + 1).sum(axis=0)
            y = (da.ones((30, 30), chunks=6) * 3).sum()
            await p.submit_both(lambda c: c.compute(x))
            await p.submit_both(lambda c: c.compute(y))
            await settle(p)
            kx, ky = (f.key for f in p.futures_of("stock")[:2])
            again = p.payload(p.capture(lambda c: c.compute(x))[0][0])
            out = {}
            for tag, s, c in (("stock", p.stock, p.c_stock), ("slim", p.slim, p.c_slim)):
                rec = p.rec_stock if tag == "stock" else p.rec_slim
                log_at, calls_at = len(s.transition_log), len(rec.calls) if rec is not None else 0
                table = s.stream_handlers
                table["client-releases-keys"](keys=[kx], client=c.id, stimulus_id="release")
                if tag == "slim":
                    assert s.slim_work.busy
                    first = len(s.transition_log)
                resubmit = asyncio.ensure_future(table["update-graph"](client=c.id, **again))
                await asyncio.sleep(0)
                table["client-releases-keys"](keys=[ky], client=c.id, stimulus_id="release-2")
                if tag == "slim":
                    # held: nothing of them happened yet
                    assert len(s.slim_work.held) == 1 and not resubmit.done()
                    assert all(t.stimulus_id == "release" for t in list(s.transition_log)[first:])
                await resubmit
                if tag == "slim":
                    await s.slim_work.idle()
                await settle(p)
                out[tag] = (transitions_since(s, log_at), rec.calls[calls_at:] if rec is not None else None,
                            snapshot(s, p.client_names))
            a, b = out["stock"], out["slim"]
            assert a[0] == b[0]
            assert a[1] == b[1]
            assert_same(a[2], b[2], ignore=("generation",))
            assert set(again["keys"]) <= set(p.slim.tasks) and kx not in p.slim.tasks and ky not in p.slim.tasks
            assert any(key in p.slim.tasks for key, *_ in b[0])  # the resubmission took some back

    run(body())


def test_a_small_release_is_one_call_like_stocks():
    """A release that fits in a slice ends inside its handler: nothing held,
    no job left."""

    async def body():
        async with Pair(n_workers=0) as p:
            await p.submit_both(lambda c: c.compute(tree(9)))
            await settle(p)
            key = p.futures_of("slim")[0].key
            p.slim.stream_handlers["client-releases-keys"](keys=[key], client=p.c_slim.id, stimulus_id="r")
            assert not p.slim.slim_work.busy
            assert not p.slim.tasks

    run(body())


def test_a_cancelled_graph_on_worker_processes_leaves_nothing_and_computes_again(monkeypatch):
    """Real parts: a slim LocalCluster with two worker processes computes an
    array, the client cancels it while it runs (in slices of 1 ms), the
    scheduler ends holding none of its tasks, a ping answered meanwhile,
    and the same graph submitted again computes the right result."""
    from distributed import Client

    from slimgraph.distributed import SlimLocalCluster

    monkeypatch.setattr(loopwork, "SLICE", 0.001)
    x = (da.ones((400, 400), chunks=5) + 1).sum()  # 6,400 chunks

    async def body():
        async with SlimLocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                    asynchronous=True) as cluster, \
                Client(cluster, asynchronous=True) as client:
            s = cluster.scheduler
            fut = client.compute(x)
            while not any(ts.state == "memory" for ts in s.tasks.values()):
                await asyncio.sleep(0.01)
            slices_at = s.slim_work.slices
            await client.cancel(fut)
            assert fut.cancelled()
            while s.tasks:
                assert (await client.scheduler.identity())["type"] == "Scheduler"
                await asyncio.sleep(0)
            assert s.slim_work.slices - slices_at > 1
            s.validate_state()
            assert await client.compute(x) == np.float64(2 * 400 * 400)

    run(body())
