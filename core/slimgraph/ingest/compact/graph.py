"""The compact graph: what the engine reads instead of dask's materialized dict.

Per task it holds the key (one canonical object), its dependencies as int
indices in a CSR pair of arrays (4 bytes an edge, no int or tuple objects),
and an 8-byte *source code*: a segment number and a position in it. A
segment is one of

* :class:`BlockSource` -- a Blockwise layer's factory (position: the block);
* :class:`ValueSource` -- values kept as they arrived (``GraphNode``
  objects, or legacy tuples with the kind they convert to);
* :class:`FusedSource` -- linear chains fused the way
  ``fuse_linear_task_spec`` fuses them (position: the chain);
* :class:`AliasSource` -- the ``Alias`` that fusion leaves at a chain's
  top key, pointing to the fused task;
* :class:`~.packed.PackedSource` -- plain ``Task`` nodes (a delayed graph's)
  packed into arrays once the graph is numbered (position: the task).

``run_spec(i)`` builds the node dask would have built for task ``i``;
``data_producer(i)``, ``truthy(i)`` and ``is_data(i)`` answer without
building it.
"""
from __future__ import annotations

from array import array
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from slimgraph.runtime.steps import RANDOM_ACCESS_STEP
from slimgraph.shim.compact import (
    Alias,
    DataNode,
    GraphNode,
    Task,
    convert_legacy_task,
    optimize_slices,
)
from .legacy import DATA

SHIFT = 36
MASK = (1 << SHIFT) - 1

#: ValueSource kinds beyond legacy's TASK / ALIAS / DATA
NODE = 4
#: a legacy task kept as ``(Skeleton, key, ...)`` (see legacy.Skeleton)
TEMPLATE = 5

#: keys per step of :func:`key_positions` and of a :class:`KeyPositions` scan
_POSITIONS_STEP = RANDOM_ACCESS_STEP


@dataclass
class LayerReport:
    """Which path one layer (or the whole graph) took."""

    name: str
    #: the layer's type (``Blockwise``, ``MaterializedLayer``, ...), or the
    #: expression's type for a whole-graph fallback
    type: str
    #: ``compact``: read from the layer without materializing it;
    #: ``kept``: dask's objects kept as they arrived (nodes in a
    #: materialized layer, legacy tuples converted when read), plain
    #: ``Task`` nodes packed into arrays (:mod:`.packed`);
    #: ``dask``: materialized by dask itself
    path: str
    tasks: int
    #: why the layer or graph went to dask (``path == "dask"``)
    reason: str = ""
    #: how many layers this entry stands for: consecutive one-task layers of
    #: the same type and path (a delayed graph's one layer per Delayed) are
    #: reported once, ``name`` being the first of them
    layers: int = 1


def add_report(report: list, name: str, type_: str, path: str, tasks: int, reason: str = "") -> None:
    """Append an entry, folding one-task layers into the previous entry of
    the same kind (a report entry per Delayed would cost more than the
    compact graph itself)."""
    if tasks <= 1 and report:
        last = report[-1]
        if last.type == type_ and last.path == path and last.reason == reason and last.tasks <= last.layers:
            last.tasks += tasks
            last.layers += 1
            return
    report.append(LayerReport(name, type_, path, tasks, reason))


class KeyPositions:
    """``{key: its index in keys}`` of a compact graph's keys, made as a
    dict only when it is asked about more than a few keys.

    Why. A submission asks it about its requested keys (and the
    dependencies of tasks with outside keys): for ``x.sum().compute()``
    one key, three times. A dict of all of a big graph's keys costs the
    build thread time for nothing, and its last doubling, one call that
    faults in a fresh table of tens of MB, blocks the event loop although it
    runs in the build thread.

    What. The first :data:`FEW_LOOKUPS` distinct keys asked are found by
    scanning the keys, a step at a time (``list.index`` over slices: ``==``
    comparisons in C; for the key types dask accepts, keys that compare
    equal hash alike, so the answer is the dict's), and remembered; from
    the next one on, the dict is made (:func:`key_positions`) and answers.
    The keys are unique (a compact graph's are)."""

    __slots__ = ("keys", "_dict", "_answers")

    #: distinct keys answered by scanning before the dict is made
    FEW_LOOKUPS = 4

    def __init__(self, keys: list):
        self.keys = keys
        self._dict: dict | None = None
        self._answers: dict = {}

    def get(self, key: Any, default: Any = None) -> Any:
        d = self._dict
        if d is None:
            answers = self._answers
            if key in answers:
                i = answers[key]
                return default if i is None else i
            if len(answers) < self.FEW_LOOKUPS:
                i = answers[key] = self._scan(key)
                return default if i is None else i
            d = self.as_dict()
        return d.get(key, default)

    def _scan(self, key: Any) -> int | None:
        keys = self.keys
        for lo in range(0, len(keys), _POSITIONS_STEP):
            try:
                return keys.index(key, lo, lo + _POSITIONS_STEP)
            except ValueError:
                pass
        return None

    def __getitem__(self, key: Any) -> int:
        i = self.get(key)
        if i is None:
            raise KeyError(key)
        return i

    def __contains__(self, key: Any) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        return len(self.keys)

    def as_dict(self) -> dict:
        """The dict (made now if it was not)."""
        d = self._dict
        if d is None:
            d = self._dict = key_positions(self.keys)
        return d

    def made(self) -> list:
        """The dict, if it was made (for :func:`slimgraph.runtime.disposal.drain`)."""
        return [] if self._dict is None else [self._dict]


def key_positions(keys: list) -> dict:
    """``{key: its index in keys}``, made in steps: one ``dict(zip(...))``
    of a million keys is one C call that holds the GIL throughout, a block
    of the event loop although it runs in the build thread; between steps
    the interpreter can switch."""
    out: dict = {}
    update = out.update
    for lo in range(0, len(keys), _POSITIONS_STEP):
        hi = lo + _POSITIONS_STEP
        update(zip(keys[lo:hi], range(lo, hi)))
    return out


class BlockSource:
    """Run_specs of one Blockwise layer's blocks (see :mod:`.blockwise`)."""

    __slots__ = ("view", "live")

    def __init__(self, view: Any):
        self.view = view
        self.live = 0

    def build(self, graph: "CompactGraph", i: int, local: int) -> Any:
        return self.view.build(local, graph.keys[i])

    def build_member(self, local: int, key: Any, dep_keys: Any) -> Any:
        return self.view.build(local, key)

    def data_producer(self, local: int) -> bool:
        return self.view.data_producer

    def is_data(self, local: int) -> bool:
        return False

    def truthy(self, local: int) -> bool:
        return True

    def release(self, local: int) -> bool:
        self.live -= 1
        return self.live <= 0


class ValueSource:
    """Values kept as they arrived, with what each converts to."""

    __slots__ = ("values", "kinds", "live")

    def __init__(self) -> None:
        self.values: list = []
        self.kinds = bytearray()
        self.live = 0

    def build(self, graph: "CompactGraph", i: int, local: int) -> Any:
        kind = self.kinds[local]
        v = self.values[local]
        if kind == NODE:
            return v
        if kind == TEMPLATE:  # (its keys are its own: no legacy_keys to read)
            return v[0].build(graph.keys[i], v[1:])
        return self.build_member(local, graph.keys[i], graph.legacy_keys(i))

    def build_member(self, local: int, key: Any, dep_keys: Any) -> Any:
        v = self.values[local]
        kind = self.kinds[local]
        if kind == NODE:
            return v
        if kind == TEMPLATE:
            return v[0].build(key, v[1:])
        t = convert_legacy_task(key, v, dep_keys)
        if not isinstance(t, GraphNode):
            t = DataNode(key, t)
        return t

    def data_producer(self, local: int) -> bool:
        kind = self.kinds[local]
        if kind == NODE:
            return bool(self.values[local].data_producer)
        return kind == DATA

    def is_data(self, local: int) -> bool:
        kind = self.kinds[local]
        if kind == NODE:
            return isinstance(self.values[local], DataNode)
        return kind == DATA

    def truthy(self, local: int) -> bool:
        if self.kinds[local] == NODE:
            return bool(self.values[local])
        return True

    def release(self, local: int) -> bool:
        self.values[local] = None
        self.live -= 1
        return self.live <= 0


class FusedSource:
    """Fused linear chains: ``Task.fuse`` of the members' run_specs."""

    __slots__ = ("records", "segments", "live", "member_segments")

    def __init__(self, segments: list):
        #: per chain: (member codes, member keys), bottom first
        self.records: list = []
        self.segments = segments
        self.live = 0
        #: the segments of all the chains' members (set by the graph)
        self.member_segments: set = set()

    def build(self, graph: "CompactGraph", i: int, local: int) -> Any:
        codes, keys = self.records[local]
        segs = self.segments
        members = []
        for n, (code, k) in enumerate(zip(codes, keys)):
            src = segs[code >> SHIFT]
            dep_keys = graph.legacy_keys(i) if n == 0 else frozenset((keys[n - 1],))
            members.append(src.build_member(code & MASK, k, dep_keys))
        key = graph.keys[i]
        task = Task.fuse(*members, key=key)
        # as dask.array.optimization._optimize_slices does to every fused task
        return optimize_slices({key: task})[key]

    def build_member(self, local: int, key: Any, dep_keys: Any) -> Any:  # pragma: no cover
        raise AssertionError("a fused task is never a chain member")

    def _member_flags(self, local: int, flag: str) -> bool:
        codes, _keys = self.records[local]
        segs = self.segments
        return any(getattr(segs[c >> SHIFT], flag)(c & MASK) for c in codes)

    def data_producer(self, local: int) -> bool:
        return self._member_flags(local, "data_producer")

    def is_data(self, local: int) -> bool:
        return False

    def truthy(self, local: int) -> bool:
        return True

    def release(self, local: int) -> bool:
        self.records[local] = None
        self.live -= 1
        return self.live <= 0


class TaskOnlySource:
    """A segment whose tasks are all ``Task``/``Alias`` nodes that produce no
    data (truthy, not ``DataNode``); freed with its last task."""

    __slots__ = ("live",)

    def __init__(self) -> None:
        self.live = 0

    def data_producer(self, local: int) -> bool:
        return False

    def is_data(self, local: int) -> bool:
        return False

    def truthy(self, local: int) -> bool:
        return True

    def release(self, local: int) -> bool:
        self.live -= 1
        return self.live <= 0


class AliasSource(TaskOnlySource):
    """The Alias fusion leaves at a chain's top key: ``Alias(top, fused)``."""

    __slots__ = ()

    def build(self, graph: "CompactGraph", i: int, local: int) -> Any:
        (target,) = graph.deps[i]
        return Alias(graph.keys[i], target=graph.keys[target])

    def build_member(self, local: int, key: Any, dep_keys: Any) -> Any:  # pragma: no cover
        raise AssertionError("an alias is never a chain member")


def _constant_producer(seg: Any) -> bool | None:
    """``truthy and data_producer`` of every task of ``seg`` when it is the
    same for all of them (see :meth:`CompactGraph.producer_flags`)."""
    t = type(seg)
    if t is BlockSource:
        return bool(seg.view.data_producer)
    if isinstance(seg, TaskOnlySource):
        return False
    return None


class Deps(Sequence):
    """``deps[i]``: task ``i``'s dependency indices (a tuple, built on
    access from the CSR arrays), in the iteration order of the frozenset
    stock's run_spec holds, keys outside the graph left out."""

    __slots__ = ("off", "idx")

    def __init__(self, off: array, idx: array):
        self.off = off
        self.idx = idx

    def __len__(self) -> int:
        return len(self.off) - 1

    def __getitem__(self, i: int) -> tuple:  # type: ignore[override]
        off = self.off
        return tuple(self.idx[off[i] : off[i + 1]])

    def __iter__(self) -> Iterator[tuple]:
        off = self.off
        idx = self.idx
        a = off[0]
        for j in range(1, len(off)):
            b = off[j]
            yield tuple(idx[a:b])
            a = b

    def size(self, i: int) -> int:
        return self.off[i + 1] - self.off[i]

    def tuples(self) -> list:
        """``list(self)`` (every row as a tuple), made in C
        (:func:`slimgraph.order.csr_rows`), not by iterating the rows in
        Python."""
        import numpy as np

        from slimgraph.order import csr_rows

        idx = self.idx
        flat = np.frombuffer(idx, dtype=np.int32) if len(idx) else np.zeros(0, dtype=np.int32)
        return csr_rows(np.frombuffer(self.off, dtype=np.int32), flat, idx, tuple)


class DependencySets(Sequence):
    """Lazy ``run_spec(i).dependencies`` by index."""

    __slots__ = ("graph",)

    def __init__(self, graph: "CompactGraph"):
        self.graph = graph

    def __len__(self) -> int:
        return len(self.graph.keys)

    def __getitem__(self, i: int) -> frozenset:  # type: ignore[override]
        return self.graph.dependencies(i)


class _Truthy:
    """What a run_spec read for its truth only gives
    (:meth:`CompactGraph.stand_in_for_truth`): true, and nothing else."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "<run_spec stand-in: read for its truth only>"


TRUTHY = _Truthy()


class CompactGraph:
    """A materialized submission without a dask node per task.

    ``keys``, ``deps`` and ``external`` describe the graph in stock's order;
    ``run_spec(i)`` is equal to stock's ``dsk[keys[i]]`` (``==``, same
    ``dask.base.tokenize``); ``annotations`` equals the annotations by type
    ``_materialize_graph`` returns; ``report`` says per layer which path it
    took.
    """

    def __init__(
        self,
        keys: list,
        codes: array,
        off: array,
        idx: array,
        external: dict,
        segments: list,
        dropped: set,
        annotations: Any,
        report: list,
    ):
        self.keys = keys
        self.codes = codes
        self.deps = Deps(off, idx)
        #: i -> external dependency keys of task i (keys no task of the
        #: graph has: persisted data, futures), in their set order
        self.external = external
        self.segments = segments
        #: keys dask dropped as aliases to themselves; other tasks may still
        #: reference them (they then depend on a key outside the graph)
        self.dropped = dropped
        self.annotations = annotations
        self.report = report
        #: how a task state names its task here (see :meth:`index_of`):
        #: None while task states hold their index
        self.handles: array | None = None
        # a segment lives while a task, or a fused chain member, uses it
        for code in codes:
            segments[code >> SHIFT].live += 1
        for seg in segments:
            if type(seg) is FusedSource:
                members = seg.member_segments = set()
                for member_codes, _keys in seg.records:
                    for c in member_codes:
                        j = c >> SHIFT
                        segments[j].live += 1
                        members.add(j)
        self._producers: list | None = None

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def edges(self) -> int:
        return len(self.deps.idx) + sum(map(len, self.external.values()))

    def _source(self, i: int) -> tuple:
        code = self.codes[i]
        src = self.segments[code >> SHIFT]
        if src is None:
            raise KeyError(f"task {i} ({self.keys[i]!r}) has been released")
        return src, code & MASK

    def run_spec(self, i: int) -> Any:
        """The node stock would hold for task ``i``, built now."""
        src, local = self._source(i)
        return src.build(self, i, local)

    #: the node :meth:`task_run_spec` built last, ``(i, node)``
    _last: tuple = (-1, None)

    # -- what a task state reads, by the handle it holds ---------------------
    def index_of(self, handle: int) -> int:
        """The index of the task a task state names by ``handle``.

        A task state made from this graph holds an int naming its task: its
        index, or, once the build has set :attr:`handles`, its dask.order
        priority, the very int object its priority tuple is built from (the
        build maps priorities back to indices in ``handles``). At 1M tasks
        that is one int object per task less, 28 bytes, as priorities are
        distinct within a submission."""
        handles = self.handles
        return handle if handles is None else handles[handle]

    def task_run_spec(self, handle: int) -> Any:
        """:meth:`run_spec` of the task named by ``handle``, for a task
        state's reader: reads of the same task in a row (distributed's
        ``is_rootish`` then ``_task_to_msg`` when it sends a task to a
        worker) share one build.

        Written out (:meth:`index_of`, :meth:`run_spec` and :meth:`_source`
        in one frame): it runs once per task sent to a worker, where three
        Python calls are a noticeable part of a ``compute-task`` message."""
        handles = self.handles
        i = handle if handles is None else handles[handle]
        last = self._last
        if last[0] == i:
            return last[1]
        code = self.codes[i]
        src = self.segments[code >> SHIFT]
        if src is None:
            raise KeyError(f"task {i} ({self.keys[i]!r}) has been released")
        node = src.build(self, i, code & MASK)
        self._last = (i, node)
        return node

    def stand_in_for_truth(self, handle: int) -> bool:
        """Until :meth:`end_stand_in`, reads of the run_spec of the task
        named by ``handle`` give :data:`TRUTHY` instead of building its
        node, if that node is truthy (returns whether it is): for a reader
        that only tests the run_spec's truth (distributed's ``memory ->
        released``, :mod:`slimgraph.model.state`), which would otherwise
        build every computed task's node once more."""
        handles = self.handles
        i = handle if handles is None else handles[handle]
        if not self.truthy(i):
            return False
        self._last = (i, TRUTHY)
        return True

    def end_stand_in(self) -> None:
        """Reads build nodes again (see :meth:`stand_in_for_truth`)."""
        if self._last[1] is TRUTHY:
            self._last = (-1, None)

    def task_spec_data_producer(self, handle: int) -> bool:
        """:meth:`spec_data_producer` of the task named by ``handle``."""
        handles = self.handles
        return self.spec_data_producer(handle if handles is None else handles[handle])

    def producer_flags(self) -> list:
        """Per segment, :meth:`spec_data_producer` of every task coded to
        it when that is the same for all of them (True or False), else None.

        Why: the replay asks it of every ready task (four calls each, for
        each of them); by segment it is one list read. A
        Blockwise layer's blocks and the alias leaves answer alike; a fused
        chain answers False when none of its members' segments can produce
        data; values kept as they arrived answer one by one."""
        flags = self._producers
        if flags is None:
            segments = self.segments
            flags = [_constant_producer(seg) for seg in segments]
            for j, seg in enumerate(segments):
                if type(seg) is FusedSource and all(flags[m] is False for m in seg.member_segments):
                    flags[j] = False
            self._producers = flags
        return flags

    def task_truthy(self, handle: int) -> bool:
        """:meth:`truthy` of the task named by ``handle``."""
        handles = self.handles
        return self.truthy(handle if handles is None else handles[handle])

    def data_producer(self, i: int) -> bool:
        src, local = self._source(i)
        return src.data_producer(local)

    def spec_data_producer(self, i: int) -> bool:
        """``truthy(i) and data_producer(i)``: one lookup of the source (the
        replay asks it of every task, 1M times for a 1M-task array)."""
        code = self.codes[i]
        src = self.segments[code >> SHIFT]
        if src is None:
            raise KeyError(f"task {i} ({self.keys[i]!r}) has been released")
        local = code & MASK
        return src.truthy(local) and src.data_producer(local)

    def is_data(self, i: int) -> bool:
        """Whether the run_spec is a ``DataNode``."""
        src, local = self._source(i)
        return src.is_data(local)

    def truthy(self, i: int) -> bool:
        """``bool(run_spec(i))`` (stock's pure-data test)."""
        src, local = self._source(i)
        return src.truthy(local)

    def dependencies(self, i: int) -> frozenset:
        """The run_spec's own dependency frozenset (its layout is stock's)."""
        return self.run_spec(i).dependencies

    def legacy_keys(self, i: int) -> frozenset:
        """The keys a legacy value of task ``i`` references: what
        ``convert_legacy_task`` needs to know of the graph's keys."""
        keys = self.keys
        ks = [keys[j] for j in self.deps[i]]
        ext = self.external.get(i)
        if ext and self.dropped:
            ks.extend(k for k in ext if k in self.dropped)
        return frozenset(ks)

    def release(self, i: int) -> None:
        """Forget task ``i``'s source (stock drops a run_spec when its task
        is forgotten); a segment goes when its last task does."""
        code = self.codes[i]
        src = self.segments[code >> SHIFT]
        if type(src) is FusedSource and src.records[code & MASK] is not None:
            for c in src.records[code & MASK][0]:
                self._release_code(c)
        self._release_code(code)

    def _release_code(self, code: int) -> None:
        seg_no = code >> SHIFT
        src = self.segments[seg_no]
        if src is not None and src.release(code & MASK):
            self.segments[seg_no] = None

    def data_indices(self) -> list:
        """Indices of the tasks whose run_spec is a ``DataNode`` (what
        ``dask.order`` treats as data). Only values kept as they arrived can
        be data: a graph without such a segment has none."""
        segs = self.segments
        maybe = {
            n for n, seg in enumerate(segs)
            if type(seg) is ValueSource and any(seg.is_data(j) for j in range(len(seg.kinds)))
        }
        if not maybe:
            return []
        out = []
        for i, code in enumerate(self.codes):
            n = code >> SHIFT
            if n in maybe and segs[n].is_data(code & MASK):
                out.append(i)
        return out

    def dependency_sets(self) -> "DependencySets":
        """``sets[i]``: task ``i``'s run_spec dependency frozenset, built on
        access (for an ordering that reads a few of them)."""
        return DependencySets(self)

    def positions(self) -> KeyPositions:
        """key -> index (a temporary for the engine; not kept here)."""
        return KeyPositions(self.keys)

    def to_dict(self) -> dict:
        """``{key: run_spec}``: stock's materialized dict, built (tests)."""
        return {k: self.run_spec(i) for i, k in enumerate(self.keys)}

    def empty_annotations(self) -> defaultdict:
        return defaultdict(dict)
