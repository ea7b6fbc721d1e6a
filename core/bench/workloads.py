"""Graph builders sized by an approximate task count.

Each returns a dask collection whose graph has roughly ``n`` tasks once
materialized on the scheduler (the benchmark reports the exact count).
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable


def array(n: int) -> Any:
    """``(ones + 1).sum(axis=0)`` on a square grid of chunks (the seed
    report's workload): one fused task per chunk plus the reduction tree."""
    import dask.array as da

    side = max(2, int(math.sqrt(n / 1.34)))
    return (da.ones((side * 2, side * 2), chunks=2) + 1).sum(axis=0)


def _inc(x: Any) -> Any:
    return x + 1


def _add(*xs: Any) -> Any:
    return sum(xs)


def delayed(n: int, chain: int = 4, fan_in: int = 4) -> Any:
    """Tree reduction of chains (the 1M-task report's shape), built with
    dask.delayed: ``leaves`` chains of ``chain`` increments, then a tree
    that sums ``fan_in`` at a time."""
    from dask import delayed as dl

    leaves = max(2, int(n / (chain + 1 + 1 / (fan_in - 1))))
    inc = dl(_inc, pure=True)
    add = dl(_add, pure=True)
    xs = []
    for i in range(leaves):
        x = i
        for _ in range(chain):
            x = inc(x)
        xs.append(x)
    while len(xs) > 1:
        xs = [add(*xs[i : i + fan_in]) for i in range(0, len(xs), fan_in)]
    return xs[0]


def dataframe(n: int) -> Any:
    """groupby-aggregation after a column op, over many small partitions."""
    import dask.dataframe as dd

    parts = max(2, n // 4)
    ddf = dd.from_map(_part, range(parts))
    return (ddf.assign(c=ddf.b + 1)).groupby("a").c.sum(split_every=8)


def _part(i: int) -> Any:
    import pandas as pd

    return pd.DataFrame({"a": [1, 2, 3, 4] * 2, "b": range(i, i + 8)})


def bag(n: int) -> Any:
    import dask.bag as db

    parts = max(2, n // 3)
    return db.from_sequence(range(parts * 2), npartitions=parts).map(_inc).fold(operator.add)


WORKLOADS: dict[str, Callable[[int], Any]] = {
    "array": array,
    "delayed": delayed,
    "dataframe": dataframe,
    "bag": bag,
}
