"""Fast static ordering, value for value equal to ``dask.order.order``.

What this computes
------------------------------------------------------------------------------
``dask.order.order`` gives every task a priority: the position at which a
single-threaded scheduler following dask's heuristics would run it. The
scheduler uses it to break ties. This module returns *the same* dict (for
dask 2026.8.0), but works on integer task indices and flat Python lists
instead of dicts of sets keyed by task keys. ``order(dsk)`` turns a graph
into the indexed form (``keys[i]``, ``deps[i]``) and calls ``order_indexed``.

The heuristic, in plain words
------------------------------------------------------------------------------
1. *Clean up.* A root that is plain data (a ``DataNode``, or a legacy
   non-task value) feeding more than one task is taken out of the graph: it
   is given its priority right before the first task that needs it. A leaf
   that is not a task and has more than one dependency (an alias over many
   keys, e.g. ``da.store``) is taken out too and given a priority at the end.
   Dependencies that are not keys of the graph ("external" keys) take part as
   data roots but get no priority of their own.
2. *Statistics.* For every task: the number of tasks it transitively needs,
   counted with multiplicity (``total``), its number of dependencies, the
   number of distinct roots above it, and the largest fan-out among those
   roots. Together with ``str(key)`` these form the *sort key* by which all
   choices are made. Each root also learns which leaves lie below it.
3. *Critical paths.* Pick a target leaf: while nothing is reachable yet (or
   every leaf only needs already loaded roots), the next leaf of a fixed
   sorted list (largest first when the graph looks like a reduction or a
   symmetric map, smallest first otherwise); otherwise the smallest leaf among
   those needing the fewest not yet loaded roots, preferring leaves that
   already touch computed work. From the target walk up to a root, at each
   step to the largest dependency, pushing the other pending dependencies of
   that step onto a stack.
4. *Walking the path.* Pop the stack: a task that is runnable is run (given
   the next priority). A task that is not is pushed back together with its
   pending dependencies, smallest on top, so that we "walk back" to what it
   needs; known runnable paths (see 5) that end in one of those dependencies
   are pushed instead of the dependency itself.
5. *Runnable work.* Running a task makes dependents runnable. A dependent
   that is the only one of its parent runs immediately (chains are followed
   eagerly). Others are collected and, after walking back (or after the
   path), followed forward: along single dependents, splitting at splitters,
   until a reducer is hit. Paths into a reducer are remembered; once enough
   paths to make the reducer runnable are known they are run, and paths into
   leaves are run at once.

Where the time goes, and how we save it
------------------------------------------------------------------------------
dask spends most of its time on the statistics of step 2 (a frozenset of
roots and one of leaves for every task, plus dict-of-set bookkeeping keyed by
tuples) and on hashing keys in the walk. Here the statistics are computed
level by level of a topological sort with numpy (``reduceat`` over each
level's edges). Distinct roots above a task are a plain sum wherever the
tasks above have one dependent each (no overlap is possible), and real sets
of root indices are built only where ancestors overlap. Leaf sets are shared
along single dependents (found by pointer jumping) and united only at
splitters; roots whose leaf sets are one shared set object share one code.

The walk (steps 3-5) then touches every task a few times, in an order
unrelated to its index, so what costs is per-task Python work and cache
misses on per-task lists (a list of ints costs two: the slot and the int
object). We keep both down:

- *One integer sort key.* For the tuple keys dask collections use,
  ``(name, i, j)``, the order of ``str(key)`` among tasks whose numeric keys
  tie follows from integer columns computed in bulk, without building a
  string (the rank of each element's repr, or for ints a numpy code ordered
  like their decimal strings). Sorting by the numeric key, then by those
  columns, gives every task its rank in dask's whole sort key, and the walk
  compares plain integers from a flat ``array``. For other keys (str keys
  need real string comparisons) ``str(key)`` is looked at lazily, only
  where numeric keys tie.
- *Leaf degrees on demand.* The leaf choice needs, per leaf, the number of
  roots above it not yet run, but only when a target is picked, while roots
  run all the time. Running a task only appends it to the result list; when
  a target is needed the roots run since the last choice are counted per
  leaf (numpy for many, ``Counter`` for few) and each touched leaf's degree
  and per-degree heap entry are updated once.
- *Flat per-task data.* Flags are bytearrays, the single dependent of a task
  a flat ``array`` (most tasks have one), priorities are given from the
  result list at the end, dependents lists are built from the numpy edge
  arrays, and the nodes' dependency sets are read only where set order
  matters.

The cyclic garbage collector is paused while we run: everything we allocate
is acyclic.

Exactness
------------------------------------------------------------------------------
dask's result depends on the iteration order of a few Python sets (which is
fixed within a process but changes with ``PYTHONHASHSEED`` for str keys):
the order in which the pending dependencies of a critical-path step are
pushed (``dependencies[x].difference(result)``), the order in which several
dependents becoming runnable at once are queued (``dependents[x]``, built in
graph order), the order in which several data roots of one task are given
their priority, and the root set scanned by the "symmetric graph" test. We
rebuild exactly those Python sets, with the same elements inserted in the same
order and the same set operation, only at the moments they matter, so the
iteration order is the very same. Everything else works on integers.

The one case handled by delegating to ``dask.order.order`` itself: two
distinct keys whose ``str()`` coincide (e.g. ``1`` and ``'1'``). dask then
breaks remaining ties by set iteration order of sets we do not mirror.

On bad input: a cycle raises :class:`slimgraph.errors.CycleError`, a
``RuntimeError`` as dask's is, whose ``.keys`` lists keys on the cycle in
cycle order. The ``dependencies`` argument is accepted and ignored,
exactly like dask does.
"""
from __future__ import annotations

from array import array
from collections import Counter, deque
from heapq import heappop, heappush
from functools import partial
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import Any, Hashable, Iterable, Mapping, Sequence

from slimgraph.runtime import gcpause, steps
from slimgraph.errors import CycleError

__all__ = ["order", "order_graph", "order_indexed", "order_numbered"]

_NO_DEPS: frozenset = frozenset()
_get_dependencies = attrgetter("dependencies")

#: Graphs with at least this many tasks compute their statistics with numpy,
#: level by level (see ``_Orderer.stats_numpy``), and rank their tasks by the
#: whole sort key up front (``_Orderer.full_rank``); smaller ones work in
#: Python, where numpy's per-call overhead would dominate, and look at
#: ``str(key)`` lazily. Both give equal results.
NUMPY_MIN_TASKS = 2000


# ---------------------------------------------------------------------------
# public entry points
# ---------------------------------------------------------------------------


def order(dsk: Mapping, dependencies: Mapping | None = None) -> dict:
    """Priorities for every key of ``dsk``, equal to ``dask.order.order(dsk)``.

    ``dsk`` maps keys to dask ``_task_spec`` nodes (legacy task tuples and
    plain values work too). ``dependencies`` is ignored, as dask ignores it:
    dask always derives dependencies from the nodes. This only converts the
    graph into integer form, keeping the nodes' own dependency frozensets so
    that set-iteration tie-breaks are reproduced exactly, and calls
    :func:`order_indexed`.

    A cycle raises :class:`~slimgraph.errors.CycleError` (a ``RuntimeError``,
    as dask's, naming keys on the cycle).
    """
    if not dsk:
        return {}
    gcpause.hold()  # see order_indexed
    try:
        keys, deps, dep_sets, data, n_ext, index = _index_graph(dsk)
        types = set(map(type, keys))
        if _str_ties_possible(keys, len(keys) - n_ext, types):
            from dask.order import order as dask_order

            return dask_order(dsk)  # see _str_ties_possible
        prio = order_indexed(
            keys,
            deps,
            data=data,
            external=n_ext,
            dep_sets=dep_sets,
            _index=index,
            _ties_checked=True,
            _key_types=types,
        )
        if n_ext:
            del keys[len(keys) - n_ext :]
        return dict(zip(keys, prio))
    finally:
        gcpause.release()


def order_numbered(keys: list, deps: list, values: list, index: dict) -> list[int] | None:
    """:func:`order` for a graph its caller has already numbered.

    ``keys[i]``, ``values[i]`` (the graph's nodes, in graph order) and
    ``deps[i]`` (indices of ``values[i].dependencies``, in that set's
    iteration order) describe a graph with no keys outside it; ``index``
    maps key -> i. Returns the priorities by index, or ``None`` where
    :func:`order` has to see the graph itself (legacy values, or keys whose
    ``str()`` may coincide).
    """
    kinds = _node_kinds(values)
    if 0 in kinds.values():
        return None
    return order_graph(keys, deps, _data_indices(values, kinds), _NodeDependencies(values), index)


def order_graph(
    keys: list, deps: list, data: list, dep_sets: Any, index: dict | None, external: int = 0
) -> list[int] | None:
    """:func:`order_indexed` for a numbered graph of task-spec nodes whose
    data nodes (``data``) and dependency sets (``dep_sets[i]``, read on
    demand) its caller knows, with ``external`` outside keys numbered last
    (as :func:`order` numbers them). ``None`` where :func:`order` has to see
    the graph itself (keys whose ``str()`` may coincide)."""
    types = set(map(type, keys))
    if _str_ties_possible(keys, len(keys) - external, types):
        return None
    return order_indexed(
        keys,
        deps,
        data=data,
        external=external,
        dep_sets=dep_sets,
        _index=index,
        _ties_checked=True,
        _key_types=types,
    )


class _NodeDependencies:
    """``nodes[i].dependencies`` on demand: the ordering looks at only a few
    of these sets (where their iteration order matters)."""

    __slots__ = ("nodes",)

    def __init__(self, nodes: list):
        self.nodes = nodes

    def __getitem__(self, i: int) -> Any:
        return self.nodes[i].dependencies

    def __len__(self) -> int:
        return len(self.nodes)


def _node_kinds(values: Iterable) -> dict:
    """type -> 2 for ``DataNode``s, 1 for other ``GraphNode``s, 0 for legacy
    values (one check per type, not per node)."""
    from slimgraph.shim import DataNode, GraphNode

    kinds = {}
    for t in set(map(type, values)):
        if issubclass(t, GraphNode):
            kinds[t] = 2 if issubclass(t, DataNode) else 1
        else:
            kinds[t] = 0
    return kinds


def _data_indices(values: list, kinds: dict) -> list[int]:
    if 2 not in kinds.values():
        return []
    return [i for i, t in enumerate(map(type, values)) if kinds[t] == 2]


def _index_graph(dsk: Mapping) -> tuple:
    """The integer form of ``dsk``: keys, dependency index tuples (in the
    iteration order of each node's dependency set), the sets themselves,
    the indices of data nodes, and the number of external keys appended.

    External keys are numbered after the graph's keys in order of first
    appearance, which is where dask adds its stand-in data nodes.
    """
    keys = list(dsk)
    values = list(dsk.values())
    n = len(keys)
    index = dict(zip(keys, range(n)))
    getidx = index.__getitem__
    kinds = _node_kinds(values)
    deps = None
    if 0 not in kinds.values():
        # the common case: only _task_spec nodes; C-level loops
        dep_sets = list(map(_get_dependencies, values))
        data = _data_indices(values, kinds)
        try:
            deps = list(map(tuple, map(map, repeat(getidx), dep_sets)))
        except KeyError:
            pass
    else:
        dep_sets = []
        data = []
        for i, v in enumerate(values):
            kind = kinds[type(v)]
            if kind:
                dep_sets.append(v.dependencies)
                if kind == 2:
                    data.append(i)
            else:
                s, is_task = _legacy_node(dsk, v)
                dep_sets.append(s)
                if not is_task:
                    data.append(i)
    if deps is None:
        deps = []
        for s in dep_sets:
            try:
                deps.append(tuple(map(getidx, s)))
            except KeyError:
                # A dependency outside the graph: dask adds it as a data node
                # at the end of the graph, in order of first appearance.
                row = []
                for k in s:
                    j = index.get(k)
                    if j is None:
                        j = index[k] = len(keys)
                        keys.append(k)
                    row.append(j)
                deps.append(tuple(row))
    n_ext = len(keys) - n
    if n_ext:
        data.extend(range(n, len(keys)))
        deps.extend([()] * n_ext)
        dep_sets.extend([_NO_DEPS] * n_ext)
    return keys, deps, dep_sets, data, n_ext, index


class _LegacyDeps(set):
    """The dependency set dask computes for a legacy (non-``GraphNode``)
    value, remembering the keys in the order they were found: once tasks
    are removed, dask recomputes such sets from the shrunken graph, i.e.
    from that list without the removed keys, which can change the set's
    iteration order."""

    __slots__ = ("found",)


def _legacy_node(dsk: Mapping, v: Any) -> tuple:
    """Dependencies and task-ness of a value that is not a ``GraphNode``.

    dask.order falls back to ``dask.core.get_dependencies`` and
    ``dask.core.istask`` for such values; we do the same, so legacy graphs
    (tuples, lists of keys, literals) are ordered identically.
    """
    from dask.core import get_dependencies, istask

    found = get_dependencies(dsk, task=v, as_list=True)
    s = _LegacyDeps(found)
    s.found = found
    return s, bool(istask(v))


def order_indexed(
    keys: Sequence[Hashable],
    deps: Sequence[Sequence[int]],
    *,
    data: Iterable[int] = (),
    external: int = 0,
    dep_sets: Sequence[Any] | None = None,
    _index: dict | None = None,
    _ties_checked: bool = False,
    _key_types: set | None = None,
) -> list[int]:
    """Priority of every task of an integer-indexed graph.

    ``keys[i]`` is task ``i``'s key and ``deps[i]`` the indices of its
    dependencies. The result equals ``dask.order.order`` on the graph
    ``{keys[i]: Task(keys[i], f, *[TaskRef(keys[j]) for j in deps[i]])}``
    (graph order = index order), with the tasks listed in ``data`` being
    ``DataNode``s instead. The order of ``deps[i]`` matters only where dask's
    result depends on set iteration order: a ``Task`` builds its dependency
    set by inserting its references in argument order, and so do we.

    ``data`` (optional): indices of data nodes (``DataNode``s: no
    dependencies). ``dep_sets`` (optional): the actual dependency set of each
    task (what ``node.dependencies`` returns), with ``deps[i]`` listing the
    same keys in any order; ``order()`` passes them so that set-order
    tie-breaks are those of the real graph. ``external`` (optional): the last
    ``external`` indices are keys outside the graph, which dask treats as data
    nodes without a priority of their own (their entries in the returned list
    are meaningless).

    Raises :class:`~slimgraph.errors.CycleError` on a cycle (dask:
    ``RuntimeError``) and ``ValueError`` if ``deps`` and ``keys`` differ in
    length.
    """
    n = len(keys)
    if not n:
        return []
    if len(deps) != n:
        raise ValueError(f"{len(deps)} dependency rows for {n} keys")
    if dep_sets is None:
        # a Task's dependencies are a set: a reference listed twice counts once
        for d in deps:
            if len(d) > 1 and len(set(d)) != len(d):
                deps = [tuple(dict.fromkeys(d)) if len(d) > 1 else tuple(d) for d in deps]
                break
    if not _ties_checked and _str_ties_possible(keys, n - external):
        return _delegate_to_dask(keys, deps, data, external, dep_sets)
    # Everything allocated here is acyclic; the cyclic collector would only
    # rescan our millions of small lists and tuples over and over.
    with gcpause.paused():
        return _Orderer(keys, deps, data, external, dep_sets, _index, _key_types).run()


# ---------------------------------------------------------------------------
# helpers used before the main algorithm
# ---------------------------------------------------------------------------


def csr_rows(ptr: Any, flat: Any, seq: Any = None, many_as: Any = None) -> list:
    """Every row ``flat[ptr[i]:ptr[i + 1]]`` of a CSR structure, as a list,
    made in C: numpy fills an object array per class of row length (most
    rows have one element: a 1-tuple made by ``zip``; empty rows share
    ``()``), then turns it into a list. ``ptr`` and ``flat`` are numpy
    arrays; rows of several elements are slices of ``seq`` (a list or an
    array; default ``flat.tolist()``), passed through ``many_as`` if given
    (e.g. ``tuple``)."""
    import numpy as np

    lens = np.diff(ptr)
    obj = np.empty(len(lens), dtype=object)

    def put(at: Any, rows: Any) -> None:
        obj[at] = np.fromiter(rows, dtype=object, count=at.size)

    # (each C call over at most a step of rows: slimgraph.runtime.steps)
    steps.each_step(np.flatnonzero(lens == 1), lambda at: put(at, zip(flat[ptr[at]].tolist())))
    steps.each_step(np.flatnonzero(lens == 0), lambda at: put(at, repeat((), at.size)))
    many = np.flatnonzero(lens > 1)
    if many.size:
        if seq is None:
            seq = steps.tolist(flat)

        def rows_of(at: Any) -> Any:
            rows = map(seq.__getitem__, map(slice, ptr[at].tolist(), ptr[at + 1].tolist()))
            return rows if many_as is None else map(many_as, rows)

        steps.each_step(many, lambda at: put(at, rows_of(at)))
    return steps.tolist(obj)


def _roots_of_private_tree(pdeps: Sequence, deps: Iterable[int]) -> frozenset:
    """Roots above a task whose ancestors each have exactly one dependent
    (a private in-tree, so no root is met twice): walk up from ``deps``."""
    out = []
    stack = list(deps)
    while stack:
        y = stack.pop()
        dy = pdeps[y]
        if dy:
            stack.extend(dy)
        else:
            out.append(y)
    return frozenset(out)


def _str_ties_possible(keys: Sequence, n_real: int, types: set | None = None) -> bool:
    """Whether two distinct keys may have the same ``str()``.

    dask's sort key ends with ``str(key)``; only if two keys share it can a
    comparison fall through to set iteration order, which we do not mirror in
    every place. ``str`` of a tuple of str/int/float is its repr, which is
    injective, and ``str`` of a str is itself; so collisions need a str key
    equal to ``str`` of a non-str key. We check exactly that, computing
    ``str`` only for the few keys that could collide. ``types``: the set of
    the keys' types, if the caller has it.
    """
    if types is None:
        types = set(map(type, keys))
    if types == {str} or types == {tuple}:
        return False
    strs = {k for k in keys if type(k) is str}
    if types <= {str, tuple} and not any(s[:1] == "(" for s in strs):
        return False
    other = [k for k in keys if type(k) is not str and type(k) is not tuple]
    probe = [str(k) for k in other]
    if len(set(probe)) < len(probe) or any(s in strs for s in probe):
        return True
    if tuple in types and any(s[:1] == "(" for s in strs):
        tuple_keys = [k for k in keys if type(k) is tuple]
        tstr = {str(k) for k in tuple_keys}
        if tstr & strs or len(tstr) < len(tuple_keys) or tstr & set(probe):
            return True
    return False


def _delegate_to_dask(keys, deps, data, external, dep_sets) -> list[int]:
    """Order with ``dask.order.order`` itself (keys with colliding ``str``).

    Rebuilds the graph the indexed form stands for and maps the result back.
    Slow, but exact; it is only used for pathological key sets.
    """
    from slimgraph.shim import DataNode, Task, TaskRef
    from slimgraph.shim.nodes import set_dependencies
    from dask.order import order as dask_order

    datas = set(data)
    n_real = len(keys) - external
    dsk = {}
    for i in range(n_real):
        k = keys[i]
        if i in datas:
            dsk[k] = DataNode(k, None)
        else:
            dsk[k] = Task(k, _noop, *[TaskRef(keys[j]) for j in deps[i]])
            if dep_sets is not None:
                # keep the original set object so its iteration order is used
                set_dependencies(dsk[k], dep_sets[i])
    res = dask_order(dsk)
    return [res.get(k, -1) if i < n_real else -1 for i, k in enumerate(keys)]


def _noop(*args: Any) -> None:
    """Stand-in callable for graphs rebuilt from the indexed form."""


def _set_order(keys: Sequence, members: Sequence[int]) -> list[int]:
    """Iteration order of ``{keys[j] for j in members}`` as indices.

    Building the set by inserting in the same order as dask did yields the
    same table layout and therefore the same iteration order.
    """
    m = {keys[j]: j for j in members}
    return [m[k] for k in {k for k in m}]


def _str_order_columns(mkeys: Sequence, np: Any) -> list | None:
    """Integer columns whose lexicographic order is that of ``str(k)``.

    Only for keys that are all flat tuples of at least two str, int or
    float elements (the keys of dask collections: ``(name, i, j)``, with
    floats from ``map_overlap``); None otherwise. The columns avoid
    building and comparing 40-character strings:

    - ``str`` of such a tuple is ``"(" + repr(e0) + ", " + repr(e1) + ...
      + ")"``. Each element ends in ``,`` or ``)``, which sort below every
      character that can follow a complete element's repr (digits, ``.``,
      ``e``; a str's repr ends in its quote and is never the start of
      another repr). So two keys compare like their tuples of element
      reprs, compared as strings, a missing element (the shorter tuple:
      ``)`` against ``,``) first. (One-element tuples print ``(x,)`` and
      would break this.)
    - One column per element: 0 if missing, else a code ordered like the
      element's repr: for ints computed with numpy (:func:`_decimal_order`),
      for other elements the rank of the repr among the column's distinct
      reprs (few: names, chunk coordinates).
    """
    m = len(mkeys)
    if steps.types_of(mkeys) != {tuple}:
        return None
    lens = steps.int_array(steps.list_map(len, mkeys), np)
    lo = int(lens.min())
    hi = int(lens.max())
    if lo < 2 or hi > 16:
        return None
    cols = []
    for j in range(hi):
        if j < lo:
            vals = steps.list_map(itemgetter(j), mkeys)
            where = None
        else:
            where = np.flatnonzero(lens > j)
            vals = steps.list_map(itemgetter(j), steps.list_map(mkeys.__getitem__, steps.tolist(where)))
        types = steps.types_of(vals)
        code = None
        if types == {int}:
            code = _decimal_order(vals, np)
        if code is None:
            if not types <= {int, float, str}:
                return None
            if types == {str}:
                # equal strs have equal reprs: rank the distinct ones
                distinct = sorted(steps.distinct(vals), key=repr)
                at = dict(zip(distinct, range(1, len(distinct) + 1)))
                code = steps.int_array(steps.list_map(at.__getitem__, vals), np)
            else:
                # floats (0.0 == -0.0, nan) and mixed types: by repr itself
                reprs = steps.list_map(repr, vals)
                distinct = sorted(steps.distinct(reprs))
                at = dict(zip(distinct, range(1, len(distinct) + 1)))
                code = steps.int_array(steps.list_map(at.__getitem__, reprs), np)
        if where is not None:
            full = np.zeros(m, dtype=np.int64)
            full[where] = code
            code = full
        cols.append(code)
    return cols


def _decimal_order(vals: list, np: Any) -> Any:
    """Codes >= 1 ordered like ``str(v)`` of the ints ``vals``, for a
    comparison that stops at a character below ``-`` and the digits (an
    element's end). None if an |int| reaches 10**17.

    ``-`` sorts before the digits, so negatives come first; among numbers
    of one sign the digit strings compare like the numbers left-aligned to
    a common width, the shorter first where those are equal ("1" < "10").
    """
    try:
        v = steps.int_array(vals, np)
    except OverflowError:
        return None
    limit = 10**17
    if int(v.max()) >= limit or int(v.min()) <= -limit:
        return None
    neg = v < 0
    a = np.abs(v)
    length = np.ones(a.size, dtype=np.int64)
    width = 1
    p = 10
    while True:
        longer = a >= p
        if not longer.any():
            break
        length += longer
        width += 1
        p *= 10
    pow10 = 10 ** np.arange(width + 1, dtype=np.int64)
    aligned = a * pow10[width - length]
    return ((~neg) * pow10[width] + aligned) * (width + 1) + length


# ---------------------------------------------------------------------------
# the algorithm
# ---------------------------------------------------------------------------


class _Orderer:
    """One ordering run. Holds the integer graph and per-task statistics.

    A class only to group the phases into methods; all hot loops copy what
    they use into local variables.
    """

    def __init__(self, keys, deps, data, external, dep_sets, index, key_types=None):
        self.keys = keys
        self.deps = deps
        self.n = n = len(keys)
        self.external = external
        self.dep_sets = dep_sets
        self.index = index
        is_data = bytearray(n)
        data = list(data)
        for j in data:
            is_data[j] = 1
        self.is_data = is_data
        self.data_idx = data
        self.key_types = key_types  # set of the keys' types, if known
        self.dep1 = None  # set by stats_numpy
        self.csr = None  # edge arrays of deps, see edge_arrays
        self.lor_np = None

    # -- dependency sets exactly as dask sees them ---------------------------

    def orig_set(self, i):
        """The dependency set object of task ``i`` before any removal.

        The real one if given; else the one a ``Task`` would build: a set
        filled in argument order, then frozen.
        """
        if self.dep_sets is not None:
            return self.dep_sets[i]
        d = self.deps[i]
        if not d:
            return _NO_DEPS
        keys = self.keys
        return frozenset({keys[j] for j in d})

    def cur_set(self, i):
        """``dependencies[i]`` as dask's DependenciesMapping returns it after
        the clean-up: the original set minus every removed key (a new set,
        whose layout depends on the removed set's size, hence the real set)."""
        s = self.orig_set(i)
        removed = self.removed_keys
        if removed:
            if type(s) is _LegacyDeps:
                s = set([k for k in s.found if k not in removed])
            return s - removed
        return s

    # -- phase 1: clean-up -----------------------------------------------------

    def build_dependents(self):
        """Dependents of every task, in graph (= index) order, as dask's
        ``reverse_dict`` inserts them (tuples or lists; read only)."""
        n = self.n
        if n >= NUMPY_MIN_TASKS:
            dependents = self.dependents_numpy()
            self.dependents_full = dependents
            return dependents
        dependents = [[] for _ in range(n)]
        for i, d in enumerate(self.deps):
            if d:
                if len(d) == 1:
                    dependents[d[0]].append(i)
                else:
                    for j in d:
                        dependents[j].append(i)
        self.dependents_full = dependents
        return dependents

    def dependents_numpy(self):
        """:meth:`build_dependents` from the edge arrays: one object array
        filled per out-degree class, then turned into a list in C (most
        tasks have one dependent: a 1-tuple made by ``zip``)."""
        import numpy as np

        lens, flat, tgt, dptr, outdeg = self.edge_arrays(self.deps)
        self.csr = (lens, flat, tgt, dptr, outdeg)
        return csr_rows(dptr, tgt)

    def edge_arrays(self, pdeps):
        """Edges as arrays: ``lens[i]`` dependencies of ``i``, listed in
        ``flat`` (CSR, by task); ``tgt`` the dependents grouped by
        dependency (graph order within a group), ``dptr`` their offsets,
        ``outdeg`` their numbers."""
        import numpy as np

        n = self.n
        i64 = np.int64
        # (a step of rows at a time: one fromiter over a million rows holds
        # the GIL, slimgraph.runtime.steps)
        lens_parts: list = []
        flat_parts: list = []

        def take(part: Sequence) -> None:
            lp = np.fromiter(map(len, part), dtype=i64, count=len(part))
            lens_parts.append(lp)
            flat_parts.append(np.fromiter(chain.from_iterable(part), dtype=i64, count=int(lp.sum())))

        steps.each_step(pdeps, take)
        lens = np.concatenate(lens_parts)
        flat = np.concatenate(flat_parts)
        src = np.repeat(np.arange(n, dtype=i64), lens)
        eorder = np.argsort(flat, kind="stable")
        tgt = src[eorder]  # dependents, grouped by dependency
        outdeg = np.bincount(flat, minlength=n).astype(i64)
        dptr = np.zeros(n + 1, dtype=i64)
        np.cumsum(outdeg, out=dptr[1:])
        return lens, flat, tgt, dptr, outdeg

    def strip_data_nodes(self):
        """Remove data roots with several dependents and non-task leaves with
        several dependencies, as dask does before ordering.

        Returns True if anything was removed. The iteration order of dask's
        leaf and root sets decides which removed leaf gets which priority and
        the order in which the data roots of a task are emitted, so those sets
        are mirrored with real Python sets built in the same way.
        """
        n = self.n
        deps = self.deps
        dependents = self.dependents_full
        is_data = self.is_data
        self.removed_keys = set()
        self.requires = {}
        self.removed_leaf_prio = []
        self.root_set = None
        cand_leaf = cand_root = False
        for j in self.data_idx:
            if not deps[j]:
                if len(dependents[j]) > 1:
                    cand_root = True
            elif not dependents[j] and len(set(deps[j])) > 1:
                cand_leaf = True
        if not (cand_leaf or cand_root):
            return False

        keys = self.keys
        index = self.index
        if index is None:
            index = self.index = {k: i for i, k in enumerate(keys)}
        indeg = [len(set(d)) for d in deps]
        outdeg = [len(d) for d in dependents]
        alive = bytearray(b"\x01") * n
        removed_keys = self.removed_keys
        leaf_set = {keys[j] for j in range(n) if not outdeg[j]}
        root_set = {keys[j] for j in range(n) if not indeg[j]}
        requires: dict = {}
        cur_len = n
        n_removed_leaves = 0
        all_tasks = False
        while not all_tasks:
            all_tasks = True
            for key in list(leaf_set):
                if key in root_set:
                    continue
                x = index[key]
                if is_data[x] and indeg[x] > 1:
                    all_tasks = False
                    self.removed_leaf_prio.append((x, cur_len - 1 - n_removed_leaves))
                    n_removed_leaves += 1
                    leaf_set.discard(key)
                    for dkey in self.cur_set(x):
                        d = index[dkey]
                        outdeg[d] -= 1
                        if not outdeg[d]:
                            leaf_set.add(dkey)
                    cur_len -= 1
                    alive[x] = 0
                    removed_keys.add(key)
            for key in list(root_set):
                if key in leaf_set:
                    continue
                r = index[key]
                if is_data[r] and outdeg[r] > 1:
                    cur_len -= 1
                    alive[r] = 0
                    removed_keys.add(key)
                    root_set.discard(key)
                    for d in _set_order(keys, dependents[r]):
                        if not alive[d]:
                            continue
                        requires.setdefault(d, []).append(r)
                        indeg[d] -= 1
                        if not indeg[d]:
                            root_set.add(keys[d])
        for d, lst in requires.items():
            if len(lst) > 1:
                requires[d] = _set_order(keys, lst)
        self.requires = requires
        self.alive = alive
        self.root_set = root_set
        self.leaf_set = leaf_set
        return True

    # -- phase 2: statistics ---------------------------------------------------

    def topo_and_stats(self, pdeps, pdependents, alive_nodes):
        """Topological order plus the numeric part of dask's sort key.

        ``total`` is 1 + the sum over dependencies (with multiplicity, as
        dask counts it), ``maxdep`` the largest fan-out of any root above.
        The number of distinct roots above a task is a sum where the roots'
        subtrees cannot overlap (every task above has one dependent) and a
        set union elsewhere; sets are built lazily and shared.
        """
        n = self.n
        nneed = [len(d) for d in pdeps]
        topo = [i for i in alive_nodes if not nneed[i]]
        append = topo.append
        pos = 0
        while pos < len(topo):
            x = topo[pos]
            pos += 1
            for y in pdependents[x]:
                c = nneed[y] - 1
                nneed[y] = c
                if not c:
                    append(y)
        if len(topo) != len(alive_nodes):
            self.raise_cycle(pdeps, set(topo), alive_nodes)

        total = [0] * n
        maxdep = [0] * n
        cnt = [0] * n  # distinct roots above, roots count themselves
        priv = bytearray(n)  # all proper ancestors have exactly one dependent
        rset: list = [None] * n  # materialised root sets (lazily)

        def roots_of(c):
            """Set of root indices above ``c`` (``c`` itself if a root)."""
            s = rset[c]
            if s is not None:
                return s
            if not pdeps[c]:
                s = rset[c] = frozenset((c,))
                return s
            if priv[c]:
                s = rset[c] = _roots_of_private_tree(pdeps, pdeps[c])
                return s
            raise AssertionError("root set not materialised")  # pragma: no cover

        for x in topo:
            d = pdeps[x]
            if not d:
                total[x] = 1
                maxdep[x] = len(pdependents[x])
                cnt[x] = 1
                priv[x] = 1
                continue
            if len(d) == 1:
                c = d[0]
                total[x] = total[c] + 1
                maxdep[x] = maxdep[c]
                cnt[x] = cnt[c]
                if priv[c] and len(pdependents[c]) == 1:
                    priv[x] = 1
                elif not priv[c]:
                    rset[x] = rset[c]
                else:
                    # c is private but shared by several dependents
                    rset[x] = roots_of(c)
                continue
            t = 1
            m = 0
            p = 1
            for c in d:
                t += total[c]
                if maxdep[c] > m:
                    m = maxdep[c]
                if p and not (priv[c] and len(pdependents[c]) == 1):
                    p = 0
            total[x] = t
            maxdep[x] = m
            if p:
                priv[x] = 1
                s = 0
                for c in d:
                    s += cnt[c]
                cnt[x] = s
                continue
            rs = _union_of_distinct([roots_of(c) for c in d])
            rset[x] = rs
            cnt[x] = len(rs)
        self.topo = topo
        self.total = total
        self.maxdep = maxdep
        self.cnt = cnt

    def stats_python(self, pdeps, pdependents, alive_nodes):
        """All per-task statistics the main loop needs, in plain Python
        (graphs below :data:`NUMPY_MIN_TASKS` tasks, and graphs too deep for
        :meth:`stats_numpy`: a chain of a million tasks is a million levels,
        each a handful of numpy calls)."""
        n = self.n
        self.topo_and_stats(pdeps, pdependents, alive_nodes)
        lset = self.leaf_sets(self.topo, pdependents)
        total, maxdep, cnt = self.total, self.maxdep, self.cnt
        del self.topo, self.total, self.maxdep, self.cnt
        is_root = bytearray(n)
        is_leaf = bytearray(n)
        for i in alive_nodes:
            if not pdeps[i]:
                is_root[i] = 1
            if not pdependents[i]:
                is_leaf[i] = 1
        roots = [i for i in alive_nodes if is_root[i]]
        leaves = [i for i in alive_nodes if is_leaf[i]]
        nrank = self.numeric_rank(alive_nodes, total, pdeps, cnt, maxdep, is_root)
        # -1: no leaves below; >= 0: the one leaf below; <= -2: the set
        # multi[-2 - code] of leaves below
        leafs_of_root: list = [-1] * n
        multi: list = []
        first_of: dict = {}  # one code per set object
        for r in roots:
            if not is_leaf[r]:
                s = lset[r]
                if type(s) is int:
                    leafs_of_root[r] = s
                else:
                    c = first_of.get(id(s))
                    if c is None:
                        c = first_of[id(s)] = len(multi)
                        multi.append(s)
                    leafs_of_root[r] = -2 - c
        leaf_degree = [cnt[x] for x in leaves]
        return nrank, is_root, is_leaf, roots, leaves, leafs_of_root, multi, leaf_degree

    def stats_numpy(self, pdeps, pdependents, alive):
        """The statistics of :meth:`stats_python`, level by level in numpy.

        Kahn's algorithm runs one topological level per step, so each step
        is a handful of array operations; the sums and maxima over
        dependencies are ``reduceat``s over the level's edges. Only tasks
        whose ancestors overlap (several dependencies, some ancestor with
        several dependents) need real root sets, built in Python as in
        :meth:`topo_and_stats`. Leaf sets go the other way: a task with one
        dependent shares that dependent's set (found by pointer jumping), so
        only splitters need unions. Returns None for graphs so deep that the
        per-level overhead would dominate.

        It moves issue #13's update_graph target (array >= 8x stock's; 8.8x
        in the latest runs, met in 6 of the last 10). ``bench --workload
        array --tasks 1000000 --only slim``: the order phase's CPU 2.0 and
        2.4 s with it, 2.8 and 3.2 s with :meth:`stats_python` only, +0.8 s
        on an update_graph of about 13 s (8.8x would be about 8.3x); the
        delayed tree 1.0 and 1.0 s against 1.5 s.
        """
        import numpy as np

        n = self.n
        i64 = np.int64
        if pdeps is self.deps and self.csr is not None:
            lens, flat, tgt, dptr, outdeg = self.csr
        else:
            lens, flat, tgt, dptr, outdeg = self.edge_arrays(pdeps)
        self.csr = None
        ne = flat.size
        ptr = np.zeros(n + 1, dtype=i64)
        np.cumsum(lens, out=ptr[1:])
        if alive is None:
            alive_np = np.ones(n, dtype=bool)
        else:
            alive_np = np.frombuffer(alive, dtype=np.uint8).astype(bool)
        n_alive = int(alive_np.sum())
        root_mask = (lens == 0) & alive_np
        frontier = np.flatnonzero(root_mask)
        indeg = lens.copy()
        levels = [frontier]
        done = frontier.size
        max_levels = 64 + n // 256

        def edges_of(nodes, starts_arr, counts_arr):
            """Indices of the CSR edges of ``nodes`` and each node's offset
            into them (the segment starts ``reduceat`` needs)."""
            c = counts_arr[nodes]
            tot = int(c.sum())
            offs = np.cumsum(c) - c
            e = np.repeat(starts_arr[nodes] - offs, c) + np.arange(tot, dtype=i64)
            return e, offs

        while True:
            e, _ = edges_of(frontier, dptr, outdeg)
            if not e.size:
                break
            if e.size * 8 > n:
                # a big level: counting beats sorting
                cc = np.bincount(tgt[e], minlength=n)
                u = np.flatnonzero(cc)
                cc = cc[u]
            else:
                u, cc = np.unique(tgt[e], return_counts=True)
            indeg[u] -= cc
            frontier = u[indeg[u] == 0]
            if not frontier.size:
                break
            levels.append(frontier)
            done += frontier.size
            if len(levels) > max_levels:
                return None
        if done != n_alive:
            alive_nodes = np.flatnonzero(alive_np).tolist()
            topo = set(np.concatenate(levels).tolist())
            self.raise_cycle(pdeps, topo, alive_nodes)

        total = np.zeros(n, dtype=i64)
        totf = np.zeros(n, dtype=np.float64)
        maxdep = np.zeros(n, dtype=i64)
        cnt = np.zeros(n, dtype=i64)
        priv = np.zeros(n, dtype=bool)
        r0 = levels[0]
        total[r0] = 1
        totf[r0] = 1.0
        maxdep[r0] = outdeg[r0]
        cnt[r0] = 1
        priv[r0] = True
        single_out = outdeg == 1
        rset: dict = {}
        rget = rset.get

        def roots_of(c):
            """Set of root indices above ``c`` (``c`` itself if a root)."""
            chain_ = []
            while True:
                s = rset.get(c)
                if s is not None:
                    break
                d = pdeps[c]
                if not d:
                    s = frozenset((c,))
                    break
                if priv[c]:
                    s = _roots_of_private_tree(pdeps, d)
                    break
                # a single dependency without a private tree: same set
                chain_.append(c)
                c = d[0]
            rset[c] = s
            for x in chain_:
                rset[x] = s
            return s

        for lev in levels[1:]:
            e, offs = edges_of(lev, ptr, lens)
            ch = flat[e]
            total[lev] = np.add.reduceat(total[ch], offs) + 1
            totf[lev] = np.add.reduceat(totf[ch], offs) + 1.0
            maxdep[lev] = np.maximum.reduceat(maxdep[ch], offs)
            ok = priv[ch] & single_out[ch]
            pv = np.logical_and.reduceat(ok, offs)
            priv[lev] = pv
            cnt[lev] = np.add.reduceat(cnt[ch], offs)
            hard = lev[~pv & (lens[lev] > 1)]
            if hard.size:
                for x in hard.tolist():
                    found = []
                    for c in pdeps[x]:
                        s = rget(c)
                        found.append(roots_of(c) if s is None else s)
                    rs = _union_of_distinct(found)
                    rset[x] = rs
                    cnt[x] = len(rs)
        del rset

        # numeric sort key
        nr = cnt.copy()
        nr[root_mask] = 0
        if float(totf.max()) < 2.0**62:
            b1 = int(lens.max()) + 1
            b2 = int(nr.max()) + 1
            b3 = int(maxdep.max()) + 1
            if (int(total.max()) + 1) * b1 * b2 * b3 < 2**62:
                nrank = ((total * b1 + lens) * b2 + nr) * b3 + (b3 - 1 - maxdep)
            else:
                idx = np.lexsort((-maxdep, nr, lens, total))
                k = np.stack([total, lens, nr, maxdep])[:, idx]
                newgrp = np.empty(n, dtype=bool)
                newgrp[0] = True
                newgrp[1:] = (k[:, 1:] != k[:, :-1]).any(axis=0)
                nrank = np.empty(n, dtype=i64)
                nrank[idx] = np.cumsum(newgrp)
        else:
            # totals beyond int64: recompute them exactly in Python
            tot_py = [0] * n
            for lev in levels:
                for x in lev.tolist():
                    d = pdeps[x]
                    t = 1
                    for c in d:
                        t += tot_py[c]
                    tot_py[x] = t
            alive_nodes = np.flatnonzero(alive_np).tolist()
            is_root_b = bytearray(root_mask.astype(np.uint8).tobytes())
            nrank = self.numeric_rank(
                alive_nodes, tot_py, pdeps, cnt.tolist(), maxdep.tolist(), is_root_b
            )

        leaf_mask = (outdeg == 0) & alive_np
        is_root = bytearray(root_mask.astype(np.uint8).tobytes())
        is_leaf = bytearray(leaf_mask.astype(np.uint8).tobytes())
        roots = np.flatnonzero(root_mask).tolist()
        leaves = np.flatnonzero(leaf_mask).tolist()

        # leaf sets: share along single dependents, unite at splitters
        rep = np.arange(n, dtype=i64)
        rep[single_out] = tgt[dptr[:-1][single_out]]
        while True:
            r2 = rep[rep]
            if np.array_equal(r2, rep):
                break
            rep = r2
        splitters = outdeg > 1
        lsets: dict = {}
        if splitters.any():
            order_all = np.concatenate(levels)
            sp = order_all[splitters[order_all]][::-1].tolist()
            repl = rep.tolist()
            for x in sp:
                ds = pdependents[x]
                parts = []
                seen = set()
                for y in ds:
                    ry = repl[y]
                    s = lsets.get(ry)
                    if s is None:
                        s = (ry,)  # a leaf
                    if id(s) not in seen:
                        seen.add(id(s))
                        parts.append(s)
                if len(parts) == 1:
                    lsets[x] = parts[0]
                else:
                    acc = set()
                    for s in parts:
                        acc.update(s)
                    lsets[x] = acc
        # -1: no leaves below; >= 0: the one leaf below; <= -2: the set
        # multi[-2 - code] of leaves below (roots above a splitter)
        lor = np.full(n, -1, dtype=i64)
        m = root_mask & ~leaf_mask
        lor[m] = rep[m]
        multi: list = []
        if lsets:
            shared = m & splitters[rep]
            sp_of = lor[shared]
            uniq, inv = np.unique(sp_of, return_inverse=True)
            # splitters often share one set object: one code per object
            first_of: dict = {}
            code_of = []
            for x in uniq.tolist():
                st = lsets[x]
                c = first_of.get(id(st))
                if c is None:
                    c = first_of[id(st)] = len(multi)
                    multi.append(st)
                code_of.append(c)
            lor[shared] = -2 - np.asarray(code_of, dtype=i64)[inv.reshape(-1)]
        leafs_of_root = lor.tolist()
        self.lor_np = lor
        leaf_degree = cnt[leaf_mask].tolist()
        # the one dependent of each task that has exactly one, else -1
        one = np.full(n, -1, dtype=i64)
        if ne:
            single = np.flatnonzero(single_out)
            one[single] = tgt[dptr[single]]
        self.dep1 = array("q", one.tobytes())
        return nrank, is_root, is_leaf, roots, leaves, leafs_of_root, multi, leaf_degree

    def raise_cycle(self, pdeps, done, alive_nodes):
        """Find one cycle among the tasks Kahn's algorithm could not order
        and raise :class:`CycleError` naming its keys in cycle order."""
        keys = self.keys
        stuck = [i for i in alive_nodes if i not in done]
        stuck_set = set(stuck)
        x = stuck[0]
        seen: dict = {}
        path = []
        while x not in seen:
            seen[x] = len(path)
            path.append(x)
            x = next(j for j in pdeps[x] if j in stuck_set)
        cyc = path[seen[x]:]
        cyc.reverse()  # walk order along dependencies -> run order
        raise CycleError([keys[i] for i in cyc] + [keys[cyc[0]]])

    def leaf_sets(self, topo, pdependents):
        """For every root, the leaves below it (dask's ``leafs_connected``).

        Walks the graph from the leaves up; a task with one dependent shares
        that dependent's leaf set object, others take the union. A lone leaf
        is represented by its index until a union needs a real set.
        """
        n = self.n
        lset: list = [None] * n
        for x in reversed(topo):
            ds = pdependents[x]
            if not ds:
                lset[x] = x
            elif len(ds) == 1:
                lset[x] = lset[ds[0]]
            else:
                first = lset[ds[0]]
                same = True
                for y in ds:
                    if lset[y] is not first:
                        same = False
                        break
                if same:
                    lset[x] = first
                    continue
                acc = set()
                for y in ds:
                    s = lset[y]
                    if type(s) is int:
                        acc.add(s)
                    else:
                        acc |= s
                lset[x] = acc
        return lset

    # -- phase 3/4/5 -----------------------------------------------------------

    def run(self) -> list[int]:
        """Clean up, compute statistics, then walk critical paths."""
        keys = self.keys
        n = self.n
        deps = self.deps
        dependents_full = self.build_dependents()
        stripped = self.strip_data_nodes()
        prio = [-1] * n
        inres = bytearray(n)
        nres = 0
        requires = self.requires
        if stripped:
            alive = self.alive
            for x, p in self.removed_leaf_prio:
                prio[x] = p
                inres[x] = 1
                nres += 1
            # removed tasks take no part in the statistics
            pdeps = [
                ()
                if not alive[x]
                else d
                if not d or all(alive[j] for j in d)
                else tuple(j for j in d if alive[j])
                for x, d in enumerate(deps)
            ]
            pdependents = [
                ds if all(alive[j] for j in ds) else [j for j in ds if alive[j]]
                for ds in dependents_full
            ]
            alive_nodes = [i for i in range(n) if alive[i]]
        else:
            pdeps = deps
            pdependents = dependents_full
            alive_nodes = range(n)
            alive = None
        st = None
        if n >= NUMPY_MIN_TASKS:
            st = self.stats_numpy(pdeps, pdependents, alive)
        if st is None:
            st = self.stats_python(pdeps, pdependents, alive_nodes)
        nrank, is_root, is_leaf, roots, leaves, leafs_of_root, multi, leaf_degree = st
        del st
        dep1 = self.dep1
        if dep1 is None:
            dep1 = array("q", [ds[0] if len(ds) == 1 else -1 for ds in pdependents])
        lor_np = self.lor_np
        # dask's whole sort key (numeric part, then str(key)) as one integer
        # per task where that is cheap (see full_rank); else str(key) is
        # looked at lazily, only where numeric keys tie.
        rank = None
        if n >= NUMPY_MIN_TASKS:
            rank = self.full_rank(nrank, alive_nodes if alive is not None else None)
        if rank is not None:
            del nrank
            skey = rank.__getitem__
            smax = partial(max, key=skey)
            ssorted = partial(sorted, key=skey)
        else:
            if type(nrank) is not list:
                nrank = nrank.tolist()
            tk: list = [None] * n  # (numeric rank, str(key)), filled lazily

            def skey(x):
                """dask's sort key, with the numeric part pre-ranked."""
                t = tk[x]
                if t is None:
                    t = tk[x] = (nrank[x], str(keys[x]))
                return t

            def smax(items):
                """max by dask's sort key."""
                best = -1
                bv = -1
                tie = False
                for x in items:
                    v = nrank[x]
                    if v > bv:
                        best = x
                        bv = v
                        tie = False
                    elif v == bv:
                        tie = True
                if tie:
                    return max([x for x in items if nrank[x] == bv], key=skey)
                return best

            def ssorted(items):
                """sorted by dask's sort key."""
                if len(items) < 2:
                    return list(items)
                r = [nrank[x] for x in items]
                if len(set(r)) == len(r):
                    return sorted(items, key=nrank.__getitem__)
                for x in items:
                    if tk[x] is None:
                        tk[x] = (nrank[x], str(keys[x]))
                return sorted(items, key=tk.__getitem__)

        # symmetric / reduction test -> direction of the static leaf list
        longest_path = self.use_longest_path(roots, leaves, leafs_of_root, multi)
        leaves_sorted = sorted(leaves, key=skey)
        leafrank = {}
        for r, x in enumerate(leaves_sorted):
            leafrank[x] = r
        leaf_stack = leaves_sorted.copy() if longest_path else leaves_sorted[::-1]

        # leaf degrees: number of roots above a leaf not yet run
        deg = [0] * n
        bcount: dict = {}
        heap_all: dict = {}
        heap_reach: dict = {}
        maxd = len(alive_nodes)
        min_deg = maxd
        n_in_buckets = 0
        for x, d in zip(leaves, leaf_degree):
            if is_root[x]:
                continue
            deg[x] = d
            bcount[d] = bcount.get(d, 0) + 1
            n_in_buckets += 1
            if d < min_deg:
                min_deg = d
            heap_all.setdefault(d, []).append(leafrank[x])
        for h in heap_all.values():
            h.sort()
        nn = list(map(len, pdeps))
        rhull = bytearray(n)
        reach = bytearray(n)
        n_ext = self.external
        runnable: list = []
        krp: dict = {}
        # the tasks in the order they are run, external keys and stripped
        # data roots included; ``len(result) + base`` (the removed leaves)
        # is len(result) in dask. Priorities are given at the end; external
        # keys do not consume one.
        result: list = []
        result_append = result.append
        base = nres
        nreach = 0
        in_buckets = n_in_buckets
        expected = n - base

        def set_order_runnable(x, newly):
            """Order in which dask iterates ``dependents[x]`` restricted to
            the newly runnable ones."""
            ns = set(newly)
            return [j for j in _set_order(keys, dependents_full[x]) if j in ns]

        def add_data_root(r):
            """Emit a removed data root right before the task needing it
            (after the data roots it needs itself, in legacy graphs)."""
            if inres[r]:
                return
            if r in requires:
                for r2 in requires.pop(r):
                    add_data_root(r2)
            result_append(r)
            inres[r] = 1

        def add_to_result(x):
            """Give ``x`` the next priority, follow single dependents
            eagerly and queue other newly runnable dependents."""
            nonlocal nreach
            while True:
                rhull[x] = 0
                if reach[x]:
                    reach[x] = 0
                    nreach -= 1
                if inres[x]:
                    return
                if requires and x in requires:
                    for r in requires.pop(x):
                        add_data_root(r)
                result_append(x)
                inres[x] = 1
                y = dep1[x]
                if y >= 0:
                    c = nn[y] - 1
                    nn[y] = c
                    if not reach[y]:
                        reach[y] = 1
                        nreach += 1
                        if is_leaf[y]:
                            reached_leaves_append(y)
                    if c:
                        return
                    x = y
                    continue
                ds = pdependents[x]
                if not ds:
                    return
                newly = []
                for y in ds:
                    c = nn[y] - 1
                    nn[y] = c
                    if not reach[y]:
                        reach[y] = 1
                        nreach += 1
                        if is_leaf[y]:
                            reached_leaves_append(y)
                    if not c:
                        newly.append(y)
                if newly:
                    if len(newly) > 1:
                        newly = set_order_runnable(x, newly)
                    runnable.extend(newly)
                return

        def process_runnables():
            """Follow runnable tasks forward to reducers or leaves, caching
            paths into reducers until enough are known (see module doc)."""
            while runnable:
                cands = runnable.copy()
                runnable.clear()
                while cands:
                    key = cands.pop()
                    if rhull[key] or inres[key]:
                        continue
                    if is_leaf[key]:
                        add_to_result(key)
                        continue
                    branches = None
                    nsplits = 0
                    path = [key]
                    while True:
                        while True:
                            cur = path[-1]
                            rhull[cur] = 1
                            down = pdependents[cur]
                            if not down:
                                if nn[cur] <= 1:
                                    for k in path:
                                        add_to_result(k)
                                else:
                                    rhull[cur] = 0
                            elif len(path) == 1 or len(pdeps[cur]) == 1:
                                if len(down) > 1:
                                    nsplits += 1
                                    if branches is None:
                                        branches = deque()
                                    for d in ssorted(down):
                                        if len(pdeps[d]) == 1:
                                            branches.append((nsplits, path + [d]))
                                    break
                                path.append(down[0])
                                continue
                            elif cur in krp:
                                known = krp[cur]
                                known.append(path)
                                rhull[cur] = 0
                                need = nn[cur]
                                if len(known) >= need:
                                    del krp[cur]
                                    pruned = deque([p for p in known if not inres[p[-2]]])
                                    if len(pruned) < need:
                                        krp[cur] = list(pruned)
                                    else:
                                        if nsplits > 1:
                                            merged = []
                                            for p in pruned:
                                                merged.extend(p)
                                            if branches is None:
                                                branches = deque()
                                            branches.append((nsplits - 1, merged))
                                            break
                                        while pruned:
                                            p = pruned.popleft()
                                            for k in p:
                                                if nn[k]:
                                                    pruned.append(p)
                                                    break
                                                add_to_result(k)
                            elif len(pdeps[cur]) > 1 and nn[cur] <= 1:
                                for k in path:
                                    add_to_result(k)
                            else:
                                krp[cur] = [path]
                                rhull[cur] = 0
                            break
                        if not branches:
                            break
                        nsplits, path = branches.popleft()

        def pending_in_set_order(item):
            """``dependencies[item].difference(result)`` in dask's iteration
            order, as indices."""
            d = pdeps[item]
            pend = [j for j in d if not inres[j]]
            if len(pend) <= 1:
                return pend
            s = self.cur_set(item)
            if (len(s) >> 2) > len(result) + base:
                # CPython copies the set and discards the done keys
                res = s.difference([keys[j] for j in d if inres[j]])
                m = {keys[j]: j for j in pend}
                return [m[k] for k in res]
            # CPython builds a fresh set in the set's iteration order
            m = {keys[j]: j for j in d}
            res = {k for k in s if not inres[m[k]]}
            return [m[k] for k in res]

        # Leaf degrees are read only when a target is chosen, while a root
        # runs for nearly every task: running a root only notes its leaves
        # (code as in ``leafs_of_root``), and newly reached leaves are noted;
        # both are applied here, once per leaf, before a choice needs them.
        # Entries of heap_all[d] / heap_reach[d] are leaf ranks, valid while
        # the leaf's degree is still d (degrees only go down).
        reached_leaves: list = []
        reached_leaves_append = reached_leaves.append
        applied = 0  # result[:applied] has been accounted for

        def apply_degrees():
            nonlocal min_deg, in_buckets, applied
            if len(result) > applied:
                dec = ran_roots_since(applied)
                applied = len(result)
            else:
                dec = None
            if dec:
                if multi:
                    for code in [c for c in dec if c < -1]:
                        times = dec.pop(code)
                        for leaf in multi[-2 - code]:
                            dec[leaf] = dec.get(leaf, 0) + times
                md = min_deg
                for leaf, times in dec.items():
                    d = deg[leaf]
                    bcount[d] -= 1
                    d1 = d - times
                    deg[leaf] = d1
                    if d1:
                        bcount[d1] = bcount.get(d1, 0) + 1
                        rk = leafrank[leaf]
                        h = heap_all.get(d1)
                        if h is None:
                            heap_all[d1] = [rk]
                        else:
                            heappush(h, rk)
                        if reach[leaf]:
                            h = heap_reach.get(d1)
                            if h is None:
                                heap_reach[d1] = [rk]
                            else:
                                heappush(h, rk)
                        if d1 < md:
                            md = d1
                    else:
                        in_buckets -= 1
                if not in_buckets:
                    md = maxd
                elif not bcount.get(md):
                    # buckets below md are empty: find the lowest filled one
                    for _ in range(64):
                        md += 1
                        if bcount.get(md):
                            break
                    else:
                        md = min([b for b, c in bcount.items() if c])
                min_deg = md
            if reached_leaves:
                for y in reached_leaves:
                    d = deg[y]
                    if d and reach[y]:
                        heappush(heap_reach.setdefault(d, []), leafrank[y])
                reached_leaves.clear()

        def ran_roots_since(start):
            """Leaf code (as in ``leafs_of_root``) -> number of roots among
            ``result[start:]`` with that code."""
            chunk = result[start:]
            if lor_np is not None and len(chunk) > 512:
                import numpy as np

                codes = lor_np[np.asarray(chunk, dtype=np.int64)]
                codes = codes[codes != -1]
                u, c = np.unique(codes, return_counts=True)
                return dict(zip(u.tolist(), c.tolist()))
            dec = Counter(map(leafs_of_root.__getitem__, chunk))
            dec.pop(-1, None)
            return dec

        def get_target():
            """Next leaf to aim the critical path at (see module doc)."""
            if nreach:
                apply_degrees()
            if nreach and min_deg != maxd:
                md = min_deg
                h = heap_reach.get(md)
                while h:
                    x = leaves_sorted[h[0]]
                    if deg[x] == md:
                        return x
                    heappop(h)
                h = heap_all[md]
                while True:
                    x = leaves_sorted[h[0]]
                    if deg[x] == md:
                        return x
                    heappop(h)
            while True:
                x = leaf_stack.pop()
                if not inres[x]:
                    return x

        cp: list = []
        pop = cp.pop
        push = cp.append
        extend = cp.extend
        while len(result) < expected:
            target = get_target()
            push(target)
            d = pdeps[target]
            if d:
                item = smax(d)
                push(item)
                while True:
                    nxt = pending_in_set_order(item)
                    if not nxt:
                        break
                    extend(nxt)
                    item = smax(nxt) if len(nxt) > 1 else nxt[0]
                    push(item)
            walked_back = False
            while cp:
                item = pop()
                if inres[item]:
                    continue
                if nn[item]:
                    push(item)
                    d = pdeps[item]
                    if len(d) == 1:
                        j = d[0]
                        if j in krp:
                            for p in krp.pop(j):
                                extend(reversed(p))
                            continue
                        push(j)
                        # Walking back up a chain: popping ``j`` next would
                        # push it back with its single dependency; do that
                        # directly (the stack ends up exactly the same).
                        while nn[j]:
                            dj = pdeps[j]
                            if len(dj) != 1:
                                break
                            k = dj[0]
                            if k in krp:
                                break
                            push(k)
                            j = k
                        continue
                    if nn[item] == len(d):
                        # nothing of ``d`` has run (nn counts what has not)
                        pend = ssorted(d)
                    else:
                        pend = [j for j in d if not inres[j]]
                        if len(pend) > 1:
                            pend = ssorted(pend)
                    if not krp:
                        if len(pend) > 1:
                            walked_back = True
                        extend(pend)
                        continue
                    unknown = [j for j in pend if j not in krp]
                    if len(unknown) > 1:
                        walked_back = True
                    extend(unknown)
                    if len(unknown) != len(pend):
                        for j in pend:
                            if j in krp:
                                for p in krp.pop(j):
                                    extend(reversed(p))
                    continue
                if walked_back and runnable and len(runnable) < len(cp):
                    process_runnables()
                add_to_result(item)
            if runnable:
                process_runnables()
        if n_ext:
            # external keys take no priority of their own
            result = [x for x in result if x < n - n_ext]
        if n >= NUMPY_MIN_TASKS:
            import numpy as np

            p = steps.int_array(prio, np)
            p[steps.int_array(result, np)] = np.arange(len(result), dtype=np.int64)
            prio = steps.tolist(p)
        else:
            for k, x in enumerate(result):
                prio[x] = k
        return prio

    def numeric_rank(self, alive_nodes, total, pdeps, cnt, maxdep, is_root):
        """Dense rank of (total, #deps, #roots above, -max fan-out).

        Equal numeric keys get equal ranks; ``str(key)`` breaks those ties
        lazily, only where a comparison needs it. When the numbers are small
        enough one packed integer orders exactly like the tuple.
        """
        n = self.n
        import numpy as np

        try:
            t = np.array(total, dtype=np.int64)
        except OverflowError:
            t = None
        if t is not None:
            nd = np.fromiter(map(len, pdeps), dtype=np.int64, count=n)
            nr = np.array(cnt, dtype=np.int64)
            nr[np.frombuffer(is_root, dtype=np.uint8).astype(bool)] = 0
            md = np.array(maxdep, dtype=np.int64)
            b1 = int(nd.max()) + 1
            b2 = int(nr.max()) + 1
            b3 = int(md.max()) + 1
            if (int(t.max()) + 1) * b1 * b2 * b3 < 2**62:
                # one integer orders exactly like the tuple
                key = ((t * b1 + nd) * b2 + nr) * b3 + (b3 - 1 - md)
                return key.tolist()
            idx = np.lexsort((-md, nr, nd, t))
            k = np.stack([t, nd, nr, md])[:, idx]
            newgrp = np.empty(n, dtype=bool)
            newgrp[0] = True
            newgrp[1:] = (k[:, 1:] != k[:, :-1]).any(axis=0)
            rank = np.empty(n, dtype=np.int64)
            rank[idx] = np.cumsum(newgrp)
            return rank.tolist()
        # totals beyond int64 (path counts explode on lattices): plain Python
        nroots = [0 if is_root[i] else cnt[i] for i in range(n)]
        tuples = [(total[i], len(pdeps[i]), nroots[i], -maxdep[i]) for i in range(n)]
        rank = [0] * n
        r = 0
        prev = None
        for i in sorted(range(n), key=tuples.__getitem__):
            k = tuples[i]
            if k != prev:
                r += 1
                prev = k
            rank[i] = r
        return rank

    def full_rank(self, nrank, alive_nodes):
        """Position of every task in the order of dask's complete sort key
        (the numeric part ``nrank``, then ``str(key)``), or None.

        Where numeric keys tie, ``str(key)`` decides. For the keys dask
        collections use, tuples ``(name, i, ...)`` of str, int and float,
        the order of their ``str`` follows from integer columns computed in
        bulk (see :func:`_str_order_columns`) without building any string;
        then the walk compares plain integers. For other keys (e.g. str
        keys, whose order needs real string comparisons) we return None and
        the walk compares ``str`` lazily, only where it has to.
        ``alive_nodes`` None means all tasks; other tasks get arbitrary
        ranks (never compared).
        """
        if self.key_types is not None and tuple not in self.key_types:
            return None  # (no tuple keys: the columns cannot apply)
        import numpy as np

        n = self.n
        keys = self.keys
        k = np.asarray(nrank, dtype=np.int64)
        if alive_nodes is None:
            nodes = np.argsort(k, kind="stable")
        else:
            al = np.asarray(alive_nodes, dtype=np.int64)
            nodes = al[np.argsort(k[al], kind="stable")]
        ks = k[nodes]
        eq = ks[1:] == ks[:-1]
        tied = np.zeros(nodes.size, dtype=bool)
        tied[1:] = eq
        tied[:-1] |= eq
        if tied.any():
            members = nodes[tied]  # grouped by numeric key, groups in order
            cols = _str_order_columns(steps.list_map(keys.__getitem__, steps.tolist(members)), np)
            if cols is None:
                return None
            gk = ks[tied]
            group = np.zeros(members.size, dtype=np.int64)
            np.cumsum(gk[1:] != gk[:-1], out=group[1:])
            # one integer per member if the columns fit, else lexsort
            cols.insert(0, group)
            width = 1
            for c in cols:
                width *= int(c.max()) + 1
            if width < 2**63:
                packed = cols[0]
                for c in cols[1:]:
                    packed = packed * (int(c.max()) + 1) + c
                # (runs are often presorted: timsort finds them)
                within = np.argsort(packed, kind="stable")
            else:
                within = np.lexsort(cols[::-1])
            nodes[tied] = members[within]
        rank = np.zeros(n, dtype=np.int64)
        rank[nodes] = np.arange(nodes.size, dtype=np.int64)
        # a flat array: looking a rank up touches no int object
        return array("q", rank.tobytes())

    def use_longest_path(self, roots, leaves, leafs_of_root, multi):
        """dask's choice of leaf-list direction: reductions and symmetric
        graphs go largest-leaf first.

        The symmetry test walks dask's root set and stops at the first root
        whose number of leaves below differs from the first non-zero one, so
        with isolated tasks (zero leaves below) the set's iteration order
        matters; we rebuild that set then.
        """
        nroot = len(roots)
        if not abs(nroot - len(leaves)) / nroot < 0.8:
            return True

        def size(r):
            """Number of leaves below root ``r`` (0 for an isolated task)."""
            s = leafs_of_root[r]
            if s >= -1:
                return 0 if s == -1 else 1
            return len(multi[-2 - s])

        sizes = {size(r) for r in roots}
        nonzero = sizes - {0}
        if len(nonzero) > 1:
            return False
        if not nonzero or 0 not in sizes:
            return True
        # zeros and one non-zero size: order of the root set decides
        keys = self.keys
        root_set = self.root_set
        if root_set is None:
            it = _set_order(keys, roots)
        else:
            index = self.index
            it = [index[k] for k in root_set]
        first = 0
        for r in it:
            s = size(r)
            if not first:
                first = s
            elif first != s:
                return False
        return True


def _union_of_distinct(sets: list) -> set:
    """Union of the root sets of a task's dependencies, sharing when it can.

    Several dependencies often share one set object (a chain hands its set
    on), and often one set contains all the others: then that set itself is
    the union and no new set is built.
    """
    distinct = []
    seen = set()
    for s in sets:
        if id(s) not in seen:
            seen.add(id(s))
            distinct.append(s)
    if len(distinct) == 1:
        return distinct[0]
    distinct.sort(key=len, reverse=True)
    big = distinct[0]
    rest = distinct[1:]
    if all(s <= big for s in rest):
        return big
    out = set(big)
    for s in rest:
        out |= s
    return out
