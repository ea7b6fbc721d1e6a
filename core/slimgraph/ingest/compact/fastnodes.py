"""dask's ``Task`` and ``Alias`` made without running their constructors, where allowed.

Why: a run_spec that compact ingestion keeps as a reference is built each
time its task is sent to a worker, on the event loop. A reduction task of
dask.array (``Task(key, combine, Task(None, _identity_cast, Alias(k0),
..., typ=list))``) took 4.4 us through the constructors: each walks its
arguments with ``isinstance`` tests and collects their dependencies into a
set, which the caller here already knows. Setting the slots directly took
it to 2.6 us (bench "sending", the array's compute-task messages).

What: :func:`alias`, :func:`task` and :func:`task_on_ref` (the shim's,
:mod:`slimgraph.shim.nodes`: they write dask's slots) store in each slot
what the constructors store. The dependency frozenset is given by the
caller, built with the same set operations (:mod:`.setorder`), so its
iteration order is dask's too. Whether the constructors of the installed
dask still store exactly that, with the frozensets :mod:`.setorder` makes,
is checked once, at import (:func:`slimgraph.shim.nodes.agrees`); if a dask
release changes them, :data:`ENABLED` is False and callers use the
constructors.
"""
from __future__ import annotations

from slimgraph.shim.nodes import NO_DEPS, agrees, alias, task, task_on_ref
from .setorder import aliases_frozenset

__all__ = ["ENABLED", "NO_DEPS", "alias", "task", "task_on_ref"]

#: whether the installed dask's constructors store what :func:`task` and
#: :func:`alias` store (checked at import)
ENABLED: bool = agrees(aliases_frozenset)
