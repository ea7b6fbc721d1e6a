"""Phase records: what one ``update_graph`` spent, phase by phase.

Both schedulers produce the same records: the slim engine times its own
phases, and :mod:`slimgraph.instrument.stock_recorder` times an unmodified stock
scheduler from the outside. Everything that shows time (the benchmark, the
profile command, the dashboard, the notebooks) reads these records, so they
are plain data: dataclasses that turn into dicts and DataFrame rows.

A :class:`PhaseClock` measures one phase: wall and CPU seconds, bytes
allocated (from ``tracemalloc`` when it is already tracing, else ``None``),
and time spent in the cyclic garbage collector, which stock loses a third of
its time to.
"""
from __future__ import annotations

import gc
import itertools
import os
import threading
import time
import tracemalloc
from bisect import bisect_right
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

import psutil

from slimgraph.instrument.blame import CAUSES

#: The phases of an update_graph, in pipeline order. Stock and slim use the
#: same names so their records line up column by column.
PHASES = (
    "deserialize",
    "materialize",
    "cull",
    "lost_dependencies",
    "order",
    "task_states",
    "annotations",
    "priorities",
    "who_wants",
    "transitions",
    "plugins",
    "commit",
)

#: Phases the slim engine owns (everything but dask's materialization and
#: the ordering, which has its own target).
OWNED_PHASES = (
    "cull",
    "lost_dependencies",
    "task_states",
    "annotations",
    "priorities",
    "who_wants",
    "transitions",
    "commit",
)


class _GCWatch:
    """Accumulates cyclic-GC pause time process-wide through ``gc.callbacks``.

    One instance is installed lazily; clocks read the running totals at their
    start and end, so nested and concurrent clocks all see correct deltas.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._t0 = 0.0
        self._lock = threading.Lock()

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            with self._lock:
                self.seconds += time.perf_counter() - self._t0
                self.collections += 1


_gc_watch: _GCWatch | None = None


def gc_watch() -> _GCWatch:
    global _gc_watch
    if _gc_watch is None:
        _gc_watch = _GCWatch()
        gc.callbacks.append(_gc_watch)
    return _gc_watch


@dataclass
class PhaseRecord:
    """One phase of one update_graph."""

    name: str
    wall_s: float = 0.0
    cpu_s: float = 0.0
    tasks: int = 0
    edges: int = 0
    alloc_bytes: int | None = None
    gc_s: float = 0.0
    gc_collections: int = 0
    #: Where the phase ran: "event-loop" (blocks the scheduler) or "offload"
    #: (a thread off the loop: distributed's offload thread for stock,
    #: slimgraph.runtime.threads for slim; it still holds the GIL).
    where: str = "event-loop"
    #: Longest event-loop block that overlapped this phase (seconds), when a
    #: loop monitor was attached: says which phase a long block came from.
    longest_block_s: float | None = None

    def __post_init__(self) -> None:
        # perf_counter (start, end) of each run of the phase; not a field, so
        # it stays out of rows and JSON
        self.spans: list = []

    def longest_overlap(self, blocks: Any) -> float:
        """Longest part of any ``(end, duration)`` block inside this phase.

        ``blocks`` in time order, as the loop monitor keeps them. Per run of
        the phase only the blocks that can overlap it are looked at (found
        by bisection): every block against every run, for every phase, is
        quadratic, a long step of the event loop at the end of a big
        submission with thousands of blocks."""
        if not blocks or not self.spans:
            return 0.0
        ends = [e for e, _ in blocks]
        longest = max(d for _, d in blocks)
        best = 0.0
        n = len(blocks)
        for a, b in self.spans:
            # a block overlaps [a, b] if it ends after a and starts before
            # b; it starts at most ``longest`` before its end (compared as
            # ``end - longest``, which rounds the way ``end - dur`` does:
            # ``b + longest`` can round down onto a block that overlaps)
            j = bisect_right(ends, a)
            while j < n:
                end, dur = blocks[j]
                if end - longest >= b:
                    break
                overlap = min(end, b) - max(end - dur, a)
                if overlap > best:
                    best = overlap
                j += 1
        return best


class PhaseClock:
    """Context manager that fills a :class:`PhaseRecord`.

    >>> rec = SubmissionRecord(scheduler="slim")
    >>> with rec.phase("cull") as p:
    ...     p.tasks = 10
    """

    __slots__ = ("record", "_w", "_c", "_gs", "_gn", "_m")

    def __init__(self, record: PhaseRecord):
        self.record = record

    def __enter__(self) -> PhaseRecord:
        w = gc_watch()
        self._gs, self._gn = w.seconds, w.collections
        self._m = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else None
        self._c = time.thread_time()
        self._w = time.perf_counter()
        return self.record

    def __exit__(self, *exc: Any) -> None:
        r = self.record
        now = time.perf_counter()
        r.spans.append((self._w, now))
        r.wall_s += now - self._w
        r.cpu_s += time.thread_time() - self._c
        w = gc_watch()
        r.gc_s += w.seconds - self._gs
        r.gc_collections += w.collections - self._gn
        if self._m is not None and tracemalloc.is_tracing():
            r.alloc_bytes = (r.alloc_bytes or 0) + tracemalloc.get_traced_memory()[0] - self._m


_ids = itertools.count(1)


def rss_bytes() -> int:
    return psutil.Process(os.getpid()).memory_info().rss


@dataclass
class SubmissionRecord:
    """Everything measured about one update_graph call."""

    scheduler: str  # "slim" or "stock"
    submission_id: int = field(default_factory=lambda: next(_ids))
    client: str | None = None
    stimulus_id: str | None = None
    start: float = field(default_factory=time.time)
    tasks: int = 0
    new_tasks: int = 0
    edges: int = 0
    phases: list[PhaseRecord] = field(default_factory=list)
    total_s: float = 0.0
    #: Longest stretch the event loop was blocked during this submission
    #: (seconds), when a loop monitor was attached.
    longest_block_s: float | None = None
    rss_before: int | None = None
    rss_after: int | None = None
    status: str = "running"  # running / OK / cancelled / error
    error: str | None = None
    #: how the graph reached the scheduler's state: "staged" (built off the
    #: event loop, published in one commit), "in place: <why not staged>",
    #: or "stock"
    ingestion: str | None = None
    #: how dask's side of the graph was materialized (slim only):
    #: ``compact`` (no dask node per task; see ``layers``), ``compact, N
    #: tasks by dask`` (some layers or steps went to dask), ``dask: <why>``
    #: (the whole graph, e.g. a dataframe expression), or ``dask
    #: (compact-ingestion off)``; None for stock
    materialization: str | None = None
    #: which path each layer took, as ``{"name", "type", "path", "tasks",
    #: "layers", "reason"}`` (``path``: ``compact``, ``kept`` or ``dask``;
    #: consecutive one-task layers of one kind folded into one entry)
    layers: list = field(default_factory=list)
    #: ready tasks a staged commit left to be sent after it, in slices
    #: (slimgraph.ingest.tail): ``{"tasks", "in_bulk", "slices", "seconds" (from the
    #: commit until the last was sent), "longest_slice_s", "done"}``; None:
    #: the commit sent them all. ``longest_block_s`` counts the longest
    #: slice too.
    sent_in_slices: dict | None = None
    #: what the event loop's blocks of at least 50 ms were spent on, while
    #: this update_graph ran: ``{cause: {"seconds", "label"}}``, the longest
    #: block of each cause (``ingestion``: this engine's own code, or its
    #: thread holding the GIL; ``other handler``: e.g. dask's dashboard
    #: pages; see :mod:`slimgraph.instrument.blame`). The block still running
    #: when update_graph ends is its own; the longest slice of ready tasks
    #: sent after the commit counts as ``ingestion`` too.
    block_causes: dict | None = None

    def phase(self, name: str, where: str = "event-loop") -> PhaseClock:
        for p in self.phases:
            if p.name == name:
                return PhaseClock(p)
        p = PhaseRecord(name, where=where)
        self.phases.append(p)
        return PhaseClock(p)

    def phase_seconds(self) -> dict[str, float]:
        return {p.name: p.wall_s for p in self.phases}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def rows(self) -> Iterator[dict[str, Any]]:
        """One flat row per phase, for DataFrames and CSV (``block_causes``
        as one column of seconds per cause: ``longest_block_<cause>_s``)."""
        head = {
            k: v for k, v in asdict(self).items() if k not in ("phases", "layers", "block_causes")
        }
        causes = self.block_causes or {}
        for cause in CAUSES:
            head[cause_column(cause)] = (causes.get(cause) or {}).get("seconds")
        for p in self.phases:
            row = dict(head)
            # the phase's own name/tasks/edges must not overwrite the
            # submission's: they get a ``phase_`` prefix
            row.update({f"phase_{k}" if k in _ROW_CLASHES else k: v for k, v in asdict(p).items()})
            yield row


def cause_column(cause: str) -> str:
    """``"dask's own"`` -> ``"longest_block_dask_own_s"``."""
    slug = "".join(ch if ch.isalnum() else "_" for ch in cause.replace("'s", ""))
    return f"longest_block_{slug}_s"


def row_columns() -> list:
    """The columns of :meth:`SubmissionRecord.rows`, in order."""
    from dataclasses import fields

    head = [f.name for f in fields(SubmissionRecord) if f.name not in ("phases", "layers", "block_causes")]
    head += [cause_column(c) for c in CAUSES]
    return head + [f"phase_{f.name}" if f.name in _ROW_CLASHES else f.name for f in fields(PhaseRecord)]


#: PhaseRecord fields that share a name with SubmissionRecord fields.
_ROW_CLASHES = ("name", "tasks", "edges")


class History:
    """Bounded, thread-safe history of :class:`SubmissionRecord` objects."""

    def __init__(self, maxlen: int | None = None):
        if maxlen is None:
            import dask.config

            from slimgraph import config  # noqa: F401  (registers defaults)

            maxlen = config.get("history-length")
        self._records: deque[SubmissionRecord] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def append(self, record: SubmissionRecord) -> None:
        with self._lock:
            self._records.append(record)

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[SubmissionRecord]:
        with self._lock:
            return iter(list(self._records))

    def latest(self) -> SubmissionRecord | None:
        with self._lock:
            return self._records[-1] if self._records else None

    def since(self, submission_id: int) -> list[SubmissionRecord]:
        with self._lock:
            return [r for r in self._records if r.submission_id > submission_id]

    def to_frame(self):
        """One row per (submission, phase)."""
        import pandas as pd

        rows = [row for r in self for row in r.rows()]
        return pd.DataFrame(rows)


def materialization_summary(report: list) -> str:
    """One line for a compact graph's layer report (see ``SubmissionRecord.materialization``)."""
    by_dask = [r for r in report if r.path == "dask"]
    if not by_dask:
        return "compact"
    whole = [r for r in by_dask if r.name == "<graph>"]
    if whole:
        return f"dask: {whole[0].reason}"
    n = sum(r.tasks for r in by_dask)
    return f"compact, {n:,} tasks by dask"


def layer_rows(report: list) -> list:
    """A compact graph's layer report as plain dicts (the record's ``layers``)."""
    return [
        {"name": str(r.name), "type": r.type, "path": r.path, "tasks": r.tasks, "layers": r.layers, "reason": r.reason}
        for r in report
    ]
