"""From a culled selection of locations to numbered tasks with dependencies.

:func:`assemble` turns one operand's culled layers into a :class:`Part`:
tasks numbered in the order dask's ``ensure_dict`` would list them (layers
in the culled order, each in its own order), one canonical key each, a
source code each, and each task's dependencies as indices, in the iteration
order of the frozenset its run_spec would hold (see :mod:`.setorder`),
keys outside the graph kept apart.

Dependencies follow dask's *materialization* (what the run_spec depends
on), which can be fewer than what its cull counted (a Blockwise input the
template does not use). Values that ``convert_legacy_graph`` drops (an
alias to its own key) are left out here as there.
"""
from __future__ import annotations

from array import array
from typing import Any

from slimgraph.shim.compact import Alias, GraphNode, execute_subgraph, is_dask_future
from .graph import MASK, NODE, SHIFT, TEMPLATE, BlockSource, ValueSource, add_report
from .layers import BLOCKWISE, GraphLayers
from .unsupported import Unsupported

_UNSET = 255


class Part:
    """One operand's tasks (before they join the other operands')."""

    def __init__(self) -> None:
        self.keys: list = []
        self.codes = array("q")
        self.off = array("i", [0])
        self.idx = array("i")
        self.ext: dict = {}
        self.segments: list = []
        self.dropped: set = set()
        self.report: list = []
        #: (layer annotations, keys of the culled layer in its order) for the
        #: annotated layers, when the operand stays a HighLevelGraph
        self.annotated: list = []
        #: node values whose fusion dask blocks (P2P barriers)
        self.block_fusion: set = set()
        #: (object, key) pairs dask's _optimize_slices rewrites in place,
        #: applied once the whole materialization has succeeded
        self.slices: list = []

    def __len__(self) -> int:
        return len(self.keys)


def _self_alias(key: Any, value: Any) -> bool:
    """convert_legacy_graph drops a value that converts to Alias(key -> key)."""
    t = type(value)
    if t is str or (t is tuple and not (value and callable(value[0]))):
        return value == key
    if isinstance(value, Alias):
        return value.target == key
    if not isinstance(value, GraphNode) and is_dask_future(value):
        return value.key == key
    return False


def split_dependencies(items: Any, entry_of: Any, key_of: Any, ext_keys: list, idx: array) -> list | None:
    """Append to ``idx`` the indices of a task's dependencies that are in the
    culled graph (``items``: locations, or ``~n`` for ``ext_keys[n]``, in
    frozenset order); return the others' keys in that order, or None."""
    outside = None
    for d in items:
        if d < 0:
            k = ext_keys[~d]
        else:
            j = entry_of[d]
            if j >= 0:
                idx.append(j)
                continue
            k = key_of(d)
        if outside is None:
            outside = [k]
        else:
            outside.append(k)
    return outside


def assemble(gl: GraphLayers, selection: list, store: Any, layer_types: list, annotate: bool) -> Part:
    part = Part()
    keys = part.keys
    codes = part.codes
    segments = part.segments
    dropped = part.dropped
    entry_of = array("i", [-1]) * gl.total
    values = ValueSource()
    vseg = -1
    kinds = gl.kinds
    views = gl.views
    mkeys = gl.mkeys
    mvals = gl.mvals
    report = part.report

    canon = gl.canon
    dup_units = gl.dup_units
    rec = 0  # position in the ValueDeps store
    #: entry -> store position of its key's last occurrence (repeated keys)
    last_record: dict = {}

    # pass 1: keys, sources, the tasks convert_legacy_graph drops
    for u, locs in selection:
        n0 = len(keys)
        if kinds[u] == BLOCKWISE:
            v = views[u]
            seg = len(segments)
            segments.append(BlockSource(v))
            head = seg << SHIFT
            s = v.base
            if type(locs) is range and len(locs) == v.size:
                keys.extend(v.keys())
                codes.extend(range(head, head + v.size))
                entry_of[s : s + v.size] = array("i", range(n0, n0 + v.size))
            else:
                for loc in locs:
                    local = loc - s
                    entry_of[loc] = len(keys)
                    keys.append(v.key(local))
                    codes.append(head + local)
            add_report(report, gl.names[u], "Blockwise", "compact", len(keys) - n0)
            if annotate and u in gl.annotations:
                part.annotated.append((gl.annotations[u], keys[n0:]))
            continue
        if vseg < 0:
            vseg = len(segments)
            segments.append(values)
        head = vseg << SHIFT
        vals = values.values
        vkinds = values.kinds
        dup = u in dup_units
        for loc in locs:
            k = mkeys[loc]
            val = mvals[loc]
            p = rec
            rec += 1
            if dup:
                c = canon.get(loc, loc)
                if c in gl.occurrences or c != loc:
                    if _self_alias(k, val):
                        raise Unsupported(f"repeated key {k!r} aliased to itself")
                    e = entry_of[c]
                    if e >= 0:
                        # ensure_dict: the first position, the last value
                        entry_of[loc] = e
                        local = codes[e] & MASK
                        vals[local] = val
                        vkinds[local] = NODE if isinstance(val, GraphNode) else _UNSET
                        last_record[e] = p
                        continue
                    entry_of[c] = len(keys)
            if _self_alias(k, val):
                dropped.add(k)
                continue
            entry_of[loc] = len(keys)
            keys.append(k)
            codes.append(head + len(vals))
            vals.append(val)
            if isinstance(val, GraphNode):
                vkinds.append(NODE)
                if val.block_fusion:
                    part.block_fusion.add(len(keys) - 1)
            else:
                if type(val) is tuple and val and val[0] is execute_subgraph:
                    raise Unsupported("legacy _execute_subgraph task")
                vkinds.append(_UNSET)
        ltype = layer_types[u]
        path = "dask" if ltype == "ArrayOverlapLayer" else "kept"
        reason = "ArrayOverlapLayer materializes itself" if path == "dask" else ""
        add_report(report, gl.names[u], ltype, path, len(keys) - n0, reason)
        if annotate and u in gl.annotations:
            part.annotated.append((gl.annotations[u], [mkeys[loc] for loc in locs]))

    # pass 2: dependencies, in the order of the frozensets dask would build
    off = part.off
    idx = part.idx
    ext = part.ext
    locate = gl.locate

    def key_of(loc: int) -> Any:
        j = entry_of[loc]
        return keys[j] if j >= 0 else gl.key_of(loc)

    def culled_legacy_reference(loc: int) -> Any:
        k = gl.key_of(loc)
        if k not in dropped:
            # the converter (membership in the culled graph) and this
            # reading (the whole graph) would differ
            raise Unsupported(f"legacy value of {keys[e]!r} references {k!r}, culled away")
        return k

    e = 0
    p = 0  # position in the ValueDeps store
    vlocal = 0
    vkinds = values.kinds
    s_kinds = store.kinds
    s_off = store.off
    s_items = store.items
    s_ext = store.ext_keys
    s_skel = store.skel
    s_tstart = store.tstart
    s_titems = store.titems
    skeletons = store.skeletons
    for u, locs in selection:
        if kinds[u] == BLOCKWISE:
            v = views[u]
            n = len(locs)
            if v.dependency_free:
                off.extend([len(idx)] * n)
                e += n
                continue
            s = v.base
            dk = v.dependency_keys
            for loc in locs:
                ks = dk(loc - s, key_of, locate)
                outside = None
                for d in ks:
                    dl = locate(d)
                    j = entry_of[dl] if dl is not None else -1
                    if j >= 0:
                        idx.append(j)
                    elif outside is None:
                        outside = [d]
                    else:
                        outside.append(d)
                off.append(len(idx))
                if outside:
                    ext[e] = tuple(outside)
                e += 1
            continue
        for loc in locs:
            if entry_of[loc] != e:  # dropped, or a repeated key seen before
                p += 1
                continue
            here = p
            p = last_record.get(e, p)
            kind = s_kinds[p]
            if vkinds[vlocal] == _UNSET:
                vkinds[vlocal] = kind
                sid = s_skel[p]
                if sid >= 0:
                    skel = skeletons[sid]
                    a = s_tstart[p]
                    ks = [entry_of[x] for x in s_titems[a : a + skel.nkeys]]
                    if min(ks) >= 0:
                        # the task's tuple, list and key copies go; its
                        # keys are the graph's own
                        values.values[vlocal] = (skel, *[keys[j] for j in ks])
                        vkinds[vlocal] = TEMPLATE
            outside = split_dependencies(s_items[s_off[p] : s_off[p + 1]], entry_of,
                                         gl.key_of if kind == NODE else culled_legacy_reference, s_ext, idx)
            off.append(len(idx))
            if outside:
                ext[e] = tuple(outside)
            p = here + 1
            vlocal += 1
            e += 1
    assert e == len(keys) == len(off) - 1
    return part
