"""A delayed graph's layers, culled and numbered in one pass.

What arrives for ``dask.delayed``: one ``MaterializedLayer`` per Delayed
object, each holding one ``Task`` (812k layers for the bench's 1M tree).
The general path (:mod:`.layers`, :mod:`.cull`, :mod:`.assemble`) handles
any mix of layers and pays for that generality per layer: a unit, a kind,
a start and a size each, then a walk that looks them up, then a pass that
numbers the kept tasks. For this one shape the same three steps collapse
into one walk over ``reversed(hlg._toposort_layers())`` (dask's own
order, the order its cull walks; computed on integers by
:func:`toposort_layers`), with a task's position in that walk as its
location.

The cull is dask's (``HighLevelGraph.cull`` with one-key layers of
``Task`` nodes, through ``dask._task_spec.cull``): a layer is kept when its
key is in ``keys_set``, or when ``keys_set`` holds exactly one key (the
``len(keys) == len(dsk)`` shortcut, which keeps a one-key layer whatever
that key is); a kept task's dependencies join ``keys_set`` and its own key
leaves it; once ``keys_set`` is empty every later layer is kept as it is.
Kept tasks are numbered in walk order, which is the order ``ensure_dict``
lists the culled graph in. Anything else -- another layer type, a layer of
several keys, a value that is not a plain ``Task``, a key
two layers share, a dependency on a layer walked before -- returns None
and the general path decides.
"""
from __future__ import annotations

from array import array
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from slimgraph.runtime import steps
from slimgraph.runtime.disposal import drain
from slimgraph.shim.compact import MaterializedLayer, Task
from .assemble import Part, split_dependencies
from .graph import NODE, LayerReport, ValueSource
from .hashjoin import KeyTable
from .layers import _check_key
from .unsupported import Unsupported


def toposort_layers(dependencies: dict) -> list | None:
    """``HighLevelGraph._toposort_layers()`` of a graph whose layer
    dependencies are ``dependencies`` (see :func:`toposort_positions`)."""
    found = toposort_positions(dependencies)
    return None if found is None else found[0]


def toposort_positions(dependencies: dict) -> tuple[list, KeyTable, np.ndarray] | None:
    """``HighLevelGraph._toposort_layers()`` of a graph whose layer
    dependencies are ``dependencies``, the same list, on integers, with
    the table of the layer names it made on the
    way (position = index in ``dependencies``; the caller may reuse it, see
    :func:`delayed_part`) and those positions in the order emitted. None
    where dask's would raise (a dependency that is not a layer), or where
    two layer names hash alike (:mod:`.hashjoin`; dask's own then).

    dask's: each layer's dependents in the order the layers are listed; a
    stack of ready layers, seeded in that order with the layers without
    dependencies; pop one, emit it, push each dependent whose last
    dependency that was. Here the dependents are one stable sort of the
    (dependency, layer) pairs, listed as dask appends them."""
    names = steps.list_of(dependencies)
    sets = steps.list_of(dependencies.values())
    n = len(names)
    table = KeyTable.of(names)
    if table is None:
        return None
    degree = steps.int64s(len, sets)
    deps: list = []
    steps.each_step(sets, lambda part: deps.extend(chain.from_iterable(part)))
    target = table.locate(deps)
    drain([deps])
    if len(target) and int(target.min()) < 0:
        return None
    source = np.repeat(np.arange(n, dtype=np.int64), degree)
    # (the lists in steps: steps.tolist)
    dependents = steps.tolist(source[np.argsort(target, kind="stable")])
    start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(target, minlength=n), out=start[1:])
    start = steps.tolist(start)
    waiting = steps.tolist(degree)
    ready = steps.tolist(np.flatnonzero(degree == 0))
    emitted = array("q")
    pop = ready.pop
    push = ready.append
    emit = emitted.append
    while ready:
        i = pop()
        emit(i)
        for r in dependents[start[i] : start[i + 1]]:
            w = waiting[r] - 1
            waiting[r] = w
            if not w:
                push(r)
    # its big temporaries freed in steps: dropped at the return, its lists
    # of an int per layer would be one C-level cascade that holds the GIL
    # (a block of the event loop although it runs in a thread)
    drain([dependents, start, waiting])
    out = steps.list_map(names.__getitem__, emitted)
    return out, table, np.frombuffer(emitted, dtype=np.int64)


def delayed_part(hlg: Any, wanted: set) -> Part | None:
    """The culled graph of ``hlg`` (one-key ``Task`` layers only) as a
    :class:`Part`, or None when ``hlg`` has another shape."""
    found = toposort_positions(hlg.dependencies)
    if found is None:
        return None
    return _walk(hlg, wanted, *found)


def _walk(hlg: Any, wanted: set, order: list, names: KeyTable, emitted: np.ndarray) -> Part | None:
    """:func:`delayed_part` once the layers are in order; ``names`` is the
    toposort's table of the layer names, ``emitted`` their positions in
    ``order``."""
    layers = hlg.layers
    n = len(order)
    if n != len(layers) or not n:
        return None
    keys: list = []
    vals: list = []
    kappend = keys.append
    vappend = vals.append
    annotated: dict = {}  # position -> its layer's annotations
    M = MaterializedLayer
    named = True  # every layer's key is its name (a Delayed's is)
    for name in reversed(order):
        layer = layers[name]
        if type(layer) is not M:
            return None
        if layer.annotations:
            annotated[len(keys)] = layer.annotations
        m = layer.mapping
        if type(m) is not dict or len(m) != 1:
            return None
        for k, v in m.items():
            if type(v) is not Task:
                return None
            if named and k != name:
                named = False
            kappend(k)
            vappend(v)
    try:
        for k in keys:
            _check_key(k)
    except Unsupported:
        return None
    if named:
        # the keys are the layer names: the toposort's table, renumbered
        # in walk order (the walk is the toposort reversed)
        walk_pos = np.empty(n, dtype=np.int64)
        walk_pos[emitted[::-1]] = np.arange(n, dtype=np.int64)
        table = names.renumbered(keys, walk_pos)
    else:
        found = KeyTable.of(keys)
        if found is None:  # a key in two layers (or two hashing alike)
            return None
        table = found
    # every task's dependencies, located at once, in frozenset order
    dep_sets = steps.list_map(_dependencies_of, vals)
    dep_keys: list = []
    steps.each_step(dep_sets, lambda part: dep_keys.extend(chain.from_iterable(part)))
    dep_off = array("q", [0])
    dep_off.frombytes(np.cumsum(steps.int64s(len, dep_sets)).tobytes())
    dep_loc = array("q", table.locate(dep_keys).tobytes())

    # the cull, walking the layers (positions 0 .. n-1)
    inset = bytearray(n)
    # keys of the graph in keys_set, and the keys in it no layer has
    wl = list(wanted)
    wloc = table.locate(wl)
    ext = {k for k, loc in zip(wl, wloc.tolist()) if loc < 0}
    marked = np.frombuffer(inset, dtype=np.uint8)
    marked[wloc[wloc >= 0]] = 1
    count = int(np.count_nonzero(marked))
    del marked
    kept = array("q")
    #: per kept task, its dependencies in frozenset order: a position, or
    #: ~j for ext_keys[j]
    items = array("i")
    item_off = array("i", [0])
    ext_keys: list = []
    drained = False
    for pos in range(n):
        if not drained and not inset[pos]:
            size = count + len(ext)
            if size == 0:
                drained = True
            elif size != 1:
                continue
        for j in range(dep_off[pos], dep_off[pos + 1]):
            loc = dep_loc[j]
            if loc < 0:
                d = dep_keys[j]
                items.append(~len(ext_keys))
                ext_keys.append(d)
                if not drained:
                    ext.add(d)
                continue
            if loc < pos and not drained:
                return None  # a dependency on a layer walked before
            items.append(loc)
            if not drained and not inset[loc]:
                inset[loc] = 1
                count += 1
        item_off.append(len(items))
        if inset[pos]:
            inset[pos] = 0
            count -= 1
        kept.append(pos)
    # (emptied in steps: each a list of a reference per layer)
    drain([dep_keys, dep_sets])

    # number the kept tasks, their dependencies as indices
    part = Part()
    if annotated:  # (as the culled graph's layers carry them, in its order)
        part.annotated = [(annotated[p], [keys[p]]) for p in kept if p in annotated]
    values = ValueSource()
    part.segments.append(values)
    part.keys = keys if len(kept) == n else [keys[p] for p in kept]
    # segment 0, position = index (from numpy's bytes: ``array("q",
    # range(n))`` would convert every int in one C call)
    part.codes = array("q", np.arange(len(kept), dtype=np.int64).tobytes())
    values.values = vals if len(kept) == n else [vals[p] for p in kept]
    values.kinds = bytearray([NODE]) * len(kept)
    if len(kept) == n and not ext_keys:
        # nothing culled, nothing outside (the common case): positions are
        # the indices already
        part.off = item_off
        part.idx = items
        return _report(part, order[n - 1])
    entry_of = array("q", [-1]) * n
    for e, p in enumerate(kept):
        entry_of[p] = e
    off = part.off
    idx = part.idx
    ext_by_task = part.ext
    for e in range(len(kept)):
        a = item_off[e]
        b = item_off[e + 1]
        if a == b:
            off.append(len(idx))
            continue
        # (a position not kept: culled away before the walk drained)
        outside = split_dependencies(items[a:b], entry_of, keys.__getitem__, ext_keys, idx)
        off.append(len(idx))
        if outside:
            ext_by_task[e] = tuple(outside)
    return _report(part, order[n - 1 - kept[0]] if kept else "")


_dependencies_of = attrgetter("dependencies")


def _report(part: Part, first_layer: str) -> Part:
    """One report entry for all the kept layers. (No task here blocks
    fusion: only P2P's barrier subclass of ``Task`` does, and delayed graphs
    are not fused.)"""
    n = len(part.keys)
    if n:
        part.report.append(LayerReport(first_layer, "MaterializedLayer", "kept", n, "", n))
    return part
