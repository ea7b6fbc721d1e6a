"""Differential harness: the same submission to a stock and a slim scheduler.

A real ``Client`` builds each submission against the stock scheduler; its
``update-graph`` message is captured instead of sent, and the very same
payload (same pickled expression, keys, annotations, priorities) is handed
to ``update_graph`` of both schedulers, one after the other, in this
process. A state snapshot is taken right after each ``update_graph`` returns,
before the event loop runs anything else, so even with workers attached the
two snapshots describe the same moment: the end of ingestion.

Snapshots are canonical: keys instead of objects, client ids and worker
addresses mapped to stable names, empty containers and ``None`` equal (the
slim engine does not allocate empty containers; that is the point).
"""
from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, defaultdict
from typing import Any, Callable

from distributed import Client, Future, Scheduler, Worker
from distributed.diagnostics.plugin import SchedulerPlugin

from slimgraph.bench.payload import arguments, intercept
from slimgraph.distributed import SlimScheduler


class Recorder(SchedulerPlugin):
    """Records what plugins see: update_graph calls and transitions."""

    name = "differential-recorder"

    def __init__(self) -> None:
        self.update_graphs: list = []
        self.transitions: defaultdict = defaultdict(list)
        #: every call, in order: ("update_graph", n) / ("transition", key, start, finish)
        self.calls: list = []

    def update_graph(self, scheduler, *, client, keys, tasks, annotations, priority, stimulus_id, **kw):
        self.update_graphs.append(
            {
                "keys": set(keys),
                "tasks": list(map(repr, tasks)),
                "annotations": {
                    k: {repr(kk): vv for kk, vv in v.items()} for k, v in annotations.items() if k != "span"
                },
                "span_annotations": {repr(kk): vv["name"] for kk, vv in annotations.get("span", {}).items()},
                "priority": {repr(k): v for k, v in priority.items()},
            }
        )
        self.calls.append(("update_graph", len(self.update_graphs)))

    def transition(self, key, start, finish, *args, **kwargs):
        self.transitions[key].append((start, finish))
        self.calls.append(("transition", key, start, finish))


def inc(x):
    return x + 1


def add(*args):
    return sum(args)


def tree(n: int = 64) -> Any:
    """A delayed reduction tree over ``n`` leaves, three inputs per node."""
    from dask import delayed

    xs = [delayed(inc)(i, dask_key_name=("leaf", i)) for i in range(n)]
    while len(xs) > 1:
        xs = [delayed(add)(*xs[i : i + 3]) for i in range(0, len(xs), 3)]
    return xs[0]


def dashboard_plugins(s: Scheduler) -> list:
    """The plugins dask's own dashboard registers on a scheduler when its
    Status and Graph pages are opened."""
    from distributed.diagnostics.graph_layout import GraphLayout
    from distributed.diagnostics.task_stream import TaskStreamPlugin

    out = [TaskStreamPlugin(s), GraphLayout(s)]
    for p in out:
        s.add_plugin(p)
    return out


def layout(plugin) -> dict:
    """What a GraphLayout plugin has laid out (comparable across schedulers;
    its state updates grow as workers compute, so they are left out)."""
    return {
        "x": list(plugin.x.items()),  # (in order: the page draws them so)
        "y": list(plugin.y.items()),
        "index": list(plugin.index.items()),
        "new": list(plugin.new),
        "new_edges": list(plugin.new_edges),
    }


def _token(spec: Any) -> str:
    from dask.base import tokenize

    return tokenize(spec)


def _keys(container: Any) -> frozenset:
    return frozenset(ts.key for ts in container or ())


def snapshot(s: Scheduler, client_names: dict) -> dict:
    """Canonical, comparable view of a scheduler's task state.

    Which worker takes a task is compared only as "some worker" plus the
    number of tasks per worker: stock breaks ties between equally busy
    workers by iterating a set of WorkerStates, whose order follows the hash
    of their (random-port) addresses, so two stock schedulers differ there
    too. Which tasks are processing, queued or unrunnable is compared
    exactly.
    """
    owed = getattr(s, "slim_deliveries", None)
    if owed:  # plugin calls a staged commit still owes: delivered by now
        owed.flush()
    tasks = {}
    for k, ts in s.tasks.items():
        spec = ts.run_spec
        ann = dict(ts.annotations or {})
        tasks[k] = {
            "state": ts.state,
            "priority": ts.priority,
            "run_spec": None if spec is None else (type(spec).__name__, frozenset(spec.dependencies)),
            # the run_spec as read (slim: built from its compact graph now):
            # equal to stock's by dask's own token (what ``==`` compares)
            "run_spec_token": None if spec is None else _token(spec),
            "dependencies": _keys(ts.dependencies),
            "dependents": _keys(ts.dependents),
            "waiting_on": _keys(ts.waiting_on),
            "waiters": _keys(ts.waiters),
            "who_wants": frozenset(client_names.get(cs.client_key, cs.client_key) for cs in ts.who_wants or ()),
            "who_has": len(ts.who_has or ()),
            "processing_on": "worker" if ts.processing_on else None,
            "retries": ts.retries,
            "annotations": ann,
            "worker_restrictions": ts.worker_restrictions,
            "host_restrictions": ts.host_restrictions,
            "resource_restrictions": ts.resource_restrictions,
            "loose_restrictions": ts.loose_restrictions,
            "actor": ts.actor,
            "has_lost_dependencies": ts.has_lost_dependencies,
            "exception_blame": ts.exception_blame.key if ts.exception_blame else None,
            "group": ts.group.name,
            "prefix": ts.prefix.name,
        }
    groups = {
        name: {
            "states": dict(tg.states),
            "size": len(tg),
            "dependencies": frozenset(d.name for d in tg.dependencies),
            "prefix": tg.prefix.name,
            "span": s.extensions["spans"].spans[tg.span_id].name if tg.span_id else None,
        }
        for name, tg in s.task_groups.items()
    }
    prefixes = {
        name: {"states": dict(tp.states), "state_counts": {k: v for k, v in tp.state_counts.items() if v}, "size": len(tp)}
        for name, tp in s.task_prefixes.items()
    }
    transitions = defaultdict(list)
    for t in s.transition_log:
        transitions[t.key].append((t.start, t.finish))
    return {
        "tasks": tasks,
        "groups": groups,
        "prefixes": prefixes,
        "queued": frozenset(ts.key for ts in s.queued),
        "unrunnable": frozenset(ts.key for ts in s.unrunnable),
        "processing": sorted(len(ws.processing) for ws in s.workers.values()),
        "processing_tasks": frozenset(ts.key for ws in s.workers.values() for ts in ws.processing),
        "clients": {
            client_names.get(c, c): frozenset(ts.key for ts in cs.wants_what) for c, cs in s.clients.items()
        },
        "transition_counter": s.transition_counter,
        "transitions": dict(transitions),
        "generation": s.generation,
    }


def diff(a: dict, b: dict, path: str = "") -> list[str]:
    """Human-readable differences between two snapshots (empty: equal)."""
    out: list[str] = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a.keys() | b.keys():
            if k not in a:
                out.append(f"{path}/{k!r}: only in slim")
            elif k not in b:
                out.append(f"{path}/{k!r}: only in stock")
            else:
                out.extend(diff(a[k], b[k], f"{path}/{k!r}"))
    elif a != b:
        out.append(f"{path}: stock={a!r} slim={b!r}")
    return out


class Pair:
    """A stock and a slim scheduler side by side, each with a client and
    optionally in-process workers (same names on both sides)."""

    #: Whether a Recorder plugin listens on both sides (it records every
    #: update_graph call and transition; a listening plugin makes the slim
    #: scheduler ingest synchronously instead of staging, see
    #: slimgraph.ingest.pipeline). Tests run both ways.
    listen_default = True

    def __init__(
        self,
        n_workers: int = 0,
        nthreads: int = 1,
        resources: dict | None = None,
        validate: bool = False,
        listen: bool | None = None,
    ):
        self.listen = self.listen_default if listen is None else listen
        self.n_workers = n_workers
        self.nthreads = nthreads
        self.resources = resources
        self.validate = validate

    async def __aenter__(self) -> "Pair":
        self._stack = contextlib.AsyncExitStack()
        st = self._stack
        self.stock = await st.enter_async_context(Scheduler(dashboard_address=":0", host="127.0.0.1", validate=self.validate))
        self.slim = await st.enter_async_context(SlimScheduler(dashboard_address=":0", host="127.0.0.1", validate=self.validate))
        self.workers = {}
        for s, tag in ((self.stock, "stock"), (self.slim, "slim")):
            ws = []
            for i in range(self.n_workers):
                w = await st.enter_async_context(
                    Worker(s.address, nthreads=self.nthreads, name=f"w{i}", resources=self.resources, host="127.0.0.1")
                )
                ws.append(w)
            self.workers[tag] = ws
        for s in (self.stock, self.slim):  # every worker registered and idle
            while len(s.running) < self.n_workers or len(s.idle_task_count) < self.n_workers:
                await asyncio.sleep(0.01)
        self.c_stock = await st.enter_async_context(Client(self.stock.address, asynchronous=True))
        self.c_slim = await st.enter_async_context(Client(self.slim.address, asynchronous=True))
        self.client_names = {self.c_stock.id: "client", self.c_slim.id: "client"}
        self.rec_stock = self.rec_slim = None
        self.dash_stock = self.dash_slim = None
        self.calls_at: dict = {}
        if self.listen:
            self.rec_stock, self.rec_slim = Recorder(), Recorder()
            self.stock.add_plugin(self.rec_stock)
            self.slim.add_plugin(self.rec_slim)
            self.dash_stock = dashboard_plugins(self.stock)
            self.dash_slim = dashboard_plugins(self.slim)
        self.reports = {"stock": [], "slim": []}
        for s, tag in ((self.stock, "stock"), (self.slim, "slim")):
            self._watch_reports(s, tag)
        self.futures: list = []
        return self

    def _watch_reports(self, s: Scheduler, tag: str) -> None:
        orig = s.report
        log = self.reports[tag]

        def report(msg, ts=None, client=None):
            m = {k: v for k, v in msg.items() if k in ("op", "key", "keys", "reason")}
            if "keys" in m:
                m["keys"] = frozenset(m["keys"])
            log.append(m)
            return orig(msg, ts=ts, client=client)

        s.report = report

    async def __aexit__(self, *exc: Any) -> None:
        self.futures.clear()
        await self._stack.__aexit__(*exc)

    def capture(self, make: Callable[[Client], Any]) -> tuple[list[dict], Any]:
        """Run ``make(client)`` on the stock-side client, capturing (not
        sending) its update-graph messages."""
        return intercept(self.c_stock, make)

    payload = staticmethod(arguments)

    async def submit_both(self, make: Callable[[Client], Any]) -> tuple[dict, dict]:
        """Capture ``make``'s submission, ingest it on both, snapshot both."""
        msgs, result = self.capture(make)
        assert msgs, "make() sent no update-graph"
        snaps = {}
        for tag, s, c in (("stock", self.stock, self.c_stock), ("slim", self.slim, self.c_slim)):
            for msg in msgs:
                p = self.payload(msg)
                await s.update_graph(client=c.id, **p)
                if tag == "stock":
                    self.futures.extend(Future(k, self.c_stock) for k in p["keys"])
                else:
                    self.futures.extend(Future(k, self.c_slim) for k in p["keys"])
            snaps[tag] = snapshot(s, self.client_names)
            rec = self.rec_stock if tag == "stock" else self.rec_slim
            if rec is not None:  # calls plugins had heard of by the end of ingestion
                self.calls_at[tag] = len(rec.calls)
        return snaps["stock"], snaps["slim"]

    def futures_of(self, tag: str) -> list:
        c = self.c_stock if tag == "stock" else self.c_slim
        return [f for f in self.futures if f.client is c]


def assert_same(stock: dict, slim: dict, ignore: tuple = ()) -> None:
    a = {k: v for k, v in stock.items() if k not in ignore}
    b = {k: v for k, v in slim.items() if k not in ignore}
    d = diff(a, b)
    assert not d, "stock and slim differ:\n" + "\n".join(sorted(d)[:40])


async def wait_idle(
    s: Scheduler, timeout: float = 30, states: tuple = ("waiting", "processing", "queued", "no-worker")
) -> None:
    """Until no task is in one of ``states``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while any(ts.state in states for ts in s.tasks.values()):
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(Counter(ts.state for ts in s.tasks.values()))
        await asyncio.sleep(0.02)


def cpython_checks_failed(monkeypatch: Any) -> None:
    """Make every mechanism of :mod:`slimgraph.shim.cpython` answer as if
    its check had failed at import (another interpreter, another layout):
    the callers' plain paths, for the rest of the test."""
    from slimgraph.shim import cpython

    for name, failed in (("_AVAILABLE", False), ("_SIZES", None), ("_LAYOUT", None),
                         ("_FRAMES_BY_THREAD", False), ("_FRAMES_BY_DEPTH", False)):
        monkeypatch.setattr(cpython, name, failed)
