"""Compact materialization: a submission's graph without a dask node per task.

What arrives. ``update_graph`` receives a pickled expression. For dask
collections built on HighLevelGraphs (dask.array, dask.bag, delayed) it is
an ``_HLGExprSequence``: per low-level optimizer one ``HLGExpr`` holding a
HighLevelGraph of *layers*. An array's layers are mostly ``Blockwise``
(one template task for all blocks) plus ``MaterializedLayer``s of legacy
tuples ``(func, key, ...)`` built on the client (reductions, rechunk,
slicing); a delayed graph has one ``MaterializedLayer`` per Delayed object,
each holding one ``Task`` that pickle has already decoded.

What stock builds. ``_materialize_graph`` runs the optimizer on each
operand (dask.array: Blockwise fusion, root fusion, ``HighLevelGraph.cull``,
then, unless ``optimization.fuse.active`` is False, ``convert_legacy_graph``,
``fuse_linear_task_spec`` and slice fusion; delayed: the cull), merges the
operands into one dict and converts what is left of legacy tuples. Every
task ends up as a ``Task``/``Alias``/``DataNode`` with its own dependency
frozenset, plus the layers the cull rebuilt, of which the scheduler reads
a task's key and dependencies once, and its run_spec only when it sends the
task to a worker.

What this keeps instead. Per task: its key (one object, shared with the
engine), its dependencies as indices in two flat arrays (4 bytes an edge),
and an 8-byte code naming its *source*: a Blockwise layer's template and
the block's position, a value kept exactly as it arrived (a decoded
``Task``, or a legacy tuple), or a fused chain's members. The per-layer
steps of dask's optimizers (Blockwise and root fusion, the layers'
topological order) run as dask runs them; the per-task steps are replayed
on integers (:mod:`.cull`, :mod:`.legacy`, :mod:`.fuse`; a graph made only
of Delayed objects' one-task layers in one walk, :mod:`.delayed`). ``run_spec(i)``
builds the node stock would hold when it is read (a fraction of what
pickling it for a worker costs); ``data_producer(i)``, ``truthy(i)`` and
``is_data(i)`` answer without building it.

Why it is equal. Nothing is approximated: each step either does what dask
does on the same inputs, or proves it would give the same result, or gives
up. The order of the graph follows dask's own walks (the cull's layer
order, fusion's emission order); the order of each task's dependencies is
that of the frozenset its node would hold, rebuilt with the same set
operations on the same keys (:mod:`.setorder`); run_specs come from the
same constructors (a Blockwise block is the template's one ``Task`` with its
placeholders filled, a legacy tuple goes through ``convert_legacy_task``,
a chain through ``Task.fuse`` and ``_optimize_slices``), or, for the two
shapes sent most (a block without dependencies, a reduction), from
:mod:`.fastnodes`, which sets the slots those constructors set and is
checked against them at import. Where dask's
result depends on something that cannot be replayed cheaply (a layer culled
to several keys lists them in the order of a set with a long history), dask
does that step itself; where two of dask's readings of a value could
disagree, or a layer, expression or optimizer is unknown (dask.dataframe's
expressions, low-level dict graphs, dask.bag, custom layers), the whole
submission is materialized by dask (:mod:`.fallback`), and the report says
which and why. ``tests/test_compact.py`` compares everything with stock,
node by node, including random array expressions.

What to watch. A Blockwise layer's template (its literal arguments and IO
dependencies, e.g. ``from_array``'s slices) lives as long as one of its
tasks does, where stock frees each block's share with its task; values kept
as they arrived are freed per task (``release``). Plain ``Task`` nodes (a
delayed graph's) are packed into arrays (:mod:`.packed`) and their keys made
again: the decoded objects go before the engine allocates its state, which
then fills their heap pages. A packed segment is freed with its last
task, not per task.

Use::

    graph = materialize(expr, keys, cull=isinstance(expr, LLGExpr), validate=False)
    graph.keys[i], graph.deps[i], graph.external.get(i, ())
    graph.run_spec(i), graph.data_producer(i), graph.truthy(i)
    graph.annotations, graph.report
"""
from .graph import CompactGraph, Deps, LayerReport
from .materialize import expression_containers, materialize
from .unsupported import OrderDependent, Unsupported

__all__ = ["CompactGraph", "Deps", "LayerReport", "OrderDependent", "Unsupported", "expression_containers", "materialize"]
