"""Bad submissions: a clear error, and the scheduler exactly as before.

Each case submits a bad graph to both a stock and a slim scheduler that
already hold some state, and checks on the slim one that the snapshot after
the failed call equals the snapshot before it (no half-ingested tasks), that
the client was told (task-erred / cancelled-keys), and that stock ends in
the same state where stock itself handles the case.
"""
from __future__ import annotations

import asyncio
from collections.abc import Mapping

import dask.array as da
import pytest
from dask._task_spec import Task, TaskRef
from distributed.protocol.serialize import Serialized

from differential import Pair, assert_same, diff, snapshot

pytestmark = pytest.mark.timeout(120)


def inc(x):
    return x + 1


async def _prime(p: Pair) -> None:
    """Some existing state: a persisted-but-queued array."""
    x = da.ones((20, 20), chunks=10) + 1
    await p.submit_both(lambda c: c.persist(x))


async def _bad(p: Pair, make) -> tuple[dict, dict, dict, dict]:
    before = {
        "stock": snapshot(p.stock, p.client_names),
        "slim": snapshot(p.slim, p.client_names),
    }
    n = {t: len(p.reports[t]) for t in p.reports}
    a, b = await p.submit_both(make)
    return before, {"stock": a, "slim": b}, {t: p.reports[t][n[t]:] for t in p.reports}, n


async def _refused_by_both(p: Pair, payload: dict) -> None:
    """Both schedulers report task-erred and end exactly as they were."""
    for tag, s, c in (("stock", p.stock, p.c_stock), ("slim", p.slim, p.c_slim)):
        before = snapshot(s, p.client_names)
        n = len(p.reports[tag])
        await s.update_graph(client=c.id, **payload)
        _unchanged(before, snapshot(s, p.client_names))
        assert [m["op"] for m in p.reports[tag][n:]] == ["task-erred"]


def _unchanged(before: dict, after: dict) -> None:
    # the transition log and counter may not move either: nothing happened
    d = diff(before, after)
    assert not d, "state changed:\n" + "\n".join(d[:20])


def test_cycle_is_refused_with_keys_named():
    dsk = {"a": (inc, "b"), "b": (inc, "c"), "c": (inc, "a"), "d": (inc, "a")}

    async def body():
        async with Pair() as p:
            await _prime(p)
            before, after, reports, _ = await _bad(p, lambda c: c.get(dsk, ["d"], sync=False))
            _unchanged(before["slim"], after["slim"])
            _unchanged(before["stock"], after["stock"])
            errs = [m for m in reports["slim"] if m.get("op") == "task-erred"]
            assert errs and errs[0]["key"] == "d"
            rec = p.slim.extensions["slimgraph"].history.latest()
            assert rec.status == "error"
            assert "Cycle" in rec.error and ("'a'" in rec.error or "-> a" in rec.error)

    asyncio.run(body())


def test_missing_dependency_cancels_like_stock():
    dsk = {"b": Task("b", inc, TaskRef("never-existed"))}

    async def body():
        async with Pair() as p:
            await _prime(p)
            before, after, reports, _ = await _bad(p, lambda c: c.get(dsk, ["b"], sync=False))
            assert_same(after["stock"], after["slim"])
            assert "b" not in after["slim"]["tasks"]
            assert reports["stock"] == reports["slim"]
            assert reports["slim"][0]["op"] == "cancelled-keys"

    asyncio.run(body())


class Weird:
    """Hashable, but not a valid dask key type."""

    def __hash__(self):
        return 7

    def __eq__(self, other):
        return isinstance(other, Weird)

    def __repr__(self):
        return "Weird()"


def test_invalid_key_type_is_refused():
    async def body():
        async with Pair() as p:
            await _prime(p)
            dsk = {Weird(): Task(Weird(), inc, 1), "ok": Task("ok", inc, TaskRef(Weird()))}
            before = snapshot(p.slim, p.client_names)
            msgs, _ = p.capture(lambda c: c.get(dsk, ["ok"], sync=False))
            payload = p.payload(msgs[0])
            n = len(p.reports["slim"])
            await p.slim.update_graph(client=p.c_slim.id, **payload)
            _unchanged(before, snapshot(p.slim, p.client_names))
            rec = p.slim.extensions["slimgraph"].history.latest()
            assert rec.status == "error" and "Invalid key Weird()" in rec.error
            assert any(m["op"] == "task-erred" for m in p.reports["slim"][n:])

    asyncio.run(body())


def test_undeserializable_graph():
    async def body():
        async with Pair() as p:
            await _prime(p)
            msgs, _ = p.capture(lambda c: c.get({"z": (inc, 1)}, ["z"], sync=False))
            payload = p.payload(msgs[0])
            payload["expr_ser"] = Serialized({"serializer": "pickle"}, [b"not a pickle"])
            await _refused_by_both(p, payload)
            rec = p.slim.extensions["slimgraph"].history.latest()
            assert rec.status == "error" and "deserialization" in rec.error

    asyncio.run(body())


class Exploding(Mapping):
    """A graph that fails to materialize once ``armed`` (on the scheduler)."""

    armed = False

    def __init__(self, d):
        self.d = d

    def __getitem__(self, k):
        if Exploding.armed:
            raise RuntimeError("boom while materializing")
        return self.d[k]

    def __iter__(self):
        if Exploding.armed:
            raise RuntimeError("boom while materializing")
        return iter(self.d)

    def __len__(self):
        return len(self.d)


def test_graph_that_fails_to_materialize():
    async def body():
        async with Pair() as p:
            await _prime(p)
            Exploding.armed = False
            try:
                msgs, _ = p.capture(lambda c: c.get(Exploding({"q": (inc, 1)}), ["q"], sync=False))
                payload = p.payload(msgs[0])
                Exploding.armed = True
                await _refused_by_both(p, payload)
            finally:
                Exploding.armed = False
            rec = p.slim.extensions["slimgraph"].history.latest()
            assert rec.status == "error" and ("boom" in rec.error or "Exploding" in rec.error)

    asyncio.run(body())



# ---------------------------------------------------------------------------
# What the client sees: the exception a stock client sees, or a subclass.
# ---------------------------------------------------------------------------
async def _client_exception(s, c, payload: dict) -> BaseException:
    """Ingest ``payload`` as ``c``'s submission and return what awaiting the
    requested key raises on the client."""
    from distributed import Future

    futures = [Future(k, c) for k in payload["keys"]]
    await s.update_graph(client=c.id, **payload)
    try:
        await asyncio.wait_for(futures[0], 10)
    except Exception as e:  # noqa: BLE001 - what the user would catch
        return e
    raise AssertionError("no exception reached the client")


async def _same_exception_type(p: Pair, payload: dict) -> tuple:
    stock = await _client_exception(p.stock, p.c_stock, payload)
    slim = await _client_exception(p.slim, p.c_slim, payload)
    assert isinstance(slim, type(stock)), (type(stock), type(slim))
    return stock, slim


def test_client_sees_stock_exception_types():
    """Cycle, undeserializable graph, a graph that fails to materialize, a
    missing dependency: code written against stock (``except RuntimeError``,
    ``except CancelledError``) catches what the slim scheduler sends."""
    cycle = {"a": (inc, "b"), "b": (inc, "c"), "c": (inc, "a"), "d": (inc, "a")}

    async def body():
        async with Pair() as p:
            msgs, _ = p.capture(lambda c: c.get(cycle, ["d"], sync=False))
            stock, slim = await _same_exception_type(p, p.payload(msgs[0]))
            assert type(stock) is RuntimeError and "Cycle" in str(slim)

            msgs, _ = p.capture(lambda c: c.get({"z": (inc, 1)}, ["z"], sync=False))
            payload = p.payload(msgs[0])
            payload["expr_ser"] = Serialized({"serializer": "pickle"}, [b"not a pickle"])
            stock, slim = await _same_exception_type(p, payload)
            assert type(stock) is RuntimeError

            Exploding.armed = False
            try:
                msgs, _ = p.capture(lambda c: c.get(Exploding({"q": (inc, 1)}), ["q"], sync=False))
                Exploding.armed = True
                stock, slim = await _same_exception_type(p, p.payload(msgs[0]))
            finally:
                Exploding.armed = False
            assert "boom" in str(slim) or "Exploding" in str(slim)

            msgs, _ = p.capture(lambda c: c.get({"m": Task("m", inc, TaskRef("gone"))}, ["m"], sync=False))
            stock, slim = await _same_exception_type(p, p.payload(msgs[0]))
            assert "CancelledError" in type(stock).__name__

    asyncio.run(body())


def test_client_sees_a_type_error_for_an_invalid_key():
    """Stock accepts a key of a type dask does not accept and never runs
    it; slimgraph refuses it, with the TypeError dask's own key check raises."""

    async def body():
        async with Pair() as p:
            dsk = {Weird(): Task(Weird(), inc, 1), "ok": Task("ok", inc, TaskRef(Weird()))}
            msgs, _ = p.capture(lambda c: c.get(dsk, ["ok"], sync=False))
            exc = await _client_exception(p.slim, p.c_slim, p.payload(msgs[0]))
            assert isinstance(exc, TypeError) and "Invalid key Weird()" in str(exc)

    asyncio.run(body())
