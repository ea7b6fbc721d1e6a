"""One Blockwise layer as a factory: keys, dependencies and run_specs by block.

dask materializes a ``Blockwise`` layer with ``_make_blockwise_graph``: for
every output block it substitutes the layer's template ``Task`` (its
arguments reference the inputs through placeholder ``TaskRef``s named
``__dask_blockwise__N``) with that block's inputs: ``TaskRef``s to the
input blocks' keys, ``DataNode``s for literals and for the values of IO
dependencies (chunk shapes, slices, ...), nested ``List``/``Task`` nodes for
contracted axes; then renames the result to the block's key. That is two
or three ``Task`` objects built per block, of which the scheduler keeps one.

Here the layer stays a template. A block is its index in the layer's
iteration order (row-major over the output blocks, or the order of the
layer's ``output_blocks`` set when it was culled before), and everything
dask would compute for it is computed from that index on demand:

* the key ``(output, *coords)``, built once, as the graph's one key object;
* the dependencies as *locations* (see :mod:`.layers`): for an input that
  is itself a Blockwise layer, arithmetic on block coordinates; otherwise
  a lookup of the input key;
* the run_spec, built when read. The fast builder fills the template's
  top-level placeholder positions and constructs the one final ``Task``
  directly (about 2 us); layers whose placeholders sit inside nested
  nodes, that contract axes, or whose IO dependencies may yield graph nodes
  use dask's own ``_make_blockwise_graph`` for that one block (exact by
  construction, about 15 us). Literal arguments are substituted into the
  template once per layer, so all blocks share those ``DataNode`` objects
  (equal to stock's per-block copies; nothing mutates them).

What the template keeps alive: the layer's task, its IO-dependency
objects and literal arguments, until the compact graph itself is released
(see ``CompactGraph.release``).
"""
from __future__ import annotations

import itertools
from math import prod
from operator import getitem
from typing import Any

from slimgraph.shim.compact import (
    ArrayBlockIdDep,
    ArrayChunkShapeDep,
    ArraySliceDep,
    BlockIndex,
    DataNode,
    GraphNode,
    Task,
    TaskRef,
    blockwise_token,
    flatten,
    get_coord_mapping,
    lol_product,
    make_blockwise_graph,
    parse_input,
)
from slimgraph.shim.nodes import task_options
from . import fastnodes
from .fastnodes import NO_DEPS
from .setorder import Collector
from .unsupported import Unsupported

_fast_task = fastnodes.task

#: IO dependencies whose values are plain data (tuples of ints and slices):
#: they never add dependencies and never turn into graph nodes
_PLAIN_IO = (ArrayChunkShapeDep, ArraySliceDep, ArrayBlockIdDep, BlockIndex)

_ARRAY = 0  # an input collection's block(s)
_IO = 1  # an IO dependency's value for the block
_CONST = 2  # a block-independent argument (substituted into the template)

#: how many distinct args tuples a layer's blocks share at most (an
#: irregular array has one per distinct chunk shape; past this, new ones
#: are built per block as before)
SHARED_ARGS_MAX = 1024


class _Arg:
    """One entry of the layer's ``indices``, planned once."""

    __slots__ = ("kind", "name", "ind", "cmap", "axes", "token", "used", "io", "plain", "target", "offsets")

    def __init__(self, kind, name, ind, cmap, axes, token, used, io):
        self.kind = kind
        self.name = name
        self.ind = ind
        self.cmap = cmap
        self.axes = axes
        self.token = token
        #: whether the template references this argument (dask skips the
        #: others when materializing, but still counts them when culling)
        self.used = used
        self.io = io
        self.plain = isinstance(io, _PLAIN_IO)
        #: (for _ARRAY without contracted axes) the BlockwiseLayer the input
        #: blocks live in, when their coordinates map to it directly
        self.target = None
        self.offsets = None


class BlockwiseLayer:
    """A compact view of one ``Blockwise`` layer (see the module docstring)."""

    kind = "blockwise"

    def __init__(self, name: str, layer: Any):
        if type(layer.task) is not Task:
            raise Unsupported(f"Blockwise layer {name!r} with a {type(layer.task).__name__} template")
        self.name = name
        self.output = layer.output
        self.annotations = layer.annotations
        self.base = 0
        self._task = layer.task
        self._out_indices = layer.output_indices
        self._indices = layer.indices
        self._numblocks = layer.numblocks
        self._concatenate = layer.concatenate
        self._new_axes = layer.new_axes
        self._io_deps = layer.io_deps
        self._dims = dims = layer.dims
        self._tokens = tuple(map(blockwise_token, range(len(layer.indices))))
        out_dims = tuple(dims[i] for i in layer.output_indices)
        self.out_dims = out_dims
        self.ndim = len(out_dims)
        # int objects shared by all keys (as itertools.product shares them)
        self._pools = tuple(tuple(range(d)) for d in out_dims)
        strides = []
        s = 1
        for d in reversed(out_dims):
            strides.append(s)
            s *= d
        self.strides = tuple(reversed(strides))
        self.total = prod(out_dims)
        blocks = layer.output_blocks
        if blocks:
            self.blocks: list | None = list(blocks)  # the set's iteration order
            self._block_pos = {b: i for i, b in enumerate(self.blocks)}
            self.size = len(self.blocks)
        else:
            self.blocks = None
            self._block_pos = None
            self.size = self.total
        self.data_producer = bool(layer.task.data_producer)
        concatenate = None
        if layer.concatenate is True:
            from dask.array.core import concatenate_axes as concatenate
        self._concat_fn = concatenate
        coord_maps, concat_axes, dummies = get_coord_mapping(
            dims, layer.output_indices, layer.numblocks, layer.indices, concatenate
        )
        self._dummies = dummies
        task_deps = layer.task.dependencies
        args = []
        const_deps = []
        const_subs = {}
        for (name_, ind), cmap, axes, tok in zip(layer.indices, coord_maps, concat_axes, self._tokens):
            used = tok in task_deps
            if ind is None:
                if isinstance(name_, TaskRef):
                    const_deps.append(name_.key)
                if used:
                    const_subs[tok] = name_ if isinstance(name_, (GraphNode, TaskRef)) else DataNode(None, name_)
                continue
            if name_ in self._io_deps:
                args.append(_Arg(_IO, name_, ind, cmap, axes, tok, used, self._io_deps[name_]))
            else:
                args.append(_Arg(_ARRAY, name_, ind, cmap, axes, tok, used, None))
        self._args = args
        self._const_deps = tuple(const_deps)
        self._keyed_io = [(io, tok) for tok, io in self._io_deps.items() if io.produces_keys]
        #: whether dask's cull reports any dependency for a block
        self.cull_free = not (any(a.kind == _ARRAY for a in args) or const_deps or self._keyed_io)
        # the template with the block-independent arguments substituted once
        tmpl = layer.task.substitute(const_subs) if const_subs else layer.task
        self.template = tmpl
        #: the template's ``data_producer`` as it stores it (not made a
        #: bool): every block's Task is given it, as dask's substitution
        #: does; ``template_options`` passes it to ``Task``'s constructor
        self.template_data_producer = tmpl.data_producer
        self.template_options = task_options(tmpl.data_producer)
        self._fast = self._plan_fast(tmpl, args)
        #: dependencies the template itself contributes (const TaskRefs or
        #: nodes), in its argument order; see _task_dependency_plan
        self._plan = self._task_dependency_plan(tmpl, args) if self._fast else None
        #: whether no block's run_spec has a dependency (checked by plan)
        self.dependency_free = bool(self._fast and not self._plan)
        self._locate_key = self._key_locator()

    # -- enumeration -------------------------------------------------------
    def coords(self, local: int) -> tuple:
        if self.blocks is not None:
            return self.blocks[local]
        if self.ndim == 2:
            return divmod(local, self.out_dims[1])
        if self.ndim == 1:
            return (local,)
        out = []
        for st, d in zip(self.strides, self.out_dims):
            q, local = divmod(local, st)
            out.append(q)
        return tuple(out)

    def keys(self) -> list:
        """Every key, in the layer's iteration order, one new tuple each."""
        name = self.output
        if self.blocks is not None:
            return [(name, *b) for b in self.blocks]
        pools = self._pools
        if self.ndim == 1:
            return [(name, i) for i in pools[0]]
        if self.ndim == 2:
            p1 = pools[1]
            return [(name, i, j) for i in pools[0] for j in p1]
        head = (name,)
        return [head + c for c in itertools.product(*pools)]

    def key(self, local: int) -> tuple:
        c = self.coords(local)
        pools = self._pools
        return (self.output, *[pools[d][x] for d, x in enumerate(c)])

    def _key_locator(self):
        """A function ``key -> local index or None`` for keys ``(output,
        *coords)`` of the right length, specialised for the common shapes."""
        if self._block_pos is not None or self.ndim > 3:
            return lambda k: self.locate_coords(k[1:])
        dims = self.out_dims
        if self.ndim == 1:
            (d0,) = dims

            def loc1(k):
                c0 = k[1]
                if type(c0) is not int:
                    return self.locate_coords(k[1:])
                return c0 if 0 <= c0 < d0 else None

            return loc1
        if self.ndim == 2:
            d0, d1 = dims

            def loc2(k):
                c0 = k[1]
                c1 = k[2]
                if type(c0) is not int or type(c1) is not int:
                    return self.locate_coords(k[1:])
                if 0 <= c0 < d0 and 0 <= c1 < d1:
                    return c0 * d1 + c1
                return None

            return loc2
        if self.ndim == 3:
            d0, d1, d2 = dims

            def loc3(k):
                c0, c1, c2 = k[1], k[2], k[3]
                if type(c0) is not int or type(c1) is not int or type(c2) is not int:
                    return self.locate_coords(k[1:])
                if 0 <= c0 < d0 and 0 <= c1 < d1 and 0 <= c2 < d2:
                    return (c0 * d1 + c1) * d2 + c2
                return None

            return loc3
        return lambda k: self.locate_coords(k[1:])

    def locate_coords(self, coords: tuple) -> int | None:
        """Local index of the block with these coordinates, or None."""
        for c in coords:
            if type(c) is not int:
                raise Unsupported(f"key coordinate {c!r} of type {type(c).__name__}")
        if self._block_pos is not None:
            return self._block_pos.get(coords)
        local = 0
        for c, d, st in zip(coords, self.out_dims, self.strides):
            if not 0 <= c < d:
                return None
            local += c * st
        return local

    # -- dependencies ------------------------------------------------------
    def bind(self, views_by_output: dict) -> None:
        """Resolve, per array input, the Blockwise layer holding its blocks
        (so that input keys become locations by arithmetic)."""
        for a in self._args:
            if a.kind != _ARRAY or a.axes:
                continue
            t = views_by_output.get(a.name)
            if t is None or t.blocks is not None:
                continue
            nb = self._numblocks.get(a.name)
            if nb is None or tuple(nb) != t.out_dims:
                continue
            a.target = t
            a.offsets = tuple(zip(a.cmap, t.strides))

    def _arg_keys(self, a: _Arg, coords_ext: tuple) -> list:
        arg_coords = tuple(coords_ext[c] for c in a.cmap)
        if a.axes:
            return list(flatten(lol_product((a.name,), arg_coords)))
        return [(a.name, *arg_coords)]

    def cull_dependencies(self, local: int, locate, locs: list, ext: list) -> None:
        """What dask's ``Blockwise._cull_dependencies`` reports for this
        block: locations into ``locs``, keys no layer has into ``ext``
        (every input, referenced by the template or not)."""
        if self.cull_free:
            return
        coords = self.coords(local)
        coords_ext = coords + self._dummies
        for a in self._args:
            if a.kind != _ARRAY:
                continue
            t = a.target
            if t is not None:
                loc = t.base
                for c, st in a.offsets:
                    loc += coords_ext[c] * st
                locs.append(loc)
                continue
            for k in self._arg_keys(a, coords_ext):
                loc = locate(k)
                if loc is None:
                    ext.append(k)
                else:
                    locs.append(loc)
        for k in self._const_deps:
            loc = locate(k)
            if loc is None:
                ext.append(k)
            else:
                locs.append(loc)
        for io, _tok in self._keyed_io:
            k = io[coords]
            if isinstance(k, TaskRef):
                k = k.key
            loc = locate(k)
            if loc is None:
                ext.append(k)
            else:
                locs.append(loc)

    def all_cull_dependencies(self) -> Any:
        """Every block's :meth:`cull_dependencies` at once, as one int64
        array (repeats kept, in no particular order), where each comes from
        coordinate arithmetic alone: every input is a Blockwise layer's
        blocks (``bind``), nothing else is reported, and the blocks are the
        whole row-major grid. None otherwise (then block by block).

        Why: the cull reads every kept block's dependencies; at 1M array
        tasks that is 1.5M calls of :meth:`cull_dependencies`, about 1 s
        of the cull, for what is a handful of array operations on the
        block grid."""
        if self.cull_free or self.blocks is not None or self._const_deps or self._keyed_io:
            return None
        inputs = [a for a in self._args if a.kind == _ARRAY]
        if any(a.target is None for a in inputs):
            return None
        import numpy as np

        ndim = self.ndim
        ext = (0,) * ndim + tuple(self._dummies)
        n = self.total
        grid = None
        out = []
        for a in inputs:
            loc = np.full(n, a.target.base, dtype=np.int64)
            for c, st in a.offsets:
                if 0 <= c < ndim:
                    if grid is None:
                        grid = np.indices(self.out_dims, dtype=np.int64).reshape(ndim, n)
                    loc += grid[c] * st
                else:
                    v = ext[c]
                    if type(v) is not int:
                        return None
                    loc += v * st
            out.append(loc)
        return np.concatenate(out) if out else None

    def dependency_keys(self, local: int, key_of, locate) -> list:
        """The keys this block's run_spec depends on, in the iteration order
        of the frozenset dask's Task would hold. ``key_of(loc)`` gives the
        canonical key of a located input."""
        if not self._fast:
            return list(self.build(local, None).dependencies)
        plan = self._plan
        if not plan:
            return []
        coords = self.coords(local)
        coords_ext = coords + self._dummies
        keys = []
        refs = []  # whether each key comes from a TaskRef
        for step in plan:
            if step.__class__ is _Arg:
                a = step
                t = a.target
                if t is not None:
                    loc = t.base
                    for c, st in a.offsets:
                        loc += coords_ext[c] * st
                    keys.append(key_of(loc))
                else:
                    k = (a.name, *[coords_ext[c] for c in a.cmap])
                    loc = locate(k)
                    keys.append(k if loc is None else key_of(loc))
                refs.append(True)
            else:
                refs.append(step[0])
                keys.append(step[1])
        if len(keys) < 2:
            return keys
        if len(keys) <= 4:  # no table grows: TaskRefs and Aliases agree
            return list(frozenset(set(keys)))
        col = Collector()
        for k, r in zip(keys, refs):
            if r:
                col.add_ref(k)
            else:
                col.add_alias(k)
        return list(col.result())

    # -- run_specs ---------------------------------------------------------
    def _plan_fast(self, tmpl: Any, args: list) -> bool:
        """Whether every placeholder the template still holds is a
        top-level argument (or keyword value) and no block needs nested
        nodes or per-block graph nodes."""
        toks = {a.token for a in args if a.used}
        if not toks:
            return True
        for a in args:
            if not a.used:
                continue
            if a.kind == _ARRAY and a.axes:
                return False
            if a.kind == _IO and not isinstance(a.io, _PLAIN_IO):
                return False
        seen = set()
        for v in itertools.chain(tmpl.args, tmpl.kwargs.values()):
            if isinstance(v, TaskRef):
                if v.key in toks:
                    if v.key in seen:
                        return False
                    seen.add(v.key)
            elif isinstance(v, GraphNode) and toks & v.dependencies:
                return False
        return seen == toks

    def _task_dependency_plan(self, tmpl: Any, args: list) -> list:
        """The template's dependency contributions in argument order: an
        _Arg where a block's input goes (a ``TaskRef``), ``(True, key)`` for
        a constant ``TaskRef``, ``(False, key)`` for a node with the one
        dependency ``key`` (an ``Alias``). (Fast templates only: no nested
        node carries a placeholder; one with several dependencies sends the
        layer to the exact builder.)"""
        by_tok = {a.token: a for a in args if a.used}
        plan: list = []
        for v in itertools.chain(tmpl.args, tmpl.kwargs.values()):
            if isinstance(v, TaskRef):
                a = by_tok.get(v.key)
                if a is None:
                    plan.append((True, v.key))
                elif a.kind == _ARRAY:
                    plan.append(a)
            elif isinstance(v, GraphNode) and v.dependencies:
                deps = v.dependencies
                if len(deps) != 1:
                    self._fast = False
                    return []
                (k,) = deps
                plan.append((False, k))
        return plan

    def build(self, local: int, key: Any) -> Any:
        """The block's run_spec, equal to the Task dask materializes."""
        coords = self.coords(local)
        if key is None:
            key = (self.output, *coords)
        if not self._fast:
            task = self.build_reference(local)
            if task.key != key:
                task = task.substitute({}, key=key)
            return task
        steps = self._steps
        if steps is None:
            steps = self._steps = self._fast_steps()
            self._shared = {} if self._shares_args(steps) else None
        if self._shared is not None:
            return self._build_shared(key, coords, steps)
        tmpl = self.template
        if not steps:
            return Task(key, tmpl.func, *tmpl.args, **self.template_options, **tmpl.kwargs)
        args = list(tmpl.args)
        kwargs = tmpl.kwargs
        if kwargs:
            kwargs = dict(kwargs)
        coords_ext = coords + self._dummies
        for a, where, pick, chunks in steps:
            arg_coords = coords if pick is None else tuple(map(coords_ext.__getitem__, pick))
            if chunks is not None:  # ArrayChunkShapeDep's value, read in C
                node = DataNode(a.token, tuple(map(getitem, chunks, arg_coords)))
            elif a.kind == _IO:
                if a.plain:
                    # parse_input returns plain values (tuples of ints and
                    # slices) as they are
                    node = DataNode(a.token, a.io.get(arg_coords, arg_coords))
                else:
                    val = parse_input(a.io.get(arg_coords, arg_coords))
                    node = val.substitute({}, key=a.token) if isinstance(val, GraphNode) else DataNode(a.token, val)
            else:
                node = TaskRef((a.name, *arg_coords))
            if type(where) is int:
                args[where] = node
            else:
                kwargs[where] = node
        if self.dependency_free and fastnodes.ENABLED:
            return _fast_task(key, tmpl.func, tuple(args), kwargs if kwargs else {}, NO_DEPS, self.template_data_producer)
        return Task(key, tmpl.func, *args, **self.template_options, **kwargs)

    #: (blocks whose only varying arguments are chunk shapes) the args
    #: tuple of a block by its chunk-shape values; None where not used
    _shared: dict | None = None

    def _shares_args(self, steps: list) -> bool:
        """Whether blocks may share their args tuples: no dependencies, and
        every argument that varies is a chunk shape in ``args``. Why: a
        regular array's blocks have one or a few chunk shapes, so the
        ``DataNode`` of each and the args tuple holding it were built again
        for every block sent to a worker: three objects the garbage
        collector counted, of the ten a root task's message made (bench
        "sending": its collections were a fifth of slim's dispatch time,
        against a tenth of stock's). Sharing them is invisible to
        distributed and the workers: each run_spec is pickled on its own,
        equal (``==`` and token) to the one dask builds, and neither a
        tuple nor a ``DataNode`` is ever changed in place."""
        return bool(steps) and self.dependency_free and fastnodes.ENABLED and all(
            chunks is not None and type(where) is int for _a, where, _p, chunks in steps)

    def _build_shared(self, key: Any, coords: tuple, steps: list) -> Any:
        """:meth:`build` for :meth:`_shares_args` layers: the args tuple
        looked up by the block's chunk shapes (a new one kept while fewer
        than :data:`SHARED_ARGS_MAX` are)."""
        # values, the lookup key: the block's chunk shape per step; for one
        # step (the common case, written out) that shape itself
        one = len(steps) == 1
        if one:
            ((_a, _w, pick, chunks),) = steps
            values = tuple(map(getitem, chunks, coords if pick is None else tuple(map((coords + self._dummies).__getitem__, pick))))
        else:
            coords_ext = coords + self._dummies
            values = tuple([tuple(map(getitem, chunks, coords if pick is None else tuple(map(coords_ext.__getitem__, pick))))
                            for _a, _w, pick, chunks in steps])
        shared = self._shared
        args = shared.get(values)
        tmpl = self.template
        if args is None:
            made = list(tmpl.args)
            for (a, where, _p, _c), value in zip(steps, (values,) if one else values):
                made[where] = DataNode(a.token, value)
            args = tuple(made)
            if len(shared) < SHARED_ARGS_MAX:
                shared[values] = args
        kwargs = tmpl.kwargs
        return _fast_task(key, tmpl.func, args, dict(kwargs) if kwargs else {}, NO_DEPS, self.template_data_producer)

    #: (fast templates) per used argument: the argument, where its one
    #: ``TaskRef`` sits in the template (an int: a position in ``args``; a
    #: str: a name in ``kwargs``), which block coordinates it takes (None:
    #: the block's own) and, for a chunk-shape input, its chunks. Made at
    #: the first build.
    _steps: list | None = None

    def _fast_steps(self) -> list:
        """Why: a block is built each time its task is sent to a worker. Its
        Task, built by substituting a dict of placeholders into every
        argument, took 3.1 us; with where each placeholder goes known once
        per layer, and a block without dependencies made by
        :mod:`.fastnodes`, less (bench "sending")."""
        tmpl = self.template
        where: dict = {}
        for i, v in enumerate(tmpl.args):
            if type(v) is TaskRef:
                where.setdefault(v.key, i)
        for name, v in tmpl.kwargs.items():
            if type(v) is TaskRef:
                where.setdefault(v.key, name)
        steps = []
        for a in self._args:
            if not a.used or a.token not in where:
                continue
            pick = tuple(a.cmap)
            if pick == tuple(range(self.ndim)):
                pick = None
            # dask's ArrayChunkShapeDep gives ``tuple(chunks[d][i] for each
            # axis d)`` through two Python calls and a generator: the same
            # tuple is taken here in one C call (0.6 -> 0.15 us a block)
            chunks = a.io.chunks if a.kind == _IO and type(a.io) is ArrayChunkShapeDep else None
            steps.append((a, where[a.token], pick, chunks))
        return steps

    def build_reference(self, local: int) -> Any:
        """The block as dask's own ``_make_blockwise_graph`` builds it (the
        exact builder, and the reference the fast one is tested against)."""
        coords = self.coords(local)
        dsk = make_blockwise_graph(
            self._task,
            self.output,
            self._out_indices,
            *list(itertools.chain.from_iterable(self._indices)),
            numblocks=self._numblocks,
            concatenate=self._concatenate,
            new_axes=self._new_axes,
            output_blocks=[coords],
            dims=self._dims,
            io_deps=self._io_deps,
            keys=self._tokens,
        )
        (task,) = dsk.values()
        return task
