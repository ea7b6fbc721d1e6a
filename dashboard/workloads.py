"""Workloads the launcher can submit: array, dataframe, delayed, bag.

Each builder takes an approximate task count and returns a dask collection
(``client.compute`` takes it). Only dask and stdlib callables are used, so
worker processes never need to import this module.
"""
from __future__ import annotations

import math
import operator
from functools import partial

WORKLOADS = ("array", "dataframe", "delayed", "bag")
SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000, "1M": 1_000_000}

_inc = partial(operator.add, 1)


def array(tasks: int):
    import dask.array as da

    # (x + 1).sum(axis=0): ones and +1 fuse; ~1.35 tasks per chunk with the tree reduction.
    side = max(2, int(math.sqrt(tasks / 1.35)))
    x = da.ones((side * 10, side * 10), chunks=(10, 10))
    return (x + 1).sum(axis=0)


def dataframe(tasks: int):
    import numpy as np
    import dask.dataframe as dd

    nparts = max(2, int(tasks / 8.7))  # ~8.7 tasks per partition after optimization
    n = nparts * 4
    df = dd.from_dict({"x": np.arange(n), "y": np.arange(n) % 7}, npartitions=nparts)
    return (df.x + 1).groupby(df.y).sum()


def delayed(tasks: int):
    from dask import delayed as dl

    leaves = [dl(_inc)(i) for i in range(max(2, tasks // 2))]
    while len(leaves) > 1:
        leaves = [
            dl(operator.add)(leaves[i], leaves[i + 1]) if i + 1 < len(leaves) else leaves[i]
            for i in range(0, len(leaves), 2)
        ]
    return leaves[0]


def bag(tasks: int):
    import dask.bag as db

    nparts = max(2, int(tasks / 2.15))  # ~2.15 tasks per partition (map fuses)
    return db.range(nparts * 2, npartitions=nparts).map(_inc).fold(operator.add)


BUILDERS = {"array": array, "dataframe": dataframe, "delayed": delayed, "bag": bag}


def build(workload: str, size: str | int):
    tasks = SIZES[size] if isinstance(size, str) else int(size)
    return BUILDERS[workload](tasks)
