"""The workloads: graph builders sized by an approximate task count.

One module for everything that submits a workload: the benchmark
(``python -m slimgraph bench``), the profile command, the dashboard's
launcher and the walkthrough notebook, so that "array, 10,000 tasks" is the
same graph everywhere. These are the benchmark's definitions: the figures it
published (benchmarks/RESULTS.md) were measured on exactly these graphs.

Each builder takes ``n``, any positive integer, and returns a dask
collection whose graph has roughly ``n`` tasks once materialized on the
scheduler (measured: array 1.0x, delayed 0.81x, dataframe 1.0x, bag 0.72x
of ``n``; the benchmark reports the exact count). The callables in the
graphs are dask's, the standard library's, and this module's functions:
workers unpickle them by reference, so a worker must be able to import
``slimgraph`` for the delayed, dataframe and bag workloads.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable


def validate_tasks(n: int) -> int:
    """``n`` as an int, or a ValueError saying a task count must be a positive integer."""
    try:
        count = operator.index(n)
    except TypeError:
        count = 0
    if isinstance(n, bool) or count < 1:
        raise ValueError(f"the task count must be a positive integer, not {n!r}")
    return count


def array_side(n: int) -> int:
    """The side, in blocks, of the square grid of about ``n`` tasks that
    :func:`array` builds (its layers make about 1.34 tasks per block)."""
    return max(2, int(math.sqrt(validate_tasks(n) / 1.34)))


def array(n: int, chunk: int = 2, offset: Any = 1) -> Any:
    """``(ones + offset).sum(axis=0)`` on a square grid of ``chunk`` x
    ``chunk`` chunks (the seed report's workload): one fused task per chunk
    plus the reduction tree. A number ``offset`` changes the keys, not the
    shape; :func:`array_inputs` (persisted) makes each block depend on data
    already on the cluster."""
    import dask.array as da

    side = array_side(n)
    return (da.ones((side * chunk, side * chunk), chunks=chunk) + offset).sum(axis=0)


def array_inputs(n: int, chunk: int = 2) -> Any:
    """A row of ``array(n)``'s width, one chunk per column of blocks: as
    ``array(n, offset=client.persist(array_inputs(n)))`` every block task
    depends on one persisted key (a user's ``x = x.persist()`` before a big
    computation). About ``sqrt(n)`` tasks."""
    import dask.array as da

    return da.arange(array_side(n) * chunk, chunks=chunk)


def _inc(x: Any) -> Any:
    return x + 1


def _add(*xs: Any) -> Any:
    return sum(xs)


def delayed(n: int, chain: int = 4, fan_in: int = 4, inputs: Any = None) -> Any:
    """Tree reduction of chains (the 1M-task report's shape), built with
    dask.delayed: ``leaves`` chains of ``chain`` increments, then a tree
    that sums ``fan_in`` at a time. With ``inputs`` (a list of futures,
    e.g. ``client.scatter(range(64))``) chain ``i`` starts by adding
    ``inputs[i % len(inputs)]`` to ``i`` instead of incrementing ``i``."""
    from dask import delayed as dl

    leaves = max(2, int(validate_tasks(n) / (chain + 1 + 1 / (fan_in - 1))))
    inc = dl(_inc, pure=True)
    add = dl(_add, pure=True)
    xs = []
    for i in range(leaves):
        if inputs is None:
            x = inc(i)
        else:  # i keeps the chains apart (pure: equal arguments, one key)
            x = add(inputs[i % len(inputs)], i)
        for _ in range(chain - 1):
            x = inc(x)
        xs.append(x)
    while len(xs) > 1:
        xs = [add(*xs[i : i + fan_in]) for i in range(0, len(xs), fan_in)]
    return xs[0]


def dataframe(n: int) -> Any:
    """groupby-aggregation after a column op, over many small partitions
    (about 10 tasks per partition once dask has optimized the graph)."""
    import dask.dataframe as dd

    parts = max(2, validate_tasks(n) // 10)
    ddf = dd.from_map(_part, range(parts))
    return (ddf.assign(c=ddf.b + 1)).groupby("a").c.sum(split_every=8)


def _part(i: int) -> Any:
    import pandas as pd

    return pd.DataFrame({"a": [1, 2, 3, 4] * 2, "b": range(i, i + 8)})


def bag(n: int) -> Any:
    import dask.bag as db

    parts = max(2, validate_tasks(n) // 3)
    return db.from_sequence(range(parts * 2), npartitions=parts).map(_inc).fold(operator.add)


WORKLOADS: dict[str, Callable[[int], Any]] = {
    "array": array,
    "delayed": delayed,
    "dataframe": dataframe,
    "bag": bag,
}

#: Size presets of the dashboard's launcher (any positive integer works).
SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000, "1M": 1_000_000}


def build(workload: str, tasks: int) -> Any:
    """``WORKLOADS[workload](tasks)``, with a clear error for a bad name."""
    try:
        builder = WORKLOADS[workload]
    except KeyError:
        raise ValueError(
            f"unknown workload {workload!r}; choose one of {', '.join(WORKLOADS)}"
        ) from None
    return builder(tasks)
