"""The drop-in: run real dask clusters on the slim engine.

Three ways to turn it on, all ending with schedulers of class
:class:`SlimScheduler` (distributed's ``Scheduler`` with
:class:`~slimgraph.model.state.SlimSchedulerState` first in its MRO):

- ``dask scheduler --preload slimgraph.distributed`` (or the module name in
  ``distributed.scheduler.preload`` / ``DASK_DISTRIBUTED__SCHEDULER__PRELOAD``):
  ``dask_setup`` turns the starting scheduler into a SlimScheduler before
  it receives any graph;
- :class:`SlimLocalCluster` (or :func:`local_cluster`): a ``LocalCluster``
  whose scheduler is a SlimScheduler (``SpecCluster`` users put
  ``SlimScheduler`` in the scheduler spec);
- :func:`install` / :func:`uninstall`: every ``Scheduler(...)`` constructed
  in between is a SlimScheduler. This is how an existing test suite runs on
  the slim engine.

Only ``update_graph`` is overridden here, and only as glue: awaiting
distributed's own deserialization and materialization, then handing the
graph to :mod:`slimgraph.ingest`, timing each phase into the scheduler's
history, and sending the resulting messages.
"""
from __future__ import annotations

from typing import Any

from slimgraph import config, shim, switches
from slimgraph.ingest.pipeline import Pipeline
from slimgraph.life import release
from slimgraph.instrument.records import SubmissionRecord
from slimgraph.model.state import SlimSchedulerState
from slimgraph.runtime import finalizers, gcpause, loopwork, threads
from slimgraph.shim import cpython

Scheduler = shim.Scheduler


class SlimScheduler(SlimSchedulerState, Scheduler):
    """distributed's Scheduler, ingesting graphs with the slim engine."""

    #: jobs on the event loop, and the stimuli they hold (slimgraph.runtime.loopwork)
    slim_work: Any = None

    def __init__(self, *args: Any, **kwargs: Any):
        config.warn_unknown()
        super().__init__(*args, **kwargs)
        _attach_work(self)
        threads.attach(self)

    async def close(self, *args: Any, **kwargs: Any) -> Any:
        if self.slim_work is not None:
            self.slim_work.finish_now()
        try:
            return await super().close(*args, **kwargs)
        finally:
            # nothing of slimgraph's outlives the scheduler: its tasks must
            # not stay frozen (slimgraph.gc), its timers end, and the threads
            # end with the last slim scheduler of the process
            gcpause.on_idle()
            if self.slim_finalizers is not None:
                self.slim_finalizers.stop()
            threads.detach(self)

    #: dashboard components whose finalizer removes a plugin they added
    #: (slimgraph.runtime.finalizers): run when stock's collector would
    slim_finalizers: Any = None

    def add_plugin(self, plugin: Any, *args: Any, **kwargs: Any) -> None:
        if self.slim_finalizers is None:
            self.slim_finalizers = finalizers.HeldFinalizers()
        self.slim_finalizers.adding(plugin, cpython.caller_frame())
        return super().add_plugin(plugin, *args, **kwargs)

    def remove_plugin(self, *args: Any, **kwargs: Any) -> None:
        # ... and one removed now hears of everything owed to it first
        # (ready tasks a commit left to send in slices go now)
        if self.slim_tails:
            self.slim_tails.finish_now()
        if self.slim_deliveries:
            self.slim_deliveries.flush()
        if self.slim_work is not None:
            self.slim_work.finish_now()
        return super().remove_plugin(*args, **kwargs)

    # ------------------------------------------------------------------
    # a client's release or cancel in slices (slimgraph.life.release), and
    # the stimuli that do not come through a handler table waiting for it
    def slim_client_releases_keys(self, keys: Any, client: str, stimulus_id: str | None = None) -> None:
        """The ``client-releases-keys`` stream handler."""
        self.slim_work.run(release.client_releases_keys(self, keys, client, stimulus_id))

    def slim_stimulus_cancel(self, keys: Any, client: str, force: bool, reason: Any = None, msg: Any = None) -> None:
        """The ``cancel-keys`` stream handler."""
        self.slim_work.run(release.stimulus_cancel(self, keys, client, force, reason, msg))

    def remove_client(self, client: str, stimulus_id: str | None = None) -> None:
        # (a client's comm closing calls this directly, not through a table)
        work = self.slim_work
        if work is None or getattr(self.status, "name", "") in ("closing", "closed", "failed"):
            return super().remove_client(client, stimulus_id=stimulus_id)
        if work.holds():
            work.held.append((self.remove_client, (client,), {"stimulus_id": stimulus_id}))
            return
        work.run(release.remove_client(self, client, stimulus_id, super().remove_client))

    async def remove_worker(
        self, address: str, *, stimulus_id: str, expected: bool = False, close: bool = True
    ) -> Any:
        # a worker's comm closing, its TTL or a failed send call this directly
        if self.slim_work is not None:
            await self.slim_work.idle()
        return await super().remove_worker(address, stimulus_id=stimulus_id, expected=expected, close=close)

    async def update_graph(
        self,
        client: str,
        expr_ser: Any,
        keys: set,
        span_metadata: Any,
        internal_priority: dict | None,
        submitting_task: Any,
        user_priority: int | dict = 0,
        actors: bool | list | None = None,
        fifo_timeout: float = 0.0,
        code: tuple = (),
        annotations: dict | None = None,
        stimulus_id: str | None = None,
    ) -> None:
        """Stock's update_graph, by :class:`slimgraph.ingest.pipeline.Pipeline`,
        recorded in ``extensions["slimgraph"].history``."""
        from slimgraph.instrument.recorder import get_extension

        rec = SubmissionRecord(scheduler="slim", client=client, stimulus_id=stimulus_id)
        ext = get_extension(self)
        token = ext.begin(rec)
        pipeline = Pipeline(self, rec)
        try:
            await pipeline.run(
                client, expr_ser, keys, span_metadata, internal_priority, submitting_task,
                user_priority, actors, fifo_timeout, code, annotations, stimulus_id,
            )
        finally:
            rec.ingestion = pipeline.ingested
            ext.finish(rec, token, status=rec.status, error=rec.error)
            if pipeline.tail is not None:
                # its slices count as this submission's blocks too
                pipeline.tail.report_to(rec)


# ----------------------------------------------------------------------
# turning it on
# distributed derives names from ``type(self).__name__``: the config key of
# ``blocked-handlers`` (a security setting), ``identity()["type"]``, the
# server id and the work directory's prefix. The drop-in answers to all of
# them as a Scheduler; ``__qualname__`` (and so ``repr``) stays SlimScheduler.
SlimScheduler.__name__ = "Scheduler"

_installed = False
_patched = False


def _slim_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    if _installed and cls is Scheduler:
        cls = SlimScheduler
    return object.__new__(cls)


def install() -> None:
    """Make every ``distributed.Scheduler(...)`` built from now on slim.

    Implemented with a ``Scheduler.__new__`` that returns a SlimScheduler
    while installed. It stays in place after :func:`uninstall` (then it does
    nothing): deleting a ``__new__`` from a class leaves CPython's type slot
    in a state where ``object.__new__`` rejects the constructor arguments.
    """
    global _installed, _patched
    if not _patched:
        shim.patch_scheduler_new(_slim_new)
        _patched = True
    _installed = True


def uninstall() -> None:
    """Undo :func:`install`; schedulers already built keep their class."""
    global _installed
    _installed = False


def installed() -> bool:
    return _installed


def _rebind_handlers(scheduler: Scheduler) -> None:
    """Point the scheduler's RPC and stream handlers at its new class' methods.

    distributed binds them in ``Scheduler.__init__`` (``handlers`` and
    ``stream_handlers`` hold bound methods), so after a class change they
    would still run stock's ``update_graph``: the preload's scheduler
    ingested with stock code and recorded nothing."""
    for table in (scheduler.handlers, scheduler.stream_handlers):
        for name, fn in list(table.items()):
            if getattr(fn, "__self__", None) is not scheduler:
                continue
            now = getattr(scheduler, fn.__func__.__name__, None)
            if now is not None and getattr(now, "__func__", None) is not fn.__func__:
                table[name] = now


def _attach_work(scheduler: SlimScheduler) -> None:
    """The scheduler's :class:`~slimgraph.runtime.loopwork.LoopWork`, its
    handler tables that hold stimuli behind it, and the release and cancel
    handlers that run as its jobs."""
    loopwork.attach(scheduler)
    shim.pace_streams(scheduler)
    scheduler.stream_handlers["client-releases-keys"] = scheduler.slim_client_releases_keys
    scheduler.stream_handlers["cancel-keys"] = scheduler.slim_stimulus_cancel


def make_slim(scheduler: Scheduler) -> SlimScheduler:
    """Turn a stock Scheduler that holds no tasks yet into a SlimScheduler."""
    if isinstance(scheduler, SlimScheduler):
        return scheduler
    if scheduler.tasks:
        raise RuntimeError(
            "slimgraph can only take over a scheduler before it holds tasks; "
            f"this one holds {len(scheduler.tasks)}"
        )
    config.warn_unknown()
    scheduler.__class__ = SlimScheduler
    _rebind_handlers(scheduler)
    _attach_work(scheduler)
    scheduler.slim_lazy = bool(switches.get("lazy-containers"))
    scheduler.use_task_queue()
    shim.table_plugins(scheduler)
    threads.attach(scheduler)
    return scheduler  # type: ignore[return-value]


def dask_setup(scheduler: Scheduler) -> None:
    """Preload hook: ``dask scheduler --preload slimgraph.distributed``."""
    make_slim(scheduler)
    from slimgraph.views.tab import setup

    setup(scheduler)  # the slimgraph_* handlers, and the "slimgraph" dashboard tab


def _slim_local_cluster_class():
    from distributed import LocalCluster

    class SlimLocalCluster(LocalCluster):
        """A LocalCluster whose (in-process) scheduler is a SlimScheduler."""

        async def _start(self) -> None:
            if self.scheduler_spec.get("cls") is Scheduler:
                self.scheduler_spec["cls"] = SlimScheduler
            await super()._start()

    return SlimLocalCluster


SlimLocalCluster = _slim_local_cluster_class()


def local_cluster(**kwargs: Any):
    """``LocalCluster(**kwargs)`` with a SlimScheduler."""
    return SlimLocalCluster(**kwargs)
