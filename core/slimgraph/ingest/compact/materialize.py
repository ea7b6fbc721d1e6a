"""The entry point: a submitted expression -> a :class:`CompactGraph`.

Stock (``distributed.scheduler._materialize_graph``) calls
``expr.__dask_graph__()``. For what clients send for high-level
collections, ``_HLGExprSequence``, that is, per operand (one per
optimizer): the operand's HighLevelGraph (with the finalize task), its
optimizer run on it (dask.array: Blockwise fusion, root fusion, cull, then
unless ``optimization.fuse.active`` is False: legacy conversion, linear
fusion and slice fusion; dask.delayed: cull; none: nothing), then all
operands merged into one HighLevelGraph and flattened into one dict, the
annotations read from the merged graph's layers, and a last
``convert_legacy_graph``.

:func:`materialize` follows the same steps, layer by layer, calling dask
itself for everything that is per layer (Blockwise and root fusion, the
topological order of the layers) and replaying on locations and indices
everything that is per task (cull, legacy conversion, linear fusion). Any
step it cannot prove equal raises :class:`Unsupported`, and the whole
submission is materialized by dask instead (:mod:`.stock`); nothing is
mutated before the compact path has succeeded.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import dask
import dask.config

from slimgraph.shim.compact import (
    AnnotationsTombstone,
    HLGExpr,
    HLGExprSequence,
    array_optimize,
    delayed_optimize,
    flatten,
    fuse_roots,
    layer_order,
    optimize_blockwise,
    optimize_slices,
    validate_key,
)
from .assemble import Part, assemble
from .cull import cull_locations, read_all
from .delayed import delayed_part, toposort_layers
from .fuse import fuse_linear
from .graph import NODE, SHIFT, CompactGraph, FusedSource, ValueSource
from .layers import GraphLayers
from .packed import pack, remake_keys
from .legacy import LegacyReader
from .fallback import stock_graph
from .unsupported import OrderDependent, Unsupported

logger = logging.getLogger(__name__)


def materialize(expr: Any, keys: Any, cull: bool, validate: bool = False) -> CompactGraph:
    """The submission as stock's ``_materialize_graph(expr=expr,
    validate=validate)`` (then ``_cull(dsk, keys)`` when ``cull``) would
    give it, without a dask node per task where nothing reads it.

    Errors in the graph itself propagate as stock raises them.
    """
    try:
        return _compact(expr, cull, validate)
    except Unsupported as e:
        reason = str(e) or type(e).__name__
    except Exception as e:  # dask decides (and raises, if the graph is bad)
        logger.debug("compact materialization fell back to dask", exc_info=True)
        reason = f"{type(e).__name__}: {e}"
    return stock_graph(expr, keys, cull, validate, reason)


def expression_containers(expr: Any) -> list:
    """The big dicts of a submitted expression's HighLevelGraphs (layers and
    their dependencies), for :func:`slimgraph.runtime.disposal.drain` once
    the expression has been materialized. Why: dropping the expression of
    a 1M delayed tree frees 812k layers and (after :mod:`.packed`) their
    Tasks in one C-level cascade, 0.5 s on the event loop."""
    out: list = []
    if type(expr) is HLGExprSequence:
        for op in expr.operands:
            if isinstance(op, HLGExpr):
                hlg = op.hlg
                out.extend(c for c in (getattr(hlg, "layers", None), getattr(hlg, "dependencies", None))
                           if type(c) is dict)
    return out


class _Operand:
    __slots__ = ("part", "dict_form", "locate")

    def __init__(self, part: Part, dict_form: bool, locate: Any):
        self.part = part
        #: the optimizer returned a plain dict (dask.array with fusion
        #: active): converted already, annotated by the merge's context
        self.dict_form = dict_form
        self.locate = locate


def _compact(expr: Any, cull: bool, validate: bool) -> CompactGraph:
    if cull:
        raise Unsupported("distributed culls this graph itself (low-level graph expression)")
    if type(expr) is not HLGExprSequence:
        raise Unsupported(f"expression {type(expr).__name__}")
    ops = []
    for op in expr.operands:
        if not isinstance(op, HLGExpr):
            raise Unsupported(f"operand {type(op).__name__}")
        ops.append(_operand(op))
    if len(ops) > 1:
        _check_operands(ops)
    return _merge(ops, validate)


def _layer_types(hlg: Any) -> list:
    return [type(layer).__name__ for layer in hlg.layers.values()]


def _operand(op: Any) -> _Operand:
    keys = op.__dask_keys__()
    hlg = op.hlg
    optimizer = op.low_level_optimizer
    if optimizer is None:
        gl = GraphLayers(hlg)
        reader = LegacyReader(gl.locate, gl.index)
        # ensure_dict lists each layer object once
        seen: set = set()
        selection = []
        for u, layer in enumerate(hlg.layers.values()):
            if id(layer) in seen:
                raise Unsupported("the same layer object under two names")
            seen.add(id(layer))
            selection.append((u, gl.unit_locals(u)))
        part = assemble(gl, selection, read_all(gl, selection, reader), _layer_types(hlg), True)
        return _Operand(part, False, gl.locate)
    if optimizer is array_optimize:
        if not isinstance(keys, (list, set)):
            keys = [keys]
        keys = list(flatten(keys))
        hlg = optimize_blockwise(hlg, keys=keys)
        hlg = fuse_roots(hlg, keys=keys)
        fuse = dask.config.get("optimization.fuse.active") is not False
        part, locate = _culled(hlg, keys, not fuse)
        if not fuse:
            return _Operand(part, False, locate)
        part = fuse_linear(part, set(keys), locate)
        return _Operand(part, True, locate)
    if optimizer is delayed_optimize:
        if dask.config.get("optimization.fuse.delayed"):
            raise Unsupported("delayed graph with optimization.fuse.delayed")
        if not isinstance(keys, (list, set)):
            keys = [keys]
        keys = list(flatten(keys))
        part = delayed_part(hlg, set(keys))
        if part is not None:
            return _Operand(part, False, None)
        part, locate = _culled(hlg, keys, True)
        return _Operand(part, False, locate)
    raise Unsupported(f"optimizer {getattr(optimizer, '__module__', '')}.{getattr(optimizer, '__qualname__', optimizer)}")


def _culled(hlg: Any, keys: list, annotate: bool) -> tuple[Part, Any]:
    """``hlg.cull(set(keys))`` as an assembled Part."""
    wanted = set(keys)
    gl = GraphLayers(hlg)
    reader = LegacyReader(gl.locate, gl.index)
    try:
        order = toposort_layers(hlg.dependencies)
        if order is None:  # (dask's raises: the same error)
            order = layer_order(hlg)
        selection, store = cull_locations(gl, order, wanted, reader)
        types = _layer_types(hlg)
        note = ""
    except OrderDependent as e:
        # dask's own cull: exact by construction (and as slow as stock's)
        hlg = hlg.cull(wanted)
        gl = GraphLayers(hlg)
        reader = LegacyReader(gl.locate, gl.index)
        selection = [(u, gl.unit_locals(u)) for u in range(len(gl))]
        store = read_all(gl, selection, reader)
        types = _layer_types(hlg)
        note = f"culled by dask ({e})"
    part = assemble(gl, selection, store, types, annotate)
    if note:
        for r in part.report:
            r.reason = note if not r.reason else f"{r.reason}; {note}"
    return part, gl.locate


def _check_operands(ops: list) -> None:
    """Operands merged into one dict must not share keys, nor reach each
    other's keys: the last conversion would then read legacy values
    against the merged graph, and dependencies would cross operands."""
    allkeys: set = set()
    n = 0
    for o in ops:
        allkeys.update(o.part.keys)
        n += len(o.part.keys)
        if not o.dict_form:
            for seg in o.part.segments:
                if type(seg) is ValueSource and any(k != NODE for k in seg.kinds):
                    raise Unsupported("several operands, one with legacy values")
    if len(allkeys) != n:
        raise Unsupported("operands share keys")
    for o in ops:
        for ks in o.part.ext.values():
            for k in ks:
                if k in allkeys:
                    raise Unsupported(f"an operand depends on {k!r} of another")


def _annotations(ops: list) -> defaultdict:
    """What ``_HLGExprSequence.__dask_annotations__`` reads from the merged
    graph's layers, as ``_materialize_graph`` collects it."""
    by_type: dict = defaultdict(dict)
    for o in ops:
        if o.dict_form:
            # HighLevelGraph.merge wraps the optimizer's dict into a
            # MaterializedLayer annotated with the current context
            ann = dask.get_annotations().copy() or None
            layers = [(ann, o.part.keys)] if ann else []
        else:
            layers = o.part.annotated
        for ann, keys in layers:
            for annot_type, value in ann.items():
                vals = [(k, value(k) if callable(value) else value) for k in keys]
                by_type[annot_type].update({k: v for k, v in vals if not isinstance(v, AnnotationsTombstone)})
                if not by_type[annot_type]:
                    del by_type[annot_type]
    out: defaultdict = defaultdict(dict)
    for annot_type, value in dict(by_type).items():
        out[annot_type].update(value)
    return out


def _merge(ops: list, validate: bool) -> CompactGraph:
    annotations = _annotations(ops)
    if len(ops) == 1:
        p = ops[0].part
        keys, codes, off, idx, ext, segments, dropped = p.keys, p.codes, p.off, p.idx, p.ext, p.segments, p.dropped
        report = p.report
    else:
        from array import array

        keys = []
        codes = array("q")
        off = array("i", [0])
        idx = array("i")
        ext = {}
        segments = []
        dropped = set()
        report = []
        for o in ops:
            p = o.part
            n0 = len(keys)
            e0 = len(idx)
            s0 = len(segments)
            keys.extend(p.keys)
            codes.extend([c + (s0 << SHIFT) for c in p.codes])
            idx.extend([j + n0 for j in p.idx])
            off.extend([x + e0 for x in p.off[1:]])
            for i, ks in p.ext.items():
                ext[i + n0] = ks
            segments.extend(p.segments)
            for seg in p.segments:
                if type(seg) is FusedSource:  # its members' codes, too
                    shift = s0 << SHIFT
                    seg.records = [(tuple(c + shift for c in cs), ks) for cs, ks in seg.records]
                    seg.segments = segments
            dropped |= p.dropped
            report.extend(p.report)
    if validate:  # stock validates before dropping aliases to themselves
        for k in keys:
            validate_key(k)
        for k in dropped:
            validate_key(k)
    graph = CompactGraph(keys, codes, off, idx, ext, segments, dropped, annotations, report)
    for o in ops:
        for obj, key in o.part.slices:
            optimize_slices({key: obj})
    # (last: packing reads each task's dependencies as indices, and the
    # keys made again are the ones every later step shares)
    pack(graph)
    remake_keys(graph.keys)
    return graph
