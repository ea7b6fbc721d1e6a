"""The signal that a submission (or one of its steps) leaves the compact path."""
from __future__ import annotations


class Unsupported(Exception):
    """Raised where the compact materialization cannot prove that it gives
    exactly dask's result (a layer type it does not know, a construct whose
    conversion dask's cull and dask's converter read differently, a key
    collision, ...). The caller then materializes with dask itself, which
    is always correct; the reason goes into the report."""


class OrderDependent(Unsupported):
    """dask's HighLevelGraph cull would order some layer by iterating a set
    of keys whose layout depends on the whole cull's history (a partial cull
    with more than one surviving key). The caller then runs dask's own
    HighLevelGraph cull and compacts its result."""
