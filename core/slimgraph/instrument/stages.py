"""A graph's life in stages, and what each stage cost the scheduler process.

The one home of the whole-life figures: ``python -m slimgraph bench --mode
life`` (:mod:`slimgraph.bench.life`) and the dashboard's jobs
(:mod:`slimgraph.dashboard.jobs`) both record the same :class:`LifeRecords`
and both turn them into figures with :func:`life_figures`, so the page and
the benchmark agree by construction.

The stages, each ``[start, end]`` in ``time.time()`` seconds, one after the
other:

- **ingest**: from the client's submission until the scheduler's
  ``update_graph`` ends (its record's end);
- **run**: dispatch and completions, until the result is on the client, or
  until the client cancels (a run cancelled after N seconds, or by the
  user); the two interleave (the workers report finished tasks, the
  scheduler sends the tasks that became ready), so no time boundary splits
  them: ``bench --mode life`` splits the run's CPU by what ran (py-spy);
- **release**: from the client's release (or cancel) until the scheduler
  holds none of the graph's tasks.

A life that ends after its ingestion (the app's "ingest only") has no run.

What the records hold: the stage bounds; the scheduler process's CPU
seconds (user + system) and RSS, read by pid from outside the process
(:class:`Sampler`: psutil, nothing in the scheduler disturbed, and read
while a blocked loop answers nothing); the scheduler's event-loop blocks of
50 ms or more (its loop monitor's, as ``(end, seconds)``); optionally the
longest pings a second connection saw; how many tasks the graph had and how
many of them completed; py-spy's samples of the run by part (when py-spy
could sample it).
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

STAGES = ("ingest", "run", "release")

#: the parts of a run (:mod:`slimgraph.instrument.whatran`)
PARTS = ("dispatch", "completions", "other")

#: how a stage is named where a reader meets it
STAGE_LABELS = {"ingest": "ingest", "run": "run (dispatch + completions)", "release": "release"}

#: task states a graph's task is not done in (not computed yet). Not
#: "released": a task is released on its way in (within update_graph) and
#: after it ran (its result no longer needed, kept while its dependents are)
PENDING_STATES = ("waiting", "processing", "no-worker", "queued")


class Sampler:
    """A process's CPU seconds and RSS, read by pid every ``every`` s from
    a thread of its own; ``samples`` is ``[(time.time(), cpu s, rss bytes)]``."""

    def __init__(self, pid: int, every: float = 0.02) -> None:
        import psutil

        self._error = psutil.Error
        self.proc = psutil.Process(pid)
        self.every = every
        self.samples: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slimgraph-cpu-sampler", daemon=True)

    def _read(self) -> None:
        with self.proc.oneshot():
            t = self.proc.cpu_times()
            self.samples.append((time.time(), t.user + t.system, self.proc.memory_info().rss))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self._read()
            except self._error:
                return

    def start(self) -> "Sampler":
        self._read()
        self._thread.start()
        return self

    def stop(self) -> "Sampler":
        """Stops sampling after one last read (again: nothing more)."""
        if self._stop.is_set():
            return self
        self._stop.set()
        self._thread.join()
        try:
            self._read()
        except self._error:
            pass
        return self

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def cpu_at(samples: list, when: float) -> float:
    """CPU seconds at ``when``, interpolated between the samples around it."""
    s = samples
    if when <= s[0][0]:
        return s[0][1]
    for (t0, c0, _), (t1, c1, _) in zip(s, s[1:]):
        if t0 <= when <= t1:
            return c0 + (c1 - c0) * ((when - t0) / (t1 - t0) if t1 > t0 else 1.0)
    return s[-1][1]


def longest(entries: list, a: float, b: float) -> float:
    """Longest ``(end, seconds)`` entry that began within ``[a, b)`` (0 if
    none). By its start: the block of a stock ingestion ends a moment after
    the update_graph record does (the handler's turn goes on), and is the
    ingestion's; a ping sent during it is answered after it, and waited for
    it."""
    return max((s for end, s in entries if a <= end - s < b), default=0.0)


def settled_blocks(read: Callable[[], list], after: float, every: float = 0.25, timeout: float = 10.0) -> list:
    """``read()`` (the loop monitor's blocks as ``(end, seconds)``) once the
    blocks that ended by ``after`` have stopped changing. The monitor's
    watchdog closes a block at its next wake-up (10-100 ms after it ends,
    later while it waits for the GIL), so a read right at the release's end
    missed a 0.83 s block of it that had ended before. Two reads ``every`` s
    apart, the first ``every`` s after ``after``, that agree on them (or the
    last read at ``timeout``)."""
    deadline = time.time() + timeout
    time.sleep(max(0.0, after + every - time.time()))
    before = None
    while True:
        got = [tuple(b) for b in read()]
        upto = sorted(b for b in got if b[0] <= after)
        if upto == before or time.time() > deadline:
            return got
        before = upto
        time.sleep(every)


def completed(tasks: int, states: dict) -> int:
    """How many of a graph's ``tasks`` completed, from the scheduler's task
    counts by state (the extension's ``status``): those not pending. (The
    counts may hold other graphs' tasks, all done or forgotten: a pending
    one is this graph's.)"""
    pending = sum(int(states.get(s, 0)) for s in PENDING_STATES)
    return max(0, int(tasks) - pending)


@dataclass
class LifeRecords:
    """What one engine's life of one graph was measured as (see the module
    docstring); plain data, JSON as :meth:`to_dict`."""

    tasks: int
    #: stage -> [start, end] (``time.time()``); only the stages lived
    bounds: dict = field(default_factory=dict)
    #: [(time, cpu seconds, rss bytes)] of the scheduler process
    samples: list = field(default_factory=list)
    #: [(end, seconds)] of the scheduler's event-loop blocks
    blocks: list = field(default_factory=list)
    #: [(end, seconds)] of a second connection's pings (None: not pinged)
    pings: list | None = None
    #: tasks completed by the run's end (None: no run)
    completed: int | None = None
    #: py-spy's samples of the run by part (dispatch, completions, other:
    #: :func:`slimgraph.instrument.whatran.part`); None: not sampled
    run_parts: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "LifeRecords":
        return cls(**d)


def _span(rec: LifeRecords, a: float, b: float, n: int) -> dict:
    used = cpu_at(rec.samples, b) - cpu_at(rec.samples, a)
    return {"wall_s": b - a, "cpu_s": used, "cpu_us_per_task": used / n * 1e6 if n else None,
            "longest_block_s": longest(rec.blocks, a, b),
            "longest_ping_s": None if rec.pings is None else longest(rec.pings, a, b)}


def _parts(cpu: float, samples: dict | None, n: int) -> dict | None:
    """The run's CPU split into its parts in proportion to their samples."""
    total = sum((samples or {}).values())
    if not total:
        return None
    out = {}
    for p in PARTS:
        share = samples.get(p, 0) / total
        out[p] = {"cpu_s": cpu * share, "cpu_us_per_task": cpu * share / n * 1e6 if n else None, "share": share}
    return out


def life_figures(rec: LifeRecords) -> dict:
    """The figures of one engine's life (what the bench's JSON and the app's
    summary show)::

        {"tasks", "completed", "tasks_per_s" (completed over the run's wall
         time), "peak_rss_bytes", "peak_rss_growth_bytes" (over the first
         sample), "stages": {stage: SPAN} (the stages lived), "whole": SPAN}
        SPAN = {"wall_s", "cpu_s", "cpu_us_per_task", "longest_block_s", "longest_ping_s"}

    The run's SPAN also has ``"parts"``: ``{part: {"cpu_s", "cpu_us_per_task",
    "share"}}`` for dispatch, completions and other (the run's CPU in
    proportion to the samples of :attr:`LifeRecords.run_parts`), or None
    when the run was not sampled. (The parts interleave in time: their
    wall time and loop blocks are the run's.)
    """
    n = int(rec.tasks)
    lived = [s for s in STAGES if s in rec.bounds]
    out: dict = {"tasks": n, "completed": rec.completed, "tasks_per_s": None,
                 "peak_rss_bytes": max(r for _, _, r in rec.samples),
                 "peak_rss_growth_bytes": max(r for _, _, r in rec.samples) - rec.samples[0][2],
                 "stages": {s: _span(rec, *rec.bounds[s], n) for s in lived}}
    run = out["stages"].get("run")
    if run is not None and rec.completed is not None and run["wall_s"] > 0:
        out["tasks_per_s"] = rec.completed / run["wall_s"]
    if run is not None:
        run["parts"] = _parts(run["cpu_s"], rec.run_parts, n)
    # the whole: the stages lived, together (a life with a pause between
    # two stages, as the app's "ingest only" has while it measures the
    # scheduler's state, counts neither the pause's wall time nor its CPU)
    spans = list(out["stages"].values())
    if spans:
        cpu = sum(s["cpu_s"] for s in spans)
        pings = [s["longest_ping_s"] for s in spans]
        out["whole"] = {"wall_s": sum(s["wall_s"] for s in spans), "cpu_s": cpu,
                        "cpu_us_per_task": cpu / n * 1e6 if n else None,
                        "longest_block_s": max(s["longest_block_s"] for s in spans),
                        "longest_ping_s": None if rec.pings is None else max(pings)}
    return out
