"""dask's ``Task`` and ``Alias`` made without running their constructors.

Why: a run_spec that compact ingestion keeps as a reference is built each
time its task is sent to a worker, on the event loop. A reduction task of
dask.array (``Task(key, combine, Task(None, _identity_cast, Alias(k0),
..., typ=list))``) took 4.4 us through the constructors: each walks its
arguments with ``isinstance`` tests and collects their dependencies into a
set, which the caller here already knows. Setting the slots directly took
it to 2.6 us (bench "sending", the array's compute-task messages).

What: :func:`alias`, :func:`task` and :func:`task_on_ref` store in each
slot what the constructors store. The dependency frozenset is given by the caller, built
with the same set operations (:mod:`.setorder`), so its iteration order is
dask's too. Whether the constructors of the installed dask still store
exactly that is checked once, at import, by building the same nodes both
ways and comparing every slot (:func:`_agrees`); if a dask release changes
them, :data:`ENABLED` is False and callers use the constructors.
"""
from __future__ import annotations

from typing import Any

from slimgraph.shim.compact import Alias, Task, TaskRef, _identity_cast

__all__ = ["ENABLED", "NO_DEPS", "alias", "task", "task_on_ref"]

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


def _agrees() -> bool:
    """Whether :func:`alias` and :func:`task` give what the constructors give."""
    from .setorder import aliases_frozenset

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


#: whether the installed dask's constructors store what :func:`task` and
#: :func:`alias` store (checked at import)
ENABLED: bool = _agrees()
