"""SlimSchedulerState: distributed's scheduler state machine on slim parts.

What changes against stock ``SchedulerState``:

- tasks are :class:`~slimgraph.model.taskstate.SlimTaskState` objects with
  compact, copy-on-write containers (:mod:`slimgraph.model.containers`);
- every transition (:func:`_transition`, installed by
  ``shim.TransitionHook`` in place of distributed's own) first *thaws* the
  containers it may mutate into private sets, so distributed's own
  transition functions run unchanged on the slim containers;
- a graph submission is ingested by :mod:`slimgraph.ingest` in bulk
  instead of stock's task-state creation;
- its ``plugins`` is a :class:`slimgraph.shim.PluginTable` (made once, as
  the state is built), which can withhold the plugins owed calls from a
  step of distributed's transitions (:mod:`slimgraph.ingest.deliveries`).

Everything else — the transition table, decide_worker, queuing, stealing,
workers, clients — is stock distributed's code. The mixin must come first in
the MRO (``class X(SlimSchedulerState, Scheduler)``).
"""
from __future__ import annotations

from typing import Any

from slimgraph import shim, switches
from slimgraph.model.messages import compute_task_msg
from slimgraph.model.queue import TaskQueue
from slimgraph.model.taskstate import SlimTaskState
from slimgraph.runtime import gcpause
from slimgraph.shim import TaskGroup, TaskPrefix, TransitionHook, scheduler_story, table_plugins
from slimgraph.shim import stock_transition as _stock_transition

#: Transitions that never touch waiting_on / waiters / edges.
_CONTAINER_FREE = frozenset(
    [
        ("waiting", "processing"),
        ("waiting", "queued"),
        ("waiting", "no-worker"),
        ("queued", "processing"),
        ("no-worker", "processing"),
        ("queued", "queued"),
        ("processing", "processing"),
    ]
)


class SlimSchedulerState(TransitionHook):
    """Mixin that puts a SchedulerState on slim task states."""

    #: Whether containers are lazy/shared (the ``lazy-containers`` switch at construction).
    slim_lazy: bool
    #: Bumped whenever keys or task groups are added; a staged ingestion
    #: (slimgraph.ingest.apply.commit) built while it was unchanged can skip re-checks.
    #: (A class default: a scheduler made slim in place has it too.)
    slim_epoch: int = 0
    #: plugin calls a staged ingestion still owes (slimgraph.ingest.deliveries);
    #: delivered before any later transition
    slim_deliveries: Any = None
    #: ready tasks staged commits have sent to workers (or to no-worker) in
    #: bulk so far (slimgraph.ingest.dispatch), not one by one
    slim_dispatched: int = 0
    #: staged commits' ready tasks still to send, in slices (slimgraph.ingest.tail)
    slim_tails: Any = None

    def __init__(self, *args: Any, **kwargs: Any):
        self.slim_lazy = bool(switches.get("lazy-containers"))
        self.slim_epoch = 0
        super().__init__(*args, **kwargs)
        self.use_task_queue()
        table_plugins(self)

    def use_task_queue(self) -> None:
        """Swap distributed's HeapSet for the leaner TaskQueue (while empty)."""
        if not isinstance(self.queued, TaskQueue):
            assert not self.queued, "can only swap an empty queue"
            self.queued = TaskQueue()

    # ------------------------------------------------------------------
    # task creation
    def _get_or_create_group(self, group_key: str, prefix_key: str) -> TaskGroup:
        tg = self.task_groups.get(group_key)
        if tg is None:
            tp = self.task_prefixes.get(prefix_key)
            if tp is None:
                self.task_prefixes[prefix_key] = tp = TaskPrefix(prefix_key)
            self.task_groups[group_key] = tg = TaskGroup(group_key, tp)
        return tg

    def new_task(self, key: Any, spec: Any, state: str, computation: Any = None) -> SlimTaskState:
        """Create a task outside of graph ingestion (scatter, Variable, ...)."""
        from slimgraph.model.keys import group_name, key_split

        group_key = group_name(key)
        created = group_key not in self.task_groups
        tg = self._get_or_create_group(group_key, key_split(key))
        if created and computation:
            computation.groups.add(tg)
        ts = SlimTaskState(key, spec, state, tg)
        self.slim_epoch += 1
        if not self.slim_lazy:
            ts.dependencies = set()
            ts.dependents = set()
        self.tasks[key] = ts
        return ts

    # ------------------------------------------------------------------
    # transitions on slim containers (the functions below the class)
    #: the task whose containers the transition running now has thawed:
    #: distributed splits a transition with no entry in its table (waiting
    #: -> forgotten) into ``-> released`` and ``released ->``, calling
    #: ``_transition`` again for the first half; that inner call finds the
    #: containers already thawed
    _slim_thawed: Any = None

    def is_rootish(self, ts: Any) -> bool:
        """distributed's ``is_rootish``, reading ``run_spec.data_producer``
        without building the run_spec (``spec_data_producer``): a queued
        root-ish task would otherwise be built here and again when it is
        sent. The same test as ``slimgraph.ingest.replay``'s projection."""
        if ts.resource_restrictions or ts.worker_restrictions or ts.host_restrictions:
            return False
        if ts.spec_data_producer() if type(ts) is SlimTaskState else (ts.run_spec and ts.run_spec.data_producer):
            return True
        tg = ts.group
        return (
            len(tg) > self.total_nthreads * 2
            and len(tg.dependencies) < self.rootish_tg_threshold
            and sum(map(len, tg.dependencies)) < self.rootish_tg_dependencies_threshold
        )

    def story(self, *keys_or_tasks_or_stimuli: Any) -> list:
        keys = {
            k.key if isinstance(k, SlimTaskState) else k for k in keys_or_tasks_or_stimuli
        }
        return scheduler_story(keys, self.transition_log)


def _transition(state: Any, key: Any, finish: str, stimulus_id: str, **kwargs: Any) -> tuple:
    """Every transition of a slim scheduler (``shim.TransitionHook.transition_with``):
    :func:`_thawed_transition`, and, while an ingestion owes plugins calls,
    those plugins told of it after them (:mod:`slimgraph.ingest.deliveries`)."""
    owed = state.slim_deliveries
    if owed is not None and owed.owed_to and not owed.suspended:
        return owed.transition(state, key, finish, stimulus_id, kwargs,
                               lambda: _thawed_transition(state, key, finish, stimulus_id, kwargs))
    return _thawed_transition(state, key, finish, stimulus_id, kwargs)


def _thawed_transition(state: Any, key: Any, finish: str, stimulus_id: str, kwargs: dict) -> tuple:
    """distributed's transition, with the compact containers it may
    mutate thawed first. Emptied sets are left as distributed leaves
    them (as stock's are): they live until their task is forgotten. Most
    transitions touch no container (a task sent, queued, a computed task
    released once its dependents are done): they go straight to
    distributed's."""
    ts = state.tasks.get(key)
    if (ts is None or (ts._state, finish) in _CONTAINER_FREE or state._slim_thawed is ts
            or (finish == "released" and ts._state == "memory" and not ts.waiters)):
        # (memory -> released mutates containers only through the tasks
        # still waiting for this one, its waiters: none once its
        # dependents are done, which is how computed tasks are released)
        out = _stock_transition(state, key, finish, stimulus_id, **kwargs)
        if finish == "forgotten" and not state.tasks:
            gcpause.on_idle()  # ends a ``slimgraph.gc: freeze``
        return out
    forgetting = finish == "forgotten"
    # Containers distributed's transition code may mutate: its own, its
    # dependencies' waiters and its dependents' waiting_on (and, when
    # forgetting, the edges on both sides). Written out, not calls to
    # _thaw_*: this runs for every edge of every task a graph releases.
    deps = ts.dependencies
    dependents = ts.dependents
    w = ts.waiting_on
    if w is not None and (type(w) is not set or w is deps):
        ts.waiting_on = set(w)
    w = ts.waiters
    if w is not None and (type(w) is not set or w is dependents):
        ts.waiters = set(w)
    for dts in deps:
        w = dts.waiters
        if w is not None and (type(w) is not set or w is dts.dependents):
            dts.waiters = set(w)
        if forgetting and type(dts.dependents) is not set:
            dts.dependents = set(dts.dependents)
    for dts in dependents:
        w = dts.waiting_on
        if w is not None and (type(w) is not set or w is dts.dependencies):
            dts.waiting_on = set(w)
        if forgetting and type(dts.dependencies) is not set:
            dts.dependencies = set(dts.dependencies)
    if forgetting:
        if type(deps) is not set:
            ts.dependencies = set(deps)
        if type(dependents) is not set:
            ts.dependents = set(dependents)
    outer = state._slim_thawed
    state._slim_thawed = ts
    try:
        out = _stock_transition(state, key, finish, stimulus_id, **kwargs)
    finally:
        state._slim_thawed = outer
    if forgetting and not state.tasks:
        gcpause.on_idle()  # ends a ``slimgraph.gc: freeze``
    return out


SlimSchedulerState.transition_with(_transition)


_stock_memory_released = shim.stock_memory_released


def _memory_released(state: Any, key: Any, stimulus_id: str, **kwargs: Any) -> tuple:
    """distributed's ``memory -> released``, unchanged, with its one read of
    ``ts.run_spec`` (``if not ts.run_spec:``, a pure-data test) answered
    from a compact graph without building the task's node: otherwise every
    computed task's node is built once more as it is released, after it was
    built to be sent (~1-3 us each, ``bench --mode statemachine``). Only
    while distributed's function reads ``run_spec`` for its truth alone
    (:data:`MEMORY_RELEASED_BY_TRUTH`); the stand-in ends before the
    transition's plugins run."""
    ts = state.tasks[key]
    g = ts._graph if type(ts) is SlimTaskState else None
    if g is None or not g.stand_in_for_truth(ts._spec):
        return _stock_memory_released(state, key, stimulus_id, **kwargs)
    try:
        return _stock_memory_released(state, key, stimulus_id, **kwargs)
    finally:
        g.end_stand_in()


#: whether the installed distributed's ``memory -> released`` reads the
#: run_spec only for its truth (checked at import, in its bytecode)
MEMORY_RELEASED_BY_TRUTH = shim.reads_only_truth_of(_stock_memory_released, "run_spec")
if MEMORY_RELEASED_BY_TRUTH:
    shim.transitions_table_with(SlimSchedulerState, {("memory", "released"): _memory_released})


# compute-task messages built from the slim task's own fields
# (slimgraph.model.messages; equal to distributed's)
SlimSchedulerState.build_messages_with(compute_task_msg)
