"""The drop-in: run real dask clusters on the slim engine.

Three ways to turn it on, all ending with schedulers of class
:class:`SlimScheduler` (distributed's ``Scheduler`` with
:class:`~slimgraph.state.SlimSchedulerState` first in its MRO):

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

import textwrap
from time import time
from typing import Any

import dask.config
from dask._expr import LLGExpr
from distributed import Scheduler
from distributed.protocol import deserialize
from distributed.scheduler import _materialize_graph
from distributed.utils import offload
from distributed.core import error_message

from slimgraph import config, disposal, gcpause, staging, switching
from slimgraph.ingest import (
    GraphIndex,
    Ingestion,
    Submission,
    compute_order,
    index_graph,
    lost_keys,
)
from slimgraph.phases import SubmissionRecord
from slimgraph.state import SlimSchedulerState


class _GCPolicy:
    """Applies ``slimgraph.gc`` around ingestions. Overlapping submissions
    (one awaits its offloaded phases while another runs) are safe because
    :mod:`slimgraph.gcpause` counts the holds."""

    def enter(self) -> str:
        policy = config.get("gc")
        if policy != "stock":
            gcpause.hold()
        return policy

    def exit(self, policy: str, new_tasks: int = 0) -> None:
        if policy == "stock":
            return
        if policy == "freeze" or (policy == "auto" and new_tasks >= config.get("gc-freeze-tasks")):
            # The new task states are long-lived: keep them out of every
            # future collection's traversal until the scheduler is idle.
            # (Another ingestion still running is frozen with them, as it
            # would be at its own exit: a freeze keeps only cyclic garbage.)
            # Frozen before the collector is back on, so that no collection
            # can start in between and traverse them after all.
            gcpause.freeze_until_idle()
        gcpause.release()


gc_policy = _GCPolicy()


def _pickled_size(ser: Any) -> int | None:
    """Bytes of a serialized graph; None if it is not one (deserialize then
    reports the error)."""
    try:
        return sum(memoryview(f).nbytes for f in ser.frames)
    except Exception:
        return None


def _prepare(dsk: dict, keys: Any, cull: bool, priorities: Any, rec: SubmissionRecord,
             where: str = "offload"):
    """Number the graph, then order it (off the event loop unless small)."""
    with rec.phase("cull", where=where) as p:
        index = index_graph(dsk, keys, cull)
        p.tasks = len(index.keys)
        p.edges = index.edges
    if not priorities:
        with rec.phase("order", where=where) as p:
            priorities = compute_order(index)
            p.tasks = len(index.keys)
            p.edges = index.edges
    return index, priorities


class SlimScheduler(SlimSchedulerState, Scheduler):
    """distributed's Scheduler, ingesting graphs with the slim engine."""

    async def close(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().close(*args, **kwargs)
        finally:
            # a closed scheduler's tasks must not stay frozen (slimgraph.gc)
            gcpause.on_idle()

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
        from slimgraph.instrument.recorder import get_extension

        start = time()
        stimulus_id = stimulus_id or f"update-graph-{start}"
        self._active_graph_updates += 1
        rec = SubmissionRecord(scheduler="slim", client=client, stimulus_id=stimulus_id)
        ext = get_extension(self)
        token = ext.begin(rec)
        policy = gc_policy.enter()
        switching.hold(config.get("switch-interval"))
        status, error = "OK", None
        # whether this submission joins the latest Computation: decided on
        # arrival (see joins_last_computation)
        busy = not self.is_idle
        try:
            size = _pickled_size(expr_ser)
            inline = size is not None and size < config.get("offload-min-bytes")
            with rec.phase("deserialize", where="event-loop" if inline else "offload"):
                try:
                    if inline:
                        expr = deserialize(expr_ser.header, expr_ser.frames)
                    else:
                        expr = await offload(deserialize, expr_ser.header, expr_ser.frames)
                    del expr_ser
                except Exception as e:
                    raise RuntimeError(
                        "Error during deserialization of the task graph. This "
                        "frequently occurs if the Scheduler and Client have "
                        "different environments."
                    ) from e
            with rec.phase("materialize", where="offload"):
                dsk, annotations_by_type = await offload(
                    _materialize_graph, expr=expr, validate=self.validate
                )
            cull = isinstance(expr, LLGExpr)
            del expr
            small = len(dsk) < config.get("offload-min-tasks")
            if small:
                index, priorities = _prepare(dsk, keys, cull, internal_priority, rec, "event-loop")
            else:
                index, priorities = await offload(
                    _prepare, dsk, keys, cull, internal_priority, rec
                )
            del dsk
            # ---- synchronous from here: compares the graph to the state ----
            with rec.phase("lost_dependencies") as p:
                lost = lost_keys(self, index)
                p.tasks = len(index.outside)
            if lost:
                self.report(
                    {"op": "cancelled-keys", "keys": keys, "reason": "lost dependencies"},
                    client=client,
                )
                self.client_releases_keys(keys=keys, client=client, stimulus_id=stimulus_id)
                self.log_event(
                    ["scheduler", client],
                    {"action": "update-graph", "stimulus_id": stimulus_id, "status": "cancelled"},
                )
                status = "cancelled"
                return
            sub = Submission(
                client=client,
                keys=set(keys),
                stimulus_id=stimulus_id,
                start=start,
                index=index,
                priorities=priorities,
                annotations_by_type=annotations_by_type,
                global_annotations=annotations,
                user_priority=user_priority,
                submitting_task=submitting_task,
                actors=actors,
                fifo_timeout=fifo_timeout,
                code=code,
                span_metadata=span_metadata,
                busy=busy,
            )
            metrics = None if small else await self.ingest_staged(sub, rec)
            if metrics is None:
                metrics = self.ingest(sub, rec)
            done = time()
            metrics.update(
                {
                    "start_timestamp_seconds": start,
                    "duration_seconds": done - start,
                    "phases": rec.phase_seconds(),
                }
            )
            self.log_event(
                ["scheduler", client],
                {
                    "action": "update-graph",
                    "stimulus_id": stimulus_id,
                    "metrics": metrics,
                    "status": "OK",
                },
            )
            # a million-entry index, order and staging lists: freed in a
            # worker thread, in steps, not in one cascade on the event loop
            ing = sub.ingestion
            garbage = disposal.big(
                *index.temporaries(), priorities, *(ing.temporaries() if ing else ())
            )
            del index, priorities, sub, ing
            if garbage:
                await offload(disposal.drain, garbage)
        except Exception as e:
            status, error = "error", f"{type(e).__name__}: {e}"
            self.log_event(
                ["scheduler", client],
                {"action": "update-graph", "stimulus_id": stimulus_id, "status": "error"},
            )
            err = error_message(e)
            for key in keys:
                self.report(
                    {
                        "op": "task-erred",
                        "key": key,
                        "exception": err["exception"],
                        "traceback": err["traceback"],
                    },
                    client=client,
                )
        finally:
            gc_policy.exit(policy, rec.new_tasks)
            switching.release()
            self._active_graph_updates -= 1
            ext.finish(rec, token, status=status, error=error)
            self.digest_metric("update-graph-duration", time() - start)

    async def ingest_staged(self, sub: Submission, rec: SubmissionRecord) -> dict | None:
        """Build off the loop, publish in one block (:mod:`slimgraph.staging`).
        None: not stageable, or the state changed meanwhile; ingest synchronously."""
        if not config.get("staging") or staging.refusal(self, sub) is not None:
            return None
        ing = sub.ingestion = staging.StagedIngestion(self, sub, rec)
        if not await offload(ing.build) or not ing.still_valid():
            return None
        client_msgs: dict = {}
        worker_msgs: dict = {}
        with rec.phase("commit") as p:
            ing.commit(client_msgs, worker_msgs)
            self.send_all(client_msgs, worker_msgs)
            p.tasks = len(ing.new)
        rec.tasks = len(sub.index.keys)
        rec.new_tasks = len(ing.new)
        rec.edges = sub.index.edges
        return {"tasks": len(sub.index.keys), "new_tasks": len(ing.new), "key_collisions": 0}

    def ingest(self, sub: Submission, rec: SubmissionRecord) -> dict:
        """Phases 4-7 (synchronous): state in, state out, messages sent."""
        ing = sub.ingestion = Ingestion(self, sub, rec)
        with rec.phase("task_states") as p:
            ing.task_states()
            p.tasks = len(ing.touched)
            p.edges = ing.edges
        rec.tasks = len(sub.index.keys)
        rec.new_tasks = len(ing.new)
        rec.edges = sub.index.edges
        with rec.phase("annotations") as p:
            ing.annotations()
            p.tasks = len(ing.keys_with_annotations)
        with rec.phase("priorities") as p:
            ing.priorities()
            p.tasks = len(ing.touched)
        with rec.phase("who_wants") as p:
            ing.who_wants()
            p.tasks = len(sub.keys)
        with rec.phase("plugins") as p:
            ing.plugins()
            p.tasks = len(ing.touched)
        client_msgs: dict = {}
        worker_msgs: dict = {}
        with rec.phase("transitions") as p:
            ing.transitions(client_msgs, worker_msgs)
            self.send_all(client_msgs, worker_msgs)
            ing.report()
            p.tasks = len(ing.touched)
        return {
            "tasks": len(sub.index.keys),
            "new_tasks": len(ing.new),
            "key_collisions": ing.collisions,
        }


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
        if "__new__" in Scheduler.__dict__:  # pragma: no cover - not in 2026.8.0
            raise RuntimeError("distributed.Scheduler defines __new__; cannot install")
        Scheduler.__new__ = _slim_new  # type: ignore[assignment]
        _patched = True
    _installed = True


def uninstall() -> None:
    """Undo :func:`install`; schedulers already built keep their class."""
    global _installed
    _installed = False


def installed() -> bool:
    return _installed


def make_slim(scheduler: Scheduler) -> SlimScheduler:
    """Turn a stock Scheduler that holds no tasks yet into a SlimScheduler."""
    if isinstance(scheduler, SlimScheduler):
        return scheduler
    if scheduler.tasks:
        raise RuntimeError(
            "slimgraph can only take over a scheduler before it holds tasks; "
            f"this one holds {len(scheduler.tasks)}"
        )
    scheduler.__class__ = SlimScheduler
    scheduler.slim_lazy = bool(config.get("lazy-containers"))
    scheduler._slim_queue()
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
