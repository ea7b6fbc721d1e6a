"""Numbering a submitted graph, and ordering it.

Stock walks the materialized graph by key three times (cull, lost
dependencies, task states). Here one pass (:func:`index_graph`) numbers the
graph's tasks, turns every dependency into an integer, checks the key types,
and finds what the requested keys reach and which keys the graph needs from
outside. Everything after works on those integers. Nothing here reads or
writes scheduler state, so it can run in a worker thread
(:func:`prepare` is what the pipeline offloads).

A compact graph (:mod:`slimgraph.ingest.compact`, ``slimgraph-switches.compact-ingestion``)
comes numbered already: :func:`index_compact` takes its keys, CSR
dependencies and outside keys as they are, and only walks what the
requested keys reach. The ordering reads its integers too, and builds a
node only where ``dask.order`` would look at a dependency set's iteration
order. Its culled, ordered dict of nodes is never made.
"""
from __future__ import annotations

from array import array

from dataclasses import dataclass, field
from typing import Any

from slimgraph import config, shim
from slimgraph.errors import InvalidKeyError
from slimgraph.instrument.records import SubmissionRecord
from slimgraph.model.keys import validate_key_type


@dataclass
class GraphIndex:
    """The submitted graph, numbered. Built without touching the scheduler."""

    dsk: dict
    keys: list  # keys[i]: the i-th task of dsk
    pos: dict  # key -> i
    deps: list  # deps[i]: tuple of dependency indices inside dsk
    external: dict  # i -> [keys of dependencies not in dsk]
    reached: Any  # indices reachable from the requested keys, in visit order (array)
    outside: list  # requested/needed keys that are not in dsk, in visit order
    edges: int = 0
    #: for each key of ``outside``: how many tasks were reached before it
    #: (stock visits both in one walk: where each goes among its "touched" tasks)
    outside_at: list = field(default_factory=list)
    #: the compact graph the index was read from (``dsk`` is then None):
    #: task states keep it as their run_spec reference
    graph: Any = None
    #: a compact graph's dependency rows as a list of tuples (``deps`` is
    #: its CSR form), made once for the walk and the ordering
    rows: Any = None

    def temporaries(self) -> list:
        """Its big containers, which nothing outlives it (see slimgraph.runtime.disposal).
        Not a compact graph's keys and dependencies: its task states keep them."""
        if self.graph is not None:
            return [*self.pos.made(), self.reached, *([] if self.rows is None else [self.rows])]
        return [self.dsk, self.keys, self.pos, self.deps, self.external, self.reached]

    def node(self, i: int) -> Any:
        """Task ``i``'s node, as stock's materialized dict holds it (built
        now from a compact graph)."""
        if self.graph is not None:
            return self.graph.run_spec(i)
        return self.dsk[self.keys[i]]

    def node_dependencies(self, i: int) -> Any:
        """``node(i).dependencies``: stock's frozenset, in its order."""
        if self.graph is not None:
            return self.graph.dependencies(i)
        return self.dsk[self.keys[i]].dependencies

    def dependency_keys(self, i: int) -> set:
        """The keys task ``i`` depends on, as an (unordered) set."""
        if self.graph is None:
            return self.dsk[self.keys[i]].dependencies
        keys = self.keys
        out = {keys[j] for j in self.deps[i]}
        ext = self.external.get(i)
        if ext:
            out.update(ext)
        return out


def index_graph(dsk: dict, wanted: Any, cull: bool) -> GraphIndex:
    """Number the graph and find what the requested keys reach.

    Raises InvalidKeyError for keys of a type dask does not accept.
    """
    # stock walks ``set(keys)`` (the client sends a list): the same order here
    wanted = set(wanted)
    if cull:
        # distributed's own cull: the culled dict's order (set-pop order) is
        # the order stock adds dependents in, and what dask.order sees.
        dsk = shim.cull(dsk, wanted)

    keys = list(dsk)
    pos = {k: i for i, k in enumerate(keys)}
    if len(pos) != len(keys):  # pragma: no cover - dict keys are unique
        raise InvalidKeyError("duplicate keys")
    deps: list = [()] * len(keys)
    external: dict = {}
    get = pos.get
    n_edges = 0
    for i, k in enumerate(keys):
        node = dsk[k]
        nd = node.dependencies
        if nd:
            idx = []
            for d in nd:
                j = get(d)
                if j is None:
                    external.setdefault(i, []).append(d)
                else:
                    idx.append(j)
            n_edges += len(nd)
            deps[i] = tuple(idx)
    _check_key_types(keys)
    reached, outside, outside_at = _reach(wanted, get, deps, external, lambda j: dsk[keys[j]].dependencies)
    return GraphIndex(dsk, keys, pos, deps, external, reached, outside, n_edges, outside_at)


def index_compact(graph: Any, wanted: Any) -> GraphIndex:
    """:func:`index_graph` for a compact graph (culled already, if stock
    culls): its keys, dependencies and outside keys as they are.

    Raises InvalidKeyError for keys of a type dask does not accept.
    """
    wanted = set(wanted)
    keys = graph.keys
    _check_key_types(keys)
    pos = graph.positions()  # (a KeyPositions: the graph's keys are unique)
    external = graph.external
    rows = graph.deps.tuples()
    reached, outside, outside_at = _reach(wanted, pos.get, rows, external, graph.dependencies)
    return GraphIndex(
        None, keys, pos, graph.deps, external, reached, outside, graph.edges, outside_at, graph=graph,
        rows=rows,
    )


def _check_key_types(keys: list) -> None:
    bad = None
    for k in keys:
        t = type(k)
        if t is tuple:
            # (an array's keys, ``(name, i, j)``, checked without a call)
            if len(k) == 3 and type(k[0]) is str and type(k[1]) is int and type(k[2]) is int:
                continue
            if not (type(k[0]) is str and _all_ints(k)) and not validate_key_type(k):
                bad = k
                break
        elif t is not str and not validate_key_type(k):
            bad = k
            break
    if bad is not None:
        raise InvalidKeyError(
            f"Invalid key {bad!r} of type {type(bad).__name__}: keys must be str, "
            "bytes, int, float or tuples of those"
        )


def _reach(wanted: set, get: Any, deps: Any, external: dict, node_deps: Any) -> tuple:
    """What the requested keys reach, in stock's visit order; the keys from
    outside the graph met on the way, and where. ``node_deps(j)``: task
    ``j``'s dependency frozenset (read only for tasks with outside keys)."""

    # Reachability from the requested keys (stock only creates those tasks),
    # visited in stock's order: a stack of the requested keys, then of each
    # task's dependencies, popped from the end. Keys from outside the graph
    # are visited in that order too (they are "touched" tasks for stock),
    # so each one's place among the reached tasks is kept.
    seen = bytearray(len(deps))
    # flat: the engine iterates it (no int object kept per task: they
    # would be freed after the ingestion amid what it keeps)
    reached = array("q")
    outside_seen: set = set()
    outside = []
    outside_at = []  # for each outside key: how many tasks were reached before it
    ext_keys: list = []  # outside keys on the stack, as -1 - position here
    stack = []
    for k in wanted:
        j = get(k)
        if j is None:
            ext_keys.append(k)
            stack.append(-len(ext_keys))
        else:
            stack.append(j)
    while stack:
        j = stack.pop()
        if j < 0:
            k = ext_keys[-1 - j]
            if k not in outside_seen:
                outside_seen.add(k)
                outside.append(k)
                outside_at.append(len(reached))
            continue
        if seen[j]:
            continue
        seen[j] = 1
        reached.append(j)
        if j in external:
            # the task's dependencies in their own order, outside ones too
            for d in node_deps(j):
                jj = get(d)
                if jj is None:
                    ext_keys.append(d)
                    stack.append(-len(ext_keys))
                elif not seen[jj]:
                    stack.append(jj)
        else:
            for d in deps[j]:
                if not seen[d]:
                    stack.append(d)
    return reached, outside, outside_at


def _in_index_order(indices: list, n: int) -> Any:
    """``sorted(indices)`` for distinct indices below ``n``, without one long
    C-level sort (it holds the GIL for the whole sort, a stall for the
    event loop even when a worker thread sorts)."""
    if len(indices) == n:
        return range(n)
    mask = bytearray(n)
    for i in indices:
        mask[i] = 1
    return [i for i in range(n) if mask[i]]


def _all_ints(k: tuple) -> bool:
    for x in k[1:]:
        if type(x) is not int:
            return False
    return True


def compute_order(index: GraphIndex) -> list | dict:
    """Priorities: a list by index (fast ordering) or dask.order's dict."""
    if index.graph is not None:
        return _compact_order(index)
    if config.get("ordering") == "fast":
        from slimgraph.order import order, order_numbered

        dsk = index.dsk
        if not index.external and dsk:
            # The graph is numbered already (phase 1): hand that to the
            # ordering instead of letting it number the graph again. Graphs
            # with outside keys (dask turns them into stand-in data nodes)
            # or legacy values go through order(), which handles them.
            prio = order_numbered(index.keys, index.deps, list(dsk.values()), index.pos)
            if prio is not None:
                return prio
        return order(dsk)
    import dask.order

    return dask.order.order(dsk=index.dsk)


def lost_keys(state: Any, index: GraphIndex) -> list:
    """Keys the graph needs that neither the graph nor the scheduler has."""
    tasks = state.tasks
    return [k for k in index.outside if k not in tasks]


def prepare(dsk: Any, keys: Any, cull: bool, priorities: Any, rec: SubmissionRecord,
            where: str = "offload") -> tuple[GraphIndex, Any]:
    """Number the graph (a dict of nodes, or a compact graph, culled
    already), then order it unless the client sent priorities (phases
    ``cull`` and ``order``)."""
    with rec.phase("cull", where=where) as p:
        if isinstance(dsk, dict):
            index = index_graph(dsk, keys, cull)
        else:
            assert not cull, "a compact graph is culled as it is made"
            index = index_compact(dsk, keys)
        p.tasks = len(index.keys)
        p.edges = index.edges
    if not priorities:
        with rec.phase("order", where=where) as p:
            priorities = compute_order(index)
            p.tasks = len(index.keys)
            p.edges = index.edges
    return index, priorities


def _compact_order(index: GraphIndex) -> list | dict:
    """Priorities of a compact graph's tasks, read from its integers.

    Keys outside the graph (persisted data, futures) are numbered after the
    graph's own keys in order of first appearance, as ``dask.order`` adds
    its stand-in data nodes; the ordering reads a task's dependency set
    (built from its node) only where the set's iteration order decides.
    """
    graph = index.graph
    if not graph.keys:
        return []
    if config.get("ordering") != "fast":
        import dask.order

        return dask.order.order(dsk=graph.to_dict())
    from slimgraph.order import order, order_graph

    keys = graph.keys
    n = len(keys)
    rows = index.rows if index.rows is not None else graph.deps.tuples()
    deps: list = list(rows) if graph.external else rows  # (copied to add the outside keys' rows)
    data = graph.data_indices()
    dep_sets: Any = graph.dependency_sets()
    external = graph.external
    n_ext = 0
    if external:
        keys = list(keys)
        outside: dict = {}  # outside key -> its number after the graph's
        for i in sorted(external):
            row = []
            for k in external[i]:
                j = outside.get(k)
                if j is None:  # (not a key of the graph: that is what external holds)
                    j = outside[k] = len(keys)
                    keys.append(k)
                row.append(j)
            deps[i] = deps[i] + tuple(row)
        n_ext = len(keys) - n
        deps.extend([()] * n_ext)
        data.extend(range(n, len(keys)))
        dep_sets = _WithOutside(dep_sets, n)
    # (no key -> index dict: the ordering makes its own where it needs one)
    prio = order_graph(keys, deps, data, dep_sets, None, n_ext)
    if prio is None:  # keys whose str() may coincide: dask's own ordering
        return order(graph.to_dict())
    return prio


class _WithOutside:
    """Dependency sets of a graph's tasks, then none for its outside keys."""

    __slots__ = ("sets", "n")

    def __init__(self, sets: Any, n: int):
        self.sets = sets
        self.n = n

    def __getitem__(self, i: int) -> Any:
        return self.sets[i] if i < self.n else frozenset()

    def __len__(self) -> int:
        return self.n
