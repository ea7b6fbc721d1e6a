"""The shim's reach into dask's task-spec nodes: their slots.

dask's ``Task``, ``Alias`` and ``TaskRef`` keep their state in ``__slots__``,
some of them private (``_dependencies``, ``_data_producer``, ``_token``,
``_is_coro``, ``_repr``). slimgraph reads and writes those slots where a
constructor or ``__setstate__`` would cost too much, and only through this
module:

* :func:`alias`, :func:`task` and :func:`task_on_ref` make nodes without
  running their constructors (a run_spec is built each time its task is
  sent to a worker); :func:`agrees` checks that they still store what the
  constructors store (slimgraph.ingest.compact.fastnodes runs it once, at
  import, and uses them only where it passes).
* :class:`DecodedTask` fills a ``Task`` from its pickled state in one
  statement (slimgraph.ingest.decode); :data:`DECODES` says whether dask's
  ``Task`` still pickles the slots it assigns.
* :func:`dependencies_of`, :func:`data_producer_of` and
  :func:`set_dependencies` read and keep a node's own slot values (its
  dependency frozenset's object, hence its iteration order);
  :func:`task_options` passes a data producer flag to the constructor.

Kept apart from :mod:`slimgraph.shim.compact` because it imports only
``dask._task_spec`` (the unpickler and dask.order's fallback need these, not
dask.array).
"""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Callable

from dask._task_spec import Alias, Task, TaskRef, _identity_cast

__all__ = [
    "DECODES", "NO_DEPS", "DecodedTask", "agrees", "alias", "data_producer_of", "decoding_class",
    "dependencies_of", "set_dependencies", "task", "task_on_ref", "task_options",
]

# ---------------------------------------------------------------------------
# Reading and keeping a node's slots
# ---------------------------------------------------------------------------
#: ``node.dependencies`` read from its slot (dask's property returns the
#: slot; the slot read is one C call, run once per delayed task packed)
dependencies_of = attrgetter("_dependencies")

#: ``task.data_producer`` read from its slot (as above)
data_producer_of = attrgetter("_data_producer")


def task_options(data_producer: Any) -> dict:
    """The keywords that make ``Task``'s constructor store ``data_producer``
    as it is (dask's ``_data_producer=``), to pass as ``Task(key, func,
    *args, **options, **kwargs)``; one dict per template, reused."""
    return {"_data_producer": data_producer}


def set_dependencies(node: Any, dependencies: frozenset) -> None:
    """Make ``dependencies`` the node's dependency frozenset, that object
    itself: its iteration order is what dask.order and a worker see."""
    node._dependencies = dependencies


# ---------------------------------------------------------------------------
# Nodes made without their constructors
# ---------------------------------------------------------------------------
# Why: a run_spec that compact ingestion keeps as a reference is built each
# time its task is sent to a worker, on the event loop. A reduction task of
# dask.array (``Task(key, combine, Task(None, _identity_cast, Alias(k0), ...,
# typ=list))``) took 4.4 us through the constructors: each walks its
# arguments with ``isinstance`` tests and collects their dependencies into a
# set, which the caller already knows. Setting the slots directly took it to
# 2.6 us (bench "sending", the array's compute-task messages). The
# dependency frozenset is given by the caller, built with the same set
# operations (slimgraph.ingest.compact.setorder), so its iteration order is
# dask's too.

_new = object.__new__

#: the frozenset a node without dependencies holds (dask shares one)
NO_DEPS: frozenset = Task(None, len)._dependencies


def alias(key: Any) -> Any:
    """``Alias(key)`` for a key that is not a TaskRef or an Alias."""
    a = _new(Alias)
    a.key = key
    a.target = key
    a._dependencies = frozenset((key,))
    return a


def task(key: Any, func: Any, args: tuple, kwargs: dict, dependencies: frozenset,
         data_producer: bool = False) -> Any:
    """``Task(key, func, *args, _data_producer=data_producer, **kwargs)``,
    whose dependency frozenset the caller built: ``kwargs`` is stored as
    given (a new dict per task, as the constructor's ``**kwargs`` makes)."""
    t = _new(Task)
    t.key = key
    t._dependencies = dependencies
    t.func = func
    t.args = args
    t.kwargs = kwargs
    t._data_producer = data_producer
    t._token = None
    t._is_coro = None
    t._repr = None
    return t


def task_on_ref(key: Any, func: Any, dep: Any) -> Any:
    """``Task(key, func, TaskRef(dep))``: a delayed chain's task, its one
    argument a reference to the task before, its ``TaskRef`` made without
    running ``TaskRef.__init__`` (it runs once per such task sent to a
    worker: 0.2 us less a message)."""
    r = _new(TaskRef)
    r.key = dep
    return task(key, func, (r,), {}, frozenset((dep,)))


def _slots(node: Any) -> list:
    names: list = []
    for cls in type(node).__mro__:
        names.extend(getattr(cls, "__slots__", ()))
    return names


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    names = _slots(a)
    if sorted(names) != sorted(_slots(b)):
        return False
    for name in names:
        x, y = getattr(a, name, _new), getattr(b, name, _new)
        if type(x) is not type(y):
            return False
        if isinstance(x, (Alias, Task)):
            if not _same(x, y):
                return False
        elif isinstance(x, tuple) and any(isinstance(v, (Alias, Task)) for v in x):
            if len(x) != len(y) or not all(_same(v, w) for v, w in zip(x, y)):
                return False
        elif isinstance(x, frozenset):
            if list(x) != list(y):  # the same iteration order too
                return False
        elif x != y:
            return False
    return True


def agrees(aliases_frozenset: Callable[[list], frozenset]) -> bool:
    """Whether :func:`alias`, :func:`task` and :func:`task_on_ref` give what
    the installed dask's constructors give, slot by slot (the dependency
    frozensets in the same iteration order), when the dependencies of a
    task whose arguments are ``Alias``es to ``keys`` are made by
    ``aliases_frozenset(keys)`` (the caller's way, checked with them)."""
    try:
        keys = [("x", i) for i in range(6)]
        for n in (1, 4, 6):
            ks = keys[:n]
            ref_inner = Task(None, _identity_cast, *[Alias(k) for k in ks], typ=list)
            ref = Task(("y", 0), max, ref_inner)
            deps = aliases_frozenset(ks)
            inner = task(None, _identity_cast, tuple(alias(k) for k in ks), {"typ": list}, deps)
            ours = task(("y", 0), max, (inner,), {}, frozenset(set(deps)))
            if not (_same(ref, ours) and ref == ours):
                return False
        ref = Task("k", len, (1, 2), _data_producer=True, axis=0)
        if not _same(ref, task("k", len, ((1, 2),), {"axis": 0}, NO_DEPS, True)) or ref.dependencies is not NO_DEPS:
            return False
        if not _same(Task("k", len, TaskRef("j")), task_on_ref("k", len, "j")):
            return False
        return _same(Alias(("x", 0)), alias(("x", 0)))
    except Exception:
        return False


# ---------------------------------------------------------------------------
# A Task filled from its pickled state (slimgraph.ingest.decode)
# ---------------------------------------------------------------------------
#: ``Task``'s slots, in the order its ``__getstate__`` gives them
#: (``get_all_slots()``), as :class:`DecodedTask` assigns them (dask 2026.3
#: to 2026.8)
_KNOWN_SLOTS = ["_data_producer", "_dependencies", "_is_coro", "_repr", "_token", "args", "func", "key", "kwargs"]

#: whether dask's Task pickles the state :class:`DecodedTask` assigns
DECODES = list(Task.get_all_slots()) == _KNOWN_SLOTS


class DecodedTask(Task):
    """A ``Task`` while pickle fills it; a ``Task`` once filled (its
    ``__setstate__`` assigns the nine slots in one statement, then makes
    the object a plain ``Task``: ``__class__`` assignment, allowed between
    classes with the same layout). Use only where :data:`DECODES`."""

    __slots__ = ()

    def __setstate__(self, state: tuple) -> None:
        (
            self._data_producer,
            self._dependencies,
            self._is_coro,
            self._repr,
            self._token,
            self.args,
            self.func,
            self.key,
            self.kwargs,
        ) = state
        self.__class__ = Task


def decoding_class(module: str, name: str) -> type | None:
    """The class an unpickler makes in place of the global ``module.name``:
    :class:`DecodedTask` for dask's ``Task`` (not its subclasses), else None."""
    if name == "Task" and module == Task.__module__:
        return DecodedTask
    return None
