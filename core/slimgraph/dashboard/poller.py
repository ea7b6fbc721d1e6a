"""One shared refresher per app process: polls every engine, sessions read its snapshot.

Why. A refresher per browser session walks the schedulers once per open tab,
and one that awaits a scheduler on the session's event loop freezes that
page while the scheduler is busy (stock blocks its loop for the whole
update_graph). Here one :class:`Poller` per process runs
in a thread of its own, with its own event loop and its own asynchronous
Client per engine (never the job's Client, which may be serializing a big
graph), and keeps a plain :class:`EngineSnapshot` per engine. A browser
session's periodic callback only copies what changed from the snapshot into
its Bokeh sources (microseconds), so a page load or a widget change never
waits for a scheduler.

What is polled, per engine:

- every :data:`PERIOD_S`: the process's RSS and CPU use by pid (psutil: no
  scheduler involved, so they keep coming while stock's loop is blocked; the
  RSS is the same figure the process reports for itself; the CPU use is the
  CPU seconds since the previous read over the time since it), and, when the previous call has
  answered, the extension's ``status`` and the records after the last one
  seen. A call that has not answered is left running (never a second one
  behind it): the engine shows "not answering for N s" instead;
- every few seconds (longer on big graphs: the walks cost the scheduler
  loop time in proportion to its tasks, in slices of 10 ms), the
  lazy-container census and a sampled memory tree.

Records are labelled with the launcher's jobs by :class:`JobBook` (pure):
a record made by the job's submission client after the job's mark is that
job's; every chart puts a job's bars of both engines at the same slot.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

#: Seconds between two polls of an engine (status, records, RSS).
PERIOD_S = 0.5
#: Longest wait for one answer before the engine is shown as busy.
ANSWER_S = 1.0
#: Tasks above which the memory tree is a random sample of this many.
MEMORY_SAMPLE = 2000
#: Longest slice of scheduler-loop time a walk may take.
SLICE_S = 0.01
#: RSS points kept per engine (at PERIOD_S: 25 minutes).
RSS_POINTS = 3000
#: blocks kept per engine for the blocks strip
BLOCK_POINTS = 2000


@dataclass
class Expected:
    """A job's submission to one engine, waiting for its record."""

    job_id: int
    kind: str
    client_id: str
    after_id: int
    label: str


class JobBook:
    """Which record belongs to which job, and where its bars go.

    Pure: no network. ``expect`` is called by a job before it submits;
    ``place`` by the poller for each new record. A record from a job's
    client with an id above the job's mark is that job's (the first one);
    any other record (another client, a notebook) gets a slot of its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._expected: list[Expected] = []
        self._slots: dict[int, int] = {}  # job id -> slot
        self.labels: dict[int, str] = {}  # slot -> axis label
        #: (kind, submission_id) -> job id
        self.job_of: dict[tuple[str, int], int] = {}
        self._next = 1

    def _slot_for_job(self, job_id: int, label: str) -> int:
        slot = self._slots.get(job_id)
        if slot is None:
            slot = self._slots[job_id] = self._next
            self._next += 1
            self.labels[slot] = label
        return slot

    def expect(self, job_id: int, kind: str, client_id: str, after_id: int, label: str) -> int:
        with self._lock:
            self._expected.append(Expected(job_id, kind, client_id, after_id, label))
            return self._slot_for_job(job_id, label)

    def place(self, kind: str, rec: Any) -> tuple[int, int | None]:
        """(slot, job id or None) of a finished record."""
        with self._lock:
            for e in self._expected:
                if e.kind == kind and rec.client == e.client_id and rec.submission_id > e.after_id:
                    self._expected.remove(e)
                    self.job_of[(kind, rec.submission_id)] = e.job_id
                    return self._slots[e.job_id], e.job_id
            slot = self._next
            self._next += 1
            self.labels[slot] = f"#{rec.submission_id} ({kind}, {rec.tasks:,} tasks)"
            return slot, None


@dataclass
class EngineSnapshot:
    """What the app knows of one engine (plain data; the poller writes it)."""

    kind: str
    pid: int | None = None
    #: finished records, oldest first, each with its slot: (slot, record)
    records: list = field(default_factory=list)
    #: (time in ms since the epoch, MiB) of the scheduler process
    rss: deque = field(default_factory=lambda: deque(maxlen=RSS_POINTS))
    rss_seq: int = 0
    #: (time in ms since the epoch, % of one core) of the scheduler process
    #: since the previous read; ``cpu_read`` is that read (time, CPU seconds)
    cpu: deque = field(default_factory=lambda: deque(maxlen=RSS_POINTS))
    cpu_seq: int = 0
    cpu_read: tuple | None = None
    status: dict | None = None
    #: monotonic time of the last answer, and since when a call is pending
    answered_at: float | None = None
    waiting_since: float | None = None
    #: (icicle columns, ntasks, sample, total bytes) of the latest memory tree
    tree: tuple | None = None
    tree_seq: int = 0
    lazy_points: deque = field(default_factory=lambda: deque(maxlen=2000))
    lazy_seq: int = 0
    lazy_attrs: dict | None = None
    #: the scheduler's event-loop blocks of 50 ms or more, with their causes
    #: (``loop_blocks`` dicts), oldest first; ``blocks_seq`` counts arrivals
    blocks: deque = field(default_factory=lambda: deque(maxlen=BLOCK_POINTS))
    blocks_seq: int = 0
    blocks_since: float = 0.0
    error: str = ""

    def busy_for(self, now: float | None = None) -> float:
        """Seconds the engine has not answered a pending call (0 if none)."""
        if self.waiting_since is None:
            return 0.0
        return (now or time.monotonic()) - self.waiting_since


class Poller:
    """The process's one poller (see the module docstring)."""

    def __init__(self, manager: Any, period: float = PERIOD_S):
        self.manager = manager
        self.period = period
        self.book = JobBook()
        self.engines: dict[str, EngineSnapshot] = {}
        self.ticks = 0
        self._clients: dict[str, Any] = {}
        self._feeds: dict[str, Any] = {}
        self._pending: dict[str, asyncio.Task] = {}
        self._slow: dict[str, asyncio.Task] = {}
        self._last_slow: dict[str, float] = {}
        self._cursor: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="slimgraph-poller", daemon=True)

    def start(self) -> "Poller":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def engine(self, kind: str) -> EngineSnapshot:
        e = self.engines.get(kind)
        if e is None:
            e = self.engines[kind] = EngineSnapshot(kind)
        return e

    def record_of(self, kind: str, job_id: int):
        """The finished record of ``job_id`` on ``kind``, or None."""
        for slot, rec in list(self.engine(kind).records):
            if self.book.job_of.get((kind, rec.submission_id)) == job_id:
                return rec
        return None

    # -- the thread -------------------------------------------------------------
    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                await self._round()
            except Exception:  # noqa: BLE001
                logger.exception("slimgraph poller")
            self.ticks += 1
            await asyncio.sleep(max(0.05, self.period - (time.monotonic() - t0)))
        for c in self._clients.values():
            try:
                await c.close()
            except Exception:  # noqa: BLE001
                pass

    async def _round(self) -> None:
        import psutil

        from slimgraph.instrument.feed import RemoteFeed

        for key, entry in list(self.manager.entries.items()):
            kind = entry.kind if key == "remote" else key
            if kind == "remote":
                continue  # kind not known yet
            snap = self.engine(kind)
            snap.pid = entry.pid
            snap.error = entry.error if entry.status == "error" else ""
            if entry.status != "running" or not entry.address:
                continue
            now_ms = time.time() * 1000
            if entry.pid is not None:
                try:
                    proc = psutil.Process(entry.pid)
                    with proc.oneshot():
                        t, rss = proc.cpu_times(), proc.memory_info().rss
                    snap.rss.append((now_ms, rss / 2**20))
                    snap.rss_seq += 1
                    read = (now_ms / 1000, t.user + t.system)
                    if snap.cpu_read is not None and read[0] > snap.cpu_read[0]:
                        snap.cpu.append((now_ms, 100 * (read[1] - snap.cpu_read[1]) / (read[0] - snap.cpu_read[0])))
                        snap.cpu_seq += 1
                    snap.cpu_read = read
                except psutil.Error:
                    pass
            if kind not in self._feeds:
                from distributed import Client

                try:
                    c = await asyncio.wait_for(
                        Client(entry.address, asynchronous=True, set_as_default=False,
                               name=f"slimgraph-poller-{kind}"), 30)  # fmt: skip
                except Exception as ex:  # noqa: BLE001
                    snap.error = f"cannot connect: {ex!r}"
                    continue
                self._clients[kind] = c
                self._feeds[kind] = RemoteFeed(c, kind)
                self._cursor[kind] = 0
            task = self._pending.get(kind)
            if task is None or task.done():
                task = self._pending[kind] = asyncio.ensure_future(self._fast(kind))
                if snap.waiting_since is None:
                    snap.waiting_since = time.monotonic()
            await asyncio.wait([task], timeout=0.05)
            slow = self._slow.get(kind)
            if (slow is None or slow.done()) and snap.busy_for() < ANSWER_S:
                n = (snap.status or {}).get("tasks", 0)
                if time.monotonic() - self._last_slow.get(kind, 0.0) >= min(10.0, 2.0 + n / 150_000):
                    self._last_slow[kind] = time.monotonic()
                    self._slow[kind] = asyncio.ensure_future(self._walks(kind))

    async def _fast(self, kind: str) -> None:
        feed, snap = self._feeds[kind], self.engine(kind)
        try:
            status = await feed.status()
            recs = await feed.records(self._cursor[kind])
        except Exception as ex:  # noqa: BLE001
            snap.error = repr(ex)
            snap.waiting_since = None
            return
        try:
            blocks = await feed.loop_blocks(snap.blocks_since)
        except Exception:  # noqa: BLE001  (an older extension: no blocks strip)
            blocks = []
        if blocks:
            snap.blocks.extend(blocks)
            snap.blocks_since = max(b["wall_end"] for b in blocks)
            snap.blocks_seq += 1
        snap.status = status
        if snap.pid is None and "rss" in status:  # remote: the scheduler's own figure
            snap.rss.append((time.time() * 1000, status["rss"] / 2**20))
            snap.rss_seq += 1
        for rec in sorted(recs, key=lambda r: r.submission_id):
            if rec.status == "running":
                break
            self._cursor[kind] = max(self._cursor[kind], rec.submission_id)
            slot, _ = self.book.place(kind, rec)
            snap.records.append((slot, rec))
        snap.answered_at = time.monotonic()
        snap.waiting_since = None

    async def _walks(self, kind: str) -> None:
        from slimgraph.views.transforms import icicle, lazy_summary, tree_rows

        feed, snap = self._feeds[kind], self.engine(kind)
        try:
            census = await feed.lazysets(budget_s=SLICE_S)
            point, attrs = lazy_summary(census)
            snap.lazy_points.append(point)
            snap.lazy_attrs = attrs
            snap.lazy_seq += 1
            tree = await feed.memory_tree(sample=MEMORY_SAMPLE, budget_s=SLICE_S)
            # (branches in tints of the engine's colour, as on the scheduler tab:
            # without the kind they were greys dark enough to hide their labels)
            snap.tree = (icicle(tree_rows(tree), kind=kind), tree.ntasks, tree.sample, tree.total_bytes)
            snap.tree_seq += 1
        except Exception as ex:  # noqa: BLE001
            logger.debug("walks of %s: %r", kind, ex)


_poller: Poller | None = None
_lock = threading.Lock()


def poller(manager: Any = None) -> Poller:
    """The process's poller (started on first use)."""
    global _poller
    with _lock:
        if _poller is None:
            from slimgraph.dashboard import clusters

            _poller = Poller(manager or clusters.manager()).start()
        return _poller


def reset_poller() -> None:
    global _poller
    with _lock:
        if _poller is not None:
            _poller.stop()
        _poller = None
