"""One way to read a scheduler's measurements: a feed.

A feed reads one scheduler through the ``slimgraph`` extension's handlers
(:class:`~slimgraph.instrument.recorder.SlimgraphExtension`, the only
scheduler-side surface) and decodes their plain data, the records' own
serialization, into the instrument's objects: :class:`SubmissionRecord`
(from ``to_dict``), :class:`MemoryTree` (``from_dict``),
:class:`Census` (``from_records``). Two implementations, one interface:

- :class:`LocalFeed`: a scheduler object in this process. The extension's
  methods run on the scheduler's own event loop (hopping threads when the
  caller runs on another thread, as a notebook beside an in-process
  LocalCluster does), so a walk never races with ``update_graph``; the extension
  is created on first use.
- :class:`RemoteFeed`: a scheduler reached through a ``distributed.Client``
  (synchronous or asynchronous), calling the ``slimgraph_*`` RPC handlers.
  A scheduler that has no extension (a stock scheduler nobody installed it
  on) answers an unknown handler with ``None``; no handler of ours does, so
  the feed raises :class:`NotInstalled` saying what to do.
  :meth:`RemoteFeed.install` installs it: it registers a
  :class:`~slimgraph.instrument.stock_recorder.StockRecorderPlugin` on the scheduler
  (pickled, so the scheduler must be able to import slimgraph).

Every reading method is a coroutine that may be awaited on any running
loop (it hops to the feed's loop and back). From a thread that runs no
event loop (a dashboard job), use ``feed.sync(feed.records, since, timeout=...)``.
The client helpers (:mod:`slimgraph.instrument.client`), the dashboard, the
scheduler tab and the notebooks all read schedulers through feeds.
"""
from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable, Callable, TypeVar

from slimgraph.instrument.lazysets import Census
from slimgraph.instrument.memory import MemoryTree
from slimgraph.instrument.recorder import (
    EXTENSION_NAME,
    HANDLER_PREFIX,
    SlimgraphExtension,
    get_extension,
    scheduler_kind,
)
from slimgraph.instrument.records import PhaseRecord, SubmissionRecord

T = TypeVar("T")


class NotInstalled(RuntimeError):
    """The scheduler has no ``slimgraph`` extension: its handlers are missing."""


def record_from_dict(d: dict) -> SubmissionRecord:
    """Inverse of ``SubmissionRecord.to_dict()`` (strict: an unknown field
    is a ``TypeError``, not a guess)."""
    d = dict(d)
    phases = [PhaseRecord(**p) for p in d.pop("phases")]
    if "layers" in d:  # (a list of dicts; the wire may hand back a tuple)
        d["layers"] = [dict(x) for x in d["layers"]]
    return SubmissionRecord(phases=phases, **d)


def records_from_dicts(rows: list[dict]) -> list[SubmissionRecord]:
    return [record_from_dict(d) for d in rows]


class Feed:
    """Reads one scheduler's measurements (see the module docstring).

    Subclasses say on which loop the extension is reached (:attr:`loop`)
    and how (:meth:`_call`).
    """

    remote: bool

    def __init__(self, kind: str | None = None):
        #: ``"stock"``/``"slim"``; known once :meth:`status` has answered
        #: (a local feed knows it from the start).
        self.kind = kind

    # -- transport -------------------------------------------------------------
    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        raise NotImplementedError

    async def _call(self, name: str, **kwargs: Any) -> Any:
        """The extension's handler ``name``; runs on :attr:`loop`."""
        raise NotImplementedError

    async def _hop(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """``await fn(*args, **kwargs)`` on :attr:`loop`, from any loop."""
        loop = self.loop
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            return await fn(*args, **kwargs)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(fn(*args, **kwargs), loop))

    async def call(self, name: str, **kwargs: Any) -> Any:
        if name not in SlimgraphExtension.HANDLERS:
            raise ValueError(f"no slimgraph handler {name!r}")
        return await self._hop(self._call, name, **kwargs)

    def sync(self, method: Callable[..., Awaitable[T]], *args: Any,
             timeout: float | None = None, **kwargs: Any) -> T:
        """Run the coroutine ``method(*args, **kwargs)`` and wait for it, at
        most ``timeout`` seconds (then the call is cancelled and
        ``TimeoutError`` raised). For threads that run no event loop; on
        another loop's thread it blocks that loop meanwhile (await instead
        where that matters), and on the feed's own loop it would deadlock."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            raise RuntimeError("Feed.sync() called on the feed's own event loop: await the method")
        fut = asyncio.run_coroutine_threadsafe(method(*args, **kwargs), self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise

    # -- the measurements --------------------------------------------------------
    async def status(self) -> dict:
        """kind, rss, tasks, states, latest, recording (see
        :meth:`SlimgraphExtension.status`)."""
        st = await self.call("status")
        self.kind = st["kind"]
        return st

    async def records(self, since: int = 0) -> list[SubmissionRecord]:
        """The update_graph records after submission id ``since``, oldest first."""
        return records_from_dicts(await self.call("records", since=since))

    async def memory_tree(self, sample: int | None | str = "auto",
                          budget_s: float = 0.02) -> MemoryTree:
        return MemoryTree.from_dict(await self.call("memory_tree", sample=sample, budget_s=budget_s))

    async def lazysets(self, budget_s: float = 0.02) -> Census:
        return Census.from_records(await self.call("lazysets", budget_s=budget_s))

    async def lazysets_series(self, start: bool | None = None, interval: float = 0.5) -> list[dict]:
        """The census time series as ``Census.to_records`` rows."""
        return await self.call("lazysets_series", start=start, interval=interval)

    async def install(self, record_phases: bool | str = "auto") -> str:
        """Hook update_graph: ``"phases"`` (stock, timed from outside) or
        ``"hook-only"`` (a scheduler that records its own phases)."""
        return await self.call("install", record_phases=record_phases)

    async def set_lazy(self, flag: bool) -> bool:
        return await self.call("set_lazy", flag=flag)

    async def memray_arm(self, directory: str | None = None, native_traces: bool = False) -> str:
        """Capture the next update_graph; returns the capture's path."""
        return await self.call("memray_arm", directory=directory, native_traces=native_traces)

    async def memray_results(self, top: int = 20, flamegraph: bool = True,
                             path: str | None = None) -> list[dict]:
        """``MemraySummary.to_dict()`` of the finished captures (or of ``path``)."""
        return await self.call("memray_results", top=top, flamegraph=flamegraph, path=path)

    async def memray_flamegraph(self, path: str) -> str | None:
        """The HTML flamegraph of the finished capture at ``path``, or None."""
        return (await self.call("memray_flamegraph", path=path))["html"]

    async def loop_summary(self) -> dict:
        return await self.call("loop_summary")

    async def loop_blocks(self, since: float = 0.0) -> list[dict]:
        """The loop's blocks of 50 ms or more that ended after ``since``
        (``time.time()``), each with its cause (``wall_end``, ``seconds``,
        ``cause``, ``label``, ``parts``)."""
        return await self.call("loop_blocks", since=since)


class LocalFeed(Feed):
    """A scheduler object in this process, read on its own event loop.

    Except :data:`OFF_LOOP`: handlers that read only thread-safe state (the
    History, behind its lock; counters copied in single C-level steps) run
    in the caller's thread once the extension exists, so a scheduler loop
    busy with a long ingestion (stock blocks it for the whole update_graph)
    does not hold up a dashboard's new bars and RSS line.
    """

    remote = False
    OFF_LOOP = frozenset({"records", "status"})

    def __init__(self, scheduler: Any, kind: str | None = None):
        super().__init__(kind or scheduler_kind(scheduler))
        self.scheduler = scheduler

    async def call(self, name: str, **kwargs: Any) -> Any:
        ext = self.scheduler.extensions.get(EXTENSION_NAME)
        if name in self.OFF_LOOP and ext is not None:
            return getattr(ext, name)(**kwargs)
        return await super().call(name, **kwargs)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.scheduler.loop.asyncio_loop

    async def _call(self, name: str, **kwargs: Any) -> Any:
        out = getattr(get_extension(self.scheduler), name)(**kwargs)
        if inspect.isawaitable(out):
            out = await out
        return out


class RemoteFeed(Feed):
    """A scheduler reached through a ``distributed.Client``."""

    remote = True

    def __init__(self, client: Any, kind: str | None = None):
        super().__init__(kind)
        self.client = client

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.client.loop.asyncio_loop

    async def _call(self, name: str, **kwargs: Any) -> Any:
        out = await getattr(self.client.scheduler, HANDLER_PREFIX + name)(**kwargs)
        if out is None:
            # distributed answers None to an op it has no handler for
            raise NotInstalled(
                f"the scheduler at {self.client.scheduler.address} has no slimgraph extension "
                f"(no handler {HANDLER_PREFIX + name}). Call "
                "slimgraph.instrument.client.install(client) first, or start the scheduler "
                "with `--preload slimgraph.distributed` (slim engine) or "
                "`--preload slimgraph.views.tab` (stock, recorded); the scheduler must be "
                "able to import this version of slimgraph."
            )
        return out

    async def install(self, record_phases: bool | str = "auto") -> str:
        """As :meth:`Feed.install`; on a scheduler without the extension,
        registers a :class:`StockRecorderPlugin` first (it creates the
        extension and the hooks, and undoes them when the scheduler closes)."""
        try:
            return await super().install(record_phases)
        except NotInstalled:
            pass
        await self._hop(self._register_plugin, record_phases)
        return await super().install(record_phases)

    async def _register_plugin(self, record_phases: bool | str) -> None:
        from slimgraph.instrument.stock_recorder import StockRecorderPlugin

        # on the client's loop, Client.register_plugin returns an awaitable
        await self.client.register_plugin(StockRecorderPlugin(record_phases=record_phases))
