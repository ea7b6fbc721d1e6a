"""Errors for bad submissions. All are ValueErrors, and all are raised
before the scheduler state is touched (see slimgraph.ingest)."""
from __future__ import annotations


class GraphError(ValueError):
    """A submitted graph the scheduler refuses."""


class CycleError(GraphError):
    """The graph has a cycle; ``keys`` lists keys on it, in cycle order."""

    def __init__(self, keys: list):
        self.keys = list(keys)
        shown = ", ".join(map(repr, self.keys[:8]))
        more = f" (+{len(self.keys) - 8} more)" if len(self.keys) > 8 else ""
        super().__init__(f"Cycle detected between the following keys: {shown}{more}")


class InvalidKeyError(GraphError):
    """A key of a type dask does not accept."""
