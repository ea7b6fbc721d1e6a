"""slimgraph.ingest.compact must give exactly stock's materialized graph.

Every test builds the expression a Client sends (``FinalizeCompute`` of the
collections, optimized, pickled and unpickled as the scheduler receives
it), materializes one copy with distributed's ``_materialize_graph`` (and
``_cull`` where update_graph culls) and another with
:func:`slimgraph.ingest.compact.materialize`, in the same process (set
iteration orders depend on the hash seed), and compares: the keys and
their order, each task's dependencies in the iteration order of stock's
frozenset (and the keys outside the graph), each run_spec node by node
(types, keys, functions, arguments; ``==`` and ``dask.base.tokenize``),
``data_producer``, truthiness, the annotations by type, and
``dask.order.order`` on both graphs.
"""
from __future__ import annotations

import contextlib
import operator
import pickle
import sys

import dask
import dask.array as da
import numpy as np
import pytest
from dask._expr import FinalizeCompute
from dask._task_spec import Alias, DataNode, GraphNode, Task, TaskRef
from dask.base import collections_to_expr, tokenize
from dask.highlevelgraph import HighLevelGraph
from dask.order import order as dask_order
from distributed.protocol.serialize import deserialize, serialize, to_serialize
from distributed.scheduler import _cull, _materialize_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slimgraph import workloads
from slimgraph.ingest import decode
from slimgraph.ingest.compact import CompactGraph, materialize
from slimgraph.ingest.compact.graph import SHIFT
from slimgraph.ingest.compact.packed import INT, ORDER, REF, PackedSource, remake_keys
from slimgraph.ingest.compact.blockwise import BlockwiseLayer
from slimgraph.order import order_indexed


# ---------------------------------------------------------------------------
# the comparison
# ---------------------------------------------------------------------------


def submission(*collections, optimize_graph: bool = True, finalize: bool = True):
    """What update_graph receives: the pickled expression and the keys."""
    expr = collections_to_expr(list(collections), optimize_graph)
    if finalize:
        expr = FinalizeCompute(expr)
    expr = expr.optimize()
    keys = set(dask.core.flatten(expr.__dask_keys__()))
    header, frames = serialize(to_serialize(expr), on_error="raise")
    return header, frames, keys


def both(header, frames, keys, cull: bool = False, same_object: bool = False):
    """Stock's (dsk, annotations) and the compact graph, each from its own
    unpickled copy of the expression; or (``same_object``) both from one
    copy, compact first: a Future unpickles with a new id, which its token
    includes, so two copies of a graph holding futures never compare equal."""
    expr = deserialize(header, frames)
    graph = materialize(expr if same_object else deserialize(header, frames), keys, cull)
    dsk, ann = _materialize_graph(expr=expr, validate=False)
    if cull:
        dsk = _cull(dsk, set(keys))
    return dsk, ann, graph


def assert_same_node(a, b, path="run_spec"):
    """Node by node: same types, keys, functions and arguments."""
    assert type(a) is type(b), (path, type(a), type(b))
    if isinstance(a, TaskRef):
        assert a.key == b.key, (path, a.key, b.key)
        return
    if isinstance(a, Alias):
        assert (a.key, a.target) == (b.key, b.target), (path, a, b)
        assert a.dependencies == b.dependencies
        return
    if isinstance(a, DataNode):
        assert a.key == b.key, (path, a.key, b.key)
        assert tokenize(a.value) == tokenize(b.value), (path, a.value, b.value)
        return
    if isinstance(a, Task):
        assert a.key == b.key, (path, a.key, b.key)
        assert a.func == b.func or tokenize(a.func) == tokenize(b.func), (path, a.func, b.func)
        assert a._data_producer == b._data_producer, path
        assert len(a.args) == len(b.args), (path, a.args, b.args)
        for n, (x, y) in enumerate(zip(a.args, b.args)):
            assert_same_value(x, y, f"{path}.args[{n}]")
        assert list(a.kwargs) == list(b.kwargs), path
        for k in a.kwargs:
            assert_same_value(a.kwargs[k], b.kwargs[k], f"{path}.kwargs[{k!r}]")
        assert list(a.dependencies) == list(b.dependencies), (path, a.dependencies, b.dependencies)
        return
    raise AssertionError(f"{path}: unexpected node type {type(a)}")


def assert_same_value(x, y, path):
    if isinstance(x, (GraphNode, TaskRef)):
        assert_same_node(x, y, path)
    elif isinstance(x, dict):
        assert type(x) is type(y) and list(x) == list(y), (path, x, y)
        for k in x:
            assert_same_value(x[k], y[k], f"{path}[{k!r}]")
    elif isinstance(x, (tuple, list)) and any(isinstance(e, (GraphNode, TaskRef)) for e in x):
        assert type(x) is type(y) and len(x) == len(y), (path, x, y)
        for n, (e, f) in enumerate(zip(x, y)):
            assert_same_value(e, f, f"{path}[{n}]")
    else:
        assert type(x) is type(y), (path, x, y)
        assert tokenize(x) == tokenize(y), (path, x, y)


def assert_same(dsk: dict, ann, graph: CompactGraph, specs: bool = True) -> None:
    keys = list(dsk)
    assert graph.keys == keys
    pos = dict(zip(keys, range(len(keys))))
    flags = graph.producer_flags()  # (a segment's answer, where it is one)
    for i, k in enumerate(keys):
        node = dsk[k]
        flag = flags[graph.codes[i] >> SHIFT]
        assert flag is None or flag == bool(node and node.data_producer), k
        order = list(node.dependencies)
        assert list(graph.deps[i]) == [pos[d] for d in order if d in pos], k
        assert list(graph.external.get(i, ())) == [d for d in order if d not in pos], k
        assert graph.data_producer(i) == node.data_producer, k
        assert graph.truthy(i) == bool(node), k
        assert graph.spec_data_producer(i) == bool(node and node.data_producer), k
        assert graph.is_data(i) == isinstance(node, DataNode), k
        if specs:
            spec = graph.run_spec(i)
            assert spec == node, k
            assert tokenize(spec) == tokenize(node), k
            assert_same_node(spec, node, f"dsk[{k!r}]")
    assert type(graph.annotations) is type(ann)
    assert dict(graph.annotations) == dict(ann)
    for t in ann:
        assert list(graph.annotations[t]) == list(ann[t])
    if specs and dsk:
        expected = dask_order(dsk)
        assert dask_order(graph.to_dict()) == expected
        if not graph.external:
            # the engine's ordering, on the compact graph's own integers
            prio = order_indexed(
                graph.keys, list(graph.deps), data=graph.data_indices(), dep_sets=graph.dependency_sets()
            )
            assert dict(zip(keys, prio)) == expected


def compare(*collections, fallback: bool = False, same_object: bool = False, **kwargs) -> CompactGraph:
    header, frames, keys = submission(*collections, **kwargs)
    dsk, ann, graph = both(header, frames, keys, same_object=same_object)
    assert_same(dsk, ann, graph)
    whole = [r for r in graph.report if r.name == "<graph>"]
    if fallback:
        assert whole and whole[0].path == "dask", graph.report
    else:
        assert not whole, graph.report
    assert sum(r.tasks for r in graph.report) >= len(graph)
    return graph


@contextlib.contextmanager
def delayed_walk():
    """Records, per operand, whether the one-walk delayed path
    (:mod:`slimgraph.ingest.compact.delayed`) took it."""
    m = sys.modules["slimgraph.ingest.compact.materialize"]  # (the package exports a function of that name)
    taken: list = []
    real = m.delayed_part

    def spy(hlg, wanted):
        part = real(hlg, wanted)
        taken.append(part is not None)
        return part

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(m, "delayed_part", spy)
        yield taken


# ---------------------------------------------------------------------------
# the bench's workloads
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [50, 2000, 6000])  # (6000: as many reduction layers as 10000 and 40000)
def test_bench_array(n):
    g = compare(workloads.array(n))
    paths = {r.type: r.path for r in g.report}
    assert paths["Blockwise"] == "compact"


@pytest.mark.parametrize("n", [50, 3000])
def test_bench_delayed(n):
    with delayed_walk() as taken:
        compare(workloads.delayed(n))
    assert taken == [True]


def test_bench_array_without_fusion():
    with dask.config.set({"optimization.fuse.active": False}):
        compare(workloads.array(3000))


# ---------------------------------------------------------------------------
# dask.array, targeted
# ---------------------------------------------------------------------------

x24 = da.ones((24, 24), chunks=(3, 4))
r24 = da.random.default_rng(42).random((24, 24), chunks=6)
n24 = da.from_array(np.arange(24 * 24.0).reshape(24, 24), chunks=(5, 7))

ARRAYS = {
    "elementwise": lambda: (x24 + 1) * 2 - x24.T,
    "two-inputs": lambda: x24 + r24,
    "broadcast": lambda: x24 + da.arange(24, chunks=5),
    "sum-axis0": lambda: (x24 + 1).sum(axis=0),
    "mean-std": lambda: x24.mean(axis=1) + x24.std(axis=0),
    "max-split": lambda: x24.max(split_every=3),
    "cumsum": lambda: x24.cumsum(axis=1),
    "rechunk": lambda: x24.rechunk((8, 6)),
    "rechunk-sum": lambda: (x24.rechunk((5, 24)) + 1).sum(axis=1),
    "slicing": lambda: x24[2:17:2, ::-1] + 1,
    "int-index": lambda: x24[3] + x24[:, 5],
    "fancy-index": lambda: x24[[1, 5, 7], :],
    "from-array": lambda: n24[1:20, 3:9] * 2,
    "from-array-sum": lambda: (n24 + 1).sum(),
    "map-overlap": lambda: x24.map_overlap(lambda b: b * 2, depth=1, boundary="none"),
    "map-overlap-periodic": lambda: n24.map_overlap(lambda b: b + 1, depth=(2, 1), boundary="periodic"),
    "random": lambda: r24 + 1,
    "dot": lambda: x24.dot(r24),
    "tensordot": lambda: da.tensordot(x24, r24, axes=(1, 0)),
    "reshape": lambda: x24.rechunk((3, 24)).reshape(576),
    "concatenate": lambda: da.concatenate([x24, r24], axis=0).sum(axis=1),
    "stack": lambda: da.stack([x24, r24]),
    "map-blocks-block-id": lambda: x24.map_blocks(lambda b, block_id=None: b + block_id[0], dtype=float),
    "map-blocks-block-info": lambda: x24.map_blocks(lambda b, block_info=None: b, dtype=float),
    "where": lambda: da.where(x24 > 0, x24, r24),
    "transpose-chain": lambda: (x24.T + 1).T[::3],
    "argmax": lambda: r24.argmax(axis=0),
    "store-like-getitem-chain": lambda: n24[2:][3:][::2],
}


@pytest.mark.parametrize("name", sorted(ARRAYS))
@pytest.mark.parametrize("fuse", [True, False])
def test_array_expressions(name, fuse):
    with dask.config.set({"optimization.fuse.active": fuse}):
        compare(ARRAYS[name]())


def test_two_arrays_at_once():
    compare(x24.sum(axis=0), (r24 * 2).max(axis=1))


def test_array_persist_like_submission():
    """client.persist sends the collection without a finalize task."""
    compare((x24 + 1)[::2], finalize=False)


def test_array_without_graph_optimization():
    compare((x24 + 1).sum(axis=0), optimize_graph=False)


def test_annotations():
    with dask.annotate(retries=3, workers=["a", "b"]):
        a = da.ones((12, 12), chunks=4) + 1
    with dask.annotate(priority=lambda k: k[1] if isinstance(k, tuple) else 0):
        b = a.sum(axis=0)
    with dask.config.set({"optimization.fuse.active": False}):
        g = compare(b)
    assert g.annotations["retries"] and g.annotations["priority"]
    g = compare(b)  # fusion active: dask drops the layers' annotations
    assert not g.annotations


def test_annotations_of_delayed():
    with dask.annotate(resources={"GPU": 1}, priority=lambda k: len(k)):
        t = dask.delayed(operator.add)(1, 2)
    with delayed_walk() as taken:
        g = compare(dask.delayed(operator.mul)(t, 3))
    assert taken == [True]
    assert g.annotations["resources"] and g.annotations["priority"]


# ---------------------------------------------------------------------------
# delayed and bag
# ---------------------------------------------------------------------------


def test_delayed_shapes():
    inc = dask.delayed(lambda v: v + 1, pure=True)
    a = inc(1)
    b = inc(a)
    c = dask.delayed(sum)([a, b, inc(b)])
    d = dask.delayed(dict)(x=c, y=[a, 3])
    compare(d)
    compare(dask.delayed(3))
    compare(c, d)


def test_delayed_with_unused_layers():
    """A Delayed whose graph has more than it needs: the quirks of dask's
    cull (a layer kept whole when len(keys_set) equals its size) count."""
    inc = dask.delayed(lambda v: v + 1, pure=True)
    base = [inc(i) for i in range(5)]
    total = dask.delayed(sum)(base)
    compare(total, base[2])


def test_layers_after_keys_set_empties_are_kept_whole():
    """dask's cull stops culling once its keys_set is empty: the layers it
    walks after that stay, whole, though nothing wanted needs them."""
    from dask.delayed import Delayed

    inc = dask.delayed(lambda v: v + 1, pure=True)
    a, b = inc(1, dask_key_name="a"), inc(2, dask_key_name="b")
    c = inc(a, dask_key_name="c")
    hlg = HighLevelGraph.merge(a.dask, b.dask, c.dask)
    for wanted in "abc":
        graph = compare(Delayed(wanted, hlg))
        assert sorted(graph.keys) == ["a", "b", "c"]
    # walked a, b, d1, e, d2, d3: after a, keys_set is empty; b's three
    # dependencies must not join it then (e would be culled)
    d1, d2, d3, e = (inc(i, dask_key_name=k) for i, k in enumerate(["d1", "d2", "d3", "e"]))
    b = dask.delayed(sum)([d1, d2, d3], dask_key_name="b")
    hlg = HighLevelGraph.merge(*[x.dask for x in (a, d1, e, b, d2, d3)])
    assert hlg._toposort_layers()[::-1] == ["a", "b", "d1", "e", "d2", "d3"]
    graph = compare(Delayed("a", hlg))
    assert graph.keys == ["a", "b", "d1", "e", "d2", "d3"]


@pytest.mark.parametrize("names", ["keys", "other", "mixed"])
def test_one_key_layers_named_or_not(names):
    """The one-walk delayed path with layers named by their keys (a
    Delayed's: the toposort's table of names is reused) and named otherwise
    (a new table): the same graph as dask's either way."""
    from dask.delayed import Delayed
    from dask.highlevelgraph import MaterializedLayer

    inc = lambda v: v + 1  # noqa: E731
    spec = {"a": Task("a", inc, 1), "b": Task("b", inc, TaskRef("a")), "c": Task("c", sum, [TaskRef("a"), TaskRef("b")]),
            "d": Task("d", inc, 5)}
    deps = {"a": set(), "b": {"a"}, "c": {"a", "b"}, "d": set()}
    rename = {"keys": {}, "other": {k: f"layer-{k}" for k in spec}, "mixed": {"b": "layer-b", "d": "layer-d"}}[names]
    name = lambda k: rename.get(k, k)  # noqa: E731
    hlg = HighLevelGraph({name(k): MaterializedLayer({k: v}) for k, v in spec.items()},
                         {name(k): {name(d) for d in ds} for k, ds in deps.items()})
    from slimgraph.ingest.compact import delayed as delayed_mod

    made = []
    real = delayed_mod.KeyTable.of
    with delayed_walk() as taken, pytest.MonkeyPatch.context() as mp:
        def spy(keys):
            made.append(list(keys))
            return real(keys)

        mp.setattr(delayed_mod.KeyTable, "of", staticmethod(spy))
        graph = compare(Delayed("c", hlg, layer=name("c")))
    assert taken and all(taken)
    assert {"a", "b", "c"} <= set(graph.keys)
    # the toposort's table, and a second one only where a layer's name is not its key
    assert len(made) == (1 if names == "keys" else 2), made


@pytest.mark.parametrize("fuse", [True, False])
def test_array_layers_after_keys_set_empties(fuse):
    x = da.ones((8, 8), chunks=4) + 1
    y = (da.zeros((8, 8), chunks=4) * 2).sum(axis=0)
    with dask.config.set({"optimization.fuse.active": fuse}):
        for a, b in ((x, y), (y, x)):
            hlg = HighLevelGraph.merge(a.dask, b.dask)
            compare(da.Array(hlg, a.name, a.chunks, dtype=a.dtype))


@st.composite
def delayed_hlgs(draw):
    """A random DAG of Delayed objects (one-key Task layers), merged into one
    HighLevelGraph whatever is wanted, and the keys wanted from it."""
    from dask.delayed import Delayed

    n = draw(st.integers(1, 12))
    nodes = []
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        args = [nodes[j] for j in deps] or [i]
        nodes.append(dask.delayed(lambda *a: sum(a), pure=True)(*args, dask_key_name=f"k{i}"))
    hlg = HighLevelGraph.merge(*[d.dask for d in nodes])
    # some layers named otherwise than their key: the walk must locate a
    # task by its key, not by its layer's name
    renamed = set(draw(st.lists(st.integers(0, n - 1), max_size=n, unique=True)))
    name = {f"k{i}": f"layer-{i}" if i in renamed else f"k{i}" for i in range(n)}
    if renamed:
        hlg = HighLevelGraph(
            {name[k]: v for k, v in hlg.layers.items()},
            {name[k]: {name[d] for d in v} for k, v in hlg.dependencies.items()},
        )
    wanted = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True))
    return [Delayed(f"k{w}", hlg, layer=name[f"k{w}"]) for w in wanted]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(collections=delayed_hlgs())
def test_random_delayed_graphs_culled_as_dask_culls(collections):
    """The one-pass delayed path (taken, checked) against stock: culled
    layers, layers kept whole by dask's len(keys_set) shortcut or after
    keys_set empties, dependencies in frozenset order."""
    with delayed_walk() as taken:
        compare(*collections)
    assert taken == [True]


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_toposort_layers_is_dasks(data):
    """The walk's layer order on integers against dask's own
    ``_toposort_layers``: random layer DAGs listed in random order, sets of
    names whose iteration order is the hash's."""
    import types

    from slimgraph.ingest.compact.delayed import toposort_layers

    n = data.draw(st.integers(0, 30))
    names = [f"layer-{data.draw(st.integers(0, 10**6))}-{i}" for i in range(n)]
    deps = {names[i]: {names[j] for j in data.draw(st.lists(st.integers(0, i - 1), max_size=4))} if i else set()
            for i in range(n)}
    listed = data.draw(st.permutations(names))
    deps = {k: deps[k] for k in listed}
    assert toposort_layers(deps) == HighLevelGraph._toposort_layers(types.SimpleNamespace(dependencies=deps))
    if n:
        deps[names[0]] = deps[names[0]] | {"not-a-layer"}  # dask: KeyError
        assert toposort_layers(deps) is None


def test_bag_falls_back():
    import dask.bag as db

    b = db.from_sequence(range(40), npartitions=8).map(lambda v: v + 1).fold(operator.add)
    compare(b, fallback=True)


def test_dataframe_falls_back():
    g = compare(workloads.dataframe(40), fallback=True)
    assert g.report[0].path == "dask" and g.report[0].tasks == len(g)


def test_dict_graph_falls_back_and_culls():
    """A low-level graph (client.get): distributed culls it itself."""
    from dask._expr import LLGExpr

    dsk = {"a": (operator.add, 1, 2), "b": (operator.mul, "a", 3), "unused": (operator.neg, "a")}
    expr = LLGExpr(dsk)
    header, frames = serialize(to_serialize(expr), on_error="raise")
    d, ann, g = both(header, frames, {"b"}, cull=True)
    assert_same(d, ann, g)
    assert "unused" not in g.keys and g.report[0].path == "dask"


# ---------------------------------------------------------------------------
# persisted data and futures (a real in-process cluster)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        with Client(cluster) as c:
            yield c


def test_persisted_array_inputs(client):
    x = client.persist(da.ones((16, 16), chunks=4) + 1)
    g = compare((x * 2).sum(axis=0), same_object=True)
    assert g.external and g.dropped


def test_future_inside_delayed(client):
    fut = client.submit(operator.add, 1, 2)
    inc = dask.delayed(lambda v: v + 1, pure=True)
    g = compare(inc(inc(fut)), same_object=True)
    assert g.external


def test_future_inside_array_graph(client):
    fut = client.scatter(np.ones((4, 4)))
    a = da.from_delayed(dask.delayed(fut), shape=(4, 4), dtype=float)
    compare(da.concatenate([a, da.ones((4, 4), chunks=4)]).sum(), same_object=True)


def test_future_as_blockwise_argument(client):
    """A future passed to a Blockwise operation: a constant TaskRef argument
    whose key is outside the graph."""
    fut = client.submit(operator.add, 1, 2)
    g = compare(x24.map_blocks(operator.add, dask.delayed(fut), dtype=float).sum(axis=1), same_object=True)
    assert g.external


def test_p2p_rechunk_falls_back():
    g = compare(x24.rechunk((24, 2), method="p2p").sum(), fallback=True)
    assert "P2P" in g.report[0].reason


# ---------------------------------------------------------------------------
# the pieces
# ---------------------------------------------------------------------------


def test_blockwise_fast_builder_equals_dask():
    """The template builder against _make_blockwise_graph, block by block."""
    arrays = [(x24 + 1) * r24, x24.map_blocks(lambda b, block_id=None: b, dtype=float), da.ones((7, 5, 3), chunks=2) + 2]
    for a in arrays:
        hlg = a.__dask_graph__()
        for name, layer in hlg.layers.items():
            if type(layer).__name__ != "Blockwise":
                continue
            v = BlockwiseLayer(name, layer)
            for local in range(v.size):
                assert_same_node(v.build(local, v.key(local)), v.build_reference(local))


def test_blockwise_cull_dependencies_in_bulk_equal_block_by_block():
    """A Blockwise layer's dependencies for the cull, read for all blocks at
    once (coordinate arithmetic on the block grid), are the blocks' own,
    read one by one: broadcast inputs (a dimension of one chunk), a
    transposed input, three dimensions and a 0-d array included."""
    from slimgraph.ingest.compact.layers import GraphLayers

    arrays = [
        (x24 + 1) * r24 - x24.T,
        x24 + da.ones((1, 24), chunks=(1, 4)),
        da.ones((24, 1), chunks=(3, 1)) + x24,
        da.ones((7, 5, 3), chunks=2) + da.ones((7, 5, 3), chunks=2).transpose((0, 1, 2)) * 2,
        da.ones((), chunks=()) + 1,
    ]
    bulk_seen = 0
    for a in arrays:
        gl = GraphLayers(a.__dask_graph__())  # (not optimized: every layer Blockwise)
        for v in gl.views.values():
            bulk = v.all_cull_dependencies()
            if bulk is None:
                continue
            bulk_seen += 1
            one: list = []
            ext: list = []
            for local in range(v.size):
                v.cull_dependencies(local, gl.locate, one, ext)
            assert not ext
            assert sorted(bulk.tolist()) == sorted(one), v.name
    assert bulk_seen >= 5


@pytest.mark.parametrize("name", ["sum-axis0", "mean-std", "max-split", "from-array-sum", "argmax", "bench"])
def test_reduction_values_read_directly_equal_the_walk(name, monkeypatch):
    """A reduction's legacy ``(func, [key, ...])`` read without the general
    walk (``ValueDeps._keys_list``) records what the walk records: kinds,
    dependency order, skeletons (and the cull's result, for the bench's
    array)."""
    from dask.core import flatten

    from slimgraph.ingest.compact.cull import ValueDeps, cull_locations, read_all
    from slimgraph.ingest.compact.delayed import toposort_layers
    from slimgraph.ingest.compact.layers import GraphLayers
    from slimgraph.ingest.compact.legacy import LegacyReader

    a = workloads.array(6000) if name == "bench" else ARRAYS[name]()
    hlg = a.__dask_graph__()
    wanted = set(flatten(a.__dask_keys__()))
    direct = ValueDeps._keys_list
    taken = []

    def spy(self, *args):
        r = direct(self, *args)
        taken.append(r)
        return r

    def read(fast: bool) -> tuple:
        monkeypatch.setattr(ValueDeps, "_keys_list", spy if fast else (lambda self, *args: False))
        gl = GraphLayers(hlg)
        reader = LegacyReader(gl.locate, gl.index)
        if name == "bench":  # the bench's array culls on locations
            sel, st = cull_locations(gl, toposort_layers(hlg.dependencies), wanted, reader)
        else:  # every value, read as by a cull dask made
            sel = [(u, gl.unit_locals(u)) for u in range(len(gl))]
            st = read_all(gl, sel, reader)
        skels = [(sk.head, sk.shape) for sk in st.skeletons]
        return sel, bytes(st.kinds), *map(list, (st.off, st.items, st.skel, st.tstart, st.titems)), skels, st.ext_keys

    assert read(True) == read(False)
    # (a reduction over both axes nests its lists: read by the walk)
    assert any(taken) == (name in ("sum-axis0", "mean-std", "argmax", "bench"))


@pytest.mark.parametrize("most", [1024, 1])
def test_blocks_share_args_by_chunk_shape(most, monkeypatch):
    """Blocks of a root layer whose only varying input is their chunk
    shape share one args tuple per shape (at most SHARED_ARGS_MAX kept);
    each still equals dask's block, token and pickle included."""
    from slimgraph.ingest.compact import blockwise

    monkeypatch.setattr(blockwise, "SHARED_ARGS_MAX", most)
    a = da.ones((7, 5), chunks=2)  # chunk shapes (2, 2), (2, 1), (1, 2), (1, 1)
    ((name, layer),) = a.__dask_graph__().layers.items()
    v = BlockwiseLayer(name, layer)
    built = [v.build(local, v.key(local)) for local in range(v.size)]
    for local, node in enumerate(built):
        ref = v.build_reference(local)
        assert_same_node(node, ref)
        assert node == ref and tokenize(node) == tokenize(ref)
        assert pickle.dumps(node, protocol=5) == pickle.dumps(ref, protocol=5)
    assert v._shared is not None and len(v._shared) == min(most, 4)
    by_shape: dict = {}
    for node in built:
        (value,) = [x.value for x in node.args if isinstance(x, DataNode) and type(x.value) is tuple]
        by_shape.setdefault(value, []).append(node.args)
    assert {k: len(v) for k, v in by_shape.items()} == {(2, 2): 6, (2, 1): 3, (1, 2): 2, (1, 1): 1}
    distinct = {k: len({id(x) for x in v}) for k, v in by_shape.items()}
    # past the limit, a shape not kept gets an args tuple per block
    assert distinct == ({(2, 2): 1, (2, 1): 1, (1, 2): 1, (1, 1): 1} if most > 1
                        else {(2, 2): 1, (2, 1): 3, (1, 2): 2, (1, 1): 1})


def test_nodes_made_without_constructors_equal_dasks(monkeypatch):
    """The installed dask's Task and Alias constructors store what the
    shim's fast constructors store, with setorder's frozensets (checked at
    import: fastnodes.ENABLED); a change is noticed."""
    from slimgraph.ingest.compact import fastnodes
    from slimgraph.ingest.compact.setorder import aliases_frozenset
    from slimgraph.shim import nodes

    assert fastnodes.ENABLED and nodes.agrees(aliases_frozenset)
    real = nodes.task

    def stale(key, func, args, kwargs, dependencies, data_producer=False):
        t = real(key, func, args, kwargs, dependencies, data_producer)
        t._repr = "stale"  # a slot the constructor leaves at None
        return t

    monkeypatch.setattr(nodes, "task", stale)
    assert not nodes.agrees(aliases_frozenset)


@pytest.mark.parametrize("enabled", [True, False])
def test_reductions_and_blocks_with_and_without_fast_nodes(enabled, monkeypatch):
    """The builders give dask's nodes (and dependency order) both with the
    nodes made directly and through the constructors (a dask on which the
    import check failed)."""
    from slimgraph.ingest.compact import fastnodes

    monkeypatch.setattr(fastnodes, "ENABLED", enabled)
    for split_every in (2, 3, 4, 6):
        compare(workloads.array(800).sum(split_every=split_every))
    compare(da.ones((6, 6), chunks=(2, 3)).mean(axis=1, split_every=5) + da.arange(6, chunks=2))
    compare(da.ones((4, 9), chunks=(1, 2)).map_blocks(lambda b, block_info=None: b, dtype=float).max(axis=0))


def test_run_specs_pickle_and_run(client):
    """Run_specs built on demand run on a worker: their dependencies travel."""
    header, frames, keys = submission((x24 + 1).sum(axis=0))
    g = materialize(deserialize(header, frames), keys, False)
    dsk = {}
    for i in range(len(g)):
        spec = pickle.loads(pickle.dumps(g.run_spec(i)))
        assert spec.key == g.keys[i]
        dsk[g.keys[i]] = spec
    # the rebuilt run_specs computed by a real scheduler and worker
    (out,) = [k for k in g.keys if isinstance(k, str) and k.startswith("finalize")]
    result = client.get(dsk, out)
    np.testing.assert_array_equal(result, ((x24 + 1).sum(axis=0)).compute(scheduler="sync"))


def test_release_frees_sources():
    """Released tasks drop their sources; a layer's template goes with its
    last task, fused chains keep their members' layers alive until then."""
    a = (n24.rechunk((5, 24)) + 1)[2:9].sum(axis=0)  # chains through slicing
    header, frames, keys = submission(a)
    dsk, ann, g = both(header, frames, keys)
    assert any(type(s).__name__ == "FusedSource" for s in g.segments)
    order = list(range(len(g)))
    order.reverse()
    alive = dict(enumerate(g.keys))
    for i in order:
        g.release(i)
        del alive[i]
        for j in list(alive)[:50]:  # the others still build
            assert g.run_spec(j) == dsk[g.keys[j]]
    assert all(s is None for s in g.segments)
    with pytest.raises(KeyError):
        g.run_spec(0)


def test_validate_rejects_bad_keys():
    """validate=True checks keys as stock does."""
    header, frames, keys = submission(workloads.array(50))
    g = materialize(deserialize(header, frames), keys, False, validate=True)
    assert len(g) > 0


# ---------------------------------------------------------------------------
# delayed tasks kept packed (slimgraph.ingest.compact.packed)
# ---------------------------------------------------------------------------


def _sources(g):
    packed = [s for s in g.segments if isinstance(s, PackedSource)]
    kept = [v for s in g.segments if type(s).__name__ == "ValueSource" for v in s.values if v is not None]
    return packed, kept


def test_delayed_tree_packed_whole():
    """The bench's delayed tree keeps no Task: every task packed, run_specs
    built equal to stock's (dependency frozensets in stock's iteration
    order, which for some fan-in nodes takes an explicit insertion order)."""
    g = compare(workloads.delayed(3000))
    packed, kept = _sources(g)
    assert len(packed) == 1 and len(packed[0]) == len(g) and not kept
    tags = [x & 3 for x in packed[0].items]
    assert ORDER in tags and REF in tags and INT in tags


def _mixed():
    inc = dask.delayed(lambda v: v + 1, pure=True)
    f = dask.delayed(lambda *a, **k: (a, k), pure=True)
    a = inc(1)
    b = inc(a)
    return [
        f(a, a, b),  # a reference twice
        f(a, 2.5, "s", None, True, -(1 << 62), 1 << 61, -7),  # literals: kept as objects, or as ints
        f(a, key=b),  # keyword arguments: left as it arrived
        f([a, b]),  # a nested node: left as it arrived
        f(a, b, inc(b), inc(inc(b)), inc(3), inc(4)),  # six dependencies
    ]


def test_delayed_arguments_packed_or_left():
    g = compare(*_mixed())
    packed, kept = _sources(g)
    assert len(packed) == 1 and len(packed[0]) > 0
    # the keyword and nested-node tasks stay Tasks (and the finalize task)
    assert 2 <= len(kept) <= 4, kept
    assert all(isinstance(v, Task) for v in kept)
    objects = packed[0].objects
    assert 2.5 in objects and "s" in objects and None in objects
    assert any(o is True for o in objects) and -(1 << 62) in objects


def test_future_inside_delayed_packed(client):
    """A reference to a key outside the graph (a Future) is kept as an
    object; the task's dependencies still include it, in stock's order."""
    fut = client.submit(operator.add, 1, 2)
    add = dask.delayed(lambda *v: sum(v), pure=True)
    inc = dask.delayed(lambda v: v + 1, pure=True)
    a = inc(1)
    g = compare(add(fut, a, inc(a), 5), same_object=True)
    packed, _ = _sources(g)
    assert g.external and len(packed) == 1
    assert any(isinstance(o, TaskRef) for o in packed[0].objects)


def test_packed_run_specs_compute(client):
    """Packed run_specs pickle and run on a real worker."""
    x = workloads.delayed(200)
    header, frames, keys = submission(x)
    g = materialize(deserialize(header, frames), keys, False)
    assert _sources(g)[0]
    dsk = {g.keys[i]: pickle.loads(pickle.dumps(g.run_spec(i))) for i in range(len(g))}
    (out,) = keys
    assert client.get(dsk, out) == x.compute(scheduler="sync")


def test_packed_release():
    header, frames, keys = submission(workloads.delayed(100))
    g = materialize(deserialize(header, frames), keys, False)
    (packed,), _ = _sources(g)
    n = len(g)
    for i in range(n - 1):
        g.release(i)
        assert g.run_spec(n - 1).key == g.keys[n - 1]
    g.release(n - 1)
    assert all(s is None for s in g.segments)


def test_remake_keys():
    keys = ["a-1", "b-2", ("x", 1), "c\0d", "e"]
    copy = list(keys)
    remake_keys.__globals__["REMAKE_STEP"], old = 2, remake_keys.__globals__["REMAKE_STEP"]
    try:
        made = remake_keys(copy)
    finally:
        remake_keys.__globals__["REMAKE_STEP"] = old
    assert copy == keys and made == 3  # ("a-1", "b-2") and ("e",) made again
    assert copy[0] is not keys[0] and copy[2] is keys[2] and copy[3] is keys[3]


# ---------------------------------------------------------------------------
# decoding (slimgraph.ingest.decode)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("presized", [False, True])
@pytest.mark.parametrize("make", [lambda: workloads.delayed(400), lambda: workloads.array(400), _mixed])
def test_decoded_graph_equals_distributeds(make, presized, monkeypatch):
    """The fast unpickler gives what distributed's deserialize gives: plain
    ``Task`` objects with the same slots, node by node; also with its memo
    presized (``memo.presize``, taken here at any size) and handed over."""
    from slimgraph.ingest import memo

    sized = []
    if presized:
        monkeypatch.setattr(memo, "PRESIZE_MIN", 16)
        real = memo.presize
        monkeypatch.setattr(memo, "presize", lambda u, n: sized.append(real(u, n)) or sized[-1])
    x = make()
    header, frames, keys = submission(*(x if isinstance(x, list) else [x]))
    ours, _ = _materialize_graph(expr=decode.deserialize(header, frames), validate=False)
    assert sized == ([True] if presized else [])
    theirs, _ = _materialize_graph(expr=deserialize(header, frames), validate=False)
    assert list(ours) == list(theirs)
    tasks = 0
    for k, node in theirs.items():
        assert type(ours[k]) is type(node), k
        assert_same_node(ours[k], node, k)
        if type(node) is Task:
            tasks += 1
            # (the function and arguments compared by token above)
            for slot in ("_data_producer", "_is_coro", "_repr", "_token", "key"):
                assert getattr(ours[k], slot) == getattr(node, slot), (k, slot)
    assert tasks > 0


def test_decode_other_frames_as_distributed():
    """Out-of-band buffers (or any other header) go to distributed's own
    deserialize, with the same result."""
    value = {"a": np.arange(100_000), "t": Task("k", operator.add, 1, 2)}
    header, frames = serialize(to_serialize(value), on_error="raise")
    assert len(frames) > 1
    got = decode.deserialize(header, frames)
    np.testing.assert_array_equal(got["a"], value["a"])
    assert got["t"] == value["t"] and type(got["t"]) is Task


def test_decode_reads_frame_by_frame_in_python():
    """The unpickler goes back to Python code for every ~64 KiB frame (the
    points where another thread, the event loop, can take the GIL), and
    still gives what distributed's deserialize gives."""
    header, frames, _ = submission(workloads.delayed(20_000))
    assert len(frames) == 1 and len(frames[0]) > 1_000_000
    calls = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is decode._FrameReader.read.__code__:
            calls.append(frame.f_locals["n"])

    sys.setprofile(profile)
    try:
        got = decode.deserialize(header, frames)
    finally:
        sys.setprofile(None)
    assert len(calls) >= len(frames[0]) // (1 << 16)
    ours, _ = _materialize_graph(expr=got, validate=False)
    theirs, _ = _materialize_graph(expr=deserialize(header, frames), validate=False)
    assert list(ours) == list(theirs)
    assert all(type(ours[k]) is type(v) and ours[k] == v for k, v in theirs.items())


def test_a_clients_submission_is_decoded_frame_by_frame(monkeypatch):
    """What a scheduler receives from a real Client over a real comm (the
    wire encoding adds ``num-sub-frames`` to the header) goes through the
    frame-by-frame unpickler, not distributed's one C call; the graph it
    builds is the one submitted."""
    import asyncio

    from distributed import Client

    from slimgraph.distributed import SlimScheduler

    reads: list = []
    read = decode._FrameReader.read

    def counted(self, n=-1):
        reads.append(n)
        return read(self, n)

    monkeypatch.setattr(decode._FrameReader, "read", counted)
    x = workloads.delayed(20_000)

    async def body() -> int:
        async with SlimScheduler(dashboard_address=None, dashboard=False, host="127.0.0.1") as s:
            async with Client(s.address, asynchronous=True) as c:
                fut = c.compute(x)
                for _ in range(600):
                    if s.tasks:
                        break
                    await asyncio.sleep(0.05)
                n = len(s.tasks)
                await c.cancel(fut)
                return n

    n = asyncio.run(body())
    assert n > 10_000
    assert len(reads) >= 16  # one per ~64 KiB frame of a ~1 MB pickle


# ---------------------------------------------------------------------------
# random dask.array expressions
# ---------------------------------------------------------------------------


def _chunks(draw, n):
    parts = draw(st.lists(st.integers(1, max(1, n)), min_size=1, max_size=4))
    out = []
    left = n
    for p in parts:
        if left <= 0:
            break
        p = min(p, left)
        out.append(p)
        left -= p
    if left:
        out.append(left)
    return tuple(out)


@st.composite
def array_exprs(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 9)) for _ in range(ndim))
    chunks = tuple(_chunks(draw, s) for s in shape)
    kind = draw(st.sampled_from(["ones", "random", "numpy", "arange"]))
    if kind == "ones":
        x = da.ones(shape, chunks=chunks)
    elif kind == "random":
        x = da.random.default_rng(draw(st.integers(0, 5))).random(shape, chunks=chunks)
    elif kind == "numpy":
        x = da.from_array(np.arange(int(np.prod(shape)), dtype=float).reshape(shape), chunks=chunks)
    else:
        x = da.arange(int(np.prod(shape)), chunks=max(1, int(np.prod(shape)) // 3)).reshape(shape).rechunk(chunks)
    others = [x]
    for _ in range(draw(st.integers(1, 4))):
        op = draw(
            st.sampled_from(
                ["add", "scalar", "neg", "T", "sum", "mean", "max", "slice", "index", "rechunk", "overlap", "cumsum", "self2", "where"]
            )
        )
        if op == "add":
            y = draw(st.sampled_from(others))
            x = x + y if y.shape == x.shape else x + 1
        elif op == "scalar":
            x = x * draw(st.integers(1, 3))
        elif op == "neg":
            x = -x
        elif op == "T":
            x = x.T
        elif op in ("sum", "mean", "max") and x.ndim > 0:
            axis = draw(st.integers(0, x.ndim - 1))
            x = getattr(x, op)(axis=axis, split_every=draw(st.sampled_from([None, 2, 3])))
        elif op == "slice" and x.ndim > 0:
            idx = tuple(
                slice(draw(st.integers(0, max(0, s - 1))), None, draw(st.sampled_from([1, 2, -1]))) for s in x.shape
            )
            x = x[idx]
            if 0 in x.shape:
                x = da.ones((2,), chunks=1)
        elif op == "index" and x.ndim > 1:
            x = x[draw(st.integers(0, x.shape[0] - 1))]
        elif op == "rechunk" and x.ndim > 0:
            x = x.rechunk(tuple(_chunks(draw, s) for s in x.shape))
        elif op == "overlap" and x.ndim > 0 and min(x.chunksize) > 1:
            x = x.map_overlap(lambda b: b + 1, depth=1, boundary="none", dtype=x.dtype)
        elif op == "cumsum" and x.ndim > 0:
            x = x.cumsum(axis=0)
        elif op == "self2":
            x = x + x
        elif op == "where":
            x = da.where(x > 0.5, x, 0)
        others.append(x)
    outs = [x]
    if draw(st.booleans()) and len(others) > 2:
        outs.append(draw(st.sampled_from(others[1:-1])))
    return outs


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(exprs=array_exprs(), fuse=st.booleans())
def test_random_array_expressions(exprs, fuse):
    with dask.config.set({"optimization.fuse.active": fuse}):
        header, frames, keys = submission(*exprs)
        dsk, ann, graph = both(header, frames, keys)
        assert_same(dsk, ann, graph)


# ---------------------------------------------------------------------------
# the measurement script
# ---------------------------------------------------------------------------


def test_compact_bench_script(tmp_path):
    """benchmarks/compact_bench.py runs end to end on a small submission and
    reports both engines on the same tasks."""
    import json
    import os
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "compact_bench.py")
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, script, "--workload", "array", "--tasks", "2000", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(out.read_text())["array"]
    stock, compact = res["time"]["stock"][0], res["time"]["compact"][0]
    assert stock["tasks"] == compact["tasks"] > 1000
    assert res["rss"]["compact"][0]["rss_bytes_per_task"] > 0
    built = res["run_spec"]["compact"][0]["build_us_by_source"]
    assert sum(v["tasks"] for v in built.values()) == compact["tasks"]
    assert built["BlockSource"]["tasks"] > built["ValueSource"]["tasks"] > 0
    assert {r["path"] for r in compact["report"]} <= {"compact", "kept"}


def test_key_positions_scan_a_few_then_make_the_dict(monkeypatch):
    """KeyPositions answers as the dict of the keys would, for keys in the
    graph and not, by scanning for its first few distinct keys (in steps)
    and from its dict after that."""
    from slimgraph.ingest.compact import graph as graph_mod
    from slimgraph.ingest.compact.graph import KeyPositions

    monkeypatch.setattr(graph_mod, "_POSITIONS_STEP", 7)  # several steps per scan
    keys = [("x", i) for i in range(50)] + ["y", b"z", 3, 2.5, ("w", 1, "a")]
    ref = {k: i for i, k in enumerate(keys)}
    pos = KeyPositions(keys)
    asked = [("x", 49), "nope", ("x", 0), ("x", 49), 3, ("x", 13)]
    for n, k in enumerate(asked):
        assert pos.get(k) == ref.get(k) and (k in pos) == (k in ref)
        if k in ref:
            assert pos[k] == ref[k]
        else:
            with pytest.raises(KeyError):
                pos[k]
        distinct = len(set(asked[: n + 1]))
        assert pos.made() == ([] if distinct <= KeyPositions.FEW_LOOKUPS else [ref]), (n, k)
    assert len(pos) == len(keys)
    # equal keys of another type find the same entry, as in a dict
    assert pos.get(("x", 3.0)) == ref[("x", 3)] and pos.get(2.5) == ref[2.5]


def test_one_requested_key_makes_no_positions_dict():
    """An array reduced to one key: its index answers the submission's
    questions without a dict of all its keys."""
    from slimgraph.ingest.index import index_compact

    header, frames, keys = submission(workloads.array(2000))
    graph = materialize(deserialize(header, frames), keys, False)
    index = index_compact(graph, keys)
    assert len(index.reached) == len(graph.keys) and not index.outside
    assert index.pos.made() == []
    (k,) = keys
    assert index.pos[k] == graph.keys.index(k) and index.pos.made() == []


_table_keys = st.one_of(
    st.text(max_size=3),
    st.integers(-3, 3),  # (-1 and -2 hash alike)
    st.floats(allow_nan=True, width=16),
    st.tuples(st.text(max_size=2), st.integers(0, 3)),
)


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(_table_keys, max_size=30), items=st.lists(_table_keys, max_size=30),
       also_keys=st.lists(st.integers(0, 29), max_size=10))
def test_key_table_answers_as_a_dict(keys, items, also_keys):
    """The delayed path's sorted table of hashes (no dict, so no table that
    doubles while holding the GIL) against a dict of the same keys: every
    item's position, -1 where the dict has none; the key objects themselves
    found too (a NaN finds itself, 1 finds 1.0 and True); None where two
    keys hash alike or one is listed twice."""
    from slimgraph.ingest.compact.hashjoin import KeyTable

    table = KeyTable.of(keys)
    if len({hash(k) for k in keys}) != len(keys):
        assert table is None
        return
    assert table is not None
    positions = {k: i for i, k in enumerate(keys)}
    assert len(positions) == len(keys)
    asked = items + [keys[i] for i in also_keys if i < len(keys)]
    assert table.locate(asked).tolist() == [positions.get(k, -1) for k in asked]
    for k in asked[:5]:
        assert table.locate([k]).tolist() == [positions.get(k, -1)]  # (one item)
    # renumbered: the same keys listed in reverse
    rev = keys[::-1]
    where = np.arange(len(keys), dtype=np.int64)[::-1].copy()
    again = table.renumbered(rev, where)
    assert again.locate(asked).tolist() == [{k: i for i, k in enumerate(rev)}.get(k, -1) for k in asked]


def test_key_table_in_steps():
    """More keys than a step: the hashes and the ``==`` go a step at a time
    and still answer as a dict (keys not identical to the items: equal
    strings made anew)."""
    from slimgraph.ingest.compact.hashjoin import KeyTable
    from slimgraph.runtime import steps

    n = 2 * steps.STEP + 7
    keys = [f"k-{i}" for i in range(n)]
    table = KeyTable.of(keys)
    items = ["".join(["k-", str(i)]) for i in range(n - 5, -6, -1)]  # (equal, not the same objects)
    assert items[0] is not keys[n - 5]
    want = [n - 5 - j if n - 5 - j >= 0 else -1 for j in range(len(items))]
    assert table.locate(items).tolist() == want
