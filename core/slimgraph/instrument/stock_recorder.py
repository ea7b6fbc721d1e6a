"""Phase records for an unmodified stock ``distributed.Scheduler``.

Nothing in distributed is edited. :func:`install` (or the
:class:`StockRecorderPlugin`, which calls it on start) wraps, on the scheduler
*instance*, the methods ``update_graph`` walks through, and a few module
globals that ``update_graph`` calls (restored when the last hooked scheduler
uninstalls):

==================  =====================================================
phase               what is timed
==================  =====================================================
deserialize         ``distributed.scheduler.deserialize`` (unpickling)
materialize         ``distributed.scheduler._materialize_graph`` (offload)
cull                ``distributed.scheduler._cull`` (low-level graphs)
order               ``dask.order.order`` (offload)
lost_dependencies   ``Scheduler._find_lost_dependencies``
task_states         ``Scheduler._generate_taskstates``
annotations         ``Scheduler._apply_annotations``
priorities          ``Scheduler._set_priorities``
who_wants           ``Scheduler.client_desires_keys``
transitions         ``Scheduler.transitions``
plugins             every plugin's ``update_graph`` hook and
                    ``spans.observe_tasks`` (an extension hook)
other               (not in ``PHASES``) ``total_s`` minus the phases above:
                    building recommendations, the ``exception_blame`` loop
                    over edges, ``report_on_key``, and waiting for the loop
                    to resume ``update_graph`` after an offload finished
==================  =====================================================

Offloaded phases are timed inside the offload thread (wall and that
thread's CPU time). Phases never overlap, so the phase wall times plus
``other`` add up to ``total_s`` exactly; nested calls (``transitions`` from a
plugin hook, say) count in the outer phase only.

Which update_graph a global wrapper belongs to is carried by a context
variable that only the update_graph wrapper sets (offload copies contextvars
into its thread), so other callers of these functions, other schedulers in
the same process and code outside update_graph are not recorded.

Status: the stock code catches every exception inside update_graph and logs an
``update-graph`` event with status ``OK``/``cancelled``/``error``; the
instance-level ``log_event`` wrapper reads that status, and the phase
wrappers keep the first exception's text for ``record.error``.

Slim schedulers record their own phases; for them :func:`install` only hooks
the ``update_graph`` coroutine (used by memray capture). A scheduler is
considered slim when its class sets ``slimgraph_records_phases = True`` or
overrides ``update_graph``/``_create_taskstate_from_graph``.
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import operator
import threading
from typing import Any, Callable

import dask.order

from slimgraph import shim
from distributed.diagnostics.plugin import SchedulerPlugin

from slimgraph.instrument.recorder import get_extension
from slimgraph.instrument.records import PhaseClock, PhaseRecord, SubmissionRecord

OTHER = "other"


class _Active:
    """One update_graph being recorded."""

    __slots__ = ("record", "depth", "task", "done", "error", "event_status")

    def __init__(self, record: SubmissionRecord, task: Any):
        self.record = record
        self.depth = 0
        self.task = task
        self.done = False
        self.error: str | None = None
        self.event_status: str | None = None


_current: contextvars.ContextVar[_Active | None] = contextvars.ContextVar(
    "slimgraph_update_graph", default=None
)


def current_record() -> SubmissionRecord | None:
    """The record of the update_graph running in this context, if any."""
    a = _current.get()
    return None if a is None or a.done else a.record


def _active_here(loop_side: bool) -> _Active | None:
    a = _current.get()
    if a is None or a.done or a.depth:
        return None
    if loop_side:
        try:
            if asyncio.current_task() is not a.task:
                return None
        except RuntimeError:
            return None
    return a


def _note_error(a: _Active, e: BaseException) -> None:
    if a.error is None:
        a.error = f"{type(e).__name__}: {e}"


def _timed(fn: Callable, phase: str, *, where: str = "event-loop",
           loop_side: bool = True, count: Callable | None = None) -> Callable:
    """Wrap ``fn`` so calls inside a recorded update_graph fill ``phase``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        a = _active_here(loop_side)
        if a is None:
            return fn(*args, **kwargs)
        a.depth += 1
        try:
            with PhaseClock(_phase(a.record, phase, where)) as p:
                out = fn(*args, **kwargs)
            if count is not None:
                count(p, a.record, args, kwargs, out)
            return out
        except BaseException as e:
            _note_error(a, e)
            raise
        finally:
            a.depth -= 1

    wrapper.__slimgraph_wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def _phase(record: SubmissionRecord, name: str, where: str) -> PhaseRecord:
    for p in record.phases:
        if p.name == name:
            return p
    p = PhaseRecord(name, where=where)
    record.phases.append(p)
    return p


# -- counters filled after a phase (outside its clock) ---------------------
def _count_materialize(p, rec, args, kwargs, out):
    p.tasks = len(out[0])
    rec.tasks = p.tasks


def _count_dsk_out(p, rec, args, kwargs, out):
    p.tasks = len(out)
    rec.tasks = p.tasks


def _count_lost(p, rec, args, kwargs, out):
    dsk = kwargs.get("dsk", args[0] if args else None)
    p.tasks = len(dsk) if dsk is not None else 0


_deps = operator.attrgetter("dependencies")


def _count_taskstates(p, rec, args, kwargs, out):
    dsk = kwargs.get("dsk")
    touched, new, _ = out
    p.tasks = len(touched)
    rec.new_tasks = len(new)
    if dsk is not None:
        rec.tasks = len(dsk)
        p.edges = rec.edges = sum(map(len, map(_deps, dsk.values())))


def _count_tasks_kw(name):
    def count(p, rec, args, kwargs, out):
        v = kwargs.get(name)
        try:
            p.tasks = len(v)
        except TypeError:
            pass
    return count


def _count_recs(p, rec, args, kwargs, out):
    recs = args[0] if args else kwargs.get("recommendations")
    try:
        p.tasks += len(recs)
    except TypeError:
        pass


# -- module globals (shared by all hooked schedulers) ---------------------
_globals_lock = threading.Lock()
_globals_users = 0
_globals_saved: list[tuple[Any, str, Any, Any]] = []


def _install_globals() -> None:
    global _globals_users
    with _globals_lock:
        _globals_users += 1
        if _globals_users > 1:
            return
        timing = {
            "deserialize": {},
            "materialize": {"where": "offload", "loop_side": False, "count": _count_materialize},
            "cull": {"count": _count_dsk_out},
        }
        specs = [(mod, name, _timed(getattr(mod, name), phase, **timing[phase]))
                 for phase, (mod, name) in shim.STOCK_FUNCTIONS.items()]
        specs.append((dask.order, "order", _timed(
            dask.order.order, "order", where="offload", loop_side=False,
            count=_count_dsk_out)))
        for mod, name, new in specs:
            old = getattr(mod, name)
            setattr(mod, name, new)
            _globals_saved.append((mod, name, old, new))


def _uninstall_globals() -> None:
    global _globals_users
    with _globals_lock:
        if _globals_users == 0:
            return
        _globals_users -= 1
        if _globals_users:
            return
        while _globals_saved:
            mod, name, old, new = _globals_saved.pop()
            if getattr(mod, name) is new:
                setattr(mod, name, old)


def records_own_phases(scheduler: Any) -> bool:
    """True for schedulers (the slim engine) that fill their own records."""
    flag = getattr(scheduler, "slimgraph_records_phases", None)
    if flag is not None:
        return bool(flag)
    return not shim.runs_stock_update_graph(type(scheduler))


class Hooks:
    """The instance-level wrappers installed on one scheduler."""

    #: phase -> how to count its tasks (the methods: shim.STOCK_METHODS)
    INSTANCE_PHASES = {
        "lost_dependencies": _count_lost,
        "task_states": _count_taskstates,
        "annotations": _count_tasks_kw("tasks"),
        "priorities": _count_tasks_kw("tasks"),
        "who_wants": _count_tasks_kw("keys"),
        "transitions": _count_recs,
    }

    def __init__(self, scheduler: Any, record_phases: bool):
        self.scheduler = scheduler
        self.record_phases = record_phases
        self.ext = get_extension(scheduler)
        self._set_attrs: list[str] = []
        self._replaced_handlers: list[tuple[dict, str, Any, Any]] = []
        self._globals = False
        self.installed = False

    # -- install / uninstall ------------------------------------------------
    def install(self) -> "Hooks":
        s = self.scheduler
        self._orig_update_graph = s.update_graph
        wrapper = self._make_update_graph(self._orig_update_graph)
        self._set(s, "update_graph", wrapper)
        for d in (getattr(s, "stream_handlers", None), getattr(s, "client_handlers", None),
                  getattr(s, "handlers", None)):
            if isinstance(d, dict) and "update-graph" in d:
                old = d["update-graph"]
                d["update-graph"] = wrapper
                self._replaced_handlers.append((d, "update-graph", old, wrapper))
        if self.record_phases:
            for phase, count in self.INSTANCE_PHASES.items():
                meth = shim.STOCK_METHODS[phase]
                self._set(s, meth, _timed(getattr(s, meth), phase, count=count))
            create = shim.STOCK_CREATE_TASKSTATES
            self._set(s, create, self._make_create(getattr(s, create)))
            self._set(s, "log_event", self._make_log_event(s.log_event))
            _install_globals()
            self._globals = True
        self.installed = True
        self.ext.hooks = self
        return self

    def _set(self, obj: Any, name: str, value: Any) -> None:
        obj.__dict__[name] = value
        self._set_attrs.append(name)

    def uninstall(self) -> None:
        if not self.installed:
            return
        s = self.scheduler
        for name in self._set_attrs:
            s.__dict__.pop(name, None)
        self._set_attrs.clear()
        for d, k, old, new in self._replaced_handlers:
            if d.get(k) is new:
                d[k] = old
        self._replaced_handlers.clear()
        if self._globals:
            _uninstall_globals()
            self._globals = False
        self.installed = False
        if getattr(self.ext, "hooks", None) is self:
            self.ext.hooks = None

    # -- wrappers -----------------------------------------------------------
    def _make_update_graph(self, orig: Callable) -> Callable:
        hooks = self

        @functools.wraps(orig)
        async def update_graph(*args, **kwargs):
            ext = hooks.ext
            capture = ext.memray_armed
            if capture is not None:
                ext.memray_armed = None
                coro_fn = functools.partial(hooks._recorded, orig, *args, **kwargs)
                return await capture.run(coro_fn)
            return await hooks._recorded(orig, *args, **kwargs)

        update_graph.__slimgraph_wrapped__ = orig  # type: ignore[attr-defined]
        return update_graph

    async def _recorded(self, orig: Callable, *args, **kwargs):
        if not self.record_phases:
            return await orig(*args, **kwargs)
        rec = SubmissionRecord(scheduler="stock")
        rec.client = kwargs.get("client")
        rec.stimulus_id = kwargs.get("stimulus_id")
        ext = self.ext
        a = _Active(rec, asyncio.current_task())
        tok = ext.begin(rec)
        ctx_tok = _current.set(a)
        status = error = None
        try:
            return await orig(*args, **kwargs)
        except BaseException as e:
            status = "error"
            error = f"{type(e).__name__}: {e}"
            raise
        finally:
            a.done = True
            _current.reset(ctx_tok)
            if status is None:
                status = a.event_status or ("error" if a.error else "OK")
                if status == "error":
                    error = a.error or "update_graph failed (see the scheduler log)"
            elif a.error:
                error = a.error
            ext.finish(rec, tok, status=status, error=error, append=False)
            measured = sum(p.wall_s for p in rec.phases)
            other = PhaseRecord(OTHER, wall_s=max(0.0, rec.total_s - measured))
            rec.phases.append(other)
            ext.history.append(rec)

    def _make_create(self, orig: Callable) -> Callable:
        """Time plugin hooks and spans inside _create_taskstate_from_graph.

        The plugin hooks are wrapped per instance only for the duration of
        this synchronous call (no other coroutine can run meanwhile).
        """
        s = self.scheduler

        @functools.wraps(orig)
        def create(*args, **kwargs):
            a = _active_here(True)
            if a is None:
                return orig(*args, **kwargs)
            patched: list[tuple[Any, str, bool, Any]] = []

            def time_method(obj: Any, name: str) -> None:
                """Wrap ``obj.name`` on the instance; remember how to undo it."""
                try:
                    had = name in obj.__dict__
                    old = obj.__dict__.get(name)
                    setattr(obj, name, _timed(getattr(obj, name), "plugins"))
                    patched.append((obj, name, had, old))
                except (AttributeError, TypeError):
                    pass

            try:
                for p in list(s.plugins.values()):
                    if type(p).update_graph is SchedulerPlugin.update_graph and \
                            "update_graph" not in getattr(p, "__dict__", {}):
                        continue
                    time_method(p, "update_graph")
                spans = s.extensions.get("spans")
                if spans is not None and hasattr(spans, "observe_tasks"):
                    time_method(spans, "observe_tasks")
                return orig(*args, **kwargs)
            except BaseException as e:
                _note_error(a, e)
                raise
            finally:
                for obj, name, had, old in patched:
                    if had:
                        obj.__dict__[name] = old
                    else:
                        obj.__dict__.pop(name, None)

        return create

    def _make_log_event(self, orig: Callable) -> Callable:
        @functools.wraps(orig)
        def log_event(topic, msg):
            a = _current.get()
            if a is not None and not a.done and isinstance(msg, dict) \
                    and msg.get("action") == "update-graph":
                a.event_status = msg.get("status")
            return orig(topic, msg)

        return log_event


def install(scheduler: Any, record_phases: bool | str = "auto") -> Hooks:
    """Hook ``scheduler``'s update_graph (idempotent); returns the hooks.

    ``record_phases="auto"`` records phases for stock schedulers only.
    Must be called on the scheduler's event loop thread (or before it runs).
    """
    ext = get_extension(scheduler)
    if record_phases == "auto":
        record_phases = not records_own_phases(scheduler)
    hooks = getattr(ext, "hooks", None)
    if hooks is not None and hooks.installed:
        if hooks.record_phases == bool(record_phases):
            return hooks
        hooks.uninstall()
    return Hooks(scheduler, bool(record_phases)).install()


def uninstall(scheduler: Any) -> None:
    ext = scheduler.extensions.get("slimgraph")
    hooks = getattr(ext, "hooks", None)
    if hooks is not None:
        hooks.uninstall()


class StockRecorderPlugin(SchedulerPlugin):
    """Scheduler plugin: record every update_graph of this scheduler.

    ``Scheduler(plugins=[StockRecorderPlugin()])``,
    ``client.register_plugin(StockRecorderPlugin())`` or from a preload.
    Records: ``get_history(scheduler)`` / ``slimgraph.instrument.client``.
    """

    name = "slimgraph-recorder"
    idempotent = True

    def __init__(self, record_phases: bool | str = "auto"):
        self.record_phases = record_phases
        self._hooks: Hooks | None = None

    async def start(self, scheduler: Any) -> None:
        self._hooks = install(scheduler, record_phases=self.record_phases)
        get_extension(scheduler).ensure_monitor()

    async def close(self) -> None:
        if self._hooks is not None:
            self._hooks.uninstall()
            self._hooks = None

    def __getstate__(self):
        return {"record_phases": self.record_phases, "_hooks": None}
