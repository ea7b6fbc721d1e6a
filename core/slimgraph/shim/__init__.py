"""The one place that touches dask's and distributed's internals.

slimgraph builds the scheduler state that stock distributed builds, so it
has to use some of distributed's private names (``TaskGroup._size``,
``SchedulerState._transitions``, ``SpansSchedulerExtension._ensure_span``,
``_materialize_graph``, ...) and repeat a little of its private arithmetic
(how a task group and its prefix count their tasks by state). Those names
are not an API: a release can rename or change any of them. So every use
lives here, one small function per need, each with a test in
``tests/test_shim.py``; the rest of the package only calls these functions.
A search of the package for distributed's private names finds them in this
package only: here, in :mod:`slimgraph.shim.compact` (dask's internals
the compact materialization reproduces, kept apart because they import
dask.array and dask.bag), in :mod:`slimgraph.shim.nodes` (the slots of
dask's task-spec nodes) and in :mod:`slimgraph.shim.cpython` (CPython's
dict layout). ``tests/test_shim.py::test_no_foreign_private_name_outside_the_shim``
fails on any other use.

At import the installed dask and distributed are checked against the range
the differential tests pass on (:data:`SUPPORTED`). Any other release is
refused with an error naming the range: a version bump must not change
behaviour silently where the tests do not reach. Developers trying a new
release can set ``slimgraph.versions: warn`` (or
``DASK_SLIMGRAPH__VERSIONS=warn``) to import anyway.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any

import dask
import dask.config
import distributed
from packaging.version import Version

from slimgraph import config

#: Inclusive range of dask and distributed releases slimgraph supports:
#: every release in between passes the differential suites
#: (docs/interpreters.md, ``.ci/against-release``).
SUPPORTED = ("2026.3.0", "2026.8.0")


class UnsupportedVersion(ImportError):
    """The installed dask or distributed is outside :data:`SUPPORTED`."""


def check_versions(dask_version: str | None = None, distributed_version: str | None = None) -> None:
    """Refuse (or warn about) dask/distributed releases outside :data:`SUPPORTED`."""
    lo, hi = Version(SUPPORTED[0]), Version(SUPPORTED[1])
    found = {
        "dask": dask_version or dask.__version__,
        "distributed": distributed_version or distributed.__version__,
    }
    bad = {name: v for name, v in found.items() if not lo.release <= Version(v).release <= hi.release}
    if not bad:
        return
    text = (
        "slimgraph supports dask and distributed "
        f"{SUPPORTED[0]} to {SUPPORTED[1]} (every release in between); installed: "
        + ", ".join(f"{n} {v}" for n, v in found.items())
        + ". Install a supported release, e.g. `pip install 'distributed>="
        + SUPPORTED[0]
        + ",<="
        + SUPPORTED[1]
        + "' 'dask>="
        + SUPPORTED[0]
        + ",<="
        + SUPPORTED[1]
        + "'`, or set the dask config `slimgraph.versions: warn` to try it anyway."
    )
    if config.get("versions") == "warn":
        warnings.warn(text, RuntimeWarning, stacklevel=2)
        return
    raise UnsupportedVersion(text)


check_versions()

# ---------------------------------------------------------------------------
# Names: everything imported from dask's and distributed's internals
# ---------------------------------------------------------------------------
from dask._expr import LLGExpr  # noqa: E402
from dask._task_spec import (  # noqa: E402,F401
    Alias,
    DataNode,
    GraphNode,
    Task,
    TaskRef,
    convert_legacy_graph,
)
from dask.utils import key_split as _cached_key_split  # noqa: E402
from distributed.core import error_message  # noqa: E402,F401
from distributed.diagnostics.plugin import SchedulerPlugin  # noqa: E402
from distributed.protocol import deserialize  # noqa: E402,F401
from distributed.scheduler import (  # noqa: E402,F401
    DEFAULT_DATA_SIZE,
    ClientState,
    Computation,
    Scheduler,
    SchedulerState,
    TaskGroup,
    TaskPrefix,
    Transition,
    WorkerState,
    _cull,
    _materialize_graph,
    scheduler_story,
    validate_task_state,
)
from distributed.scheduler import TaskState as StockTaskState  # noqa: E402,F401
from distributed.stealing import WorkStealing  # noqa: E402
from distributed.utils import TupleComparable, key_split_group  # noqa: E402,F401

try:  # a private module: present in every supported release
    from distributed.shuffle._scheduler_plugin import ShuffleSchedulerPlugin  # noqa: E402
except ImportError:  # pragma: no cover - shuffle not importable (no pandas)
    ShuffleSchedulerPlugin = None  # type: ignore[assignment,misc]
from distributed.diagnostics.eventstream import EventStream  # noqa: E402
from distributed.diagnostics.graph_layout import GraphLayout  # noqa: E402,F401
from distributed.diagnostics.progress import GroupTiming, MultiProgress, Progress  # noqa: E402
from distributed.diagnostics.task_stream import TaskStreamPlugin  # noqa: E402

#: distributed's own plugins whose ``transition`` returns at once unless
#: the task leaves ``processing`` (the dashboard's task stream and group
#: timing, ``client.progress``, the event stream)
_ACT_ONLY_FROM_PROCESSING = (TaskStreamPlugin, Progress, MultiProgress, GroupTiming, EventStream)

#: dask's ``key_split`` without its process-wide ``lru_cache`` (resolving a
#: submission's names through the cached one fills that cache with up to
#: 100k of its keys and keeps them alive).
key_split = getattr(_cached_key_split, "__wrapped__", _cached_key_split)


# ---------------------------------------------------------------------------
# Stock's update_graph, as the instruments time it (slimgraph.instrument.stock_recorder)
# ---------------------------------------------------------------------------
import distributed.scheduler as _scheduler_module  # noqa: E402

#: Module-level functions stock's update_graph calls, by the phase each is:
#: ``phase -> (module, attribute)``. The instruments wrap the attribute.
STOCK_FUNCTIONS = {
    "deserialize": (_scheduler_module, "deserialize"),
    "materialize": (_scheduler_module, "_materialize_graph"),
    "cull": (_scheduler_module, "_cull"),
}

#: Scheduler methods stock's update_graph calls, by the phase each is.
STOCK_METHODS = {
    "lost_dependencies": "_find_lost_dependencies",
    "task_states": "_generate_taskstates",
    "annotations": "_apply_annotations",
    "priorities": "_set_priorities",
    "who_wants": "client_desires_keys",
    "transitions": "transitions",
}

#: The Scheduler method in which stock builds a submission's Computation and
#: task states (plugins' update_graph and spans run inside it).
STOCK_CREATE_TASKSTATES = "_create_taskstate_from_graph"


def runs_stock_update_graph(cls: type) -> bool:
    """Whether ``cls`` ingests with distributed's own update_graph."""
    return (getattr(cls, "update_graph", None) is Scheduler.update_graph
            and getattr(cls, STOCK_CREATE_TASKSTATES, None)
            is getattr(Scheduler, STOCK_CREATE_TASKSTATES))


#: The slot in which a dask task-spec node keeps its dependencies (the
#: memory instruments walk it like the other slots).
NODE_DEPENDENCIES_SLOT = "_dependencies"


# ---------------------------------------------------------------------------
# Materializing a submitted expression (what stock's update_graph does)
# ---------------------------------------------------------------------------
def materialize(expr: Any, validate: bool) -> tuple[dict, dict]:
    """``(dsk, annotations_by_type)``, as stock's update_graph gets them."""
    return _materialize_graph(expr=expr, validate=validate)


def culls_explicitly(expr: Any) -> bool:
    """Whether stock culls the materialized graph itself (low-level graphs;
    every other expression culls on its own)."""
    return isinstance(expr, LLGExpr)


def cull(dsk: dict, keys: set) -> dict:
    """distributed's own cull: the culled dict's order (set-pop order) is
    the order stock adds dependents in, and what dask.order sees."""
    return _cull(dsk, keys)


# ---------------------------------------------------------------------------
# Task groups and prefixes: how they count their tasks
# ---------------------------------------------------------------------------
def count_added(tg: TaskGroup, n: int, state: str = "released") -> None:
    """``TaskGroup.add`` for ``n`` tasks in ``state`` at once."""
    tg.states[state] += n
    tg._size += n
    tp = tg.prefix
    tp.states[state] += n
    tp._size += n


def count_moved(tg: TaskGroup, old: str, new: str, n: int = 1) -> None:
    """``n`` tasks of ``tg`` went from ``old`` to ``new`` (what the
    ``TaskState.state`` setter counts, once per group)."""
    gs = tg.states
    gs[old] -= n
    gs[new] += n
    tp = tg.prefix
    ps = tp.states
    ps[old] -= n
    ps[new] += n
    tp.state_counts[new] += n


def count_held(tg: TaskGroup, old: str, new: str, n: int = 1) -> None:
    """``n`` tasks of ``tg`` held from ``old`` in ``new`` without a
    transition: the state counts move, the prefix's cumulative
    ``state_counts`` (transitions made) do not (slimgraph.ingest.tail)."""
    gs = tg.states
    gs[old] -= n
    gs[new] += n
    ps = tg.prefix.states
    ps[old] -= n
    ps[new] += n


def count_unmoved(tg: TaskGroup, old: str, new: str, n: int = 1) -> None:
    """Undo :func:`count_moved` entirely, including the prefix's cumulative
    ``state_counts`` (a staged queued task that goes to a worker instead)."""
    count_moved(tg, new, old, n)
    tp = tg.prefix
    tp.state_counts[old] -= n
    tp.state_counts[new] -= n


def group_size(tg: Any) -> int:
    """How many tasks a group (or prefix) counts, in every state."""
    return tg._size


def adopt_prefix(real: TaskPrefix, private: TaskPrefix) -> None:
    """Fold a private, freshly made prefix (counts only) into the
    scheduler's prefix of the same name, and move its groups there."""
    for s, n in private.states.items():
        real.states[s] += n
    for s, n in private.state_counts.items():
        real.state_counts[s] += n
    real._size += private._size
    for tg in list(private._groups):
        tg.prefix = real
        real.add_group(tg)


# ---------------------------------------------------------------------------
# The scheduler state
# ---------------------------------------------------------------------------
def generation_clock(state: SchedulerState) -> tuple:
    """``(generation, time of the last generation change)``: what decides
    a submission's generation (see ``SchedulerState._set_priorities``)."""
    return state.generation, state._last_time


def set_generation_clock(state: SchedulerState, generation: Any, last_time: float) -> None:
    state.generation = generation
    state._last_time = last_time


def init_server_state(state: Any) -> None:
    """What distributed's Scheduler server adds to a SchedulerState and the
    ingestion reads: the generation clock and the count of graph updates
    in flight (for a server-less state)."""
    state.generation = 0
    state._last_time = 0.0
    state._active_graph_updates = 0


def server_validators() -> dict:
    """distributed's per-state checks (``validate_key``, ``validate_waiting``,
    ...) that live on the Scheduler server rather than on SchedulerState
    (in 2026.3.0; from 2026.6.0 on they are SchedulerState's): what a
    server-less state needs for ``validate=True``. ``validate_state`` is not
    among them: it also checks the server's comms."""
    return {
        name: fn
        for name, fn in vars(Scheduler).items()
        if name.startswith("validate_") and name != "validate_state" and not hasattr(SchedulerState, name)
    }


def graph_update_started(state: Any) -> None:
    """The count of update_graph calls in flight (``Scheduler.is_idle``
    reads it)."""
    state._active_graph_updates += 1


def graph_update_ended(state: Any) -> None:
    state._active_graph_updates -= 1
    assert state._active_graph_updates >= 0


def transition(state: SchedulerState, key: Any, finish: str, stimulus_id: str, **kwargs: Any) -> tuple:
    """One of distributed's own transitions: ``(recs, client_msgs, worker_msgs)``."""
    return state._transition(key, finish, stimulus_id, **kwargs)


def transitions(state: SchedulerState, recs: dict, client_msgs: dict, worker_msgs: dict, stimulus_id: str) -> None:
    """distributed's transition loop, to a steady state (messages collected)."""
    state._transitions(recs, client_msgs, worker_msgs, stimulus_id)


def apply_annotations(state: Any, tasks: Any, annotations_by_type: dict, global_annotations: dict | None) -> set:
    """Stock's own annotation step (restrictions, resources, retries, ...)
    on ``tasks``; returns the keys that got annotations."""
    return Scheduler._apply_annotations(
        state, tasks=tasks, annotations_by_type=annotations_by_type, global_annotations=global_annotations
    )


# ---------------------------------------------------------------------------
# Workers: what distributed's worker choice reads, and a shadow to run it on
# ---------------------------------------------------------------------------
from distributed.core import Status  # noqa: E402


def worker_view(ws: WorkerState) -> tuple:
    """What distributed's choice of a worker for a task without
    dependencies or restrictions reads of one worker (and what its
    ``_add_to_processing`` changes): comparable, to check later that none
    of it moved."""
    return (
        ws,
        ws.address,
        ws.status,
        ws.nthreads,
        len(ws.processing),
        len(ws.long_running),
        tuple(ws.task_prefix_count.items()),
        ws._network_occ,
        ws._occupancy_cache,
    )


def occupancy_view(state: SchedulerState) -> tuple:
    """The scheduler-wide inputs of the occupancy arithmetic."""
    return (
        tuple(state._task_prefix_count_global.items()),
        state._network_occ_global,
        state.bandwidth,
        state.UNKNOWN_TASK_DURATION,
    )


def prefix_duration_inputs(tp: TaskPrefix) -> tuple:
    """What ``SchedulerState._get_prefix_duration`` reads of a prefix."""
    return (tp.duration_average, tp.max_exec_time)


def count_processing(state: SchedulerState, ws: WorkerState, name: str, n: int) -> None:
    """``WorkerState.add_to_processing``'s counts for ``n`` tasks of prefix
    ``name`` that need no replica (the tasks themselves go into
    ``ws.processing`` separately, in order)."""
    ws.task_prefix_count[name] += n
    state._task_prefix_count_global[name] += n


def task_to_msg(state: Any, ts: Any) -> dict:
    """distributed's own ``compute-task`` message for ``ts`` (it also sets
    ``ts.run_id`` from distributed's run-id counter)."""
    return SchedulerState._task_to_msg(state, ts)


def scheduler_task_msg(state: Any, ts: Any) -> dict:
    """The ``compute-task`` message ``state`` itself builds for ``ts`` (its
    ``_task_to_msg``: the slim engine's own on a slim scheduler)."""
    return state._task_to_msg(ts)


def compute_task_fields() -> tuple:
    """The fields of distributed's ``compute-task`` message, in the order
    ``SchedulerState._task_to_msg`` writes them (read from its code: the
    constant keys of its one dict display), or ``()`` if they cannot be read
    that way."""
    for const in SchedulerState._task_to_msg.__code__.co_consts:
        if type(const) is tuple and const[:2] == ("op", "key"):
            return const
    return ()


#: opcodes that test an attribute just loaded for its truth (``if not
#: ts.run_spec:``) on the supported interpreters, 3.10 to 3.13
_TRUTH_TESTS = frozenset({"UNARY_NOT", "TO_BOOL", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE",
                          "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE"})


def reads_only_truth_of(fn: Any, attr: str) -> bool:
    """Whether ``fn``'s code reads ``attr`` exactly once, and only to test
    its truth (read from its bytecode)."""
    import dis

    ins = list(dis.get_instructions(fn))
    at = [i for i, x in enumerate(ins) if x.opname in ("LOAD_ATTR", "LOAD_METHOD") and x.argval == attr]
    return len(at) == 1 and at[0] + 1 < len(ins) and ins[at[0] + 1].opname in _TRUTH_TESTS


#: distributed's ``memory -> released``; its one read of ``ts.run_spec`` is
#: ``if not ts.run_spec:`` (pure data is forgotten), see
#: :func:`transitions_table_with`
stock_memory_released = SchedulerState._TRANSITIONS_TABLE[("memory", "released")]


def transitions_table_with(cls: type, replaced: dict) -> None:
    """Give ``cls`` (a subclass of distributed's SchedulerState) a transition
    table of its own: distributed's, with the functions in ``replaced``
    (``(start, finish) -> function``) in place of its own. distributed's
    ``_transition`` looks the function up on the instance, so the table is
    the subclass's attribute, distributed's left as it is."""
    table = dict(SchedulerState._TRANSITIONS_TABLE)
    for edge in replaced:
        if edge not in table:
            raise KeyError(f"distributed has no transition {edge!r}")
    table.update(replaced)
    cls._TRANSITIONS_TABLE = table


def next_run_id() -> int:
    """The next id of distributed's run-id counter (what ``_task_to_msg`` takes)."""
    return next(StockTaskState._run_id_iterator)


class _Count:
    """A stand-in for a set of which only the length is read."""

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


class ShadowWorker:
    """A copy of what distributed's worker choice reads of a WorkerState.
    Hashes like the worker it shadows (so sets of them iterate alike)."""

    __slots__ = (
        "index", "real", "address", "status", "nthreads", "processing", "long_running",
        "task_prefix_count", "_network_occ", "_occupancy_cache", "scheduler", "_hash",
    )
    occupancy = WorkerState.occupancy

    def __init__(self, index: int, view: tuple, scheduler: Any):
        """``view``: :func:`worker_view` of the worker, taken earlier."""
        from collections import defaultdict

        ws, address, status, nthreads, n_processing, n_long_running, counts, net, cache = view
        self.index = index
        self.real = ws
        self.address = address
        self.status = status
        self.nthreads = nthreads
        self.processing = _Count(n_processing)
        self.long_running = _Count(n_long_running)
        self.task_prefix_count = defaultdict(int, counts)
        self._network_occ = net
        self._occupancy_cache = cache
        self.scheduler = scheduler
        self._hash = hash(ws)

    def __hash__(self) -> int:
        return self._hash

    def add_task(self, name: str) -> None:
        """``WorkerState.add_to_processing`` for a task of prefix ``name``
        without dependencies."""
        self.task_prefix_count[name] += 1
        self.scheduler._task_prefix_count_global[name] += 1
        self.processing.n += 1


class ShadowState:
    """Just enough of a SchedulerState for distributed's own worker choice
    (``decide_worker_non_rootish``, ``decide_worker_rootish_queuing_enabled``)
    and ``check_idle_saturated`` to run on shadow workers: the methods are
    distributed's, the attributes copies (set by the caller)."""

    decide_worker_non_rootish = SchedulerState.decide_worker_non_rootish
    decide_worker_rootish_queuing_enabled = SchedulerState.decide_worker_rootish_queuing_enabled
    check_idle_saturated = SchedulerState.check_idle_saturated
    is_unoccupied = SchedulerState.is_unoccupied
    valid_workers = SchedulerState.valid_workers
    total_occupancy = SchedulerState.total_occupancy
    _calc_occupancy = SchedulerState._calc_occupancy
    _get_prefix_duration = SchedulerState._get_prefix_duration

    def __init__(self, occupancy: tuple, prefixes: Any):
        """``occupancy``: :func:`occupancy_view` of the scheduler, taken earlier."""
        from collections import defaultdict

        self._n_tasks = 0
        self.n_tasks_read = False

        counts, net, bandwidth, unknown = occupancy
        self.validate = False
        self.task_prefixes = prefixes
        self.bandwidth = bandwidth
        self.UNKNOWN_TASK_DURATION = unknown
        self._task_prefix_count_global = defaultdict(int, counts)
        self._network_occ_global = net
        # (set by the caller: n_tasks, total_nthreads, WORKER_SATURATION,
        # workers, running, idle, saturated, idle_task_count, step)

    @property
    def n_tasks(self) -> int:
        """The scheduler's count of tasks sent so far. distributed's choice
        reads it only for a task without dependencies when it round-robins
        (no worker occupied, or 20 workers or more); noting whether it was
        read lets a commit go ahead when only other clients' tasks moved
        the count meanwhile (a second user's ``submit`` every second).
        ``n_tasks_read`` is reset by the caller per choice."""
        self.n_tasks_read = True
        return self._n_tasks

    @n_tasks.setter
    def n_tasks(self, n: int) -> None:
        self._n_tasks = n

    def count_sent(self) -> None:
        """One more task sent (``n_tasks += 1`` without reading it)."""
        self._n_tasks += 1


def work_stealing(plugin: Any) -> bool:
    """Whether ``plugin`` is distributed's work-stealing extension."""
    return type(plugin) is WorkStealing


def stealing_level(plugin: Any, ts: Any) -> int | None:
    """Where work stealing files ``ts`` (a task without dependencies) when it
    starts processing; None: it does not."""
    cost, level = plugin.steal_time_ratio(ts)
    return None if cost is None else level


def stealing_put_one_prefix(plugin: Any, state: Any, order: list, addresses: list, by_address: dict) -> None:
    """:func:`stealing_put` for tasks of one prefix, in bulk: ``order`` the
    tasks in order, ``addresses`` where each went, ``by_address`` {address:
    its tasks, in order}."""
    ts = order[0]
    tp = ts.group.prefix
    cost, level = plugin.steal_time_ratio(ts)
    if cost is None:
        return
    stealable = plugin.stealable
    for address, tasks in by_address.items():
        stealable[address][level].update(tasks)
    where = {a: (a, level) for a in by_address}
    plugin.key_stealable.update(zip(order, [where[a] for a in addresses]))
    if state._get_prefix_duration(tp) != tp.duration_average:
        unknown = plugin.unknown_durations
        s = unknown.get(tp.name)
        if s is None:
            s = unknown[tp.name] = set()
        s.update(order)


def stealing_put(plugin: Any, state: Any, tasks: list) -> None:
    """``WorkStealing.put_key_in_stealable`` for each of ``tasks`` (now
    processing), in that order. Where a task is filed depends on its
    prefix, and for a task with dependencies also on their total size."""
    per_prefix: dict = {}
    stealable = plugin.stealable
    ks = plugin.key_stealable
    unknown = plugin.unknown_durations
    for ts in tasks:
        tp = ts.group.prefix
        by = (tp, ts.get_nbytes_deps()) if ts.dependencies else tp
        known = per_prefix.get(by)
        if known is None:
            cost, level = plugin.steal_time_ratio(ts)
            known = per_prefix[by] = (
                cost is not None,
                level,
                state._get_prefix_duration(tp) != tp.duration_average,
            )
        filed, level, unknown_duration = known
        if not filed:
            continue
        address = ts.processing_on.address
        stealable[address][level].add(ts)
        ks[ts] = (address, level)
        if unknown_duration:
            s = unknown.get(tp.name)
            if s is None:
                s = unknown[tp.name] = set()
            s.add(ts)


# ---------------------------------------------------------------------------
# Spans
# ---------------------------------------------------------------------------
def ensure_span(spans_ext: Any, name: tuple, ids: tuple) -> Any:
    return spans_ext._ensure_span(name, ids)


def default_span(spans_ext: Any) -> Any:
    return spans_ext._ensure_default_span()


def add_span_code(span: Any, code: tuple) -> None:
    span._code[code] = None


# ---------------------------------------------------------------------------
# Plugins
# ---------------------------------------------------------------------------
def listens_to_update_graph(plugin: Any) -> bool:
    return getattr(type(plugin), "update_graph", None) is not SchedulerPlugin.update_graph


def listens_to_transition(plugin: Any, start: str, finish: str) -> bool:
    """Whether ``plugin.transition`` may act on a ``start -> finish``
    transition. SchedulerPlugin's no-op is skipped, and so are distributed's
    own plugins for the transitions their ``transition`` methods return from
    without acting: work stealing acts on transitions into or out of
    ``processing``; the P2P shuffle on ``released``, ``erred`` and
    ``forgotten``; the task stream, group timing, progress and event-stream
    plugins only on transitions out of ``processing``."""
    fn = getattr(type(plugin), "transition", None)
    if fn is SchedulerPlugin.transition:
        return False
    if type(plugin) in _ACT_ONLY_FROM_PROCESSING and start != "processing":
        return False
    if type(plugin) is WorkStealing and "processing" not in (start, finish):
        return False
    if (
        ShuffleSchedulerPlugin is not None
        and type(plugin) is ShuffleSchedulerPlugin
        and finish not in ("released", "erred", "forgotten")
    ):
        return False
    return True


#: the names of distributed's machinery around each transition function
#: (the log, plugin calls, recommendations), as a profiler's frames name
#: them (slimgraph.bench.life)
TRANSITION_DISPATCH = tuple(f.__name__ for f in (SchedulerState._transition, SchedulerState._transitions,
                                                  Scheduler.transitions))

#: distributed's own transition, a plain function ``(state, key, finish,
#: stimulus_id, **kwargs)``: the hook's subclass calls it directly, one
#: call per transition instead of a chain of methods
stock_transition = SchedulerState._transition


class TransitionHook(SchedulerState):
    """A SchedulerState whose every transition can be a function of the
    subclass's (:meth:`transition_with`), which calls
    :data:`stock_transition` (distributed's own) when it is ready. The slim
    state uses it to thaw its compact containers before distributed's
    transition code runs. A subclass may also build the ``compute-task``
    messages (:meth:`build_messages_with`)."""

    @classmethod
    def transition_with(cls, fn: Any) -> None:
        """Every transition of this class's schedulers is
        ``fn(state, key, finish, stimulus_id, **kwargs)`` (in place of
        distributed's ``_transition``, which ``fn`` calls as
        :data:`stock_transition`; set as the method itself, no call in
        between: it runs for every transition)."""
        cls._transition = fn

    @classmethod
    def build_messages_with(cls, fn: Any) -> None:
        """Every ``compute-task`` message of this class's schedulers is built
        by ``fn(state, ts)`` (in place of distributed's ``_task_to_msg``; set
        as the method itself, no call in between: it runs once per task
        sent)."""
        cls._task_to_msg = fn


# ---------------------------------------------------------------------------
# Steps of distributed's own transitions whose plugin calls and log entries
# slimgraph places itself (slimgraph.ingest.apply, .tail, .deliveries)
# ---------------------------------------------------------------------------
class PluginTable(dict):
    """A slim scheduler's ``plugins``: distributed's dict of plugins (name
    -> plugin), which can *withhold* some plugins for a step
    (:meth:`withheld`). Made once, as the state is built
    (:func:`table_plugins`); distributed reads and writes it as its own
    dict. It overrides none of dict's methods: ``_transition`` tests it and
    lists its values on every transition at a plain dict's cost."""

    __slots__ = ()

    def withheld(self, ids: Any) -> "Withheld":
        """Context: inside, the plugins whose ``id`` is in ``ids`` are out
        of the table, so distributed's code (``_transition``'s calls, any
        hook) does not see them; the others keep their order. At the end
        they are back in their places; a plugin added inside stays, after
        them, and one removed inside stays out (a withheld plugin whose
        name was taken inside gives way to the new one)."""
        return Withheld(self, ids)


class Withheld:
    """:meth:`PluginTable.withheld`'s context. It runs around every
    transition made while plugin calls are owed, so the common case is
    short: the withheld plugins at the table's end (added after
    distributed's own) and nothing added inside; they go back with an
    insertion each."""

    __slots__ = ("table", "ids", "names", "out", "out_names")

    def __init__(self, table: dict, ids: Any) -> None:
        self.table = table
        self.ids = ids
        #: the plugins taken out (None: nothing withheld) and their names
        self.out: list | None = None
        self.out_names: list = []
        #: the table's names as the step started
        self.names: list = []

    def __enter__(self) -> None:
        ids = self.ids
        if not ids:
            return
        table = self.table
        out = out_names = None
        for name, p in table.items():
            if id(p) in ids:
                if out is None:
                    out, out_names = [], []
                out.append(p)
                out_names.append(name)
        if out is None:
            return
        self.names = list(table)
        for name in out_names:
            del table[name]
        self.out = out
        self.out_names = out_names

    def __exit__(self, *exc: Any) -> None:
        out = self.out
        if out is None:
            return
        table = self.table
        names = self.names
        k = len(out)
        # withheld at the end, nothing added inside (a name added last, or
        # fewer names, would show): they go back after the others, as before
        if (len(table) == len(names) - k and names[-k:] == self.out_names
                and next(reversed(table), None) == (names[-k - 1] if len(names) > k else None)):
            for name, p in zip(self.out_names, out):
                table[name] = p
            return
        now = dict(table)
        back = dict(zip(self.out_names, out))
        table.clear()
        for name in names:
            if name in now:
                table[name] = now.pop(name)
            elif name in back:
                table[name] = back[name]
        table.update(now)


def table_plugins(state: Any) -> None:
    """Give ``state`` a :class:`PluginTable` of the plugins it holds, in
    their order (once: a state that has one keeps it)."""
    if type(state.plugins) is not PluginTable:
        state.plugins = PluginTable(state.plugins)


def plugins_withheld(state: Any, ids: Any) -> Any:
    """Context: distributed's code on ``state`` does not see the plugins
    whose ``id`` is in ``ids`` (:meth:`PluginTable.withheld`)."""
    return state.plugins.withheld(ids)


class StepEntries:
    """The entries distributed's transitions append to a transition log
    from a point on (the log's last entry then, its *mark*), taken out of
    it by :meth:`take`. The log stays distributed's own deque: nothing is
    added to its ``append``, which every transition calls.

    A log at its ``maxlen`` drops its oldest entry on each append; the
    entries taken out leave it that much shorter until the caller puts
    back every entry it took, or more entries than the log keeps (a
    commit whose replay fills it), so those dropped would have been
    dropped anyway and the log ends as it would have. Entries between two
    takes must fit in the log (``maxlen`` at least that many: a hand-off's
    call appends one or two, distributed's default keeps 100,000);
    beyond, the mark is pushed out and :meth:`take` gets only what the log
    still holds."""

    __slots__ = ("log", "mark")

    def __init__(self, log: Any) -> None:
        self.log = log
        self.mark = log[-1] if log else None

    def take(self) -> list:
        """The entries appended since the mark (or the last take), in
        order, taken out of the log."""
        log = self.log
        mark = self.mark
        out = []
        while log and log[-1] is not mark:
            out.append(log.pop())
        out.reverse()
        return out


@contextlib.contextmanager
def own_step(state: Any, withheld: Any = None) -> Any:
    """Context for a step of distributed's own transitions on ``state`` whose
    plugin calls and log entries the caller places itself: the plugins
    whose ``id`` is in ``withheld`` are not told (:func:`plugins_withheld`);
    the log entries are the caller's, a :class:`StepEntries` whose
    ``take()`` hands them over. Entries not taken by the end leave the log
    too."""
    with plugins_withheld(state, withheld):
        entries = StepEntries(state.transition_log)
        try:
            yield entries
        finally:
            entries.take()


@contextlib.contextmanager
def forgotten_in_tasks(state: Any, forgotten: dict) -> Any:
    """Context: ``state.tasks`` holds again the forgotten tasks of
    ``forgotten`` (key -> task) whose keys are free; at the end, those still
    there leave it. distributed's ``_transition`` does the same around its
    plugin calls for a task it forgets, since plugins look the task up when
    they hear of it; this is for plugin calls made later than the forget
    (:mod:`slimgraph.ingest.deliveries`). Synchronous use only: nothing
    else may see them there."""
    tasks = state.tasks
    back = [k for k in forgotten if k not in tasks]
    for k in back:
        tasks[k] = forgotten[k]
    try:
        yield
    finally:
        for k in back:
            if tasks.get(k) is forgotten.get(k):
                del tasks[k]


# ---------------------------------------------------------------------------
# Workers' streams: a BatchedSend's buffer (slimgraph.ingest.pacing)
# ---------------------------------------------------------------------------
def stream_buffered(bs: Any) -> bool:
    """Whether messages wait in ``bs``'s buffer (``BatchedSend.buffer``),
    not yet taken for its next write."""
    return bool(bs.buffer)


def stream_requeue(bs: Any, msgs: Any) -> None:
    """Put ``msgs`` in ``bs``'s buffer behind what waits there, as they are:
    not counted in ``message_count`` and without waking its writer (as
    ``send`` would); its next batch or its ``close`` takes them."""
    bs.buffer.extend(msgs)


def stream_batches(bs: Any) -> int:
    """How many batches ``bs`` has taken for writing so far
    (``BatchedSend.batch_count``; it serializes a batch in the step that
    takes it)."""
    return bs.batch_count


def stream_stopping(bs: Any) -> bool:
    """Whether ``bs`` is stopping (``close`` or ``abort`` called:
    ``BatchedSend.please_stop``) or its comm is closed."""
    return bool(bs.please_stop or bs.closed())


from distributed.batched import BatchedSend  # noqa: E402


class PacedStream(BatchedSend):
    """distributed's ``BatchedSend`` of a worker's stream on a slim
    scheduler: the same object, whose ``send``, ``close`` and ``abort`` go
    to its :attr:`pacer` while one holds messages for it
    (:class:`slimgraph.ingest.pacing.Pacer`), and are distributed's own
    otherwise. Streams become PacedStreams as they enter the scheduler's
    :class:`StreamTable`, once."""

    #: the pacer holding messages for this stream, or None
    pacer: Any = None

    def send(self, *msgs: Any) -> None:
        p = self.pacer
        if p is None:
            return BatchedSend.send(self, *msgs)
        return p.send(*msgs)

    def close(self, timeout: Any = None) -> Any:
        p = self.pacer
        if p is not None:
            p.flush()
        return BatchedSend.close(self, timeout=timeout)

    def abort(self) -> None:
        p = self.pacer
        if p is not None:
            p.drop()
        return BatchedSend.abort(self)


def stream_send(bs: Any, *msgs: Any) -> None:
    """distributed's own ``BatchedSend.send`` of ``msgs`` (past a pacer)."""
    BatchedSend.send(bs, *msgs)


class StreamTable(dict):
    """A slim scheduler's ``stream_comms``: every plain ``BatchedSend``
    distributed puts in it (``add_worker``) becomes a :class:`PacedStream`
    (its class, once; nothing else of it changes)."""

    __slots__ = ()

    def __init__(self, table: dict) -> None:
        super().__init__()
        for address, bs in table.items():
            self[address] = bs

    def __setitem__(self, address: Any, bs: Any) -> None:
        if type(bs) is BatchedSend:
            bs.__class__ = PacedStream
        dict.__setitem__(self, address, bs)


def pace_streams(scheduler: Any) -> None:
    """Give ``scheduler`` a :class:`StreamTable` for its workers' streams
    (once; the streams it holds already become PacedStreams)."""
    if not isinstance(scheduler.stream_comms, StreamTable):
        scheduler.stream_comms = StreamTable(scheduler.stream_comms)


# ---------------------------------------------------------------------------
# Clients (the benchmark captures what a real Client sends)
# ---------------------------------------------------------------------------
@contextlib.contextmanager
def client_messages_kept(client: Any, keep: Any) -> Any:
    """While inside, messages for which ``keep(msg)`` is true are not sent
    to the scheduler (the client's one way out, ``_send_to_scheduler``)."""
    orig = client._send_to_scheduler

    def send(msg: dict) -> None:
        if not keep(msg):
            orig(msg)

    client._send_to_scheduler = send
    try:
        yield
    finally:
        client._send_to_scheduler = orig


# ---------------------------------------------------------------------------
# Turning distributed's Scheduler class into the slim one
# ---------------------------------------------------------------------------
def patch_scheduler_new(new: Any) -> None:
    """Give ``distributed.Scheduler`` a ``__new__`` (see
    ``slimgraph.distributed.install``)."""
    if "__new__" in Scheduler.__dict__ and Scheduler.__new__ is not new:  # pragma: no cover
        raise RuntimeError("distributed.Scheduler defines __new__; cannot install")
    Scheduler.__new__ = new  # type: ignore[assignment]


# ---------------------------------------------------------------------------
# A client's release (slimgraph.life.release)
# ---------------------------------------------------------------------------
def client_releases_recs(state: Any, keys: list, cs: Any, recs: dict) -> None:
    """distributed's first step of ``client_releases_keys``: ``cs`` stops
    wanting ``keys``; the recommendations that follow go into ``recs``."""
    state._client_releases_keys(keys=keys, cs=cs, recommendations=recs)
