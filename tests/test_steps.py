"""slimgraph.runtime.steps: the stepped conversions give what the one-call
ones give, at and around the step boundaries."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slimgraph.ingest.compact.fuse import _in_order
from slimgraph.runtime import steps


@pytest.fixture(autouse=True)
def small_steps(monkeypatch):
    monkeypatch.setattr(steps, "STEP", 4)


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 8, 9, 17])
def test_conversions_equal_the_one_call_ones(n):
    ints = [(i * 7919) % 23 - 11 for i in range(n)]
    a = np.asarray(ints, dtype=np.int64)
    assert steps.tolist(a) == a.tolist() and all(type(x) is int for x in steps.tolist(a))
    got = steps.int_array(ints, np)
    assert got.dtype == np.int64 and got.tolist() == ints
    got = steps.int64_array(ints)
    assert got.dtype == np.int64 and got.tolist() == ints
    # a view of the permutation reads as its ints, in steps
    perm = np.argsort(np.asarray(ints, dtype=np.int64), kind="stable")
    assert steps.list_map(ints.__getitem__, memoryview(perm)) == [ints[i] for i in perm.tolist()]
    objs = np.empty(n, dtype=object)
    objs[:] = [(i,) for i in range(n)]
    assert steps.tolist(objs) == objs.tolist()
    keys = [("x", i, str(i % 3)) for i in range(n)]
    assert steps.list_map(len, keys) == list(map(len, keys))
    lens = steps.int64s(len, keys)
    assert lens.dtype == np.int64 and lens.tolist() == list(map(len, keys))
    assert steps.int64s(len, keys, step=3).tolist() == list(map(len, keys))
    assert steps.types_of([*keys, *ints]) == set(map(type, [*keys, *ints]))
    assert steps.distinct([k[2] for k in keys]) == {k[2] for k in keys}
    d = {k: i for i, k in enumerate(keys)}
    assert steps.list_of(d) == list(d) and steps.list_of(d.values()) == list(d.values())
    assert steps.list_of(iter(keys)) == keys


def test_int64_array_refuses_what_is_not_a_64_bit_int():
    for bad in ([1, 2, 3, 4, 5, 2.5], [1, 2, 3, 4, 5, 2**63], [1, 2, 3, 4, 5, "6"]):
        with pytest.raises((TypeError, OverflowError)):
            steps.int64_array(bad)


def test_int_array_overflows_like_numpy():
    """The ordering's _decimal_order relies on OverflowError for ints that
    do not fit, in any step."""
    with pytest.raises(OverflowError):
        steps.int_array([1, 2, 3, 4, 5, 2**70], np)


@given(st.lists(st.integers(-2, 12), max_size=14), st.integers(0, 13))
def test_fuse_in_order_answers_like_the_one_call(items, n):
    assert _in_order(items, n) == all(map(int.__eq__, items, range(n)))
