"""The shim's names for the compact materialization (:mod:`slimgraph.ingest.compact`).

The compact materialization reproduces dask's own materialization of a
submission, so it needs dask's internals: the expression classes a client
sends, the task-spec node classes and converters, Blockwise's coordinate
planning, and the optimizations' building blocks. Importing them here (and
nowhere else in the package) keeps the surface in view. A module of its own
inside the shim because these imports pull in dask.array and dask.bag, which
a scheduler that never ingests compactly need not import.
"""
from __future__ import annotations

from dask._expr import (
    HLGExpr,
    HLGFinalizeCompute,
    LLGExpr,
    _AnnotationsTombstone,
    _HLGExprGroup,
    _HLGExprSequence,
)
from dask._task_spec import (
    Alias,
    DataNode,
    GraphNode,
    Task,
    TaskRef,
    _execute_subgraph,
    _get_dependencies,
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

__all__ = [
    "Alias", "_AnnotationsTombstone", "validate_key", "ArrayBlockIdDep", "ArrayChunkShapeDep", "ArrayOverlapLayer",
    "ArraySliceDep", "BlockIndex", "Blockwise", "DataNode", "GraphNode",
    "HLGExpr", "HLGFinalizeCompute", "HighLevelGraph", "LLGExpr",
    "MaterializedLayer", "Task", "TaskRef", "_HLGExprGroup", "_HLGExprSequence",
    "_execute_subgraph", "_identity_cast", "_get_coord_mapping", "_get_dependencies",
    "_is_dask_future", "_lol_product", "_make_blockwise_graph",
    "_optimize_slices", "array_optimize", "bag_optimize",
    "blockwise_token", "convert_legacy_graph", "convert_legacy_task",
    "default_fused_keys_renamer", "delayed_optimize", "flatten", "fuse_roots",
    "keys_in_tasks", "optimize_blockwise", "parse_input",
]
