"""A HighLevelGraph's layers, compacted, and key *locations*.

A *location* is an int naming one key of one layer of the graph as it
arrived (before culling). Culling, dependencies and fusion work on
locations; a dict by key exists only for the keys of materialized layers,
which dask stores by key anyway.

* Materialized layers (``MaterializedLayer``, and ``ArrayOverlapLayer``
  after dask's own materialization of it: its cull is the base
  ``Layer.cull``) are concatenated, in layer order, into one list of keys
  and one list of values, kept as they arrived: ``GraphNode`` objects, or
  legacy tuples converted when read. Their keys take locations
  ``0 .. M-1``. A delayed graph has one such layer per Delayed object
  (812k at 1M tasks); they cost an entry in a few flat arrays each, not an
  object each.
* Each ``Blockwise`` layer is a :class:`~.blockwise.BlockwiseLayer` and
  takes the next ``total`` locations (its blocks in row-major order, or in
  the order of an ``output_blocks`` set it already had).

A layer is a *unit* ``u`` (its position in ``hlg.layers``) with a kind, a
first location and a size. Any other layer type raises
:class:`Unsupported`, and the caller falls back to dask.
"""
from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import Any

from slimgraph.shim.compact import ArrayOverlapLayer, Blockwise, GraphNode, MaterializedLayer, overlap_layer_mapping
from .blockwise import BlockwiseLayer
from .graph import key_positions
from .unsupported import Unsupported

#: unit kinds
BLOCKWISE = 0
LEGACY = 1  # a materialized layer with at least one legacy value
NODES = 2  # a materialized layer of GraphNode values only


def _check_key(k: Any) -> None:
    t = type(k)
    if t is str:
        return
    if t is tuple and k and type(k[0]) is str:
        return
    # an int/float/bytes key can equal an argument that dask's cull counts
    # as a reference and dask's converter does not (or the other way round)
    raise Unsupported(f"key {k!r} of type {t.__name__}")


class GraphLayers:
    """The layers of one HighLevelGraph, compacted (see the module docstring)."""

    def __init__(self, hlg: Any):
        layers = hlg.layers
        self.names: list[str] = []
        self.kinds = bytearray()
        self.starts = array("q")
        self.sizes = array("q")
        self.annotations: dict[int, Any] = {}  # unit -> annotations, when any
        self.views: dict[int, BlockwiseLayer] = {}  # unit -> Blockwise view
        mkeys: list = []
        mvals: list = []
        index: dict = {}
        #: location of a repeated key -> location of its first occurrence
        canon: dict = {}
        loc_unit = array("i")
        blockwise_units = []
        names = self.names
        kinds_ = self.kinds
        starts = self.starts
        sizes = self.sizes
        annotations = self.annotations
        setdefault = index.setdefault
        for u, (name, layer) in enumerate(layers.items()):
            names.append(name)
            if layer.annotations:
                annotations[u] = layer.annotations
            t = type(layer)
            if t is MaterializedLayer:
                mapping = layer.mapping
                if len(mapping) == 1:
                    # one Delayed object's layer: the common case, inlined
                    ((k, v),) = mapping.items()
                    loc = len(mkeys)
                    mkeys.append(k)
                    mvals.append(v)
                    if setdefault(k, loc) != loc:
                        canon[loc] = index[k]
                    kinds_.append(NODES if isinstance(v, GraphNode) else LEGACY)
                    starts.append(loc)
                    sizes.append(1)
                    loc_unit.append(u)
                    continue
            elif t is Blockwise:
                self.views[u] = BlockwiseLayer(name, layer)
                kinds_.append(BLOCKWISE)
                starts.append(0)  # set below, after the materialized keys
                sizes.append(self.views[u].size)
                blockwise_units.append(u)
                continue
            elif t is ArrayOverlapLayer:
                mapping = overlap_layer_mapping(layer)  # dask's own materialization of it
            else:
                raise Unsupported(f"layer {name!r} of type {t.__name__}")
            start = len(mkeys)
            legacy = False
            for k, v in mapping.items():
                if not isinstance(v, GraphNode):
                    legacy = True
                loc = len(mkeys)
                mkeys.append(k)
                mvals.append(v)
                if setdefault(k, loc) != loc:
                    # a key another layer has too (delayed graphs repeat
                    # the tasks of collections passed as arguments)
                    canon[loc] = index[k]
            n = len(mkeys) - start
            kinds_.append(LEGACY if legacy else NODES)
            starts.append(start)
            sizes.append(n)
            if n == 1:
                loc_unit.append(u)
            else:
                loc_unit.extend([u] * n)
        # (in steps: one dict(zip()) of a delayed graph's 812k layer names
        # held the GIL 0.23 s, a block of the event loop)
        self.unit_of_name = key_positions(names)
        self.mkeys = mkeys
        self.mvals = mvals
        self.index = index
        self.canon = canon
        #: first occurrence -> number of occurrences, for repeated keys
        self.occurrences: dict = {}
        #: units holding a repeated key (either occurrence)
        self.dup_units: set = set()
        for loc, first in canon.items():
            self.occurrences[first] = self.occurrences.get(first, 1) + 1
            self.dup_units.add(loc_unit[loc])
            self.dup_units.add(loc_unit[first])
        self.loc_unit = loc_unit
        self.m = m = len(mkeys)
        # Blockwise locations follow the materialized ones
        self.blockwise: dict[str, BlockwiseLayer] = {}
        self.bw_bases: list[int] = []
        self.bw_units: list[int] = []
        base = m
        for u in blockwise_units:
            v = self.views[u]
            if v.output in self.blockwise:
                raise Unsupported(f"two Blockwise layers named {v.output!r}")
            self.blockwise[v.output] = v
            v.base = base
            self.starts[u] = base
            self.bw_bases.append(base)
            self.bw_units.append(u)
            base += v.total
        self.total = base
        for k in mkeys:
            _check_key(k)
        if self.blockwise:
            bw = self.blockwise
            for k in mkeys:
                if type(k) is tuple and k[0] in bw:
                    # a block of that layer, or a key its cull would take
                    # for one (Blockwise.cull reads every wanted key[0])
                    raise Unsupported(f"key {k!r} of a materialized layer is named like a Blockwise layer")
            for v in self.views.values():
                v.bind(bw)

    def __len__(self) -> int:
        return len(self.names)

    def locate(self, k: Any) -> int | None:
        """The location of key ``k``, or None if no layer has it."""
        if type(k) is tuple and k and type(k[0]) is str:
            w = self.blockwise.get(k[0])
            if w is not None and len(k) == w.ndim + 1:
                local = w._locate_key(k)
                if local is not None:
                    return w.base + local
        try:
            return self.index.get(k)
        except TypeError:  # unhashable
            return None

    def unit_of(self, loc: int) -> int:
        if loc < self.m:
            return self.loc_unit[loc]
        return self.bw_units[bisect_right(self.bw_bases, loc) - 1]

    def key_of(self, loc: int) -> Any:
        """The key at a location: the layer's own key object for
        materialized layers, a new tuple for Blockwise blocks."""
        if loc < self.m:
            return self.mkeys[loc]
        u = self.bw_units[bisect_right(self.bw_bases, loc) - 1]
        v = self.views[u]
        return v.key(loc - v.base)

    def unit_locals(self, u: int) -> range:
        """Locations of a unit's keys in its iteration order (Blockwise
        layers with an ``output_blocks`` set: the first ``size``)."""
        s = self.starts[u]
        return range(s, s + self.sizes[u])
