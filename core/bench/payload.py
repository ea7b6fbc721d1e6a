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


async def _capture(collection: Any) -> dict:
    from distributed import Client, Scheduler

    async with Scheduler(dashboard_address=":0", host="127.0.0.1") as s:
        async with Client(s.address, asynchronous=True) as c:
            captured: list = []
            orig = c._send_to_scheduler

            def send(msg: dict) -> None:
                if msg.get("op") == "update-graph":
                    captured.append(msg)
                else:
                    orig(msg)

            c._send_to_scheduler = send
            try:
                futures = c.compute(collection)
            finally:
                c._send_to_scheduler = orig
            del futures
    (msg,) = captured
    out: dict = {}
    for k, v in msg.items():
        if k == "op":
            continue
        if k == "expr_ser":
            out[k] = {"header": v.header, "frames": [bytes(f) for f in v.frames]}
        else:
            out[k] = v.data if isinstance(v, ToPickle) else v
    return out


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
