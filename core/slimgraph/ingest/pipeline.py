"""The ingestion pipeline: one ``update_graph``, from the wire to the state.

Stock's ``update_graph`` does it all in one method of the Scheduler server.
Here the steps are separate and each one says where it runs:

==================  =====================================  ==============
phase               what                                   where
==================  =====================================  ==============
deserialize         unpickle the client's expression       loop if small
materialize         the compact graph (or dask's dict)     thread
cull, order         number the graph, order it             loop if small
lost_dependencies   keys needed from outside, known?       loop
task_states ...     :func:`~slimgraph.ingest.build.build`  thread or loop
transitions         :func:`~slimgraph.ingest.replay.replay`  thread or loop
commit / who_wants  :mod:`~slimgraph.ingest.apply`         loop
plugins,
transitions
==================  =====================================  ==============

A big submission is *staged*: built and replayed in a worker thread while
the event loop keeps serving, then published in one short commit that first
checks that nothing the build read has changed. Everything else, and a
refused commit, is ingested *in place*: built, replayed and applied on the
loop with nothing in between, as stock does. Small submissions stay on the
loop throughout (``slimgraph-switches.offload-min-tasks`` / ``-bytes``): a thread
hand-off costs them more than the work, and would make a small ``submit``
answer later than on stock.

Materializing. With ``slimgraph-switches.compact-ingestion`` (the default) the
expression becomes a :class:`~slimgraph.ingest.compact.CompactGraph`: keys,
integer dependencies and one source code per task, no dask node per task;
layers, steps or whole graphs it cannot prove equal go to dask's own
materialization, and the record says which path each layer took
(``materialization``, ``layers``). Task states keep the graph and their
index as their run_spec, built into stock's node when something reads it.
Off, dask's ``_materialize_graph`` builds every node, as stock does.

After a commit, a worker's big list of messages reaches its stream in
slices (:mod:`slimgraph.ingest.pacing`): distributed serializes each batch
on the loop.

Around the steps, :class:`Pipeline` applies the process-wide policies
(``slimgraph.gc``, the GIL switch interval), frees the big temporaries in
steps off the loop (:mod:`slimgraph.runtime.disposal`), and fills the
submission's :class:`~slimgraph.instrument.records.SubmissionRecord`.

The pipeline needs a scheduler state, not a server: what it reads and calls
is the :class:`~slimgraph.ingest.protocol.IngestTarget` protocol. The
network edges (sending messages, reporting to clients, logging events) are
methods of that target, so the same pipeline runs inside ``SlimScheduler``
and on a bare :class:`~slimgraph.ingest.offline.OfflineScheduler`.
"""
from __future__ import annotations

import logging
from time import time
from typing import Any

from slimgraph import shim, switches
from slimgraph.ingest import apply as applier
from slimgraph.ingest import dispatch, pacing, tail
from slimgraph.ingest.build import build
from slimgraph.ingest.index import lost_keys, prepare
from slimgraph.ingest.protocol import IngestTarget
from slimgraph.ingest.replay import replay
from slimgraph.ingest.submission import Submission
from slimgraph.ingest import compact, decode
from slimgraph.instrument.records import SubmissionRecord, layer_rows, materialization_summary
from slimgraph.runtime import disposal, gcpolicy, switching, threads

logger = logging.getLogger("slimgraph.ingest")

#: how many times the dispatch shadow is made again when the workers
#: changed while it ran (see Pipeline._shadow)
SHADOW_TRIES = 3


class Pipeline:
    """One ``update_graph`` on ``target`` (see module docstring).

    ``run`` takes update_graph's own arguments. ``record`` is filled as the
    phases run (the caller keeps it in its history).
    """

    def __init__(self, target: IngestTarget, record: SubmissionRecord):
        self.target = target
        self.rec = record
        #: how the submission was ingested: "staged", "in place" (with the
        #: reason it was not staged), or None before ingestion
        self.ingested: str | None = None
        #: the ``slimgraph.gc`` policy of this ingestion, and whether it is
        #: shielded from explicit collections (slimgraph.runtime.gcpolicy)
        self.policy = "stock"
        self.shielded = False
        #: the ready tasks the commit left to send in slices (None: none)
        self.tail = None

    async def run(
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
        s = self.target
        rec = self.rec
        start = time()
        stimulus_id = stimulus_id or f"update-graph-{start}"
        rec.client = client
        rec.stimulus_id = stimulus_id
        shim.graph_update_started(s)
        policy = self.policy = gcpolicy.enter()
        switching.hold(switches.get("switch-interval"))
        status, error = "OK", None
        # whether this submission joins the latest Computation: decided on
        # arrival (see joins_last_computation)
        busy = not s.is_idle
        try:
            expr = await self._deserialize(expr_ser)
            del expr_ser
            cull = shim.culls_explicitly(expr)
            with rec.phase("materialize", where="offload") as p:
                if switches.get("compact-ingestion"):
                    # culled here already where stock culls (see compact.fallback)
                    dsk = await threads.offload(compact.materialize, expr, keys, cull, s.validate)
                    annotations_by_type = dsk.annotations
                    cull = False
                    rec.materialization = materialization_summary(dsk.report)
                    rec.layers = layer_rows(dsk.report)
                else:
                    dsk, annotations_by_type = await threads.offload(shim.materialize, expr, s.validate)
                    rec.materialization = "dask (compact-ingestion off)"
                p.tasks = len(dsk)
            # the decoded expression freed in steps in a worker thread, not
            # in one cascade here (nothing reads it after materializing)
            decoded = disposal.big(*compact.expression_containers(expr)) if switches.get("compact-ingestion") else []
            del expr
            if decoded:
                await threads.offload(disposal.drain, decoded)
            if not self.shielded and gcpolicy.big(policy, len(dsk)):
                self.shielded = gcpolicy.shield(policy)
            small = len(dsk) < switches.get("offload-min-tasks")
            if small:
                index, priorities = prepare(dsk, keys, cull, internal_priority, rec, "event-loop")
            else:
                index, priorities = await threads.offload(prepare, dsk, keys, cull, internal_priority, rec)
            del dsk
            # ---- from here on, the graph is compared with the state ----
            with rec.phase("lost_dependencies") as p:
                lost = lost_keys(s, index)
                p.tasks = len(index.outside)
            if lost:
                s.report(
                    {"op": "cancelled-keys", "keys": keys, "reason": "lost dependencies"},
                    client=client,
                )
                s.client_releases_keys(keys=keys, client=client, stimulus_id=stimulus_id)
                s.log_event(
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
            done = None if small else await self._staged(sub)
            if done is None:
                done = self._in_place(sub)
            b, plan = done
            rec.tasks = len(index.keys)
            rec.new_tasks = len(b.new)
            rec.edges = index.edges
            metrics = {
                "tasks": len(index.keys),
                "new_tasks": len(b.new),
                "key_collisions": len(b.collisions),
                "start_timestamp_seconds": start,
                "duration_seconds": time() - start,
                "phases": rec.phase_seconds(),
            }
            s.log_event(
                ["scheduler", client],
                {"action": "update-graph", "stimulus_id": stimulus_id, "metrics": metrics, "status": "OK"},
            )
            # a million-entry index, order and build: freed in a worker
            # thread, in steps, not in one cascade on the event loop
            garbage = disposal.big(*index.temporaries(), priorities, *b.temporaries(), *plan.temporaries())
            del index, priorities, sub, b, plan, done
            if garbage:
                await threads.offload(disposal.drain_and_give_back, garbage, bool(switches.get("trim-heap")))
        except Exception as e:
            status, error = "error", f"{type(e).__name__}: {e}"
            s.log_event(
                ["scheduler", client],
                {"action": "update-graph", "stimulus_id": stimulus_id, "status": "error"},
            )
            err = shim.error_message(e)
            for key in keys:
                s.report(
                    {
                        "op": "task-erred",
                        "key": key,
                        "exception": err["exception"],
                        "traceback": err["traceback"],
                    },
                    client=client,
                )
        finally:
            gcpolicy.exit(policy, rec.new_tasks, self.shielded)
            switching.release()
            shim.graph_update_ended(s)
            rec.status, rec.error = status, error
            s.digest_metric("update-graph-duration", time() - start)

    async def _deserialize(self, expr_ser: Any) -> Any:
        """Stock deserializes on the loop; a big graph is unpickled in a
        thread here (``slimgraph-switches.offload-min-bytes``)."""
        try:
            size = sum(memoryview(f).nbytes for f in expr_ser.frames)
        except Exception:
            size = None  # not a serialized graph: deserialize reports it
        inline = size is not None and size < switches.get("offload-min-bytes")
        if not inline and not self.shielded:
            # a big graph: collections from now on would traverse it
            self.shielded = gcpolicy.shield(self.policy)
        # with compact ingestion, pickled Tasks without dask's __setstate__
        # (slimgraph.ingest.decode); off: distributed's own, as stock
        loads = decode.deserialize if switches.get("compact-ingestion") else shim.deserialize
        with self.rec.phase("deserialize", where="event-loop" if inline else "offload"):
            try:
                if inline:
                    return loads(expr_ser.header, expr_ser.frames)
                return await threads.offload(loads, expr_ser.header, expr_ser.frames)
            except Exception as e:
                raise RuntimeError(
                    "Error during deserialization of the task graph. This "
                    "frequently occurs if the Scheduler and Client have "
                    "different environments."
                ) from e

    # -- the two ways in ---------------------------------------------------
    async def _staged(self, sub: Submission) -> tuple | None:
        """Build and replay in a thread, commit on the loop. None: not
        stageable, or the state changed meanwhile (then: in place)."""
        s = self.target
        rec = self.rec
        why = refusal(s, sub) if switches.get("staging") else "slimgraph-switches.staging is off"
        if why is None:
            seq_base = s.queued.reserve(len(sub.index.reached))
            complete = any(applier.listeners(s).values())

            def off_loop() -> tuple:
                b = build(s, sub, rec, where="offload")
                if b.existing_in_graph:
                    return b, None
                with rec.phase("transitions", where="offload") as p:
                    plan = replay(s, b, seq_base, complete)
                    tail.hold(s, b, plan)
                    p.tasks = len(b.new)
                return b, plan

            b, plan = await threads.offload(off_loop)
            if plan is not None and not plan.stock and not plan.live_writes:
                await self._shadow(b, plan)
            if plan is None:
                why = "the graph has keys the scheduler already has"
            elif plan.stock:
                why = plan.reason
            elif plan.live_writes:
                why = "the graph needs released tasks the scheduler already has"
            else:
                await self._rehead_while_clock_moves(b, plan)
                if not applier.seed_current(s, b):
                    await threads.offload(applier.reseed, s, b)
                with rec.phase("commit") as p:
                    msgs = applier.commit(s, b, plan)
                    if msgs is None and plan.refused == applier.CLOCK_MOVED and applier.can_rehead(b, plan):
                        # out of tries in a thread: move it here, nothing runs in between
                        applier.rehead(b, plan, applier.regeneration(s, b))
                        msgs = applier.commit(s, b, plan)
                    if msgs is not None:
                        pacing.send_all(s, *msgs)
                        # a staged graph's own tasks are neither in memory nor
                        # erred; tasks it needs from outside may be
                        applier.report(s, b, outside_only=True)
                        p.tasks = len(b.new)
                if msgs is not None:
                    self.ingested = "staged"
                    self.tail = plan.tail
                    return b, plan
                why = f"the state changed during the build: {plan.refused}"
        self.ingested = f"in place: {why}"
        logger.info(
            "update_graph of %d tasks ingested on the event loop, not staged: %s",
            len(sub.index.reached),
            why,
        )
        return None

    async def _rehead_while_clock_moves(self, b: Any, plan: Any) -> None:
        """Other clients' submissions committed during the build started a
        new generation: move the build's priorities to it in a thread
        (slimgraph.ingest.apply.rehead), up to :data:`SHADOW_TRIES` times
        while they keep coming; the commit does the last move itself."""
        s = self.target
        if not applier.can_rehead(b, plan):
            return
        for _ in range(SHADOW_TRIES):
            gen = applier.regeneration(s, b) if applier.clock_moved(s, b) else None
            if gen is None:
                return
            with self.rec.phase("transitions", where="offload"):
                await threads.offload(applier.rehead, b, plan, gen)

    async def _shadow(self, b: Any, plan: Any) -> None:
        """Where the commit will send the ready tasks (slimgraph.ingest.dispatch):
        the workers' view is taken now, after the build, and the shadow
        runs in a thread (its own short window: a busy cluster changes the
        workers all the time). Taken again if they changed meanwhile, up to
        :data:`SHADOW_TRIES` times; then the commit goes one by one."""
        s = self.target
        for _ in range(SHADOW_TRIES):
            view = dispatch.take_view(s)
            if view is None:
                return
            with self.rec.phase("transitions", where="offload"):
                plan.dispatch = await threads.offload(dispatch.shadow, s, b, plan, view)
            if plan.dispatch is None or plan.dispatch.current(s, b):
                return

    def _in_place(self, sub: Submission) -> tuple:
        """Build, replay and apply on the loop, with nothing in between."""
        s = self.target
        rec = self.rec
        if self.ingested is None:
            self.ingested = "in place: small"
        b = build(s, sub, rec)
        seq_base = s.queued.reserve(len(sub.index.reached))
        with rec.phase("transitions") as p:
            plan = replay(s, b, seq_base, complete_log=any(applier.listeners(s).values()))
            p.tasks = len(b.touched)
        client_msgs, worker_msgs = applier.apply_in_place(s, b, plan, rec)
        with rec.phase("transitions"):
            s.send_all(client_msgs, worker_msgs)
            applier.report(s, b)
        return b, plan


def refusal(state: Any, sub: Submission) -> str | None:
    """Why ``sub`` cannot be staged on ``state`` now (None: it can).

    Everything else is staged: listening plugins (their calls are owed and
    delivered after the commit, in stock's order), dependencies on
    persisted data or futures (the commit checks they did not change),
    span annotations, actors, graphs submitted from a task. What still
    refuses: distributed's validation mode (it checks every transition as
    it happens), a transition counter limit (it counts them as they
    happen), and queuing turned off (every ready task would go through
    distributed's transitions in the commit). A build that meets keys the
    scheduler already has, or tasks with erred or lost dependencies, is
    also ingested in place (see :func:`slimgraph.ingest.replay.stock_reason`).
    """
    if state.validate:
        return "validate=True"
    if state.transition_counter_max:
        return "transition counter limit"
    if state.WORKER_SATURATION == float("inf"):
        return "queuing disabled"
    return None
