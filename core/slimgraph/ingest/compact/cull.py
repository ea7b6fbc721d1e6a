"""dask's ``HighLevelGraph.cull``, replayed on locations.

What dask does: it walks the layers in ``reversed(hlg._toposort_layers())``
with one set of wanted keys, ``keys_set``. Each layer culls itself against
that set and reports every kept key's dependencies; ``keys_set`` gains the
dependencies and loses the kept keys; a layer that keeps nothing is
dropped. The culled graph lists the kept layers in that walk order, each in
its own iteration order. Two details decide the result beyond "what is
reachable":

* a materialized layer keeps *all* its keys when ``len(keys_set)`` equals
  its size, whether they are wanted or not (and reports all their
  dependencies), so the size of ``keys_set`` at each step matters: it
  counts keys outside the graph and keys a layer re-adds for itself;
* a layer culled to a subset lists it in the iteration order of a set
  derived from ``keys_set``, whose layout depends on the whole history of
  insertions and removals. That cannot be replayed without the set itself;
* once ``keys_set`` is empty, dask stops culling: every layer walked after
  that is kept whole, wanted or not.

:func:`cull_locations` replays the walk on a bytearray of locations (which
keys are in ``keys_set``) plus a set for keys outside the graph, so it knows
each step's ``len(keys_set)`` exactly. A layer kept whole keeps its own
order; a layer culled to a single key has a trivial order; a layer culled to
several keys raises :class:`OrderDependent`, and the caller runs dask's own
cull instead (exact by construction, slower).

Reading a materialized value's dependencies is the expensive part, and the
walk visits exactly the kept values in the culled graph's order, so it
records what it read (:class:`ValueDeps`) for the assembly to reuse.
"""
from __future__ import annotations

from array import array
from typing import Any

from slimgraph.shim.compact import GraphNode
from .graph import NODE
from .legacy import Skeleton, skeleton_shape
from .setorder import aliases_frozenset
from .layers import BLOCKWISE, LEGACY, GraphLayers
from .unsupported import OrderDependent, Unsupported


class ValueDeps:
    """Per kept materialized value, in the culled order: what it converts
    to and its dependencies in the order of the frozenset its node would
    hold, each a location (>= 0) or ``~n`` for ``ext_keys[n]``, a key no
    layer has."""

    __slots__ = ("kinds", "off", "items", "ext_keys", "skel", "tstart", "titems", "skeletons", "_skel_ids")

    def __init__(self) -> None:
        self.kinds = bytearray()
        self.off = array("i", [0])
        self.items = array("q")
        self.ext_keys: list = []
        #: per record: the Skeleton id of a legacy task made of keys only
        #: (-1: none), and where its keys' locations, in argument order,
        #: start in ``titems``
        self.skel = array("i")
        self.tstart = array("q")
        self.titems = array("q")
        self.skeletons: list = []
        self._skel_ids: dict = {}

    def read(self, key: Any, value: Any, legacy_layer: bool, locate: Any, reader: Any, refs: list) -> None:
        """Record ``value``'s dependencies; append to ``refs`` the
        locations dask's cull counts (and return keys outside it through
        ``refs`` as ``~n``, only for node layers, as dask's cull does)."""
        items = self.items
        self.skel.append(-1)
        self.tstart.append(-1)
        if isinstance(value, GraphNode):
            self.kinds.append(NODE)
            for d in value.dependencies:
                loc = locate(d)
                if loc is None:
                    n = len(self.ext_keys)
                    self.ext_keys.append(d)
                    items.append(~n)
                    if not legacy_layer:
                        refs.append(~n)
                else:
                    items.append(loc)
                    refs.append(loc)
        elif not self._keys_list(value, locate, refs, items):
            kind, fs, locs, in_order = reader.dependencies(key, value)
            self.kinds.append(kind)
            if kind == 3:  # SELF: the cull counts the key itself
                refs.extend(locs.values())
            elif kind == 0 and in_order:
                shape = skeleton_shape(value, len(in_order))
                if shape is not None:
                    sid = self._skeleton(value[0], shape)
                    self.skel[-1] = sid
                    self.tstart[-1] = len(self.titems)
                    self.titems.extend(in_order)
            for d in fs:
                loc = locs.get(d)
                if loc is None:
                    n = len(self.ext_keys)
                    self.ext_keys.append(d)
                    items.append(~n)
                else:
                    items.append(loc)
                    refs.append(loc)
        self.off.append(len(items))

    def _keys_list(self, value: Any, locate: Any, refs: list, items: Any) -> bool:
        """The commonest legacy value, a reduction's ``(func, [key, ...])``
        with every key in the graph, read without the general walk; False
        (nothing recorded) for anything else.

        What it records is what the walk records for that value
        (:class:`~.legacy.LegacyReader`): a Task whose one argument, the
        list, becomes a nested ``Task(_identity_cast, Alias(k), ...)``, so
        its dependency frozenset is ``frozenset(set(aliases_frozenset(keys)))``
        (a nested node's set, copied into the outer node's set, frozen);
        the keys' locations in argument order under the skeleton
        ``(func, n keys)``. An array's reductions are most of its legacy
        values, so this shape is worth its own reader."""
        if type(value) is not tuple or len(value) != 2:
            return False
        lst = value[1]
        if type(lst) is not list or not lst or not callable(value[0]):
            return False
        locs = []
        add = locs.append
        for e in lst:
            if type(e) is not tuple or not e or type(e[0]) is not str:
                return False
            loc = locate(e)
            if loc is None:
                return False
            add(loc)
        self.kinds.append(0)  # TASK
        self.skel[-1] = self._skeleton(value[0], (len(lst),))
        titems = self.titems
        self.tstart[-1] = len(titems)
        titems.extend(locs)
        at = dict(zip(lst, locs)).__getitem__
        deps = list(map(at, frozenset(set(aliases_frozenset(lst)))))
        items.extend(deps)
        refs.extend(deps)
        return True

    def _skeleton(self, head: Any, shape: tuple) -> int:
        k = (id(head), shape)
        sid = self._skel_ids.get(k)
        if sid is None:
            sid = self._skel_ids[k] = len(self.skeletons)
            self.skeletons.append(Skeleton(head, shape))
        return sid


def seed_keys_set(wanted: Any, locate: Any, inset: bytearray) -> tuple[int, set]:
    """dask's first ``keys_set`` (the wanted keys) on locations: marks their
    locations in ``inset``; returns how many it marked and the wanted keys
    no layer has."""
    count = 0
    ext: set = set()
    for k in wanted:
        loc = locate(k)
        if loc is None:
            ext.add(k)
        elif not inset[loc]:
            inset[loc] = 1
            count += 1
    return count, ext


def cull_locations(gl: GraphLayers, toposorted: list, wanted: set, reader: Any) -> tuple[list, ValueDeps]:
    """``[(unit, locations)]`` of the culled graph in its layer order, and
    the dependencies read on the way.

    ``locations`` is a ``range`` (the whole layer) or a one-element tuple;
    ``toposorted`` is ``hlg._toposort_layers()``; ``wanted`` the keys the
    optimizer culls to.
    """
    total = gl.total
    inset = bytearray(total)  # the location's key is in keys_set
    # occurrences of the location's key in layers not walked yet (a key
    # repeated by several materialized layers counts at its first location)
    remaining = bytearray(b"\x01") * total
    canon = gl.canon
    for first, n in gl.occurrences.items():
        if n > 255:
            raise Unsupported("a key repeated by more than 255 layers")
        remaining[first] = n
    dup_units = gl.dup_units
    locate = gl.locate
    # located keys in keys_set, and the keys in it that no layer has
    count, ext = seed_keys_set(wanted, locate, inset)
    if any(len(name) < 2 for name in gl.blockwise):
        # Blockwise.cull compares key[0] with its name for every wanted key
        # (a str key's first character, too)
        raise Unsupported("Blockwise layer with a one-character name")

    store = ValueDeps()
    ext_keys = store.ext_keys
    kinds = gl.kinds
    starts = gl.starts
    sizes = gl.sizes
    views = gl.views
    mkeys = gl.mkeys
    mvals = gl.mvals
    unit_of_name = gl.unit_of_name
    out: list = []
    refs: list = []
    bw_ext: list = []
    read = store.read

    for name in reversed(toposorted):
        u = unit_of_name[name]
        s = starts[u]
        if not count and not ext:
            # keys_set is empty: dask culls nothing more, it keeps this
            # layer and every one after it whole, as they are
            locs = gl.unit_locals(u)
            if kinds[u] != BLOCKWISE:
                legacy = kinds[u] == LEGACY
                for loc in locs:
                    refs.clear()
                    read(mkeys[loc], mvals[loc], legacy, locate, reader, refs)
            out.append((u, locs))
            continue
        if kinds[u] == BLOCKWISE:
            v = views[u]
            span = v.total
            _check_wanted_outside(ext, gl)
            n_in = inset.count(1, s, s + span)
            if n_in == 0:
                remaining[s : s + span] = bytes(span)
                continue
            if n_in == v.total and v.size == v.total:
                locs: Any = range(s, s + v.size)
            elif n_in == 1:
                locs = [inset.index(1, s, s + span)]
            else:
                raise OrderDependent(f"Blockwise layer {name!r} culled to {n_in} of {v.total} blocks")
            bulk = v.all_cull_dependencies() if not v.cull_free and type(locs) is range else None
            if bulk is not None:
                count += _mark_all(bulk, inset, remaining, name)
            elif not v.cull_free:
                cd = v.cull_dependencies
                for loc in locs:
                    refs.clear()
                    bw_ext.clear()
                    cd(loc - s, locate, refs, bw_ext)
                    for d in refs:
                        if not remaining[d]:
                            raise Unsupported(f"layer {name!r} needs a key of a layer walked before it")
                        if not inset[d]:
                            inset[d] = 1
                            count += 1
                    if bw_ext:
                        ext.update(bw_ext)
            if type(locs) is range:
                count -= inset.count(1, locs.start, locs.stop)
                inset[locs.start : locs.stop] = bytes(len(locs))
            else:
                for loc in locs:
                    if inset[loc]:
                        inset[loc] = 0
                        count -= 1
            remaining[s : s + span] = bytes(span)
            out.append((u, locs))
            continue

        size = sizes[u]
        legacy = kinds[u] == LEGACY
        dup = u in dup_units
        if count + len(ext) == size:
            locs = range(s, s + size)
        elif size == 1 and not dup:
            if not inset[s]:
                remaining[s] = 0
                continue
            locs = (s,)
        else:
            if dup:
                wanted_locs = [loc for loc in range(s, s + size) if inset[canon.get(loc, loc)]]
                n_in = len(wanted_locs)
            else:
                n_in = inset.count(1, s, s + size)
            if n_in == 0:
                _close(remaining, s, size, dup, canon)
                continue
            if n_in > 1:
                raise OrderDependent(f"layer {name!r} culled to {n_in} of {size} keys")
            loc = wanted_locs[0] if dup else inset.index(1, s, s + size)
            probe = ValueDeps()
            refs.clear()
            probe.read(mkeys[loc], mvals[loc], legacy, locate, reader, refs)
            here = {canon.get(x, x) for x in range(s, s + size)} if dup else range(s, s + size)
            me = canon.get(loc, loc)
            for d in refs:
                if d >= 0 and d != me and d in here:
                    raise OrderDependent(f"layer {name!r} culled to a key with dependencies in the layer")
            locs = (loc,)
        for loc in locs:
            refs.clear()
            read(mkeys[loc], mvals[loc], legacy, locate, reader, refs)
            for d in refs:
                if d < 0:
                    ext.add(ext_keys[~d])
                    continue
                if not remaining[d]:
                    raise Unsupported(f"layer {name!r} needs a key of a layer walked before it")
                if not inset[d]:
                    inset[d] = 1
                    count += 1
            c = canon.get(loc, loc) if dup else loc
            if inset[c]:
                inset[c] = 0
                count -= 1
        _close(remaining, s, size, dup, canon)
        out.append((u, locs))
    return out, store


def _mark_all(deps: Any, inset: bytearray, remaining: bytearray, name: str) -> int:
    """The per-block marking of a Blockwise layer's dependencies, for all
    its blocks at once (``deps``: locations, repeats allowed): each must be
    of a layer not walked yet; those not in ``keys_set`` join it. Returns
    how many joined."""
    import numpy as np

    if not len(deps):
        return 0
    if not np.frombuffer(remaining, dtype=np.uint8)[deps].all():
        raise Unsupported(f"layer {name!r} needs a key of a layer walked before it")
    ins = np.frombuffer(inset, dtype=np.uint8)  # 0 or 1 each
    before = np.count_nonzero(ins)
    ins[deps] = 1
    return int(np.count_nonzero(ins)) - before


def _close(remaining: bytearray, s: int, size: int, dup: bool, canon: dict) -> None:
    """Mark a walked layer's keys (a repeated key: one occurrence fewer)."""
    if not dup:
        if size == 1:
            remaining[s] = 0
        else:
            remaining[s : s + size] = bytes(size)
        return
    for loc in range(s, s + size):
        c = canon.get(loc, loc)
        remaining[c] -= 1


def _check_wanted_outside(ext: set, gl: GraphLayers) -> None:
    """Keys outside the graph that a Blockwise layer's cull would misread:
    tuples named like one of its layers (it would take them for blocks),
    and keys that are not str or tuple (dask's cull fails on them)."""
    for k in ext:
        t = type(k)
        if t is tuple:
            if k and type(k[0]) is str and k[0] in gl.blockwise:
                raise Unsupported(f"key {k!r} names a Blockwise layer but is not one of its blocks")
        elif t is not str:
            raise Unsupported(f"key {k!r} of type {t.__name__} outside the graph")


def read_all(gl: GraphLayers, selection: list, reader: Any) -> ValueDeps:
    """The :class:`ValueDeps` of every selected materialized value, for a
    selection this module did not cull (dask culled it, or nothing did)."""
    store = ValueDeps()
    refs: list = []
    mkeys = gl.mkeys
    mvals = gl.mvals
    locate = gl.locate
    for u, locs in selection:
        if gl.kinds[u] == BLOCKWISE:
            continue
        legacy = gl.kinds[u] == LEGACY
        for loc in locs:
            store.read(mkeys[loc], mvals[loc], legacy, locate, reader, refs)
    return store
