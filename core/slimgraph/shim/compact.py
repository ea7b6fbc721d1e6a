"""The shim's names for the compact materialization (:mod:`slimgraph.ingest.compact`).

The compact materialization reproduces dask's own materialization of a
submission, so it needs dask's internals: the expression classes a client
sends, the task-spec node classes and converters, Blockwise's coordinate
planning, and the optimizations' building blocks. Importing them here (and
nowhere else in the package) keeps the surface in view. dask's private
names are handed out under public-looking names, each commented with the
internal it is, and the two private methods the package calls are wrapped
(:func:`layer_order`, :func:`overlap_layer_mapping`). A module of its own
inside the shim because these imports pull in dask.array and dask.bag, which
a scheduler that never ingests compactly need not import.
"""
from __future__ import annotations

from dask._expr import (
    HLGExpr,
    HLGFinalizeCompute,
    LLGExpr,
    _AnnotationsTombstone,
    _HLGExprSequence,
)
from dask._task_spec import (
    Alias,
    DataNode,
    GraphNode,
    Task,
    TaskRef,
    _execute_subgraph,
    _identity_cast,
    _is_dask_future,
    convert_legacy_graph,
    convert_legacy_task,
    parse_input,
)
from dask.array.optimization import _optimize_slices
from dask.array.optimization import optimize as array_optimize
from dask.bag.core import optimize as bag_optimize
from dask.blockwise import (
    Blockwise,
    BlockIndex,
    _get_coord_mapping,
    _lol_product,
    _make_blockwise_graph,
    blockwise_token,
    fuse_roots,
    optimize_blockwise,
)
from dask.core import flatten, keys_in_tasks, validate_key
from dask.delayed import optimize as delayed_optimize
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from dask.layers import (
    ArrayBlockIdDep,
    ArrayChunkShapeDep,
    ArrayOverlapLayer,
    ArraySliceDep,
)
from dask.optimization import default_fused_keys_renamer

# dask's private names, under the names the package uses
#: ``dask._expr._AnnotationsTombstone``: an annotation value a layer deletes
AnnotationsTombstone = _AnnotationsTombstone
#: ``dask._expr._HLGExprSequence``: what a client sends for high-level collections
HLGExprSequence = _HLGExprSequence
#: ``dask._task_spec._execute_subgraph``: the function of a fused chain's Task
execute_subgraph = _execute_subgraph
#: ``dask._task_spec._identity_cast``: the function of the Task that makes a
#: list (``typ``) of its arguments (a reduction's inner node)
identity_cast = _identity_cast
#: ``dask._task_spec._is_dask_future``: whether a value is a Future
#: (a dependency that is not a key of the graph)
is_dask_future = _is_dask_future
#: ``dask.array.optimization._optimize_slices``: slice fusion, in place
optimize_slices = _optimize_slices
#: ``dask.blockwise._get_coord_mapping``: which block coordinates each
#: Blockwise input takes
get_coord_mapping = _get_coord_mapping
#: ``dask.blockwise._lol_product``: a list of lists of keys over coordinates
lol_product = _lol_product
#: ``dask.blockwise._make_blockwise_graph``: dask's own materialization of
#: (some blocks of) a Blockwise layer
make_blockwise_graph = _make_blockwise_graph


def layer_order(hlg: HighLevelGraph) -> list:
    """The names of ``hlg``'s layers in dask's topological order (its
    ``_toposort_layers``, which raises on a cycle)."""
    return hlg._toposort_layers()


def overlap_layer_mapping(layer: ArrayOverlapLayer) -> dict:
    """An ``ArrayOverlapLayer``'s tasks by key: dask's own materialization
    of it (its ``_dict``, made on first use and kept by the layer)."""
    return layer._dict


__all__ = [
    "Alias", "AnnotationsTombstone", "ArrayBlockIdDep", "ArrayChunkShapeDep", "ArrayOverlapLayer",
    "ArraySliceDep", "BlockIndex", "Blockwise", "DataNode", "GraphNode",
    "HLGExpr", "HLGExprSequence", "HLGFinalizeCompute", "HighLevelGraph", "LLGExpr",
    "MaterializedLayer", "Task", "TaskRef",
    "array_optimize", "bag_optimize", "blockwise_token", "convert_legacy_graph", "convert_legacy_task",
    "default_fused_keys_renamer", "delayed_optimize", "execute_subgraph", "flatten", "fuse_roots",
    "get_coord_mapping", "identity_cast", "is_dask_future", "keys_in_tasks",
    "layer_order", "lol_product", "make_blockwise_graph", "optimize_blockwise", "optimize_slices",
    "overlap_layer_mapping", "parse_input", "validate_key",
]
