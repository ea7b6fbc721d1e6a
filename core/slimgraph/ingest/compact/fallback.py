"""The whole-graph fallback: dask's own materialization, as a compact graph.

Used for every submission the compact path does not cover (dask.dataframe
expressions, low-level dict graphs, unknown layers or optimizers, ...):
dask's materialization and, where update_graph culls, distributed's
cull (:func:`slimgraph.shim.materialize`, :func:`slimgraph.shim.cull`),
exactly as stock runs them. The resulting nodes are kept as the
tasks' sources, so the engine reads every graph the same way.
"""
from __future__ import annotations

from array import array
from typing import Any

from slimgraph import shim
from .graph import NODE, SHIFT, CompactGraph, LayerReport, ValueSource, key_positions


def stock_graph(expr: Any, keys: Any, cull: bool, validate: bool, reason: str) -> CompactGraph:
    dsk, annotations = shim.materialize(expr, validate)
    name = type(expr).__name__
    del expr
    if cull:
        dsk = shim.cull(dsk, keys if isinstance(keys, set) else set(keys))
    return from_dict(dsk, annotations, [LayerReport("<graph>", name, "dask", len(dsk), reason)])


def from_dict(dsk: dict, annotations: Any, report: list) -> CompactGraph:
    """A compact graph over an already materialized ``{key: node}`` dict."""
    keys = list(dsk)
    values = ValueSource()
    values.values = list(dsk.values())
    values.kinds = bytearray([NODE]) * len(keys)
    pos = key_positions(keys)  # (in steps: one dict(zip()) of a whole graph holds the GIL throughout)
    off = array("i", [0])
    idx = array("i")
    ext: dict = {}
    get = pos.get
    for i, node in enumerate(values.values):
        deps = node.dependencies
        if deps:
            outside = None
            for d in deps:
                j = get(d)
                if j is None:
                    if outside is None:
                        outside = [d]
                    else:
                        outside.append(d)
                else:
                    idx.append(j)
            if outside:
                ext[i] = tuple(outside)
        off.append(len(idx))
    codes = array("q", range(len(keys)))  # segment 0
    assert SHIFT > 0
    return CompactGraph(keys, codes, off, idx, ext, [values], set(), annotations, report)
