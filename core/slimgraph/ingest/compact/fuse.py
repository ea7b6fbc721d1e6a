"""dask's ``fuse_linear_task_spec`` on indices, and what follows it.

What dask does (``dask.array.optimization.optimize`` with fusion active):
for each key in graph order not yet seen, it walks down while a task has
exactly one dependency whose only dependent it is (stopping at requested
keys and at tasks that block fusion), then up while the task has exactly
one dependent that has exactly one dependency, and replaces the chain by
one ``Task.fuse`` of its members under a key renamed from theirs, plus an
``Alias`` from the chain's top key to it (unless the renamed key is the top
key). Tasks where a walk stopped are emitted when the walk reaches them,
which is what reorders the graph. Then ``_optimize_slices`` rewrites nested
getter chains inside every top-level ``_execute_subgraph`` task, in place:
a Blockwise layer's blocks share their template's inner graph, so the
first top-level block rewrites it for all of them.

:func:`fuse_linear` replays the walks on the dependency arrays, emits the
same order, and records a chain as its members' source codes; the fused
``Task`` is built when its run_spec is read. Its dependencies are the
chain's outside dependencies, sorted by hash as ``Task.fuse`` sorts them,
in the order of the frozenset its ``TaskRef``s make.
"""
from __future__ import annotations

from array import array
from typing import Any

from slimgraph.runtime import steps
from slimgraph.shim.compact import GraphNode, default_fused_keys_renamer, execute_subgraph
from .assemble import Part
from .graph import MASK, NODE, SHIFT, AliasSource, BlockSource, FusedSource, ValueSource
from .setorder import refs_order
from .unsupported import Unsupported


def fuse_linear(part: Part, requested: set, locate: Any) -> Part:
    """The operand after linear fusion and slice fusion (a new Part when
    any chain was fused, else ``part`` itself)."""
    keys = part.keys
    n = len(keys)
    off = part.off
    idx = part.idx
    ext = part.ext
    nd, ndt, one_dt = _degrees(n, off, idx, ext)
    blocked = part.block_fusion
    seen = bytearray(n)

    # items: i >= 0 a task as it is; ~top the alias at a fused chain's top;
    # [chain, renamed] a fused chain (bottom first)
    items: list = []
    renamed_keys: set = set()
    for i in range(n):
        if seen[i]:
            continue
        seen[i] = 1
        if (nd[i] != 1 and ndt[i] != 1) or i in blocked:
            items.append(i)
            continue
        chain = [i]
        top = i
        cur = i
        while nd[cur] == 1:  # down
            if off[cur + 1] == off[cur]:
                break  # the one dependency is outside the graph
            d = idx[off[cur]]
            if seen[d]:
                break
            seen[d] = 1
            if ndt[d] != 1 or d in blocked or keys[d] in requested:
                items.append(d)
                break
            chain.insert(0, d)
            cur = d
        while ndt[top] == 1 and keys[top] not in requested:  # up
            nk = one_dt[top]
            if seen[nk]:
                break
            seen[nk] = 1
            if nd[nk] != 1 or nk in blocked:
                items.append(nk)
                break
            chain.append(nk)
            top = nk
        if len(chain) == 1:
            items.append(top)
            continue
        renamed = default_fused_keys_renamer([_member_key(part, m) for m in chain])
        if renamed in renamed_keys or (renamed != keys[top] and locate(renamed) is not None):
            raise Unsupported(f"fused key {renamed!r} collides with another key")
        renamed_keys.add(renamed)
        items.append([chain, renamed])
        if renamed != keys[top]:
            items.append(~top)
    if not renamed_keys and _in_order(items, n):
        # no chain, and no walk emitted a task early: the order stands
        _apply_slices(part, range(n))
        return part
    out = _build(part, items)
    _apply_slices(part, [it for it in items if type(it) is int and it >= 0])
    out.slices = part.slices
    return out


def _degrees(n: int, off: array, idx: array, ext: dict) -> tuple[array, array, array]:
    """Per task: its number of dependencies (outside ones included), of
    dependents, and its one dependent when it has one (vectorized: these
    loops over every edge are the bulk of the pass)."""
    import numpy as np

    o = np.frombuffer(off, dtype=np.int32) if off.itemsize == 4 else np.array(off, dtype=np.int64)
    ix = np.frombuffer(idx, dtype=np.int32) if idx.itemsize == 4 else np.array(idx, dtype=np.int64)
    nd_np = np.diff(o).astype(np.int32)
    nint = nd_np.copy()
    for i, ks in ext.items():
        nd_np[i] += len(ks)
    ndt_np = np.bincount(ix, minlength=n).astype(np.int32) if len(ix) else np.zeros(n, dtype=np.int32)
    one_np = np.full(n, -1, dtype=np.int32)
    if len(ix):
        owners = np.repeat(np.arange(n, dtype=np.int32), nint)
        one_np[ix] = owners  # the last writer wins; read only where ndt == 1
    out = []
    for a in (nd_np, ndt_np, one_np):
        arr = array("i")
        arr.frombytes(np.ascontiguousarray(a, dtype=np.int32).tobytes())
        out.append(arr)
    return out[0], out[1], out[2]


def _member_key(part: Part, i: int) -> Any:
    """The key ``Task.fuse`` sees for a member: its run_spec's own key."""
    code = part.codes[i]
    src = part.segments[code >> SHIFT]
    if type(src) is ValueSource and src.kinds[code & MASK] == NODE:
        node = src.values[code & MASK]
        if node.key != part.keys[i]:
            raise Unsupported(f"node under key {part.keys[i]!r} has key {node.key!r}")
    return part.keys[i]


def _build(part: Part, items: list) -> Part:
    keys = part.keys
    codes = part.codes
    off = part.off
    idx = part.idx
    ext = part.ext
    out = Part()
    out.segments = segs = list(part.segments)
    out.dropped = part.dropped
    out.report = part.report
    out.annotated = part.annotated
    fused = FusedSource(segs)
    fseg = len(segs)
    segs.append(fused)
    aseg = len(segs)
    segs.append(AliasSource())
    fkeys = out.keys
    fcodes = out.codes
    e2f = array("i", [-1]) * len(keys)
    for it in items:  # final positions
        f = len(fkeys)
        if type(it) is int:
            if it >= 0:
                e2f[it] = f
                fkeys.append(keys[it])
                fcodes.append(codes[it])
            else:
                top = ~it
                e2f[top] = f
                fkeys.append(keys[top])
                fcodes.append(aseg << SHIFT)
            continue
        chain, renamed = it
        fused.records.append((tuple(codes[m] for m in chain), tuple(keys[m] for m in chain)))
        fcodes.append((fseg << SHIFT) + len(fused.records) - 1)
        fkeys.append(renamed)
        if renamed == keys[chain[-1]]:
            e2f[chain[-1]] = f
    fo = out.off
    fi = out.idx
    fext = out.ext
    for f, it in enumerate(items):  # dependencies
        if type(it) is int:
            if it >= 0:
                for j in idx[off[it] : off[it + 1]]:
                    t = e2f[j]
                    if t < 0:  # pragma: no cover - fusion never hides a task that has other dependents
                        raise AssertionError("dependency on a fused-away task")
                    fi.append(t)
                x = ext.get(it)
                if x:
                    fext[f] = x
            else:
                fi.append(f - 1)  # the fused task, right before its alias
        else:
            _fused_dependencies(it[0], keys, off, idx, ext, e2f, fi, fext, f)
        fo.append(len(fi))
    return out


def _fused_dependencies(chain, keys, off, idx, ext, e2f, fi, fext, f) -> None:
    """``Task.fuse``'s dependencies: every member's dependencies minus the
    members, sorted by hash, then frozen from ``TaskRef``s in that order."""
    members = {keys[m] for m in chain}
    by_key: dict = {}
    for m in chain:
        for j in idx[off[m] : off[m + 1]]:
            by_key[keys[j]] = j
        for k in ext.get(m, ()):
            by_key.setdefault(k, None)
    outside = [k for k in by_key if k not in members]
    outside.sort(key=hash)
    for a, b in zip(outside, outside[1:]):
        if hash(a) == hash(b):
            raise Unsupported("two dependencies of a fused chain share a hash")
    x = []
    for k in refs_order(outside):
        j = by_key[k]
        if j is None:
            x.append(k)
        else:
            fi.append(e2f[j])
    if x:
        fext[f] = tuple(x)


def _apply_slices(part: Part, top_entries: Any) -> None:
    """Where dask's ``_optimize_slices`` acts on top-level tasks: once per
    Blockwise template with a top-level block, and on node values (fused
    chains get it when they are built). Collected into ``part.slices`` and
    applied by the caller once nothing can fail any more, since it mutates
    shared objects in place."""
    done: set = set()
    codes = part.codes
    segs = part.segments
    todo = part.slices
    for e in top_entries:
        code = codes[e]
        seg = segs[code >> SHIFT]
        if type(seg) is BlockSource:
            if id(seg) in done:
                continue
            done.add(id(seg))
            v = seg.view
            if v.template.func is execute_subgraph:
                todo.append((v.template, v.output))
        elif type(seg) is ValueSource and seg.kinds[code & MASK] == NODE:
            node = seg.values[code & MASK]
            if isinstance(node, GraphNode) and getattr(node, "func", None) is execute_subgraph:
                todo.append((node, part.keys[e]))


def _in_order(items: list, n: int) -> bool:
    """``all(map(int.__eq__, items, range(n)))``, in steps
    (slimgraph.runtime.steps: one such call over a million items holds the
    GIL throughout)."""
    step = steps.STEP
    for lo in range(0, n, step):
        if not all(map(int.__eq__, items[lo : lo + step], range(lo, min(n, lo + step)))):
            return False
    return True
