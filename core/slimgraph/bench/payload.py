"""Capture the exact update-graph payload a Client sends for a collection.

A throwaway stock scheduler (no workers) and a real Client run in-process;
the client's ``update-graph`` message is intercepted instead of sent and
stored with pickle. Both benchmark children replay the same bytes.
"""
from __future__ import annotations

import asyncio
import pickle
from typing import Any

from distributed.protocol.serialize import ToPickle


def intercept(client: Any, make: Any) -> tuple[list, Any]:
    """Run ``make(client)``, keeping (not sending) its update-graph messages.

    Every other message the client sends goes out as usual.
    """
    from slimgraph import shim

    captured: list = []

    def keep(msg: dict) -> bool:
        if msg.get("op") == "update-graph":
            captured.append(msg)
            return True
        return False

    with shim.client_messages_kept(client, keep):
        result = make(client)
    return captured, result


def arguments(msg: dict) -> dict:
    """An update-graph message as ``Scheduler.update_graph`` receives it."""
    return {k: v.data if isinstance(v, ToPickle) else v for k, v in msg.items() if k != "op"}


async def _capture(collection: Any) -> dict:
    from distributed import Client, Scheduler

    async with Scheduler(dashboard_address=":0", host="127.0.0.1") as s:
        async with Client(s.address, asynchronous=True) as c:
            (msg,), futures = intercept(c, lambda c: c.compute(collection))
            del futures
    out = arguments(msg)
    ser = on_arrival(out["expr_ser"])
    out["expr_ser"] = {"header": ser.header, "frames": [bytes(f) for f in ser.frames]}
    return out


def on_arrival(ser: Any) -> Any:
    """The serialized graph as a scheduler receives it: through
    distributed's wire encoding and back, not deserialized (its header
    gains the entries the encoding adds, e.g. ``num-sub-frames``)."""
    from distributed.protocol import dumps, loads

    return loads(dumps({"expr_ser": ser}), deserialize=False)["expr_ser"]


def capture(collection: Any) -> dict:
    return asyncio.run(_capture(collection))


def save(payload: dict, path: str) -> None:
    with open(path, "wb") as f:
        pickle.dump(payload, f, protocol=5)


def load(path: str) -> dict:
    from distributed.protocol.serialize import Serialized

    with open(path, "rb") as f:
        payload = pickle.load(f)
    ser = payload.pop("expr_ser")
    payload["expr_ser"] = Serialized(ser["header"], ser["frames"])
    return payload
