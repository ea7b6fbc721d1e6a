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
package only: here, and in :mod:`slimgraph.shim.compact` (dask's internals
the compact materialization reproduces, kept apart because they import
dask.array and dask.bag).

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
#: every release in between passes the differential suites (see README,
#: "Supported releases").
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
from distributed.utils import TupleComparable, key_split_group, offload  # noqa: E402,F401

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
# Stock's update_graph, as the instruments time it (slimgraph.instrument.stock)
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


class TransitionHook(SchedulerState):
    """A SchedulerState whose every transition goes through
    ``self.on_transition(key, finish, stimulus_id, kwargs)``, which calls
    :meth:`stock_transition` (distributed's own) when it is ready. The slim
    state uses it to thaw and settle its compact containers around
    distributed's transition code."""

    def _transition(self, key: Any, finish: str, stimulus_id: str, **kwargs: Any) -> tuple:
        return self.on_transition(key, finish, stimulus_id, kwargs)

    def on_transition(self, key: Any, finish: str, stimulus_id: str, kwargs: dict) -> tuple:
        return self.stock_transition(key, finish, stimulus_id, kwargs)

    def stock_transition(self, key: Any, finish: str, stimulus_id: str, kwargs: dict) -> tuple:
        return super()._transition(key, finish, stimulus_id, **kwargs)


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
