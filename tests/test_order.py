"""slimgraph.order must return exactly dask.order.order's priorities.

Every test compares value by value with dask 2026.8.0 running in the same
process (dask's result depends on set iteration order, which is fixed within
a process but not across hash seeds, so only in-process comparison is
meaningful).
"""
from __future__ import annotations

import operator

import dask
import numpy as np
import pytest
from dask._task_spec import Alias, DataNode, Task, TaskRef, convert_legacy_graph
from dask.order import order as dask_order
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slimgraph.order as slim
from slimgraph.errors import CycleError, GraphError
from slimgraph.order import order, order_indexed
from slimgraph.runtime import steps


def f(*args):
    return None


def graph_of(collection) -> dict:
    return convert_legacy_graph(dict(collection.__dask_graph__()))


def assert_same(dsk):
    expected = dask_order(dsk)
    got = order(dsk)
    assert got == expected
    return got


@pytest.fixture(params=["numpy", "python"])
def stats_path(request, monkeypatch):
    """Run a test with both implementations of the statistics phase (the
    numpy one with its conversions cut into steps of 3 items, so that the
    stepped code runs: slimgraph.runtime.steps)."""
    monkeypatch.setattr(slim, "NUMPY_MIN_TASKS", 0 if request.param == "numpy" else 10**12)
    if request.param == "numpy":
        monkeypatch.setattr(steps, "STEP", 3)
    return request.param


# ---------------------------------------------------------------------------
# graphs of dask collections
# ---------------------------------------------------------------------------


def _array_graphs():
    import dask.array as da

    x = da.ones((24, 24), chunks=(3, 3))
    y = da.from_array(np.arange(24 * 24.0).reshape(24, 24), chunks=6)
    return {
        "blockwise-sum-axis0": (x + 1).sum(axis=0),
        "transpose-sum": (x + x.T).sum(),
        "mean-std": x.mean(axis=1) + x.std(axis=0),
        "rechunk": x.rechunk((8, 2)).sum(),
        "map_overlap": x.map_overlap(lambda b: b, depth=1).mean(axis=1),
        "from_array-data-roots": (y + y.T).sum(axis=1),
        "matmul": x.dot(x.T).sum(),
        "cumsum": x.cumsum(axis=0)[::2].sum(),
    }


def _dataframe_graphs():
    import pandas as pd

    import dask.dataframe as dd

    pdf = pd.DataFrame({"a": np.arange(600) % 37, "b": np.arange(600.0)})
    df = dd.from_pandas(pdf, npartitions=9)
    other = dd.from_pandas(pdf.rename(columns={"b": "c"}), npartitions=5)
    return {
        "groupby": df.groupby("a").b.sum(),
        "groupby-split": df.groupby("a").b.mean(split_out=3),
        "shuffle": df.shuffle("a"),
        "merge": df.merge(other, on="a"),
        "set_index": df.set_index("b", sorted=True).a.sum(),
    }


def _bag_delayed_graphs():
    import dask.bag as db

    b = db.from_sequence(range(200), npartitions=13)
    out = {
        "bag-fold": b.map(lambda v: v + 1).fold(operator.add),
        "bag-groupby": b.groupby(lambda v: v % 7),
        "bag-frequencies": b.map(lambda v: v % 5).frequencies(),
    }
    g = dask.delayed(f, pure=True)
    leaves = []
    for i in range(60):
        v = g(i)
        for j in range(i % 5):
            v = g(v, j)
        leaves.append(v)
    while len(leaves) > 1:
        leaves = [g(*leaves[i : i + 3]) for i in range(0, len(leaves), 3)]
    out["delayed-tree-of-chains"] = leaves[0]
    shared = g("shared")
    out["delayed-shared"] = g(*[g(shared, i) for i in range(20)], *[g(g(i)) for i in range(5)])
    return out


COLLECTIONS = {}
for _maker in (_array_graphs, _dataframe_graphs, _bag_delayed_graphs):
    COLLECTIONS.update({name: (_maker, name) for name in _maker().keys()})


@pytest.mark.parametrize("name", sorted(COLLECTIONS))
def test_collection_graphs(name, stats_path):
    maker, key = COLLECTIONS[name]
    dsk = graph_of(maker()[key])
    got = assert_same(dsk)
    assert sorted(got.values()) == list(range(len(dsk)))



@pytest.mark.parametrize("name", sorted(COLLECTIONS))
def test_ingestion_reuses_its_index_for_ordering(name):
    """The engine orders on the index its cull phase built (no second
    numbering); the priorities must still be dask's, value for value."""
    from slimgraph.ingest.index import compute_order, index_graph

    maker, key = COLLECTIONS[name]
    coll = maker()[key]
    dsk = graph_of(coll)
    index = index_graph(dsk, list(dsk), cull=False)
    got = compute_order(index)
    assert isinstance(got, list), "a collection's graph takes the indexed path"
    assert dict(zip(index.keys, got)) == dask_order(dsk)

# ---------------------------------------------------------------------------
# hand-built shapes
# ---------------------------------------------------------------------------


def T(key, *deps):
    return Task(key, f, *[TaskRef(d) for d in deps])


def test_many_roots_one_reducer(stats_path):
    dsk = {("r", i): T(("r", i)) for i in range(300)}
    dsk["total"] = T("total", *[("r", i) for i in range(300)])
    assert_same(dsk)


def test_long_chains_beside_wide_fanouts(stats_path):
    dsk = {}
    for c in range(4):
        prev = None
        for i in range(120):
            k = (f"chain{c}", i)
            dsk[k] = T(k) if prev is None else T(k, prev)
            prev = k
    dsk["split"] = T("split", ("chain0", 10))
    for j in range(150):
        dsk[("fan", j)] = T(("fan", j), "split", ("chain1", j % 120))
    dsk["end"] = T("end", *[("fan", j) for j in range(0, 150, 7)], ("chain3", 119))
    assert_same(dsk)


def test_disconnected_components_and_isolated_tasks(stats_path):
    dsk = {}
    for comp in range(5):
        for i in range(comp * 3 + 1):
            k = (f"c{comp}", i)
            dsk[k] = T(k, *([(f"c{comp}", i - 1)] if i else []))
    for i in range(7):
        dsk[f"lonely-{i}"] = T(f"lonely-{i}")
    dsk["lonely-data"] = DataNode("lonely-data", 3)
    assert_same(dsk)


def test_isolated_tasks_decide_symmetry_by_set_order(stats_path):
    # roots with equal leaf counts plus isolated ones: dask's answer depends
    # on where the isolated tasks sit in its root set
    for n_iso in range(1, 12):
        dsk = {}
        for i in range(6):
            dsk[("a", i)] = T(("a", i))
            dsk[("b", i)] = T(("b", i), ("a", i))
        for i in range(n_iso):
            dsk[f"iso{i}"] = T(f"iso{i}")
        assert_same(dsk)


def test_diamonds(stats_path):
    dsk = {"top": T("top")}
    prev = ["top"]
    for level in range(30):
        cur = []
        for j in range(3):
            k = ("d", level, j)
            dsk[k] = T(k, *prev)
            cur.append(k)
        prev = cur
    dsk["bottom"] = T("bottom", *prev)
    assert_same(dsk)


def test_totals_beyond_int64(stats_path):
    # path counts double per level: 2**80 overflows int64 sort keys
    dsk = {("l", 0, 0): T(("l", 0, 0)), ("l", 0, 1): T(("l", 0, 1))}
    for level in range(1, 80):
        for j in range(2):
            k = ("l", level, j)
            dsk[k] = T(k, ("l", level - 1, 0), ("l", level - 1, 1))
    got = assert_same(dsk)
    assert len(got) == 160


def test_ties_between_critical_paths(stats_path):
    # identical subgraphs: only str(key) separates them
    dsk = {}
    for s in ["b", "a", "c", "aa", "B"]:
        for i in range(4):
            dsk[(s, i)] = T((s, i))
            dsk[(s, "m", i)] = T((s, "m", i), (s, i))
        dsk[(s, "sum")] = T((s, "sum"), *[(s, "m", i) for i in range(4)])
    assert_same(dsk)
    dsk["all"] = T("all", *[(s, "sum") for s in ["b", "a", "c", "aa", "B"]])
    assert_same(dsk)


def test_mixed_key_types(stats_path):
    keys = ["s", ("t", 1), 7, 2.5, ("t", 2, "x"), "z-1", 10**20, -3, ("t", (1, 2))]
    dsk = {}
    for i, k in enumerate(keys):
        dsk[k] = T(k, *keys[max(0, i - 2) : i])
    dsk["end"] = T("end", *keys)
    assert_same(dsk)


def test_keys_with_equal_str_fall_back_exactly():
    # 1 and '1' have the same str(); dask then breaks ties by set order
    dsk = {1: T(1), "1": T("1"), "x": T("x", 1, "1"), (1,): T((1,)), "(1,)": T("(1,)", (1,))}
    assert_same(dsk)
    assert slim._str_ties_possible(list(dsk), len(dsk))
    assert not slim._str_ties_possible(["a", ("a", 1), 2], 3)


def test_external_keys(stats_path):
    # dependencies outside the graph are data roots without a priority
    dsk = {
        "a": T("a", "ext1"),
        "b": T("b", "ext2", "a"),
        "c": T("c", "ext2"),
        "d": T("d", "ext3", "ext2", "b", "c"),
    }
    got = assert_same(dsk)
    assert set(got) == set(dsk)


def test_data_roots_alias_and_datanodes(stats_path):
    dsk = {"data": DataNode("data", 1), "data2": DataNode("data2", 2)}
    for i in range(10):
        dsk[("x", i)] = T(("x", i), "data", *(["data2"] if i % 3 == 0 else []))
        dsk[("al", i)] = Alias(("al", i), ("x", i))
    dsk["sum"] = T("sum", *[("al", i) for i in range(10)])
    dsk["single-data"] = DataNode("single-data", 0)
    dsk["uses-single"] = T("uses-single", "single-data", "sum")
    assert_same(dsk)


def test_legacy_graphs_with_alias_leaves():
    # plain tuples and lists, as dask.order accepts them: non-task leaves with
    # several dependencies (da.store-like) are removed and put at the end
    dsk = {
        "x0": 1,
        ("y", 1): ["x0"],
        ("y", 2): (operator.add, "x0", "x0"),
        "x3": (operator.add, ("y", 1), ("y", 1)),
        "x4": [("y", 2), ("y", 1)],
        "x5": (operator.add, "x4", "x3"),
        ("y", 6): [("y", 1), "x5"],
        "store": [("y", 2), "x3", "x5"],
    }
    assert_same(dsk)


def test_empty_and_single():
    assert order({}) == dask_order({}) == {}
    assert order({"a": T("a")}) == dask_order({"a": T("a")})
    assert order_indexed([], []) == []


def test_dependencies_argument_is_ignored_like_dask():
    dsk = {"a": T("a"), "b": T("b", "a")}
    assert order(dsk, dependencies={"a": set(), "b": set()}) == dask_order(dsk)


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------


def test_cycle_raises_cycle_error(stats_path):
    dsk = {"a": T("a", "c"), "b": T("b", "a"), "c": T("c", "b"), "ok": T("ok"), "d": T("d", "a")}
    with pytest.raises(RuntimeError):
        dask_order(dsk)  # dask raises RuntimeError; so do we (a subclass)
    with pytest.raises(CycleError) as info:
        order(dsk)
    err = info.value
    assert isinstance(err, GraphError) and isinstance(err, RuntimeError)
    cyc = err.keys
    assert set(cyc) == {"a", "b", "c"}
    assert "a" in str(err)


def test_self_loop_is_a_cycle(stats_path):
    with pytest.raises(CycleError) as info:
        order_indexed(["x", "y"], [(1,), (1,)])
    assert "y" in info.value.keys


def test_order_indexed_rejects_ragged_input():
    with pytest.raises(ValueError):
        order_indexed(["a", "b"], [()])


# ---------------------------------------------------------------------------
# order_indexed and random graphs
# ---------------------------------------------------------------------------


def tasks_from_indexed(keys, deps, data=()):
    """The graph order_indexed(keys, deps, data=data) stands for."""
    data = set(data)
    return {
        k: DataNode(k, 0) if i in data else T(k, *[keys[j] for j in deps[i]])
        for i, k in enumerate(keys)
    }


def test_order_indexed_matches_task_graph(stats_path):
    keys = [("k", i) for i in range(40)] + ["s", 3]
    deps = [tuple(range(max(0, i - 3), i)) for i in range(40)] + [(39, 5, 5), (40, 0)]
    dsk = tasks_from_indexed(keys, deps, data=[0])
    got = order_indexed(keys, deps, data=[0])
    expected = dask_order(dsk)
    assert got == [expected[k] for k in keys]


@st.composite
def random_dags(draw, max_nodes=400):
    n = draw(st.integers(1, max_nodes))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    window = draw(st.sampled_from([3, 10, 50, n]))
    p_root = draw(st.sampled_from([0.02, 0.1, 0.3]))
    max_deg = draw(st.sampled_from([1, 2, 4, 12]))
    key_kind = draw(st.sampled_from(["str", "tuple", "int", "mixed", "collection"]))
    p_data = draw(st.sampled_from([0.0, 0.2, 0.6]))
    p_ext = draw(st.sampled_from([0.0, 0.0, 0.03]))
    keys = []
    for i in range(n):
        if key_kind == "str":
            keys.append(f"t-{i}")
        elif key_kind == "tuple":
            keys.append(("t", i // 10, i % 10))
        elif key_kind == "int":
            keys.append(i * 7)
        elif key_kind == "collection":
            # keys as dask collections make them (ordered without str())
            keys.append(_collection_key(i, rng))
        else:
            keys.append([f"m{i}", ("m", i), i, i + 0.5][i % 4])
    dsk = {}
    for i in range(n):
        if i == 0 or rng.random() < p_root:
            ds = []
        else:
            lo = max(0, i - window)
            ds = [keys[j] for j in rng.integers(lo, i, size=rng.integers(1, max_deg + 1))]
        if p_ext and rng.random() < p_ext:
            ds.append(("ext", int(rng.integers(0, 4))))
        k = keys[i]
        if not ds and rng.random() < p_data:
            dsk[k] = DataNode(k, 0)
        elif len(set(ds)) == 1 and rng.random() < 0.1:
            dsk[k] = Alias(k, ds[0])
        else:
            dsk[k] = T(k, *ds)
    items = list(dsk.items())
    if draw(st.booleans()):
        rng.shuffle(items)  # not topologically ordered
    return dict(items)


def _collection_key(i, rng):
    """A unique tuple key of a name and ints/floats/strs, as dask collections
    name their tasks (``map_overlap`` uses floats), with numbers whose
    decimal strings sort unlike their values."""
    names = ["x", "x-1", "x'y", 'x"y', "sum-aggregate", "sum", "é"]
    name = names[i % len(names)]
    rest = []
    for _ in range(int(rng.integers(1, 4))):
        r = rng.random()
        if r < 0.6:
            rest.append(int(rng.choice([0, 1, 2, 9, 10, 11, 19, 100, -1, -10, 10**15])))
        elif r < 0.8:
            rest.append(float(rng.choice([0.5, 1.5, 10.5, -0.5, 1e16, 2.0])))
        else:
            rest.append(str(rng.choice(["a", "b", ""])))
    # i makes the key unique (and its str: no two keys print alike)
    return (name, *rest, i)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dsk=random_dags(), numpy_path=st.booleans())
def test_random_dags(dsk, numpy_path):
    old = slim.NUMPY_MIN_TASKS
    slim.NUMPY_MIN_TASKS = 0 if numpy_path else 10**12
    try:
        assert order(dsk) == dask_order(dsk)
    finally:
        slim.NUMPY_MIN_TASKS = old


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dsk=random_dags(max_nodes=3000))
def test_random_large_dags(dsk):
    assert order(dsk) == dask_order(dsk)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 200),
    seed=st.integers(0, 2**32 - 1),
    dup=st.booleans(),
)
def test_random_order_indexed(n, seed, dup):
    rng = np.random.default_rng(seed)
    keys = [f"n{i}" if i % 3 else ("n", i) for i in range(n)]
    deps = []
    for i in range(n):
        if i and rng.random() < 0.8:
            row = [int(j) for j in rng.integers(0, i, size=rng.integers(1, 5))]
            if dup:
                row.append(row[0])
            deps.append(tuple(row))
        else:
            deps.append(())
    data = [i for i in range(n) if not deps[i] and rng.random() < 0.3]
    expected = dask_order(tasks_from_indexed(keys, deps, data))
    assert order_indexed(keys, deps, data=data) == [expected[k] for k in keys]


@st.composite
def legacy_graphs(draw):
    """Raw dict graphs (tuples, lists of keys, literals) as dask.order also
    accepts them: exercises the removal of non-task leaves and roots."""
    n = draw(st.integers(2, 120))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dsk = {}
    for i in range(n):
        k = f"x{i}" if rng.random() < 0.5 else ("y", i)
        prev = list(dsk)
        r = rng.random()
        if not prev or r < 0.15:
            dsk[k] = int(rng.integers(0, 9))
        elif r < 0.3:
            dsk[k] = [prev[j] for j in rng.choice(len(prev), min(len(prev), 3), replace=False)]
        else:
            a, b = (prev[j] for j in rng.integers(0, len(prev), size=2))
            dsk[k] = (operator.add, a, b)
    return dsk


def outcome(fn, dsk):
    """The result, or the type of the exception ``fn(dsk)`` raises."""
    try:
        return fn(dsk)
    except Exception as e:  # noqa: BLE001 - compared below, not swallowed
        return type(e)


@settings(max_examples=60, deadline=None)
@given(dsk=legacy_graphs())
def test_random_legacy_graphs(dsk):
    """Same priorities as dask, or the same failure where dask fails."""
    expected = outcome(dask_order, dsk)
    assert outcome(order, dsk) == expected


def test_dask_failure_on_orphaned_data_root_is_reproduced():
    """A data root whose dependents are all alias leaves removed after it
    never gets a priority in dask 2026.8: ``dask.order`` runs out of leaves
    and raises ``IndexError``. Equivalence means failing the same way (a
    hypothesis run found this; minimised by hand)."""
    dsk = {
        "x4": (operator.add, 1, 1),
        ("y", 9): [],
        ("y", 31): (operator.add, 1, 1),
        ("y", 40): 7,
        ("y", 42): (operator.add, 1, 1),
        ("y", 49): [("y", 40), "x4", ("y", 42)],
        ("y", 55): [("y", 40), ("y", 31), ("y", 9)],
        "x56": 3,
        "x68": [("y", 55), ("y", 42)],
        ("y", 69): [("y", 49), "x56"],
    }
    assert outcome(dask_order, dsk) is IndexError
    assert outcome(order, dsk) is IndexError


_elements = st.one_of(
    st.integers(),
    st.integers(-20, 120),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.sampled_from(["a", "a'", 'a"', "a'\"", "a\\", "ab", ""]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_elements, _elements) | st.tuples(_elements, _elements, _elements), min_size=2, max_size=40))
def test_str_order_columns_sort_like_str(keys):
    """The integer columns that stand in for ``str(key)`` order tuple keys
    exactly as their strings do (where they apply)."""
    keys = list({str(k): k for k in keys}.values())  # distinct str, as required
    cols = slim._str_order_columns(keys, np)
    if cols is None:
        return
    got = [keys[i] for i in np.lexsort(cols[::-1])]
    assert got == sorted(keys, key=str)


def test_str_order_columns_decline_other_keys():
    assert slim._str_order_columns([("a",), ("b", 1)], np) is None  # "(x,)"
    assert slim._str_order_columns([("a", True), ("b", 1)], np) is None
    assert slim._str_order_columns([("a", 1), "b"], np) is None
    assert slim._str_order_columns([("a", b"x"), ("b", 1)], np) is None
    assert slim._str_order_columns([("a", ("b", 1)), ("b", 1)], np) is None
    big = slim._str_order_columns([("a", 10**30), ("a", 9), ("a", -(10**30))], np)
    assert big is not None  # beyond int64: ranked by repr instead
