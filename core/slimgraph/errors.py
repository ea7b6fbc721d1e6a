"""Errors for bad submissions, raised before the scheduler state is touched
(see :mod:`slimgraph.ingest`).

A client sees the exception update_graph raised (as ``task-erred``), so code
written against stock must catch slimgraph's errors where it catches
stock's: each class also derives from the builtin type stock (or dask) raises
for the same input. A cycle is a ``RuntimeError`` from ``dask.order`` on
stock; a key of a type dask does not accept is a ``TypeError`` in dask's own
``validate_key`` (stock's scheduler accepts such a graph and then never runs
it; slimgraph refuses it with this error instead).
"""
from __future__ import annotations


class GraphError(Exception):
    """A submitted graph the scheduler refuses."""


class CycleError(GraphError, RuntimeError):
    """The graph has a cycle; ``keys`` lists keys on it, in cycle order."""

    def __init__(self, keys: list):
        self.keys = list(keys)
        shown = ", ".join(map(repr, self.keys[:8]))
        more = f" (+{len(self.keys) - 8} more)" if len(self.keys) > 8 else ""
        super().__init__(f"Cycle detected between the following keys: {shown}{more}")

    def __reduce__(self) -> tuple:  # pickled to the client as task-erred
        return (type(self), (self.keys,))


class InvalidKeyError(GraphError, TypeError):
    """A key of a type dask does not accept."""
