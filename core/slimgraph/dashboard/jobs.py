"""A submission from the launcher: one workload, to one or both engines.

A :class:`Job` runs one thread per engine (never on Panel's loop, never on
a scheduler's loop). The engines run in processes of their own
(:mod:`slimgraph.dashboard.clusters`), so "both" submits to stock and slim
at once: neither shares a process or a GIL with the other. Each thread
builds the graph (:mod:`slimgraph.workloads`, any positive size), registers
the submission with the shared poller's :class:`~.poller.JobBook` and
submits it with the engine's Client; the record of its update_graph comes
from the poller (the thread never waits on a busy scheduler itself). With
``ingest_only``, right after the record, it measures the scheduler's state
at the end of the ingestion (sampled memory tree: state bytes per task;
lazy-container census: bytes saved), then releases the graph; otherwise it
computes the graph to the end, or for ``cancel_after`` seconds and then
cancels it, without that measurement: the workers compute from the
ingestion's end on, so the walk would be counted in the run (1.7 s of a
4.1 s run of 2,438 delayed tasks on stock, measured).

The whole life: on an engine the app started (its scheduler's pid known),
each thread records the graph's life in stages (ingest, run, release) as
``bench --mode life`` does, into the same records
(:class:`slimgraph.instrument.stages.LifeRecords`: the scheduler process's
CPU and RSS read by pid every 20 ms, its event-loop blocks, the stage
bounds, the tasks completed, py-spy's samples of the run by part: dispatch,
completions, other) and turns them into figures with the same function
(:func:`~slimgraph.instrument.stages.life_figures`). The release
ends when the scheduler holds no task (one job runs at a time). Every
stage holds the poller's reads too (docs/dashboard.md).

Cancel cancels the futures and keeps everything measured so far: a stock
update_graph cannot be interrupted, so its record still arrives and is
kept. A computing thread cancels its own future, after reading how many
tasks completed (a cancelled task is forgotten, and would count as done).

The app reads a job's plain attributes from its periodic callback; the job
never touches Panel objects.
"""
from __future__ import annotations

import itertools
import logging
import os
import shutil
import threading
import time
from concurrent.futures import CancelledError
from typing import Any

from slimgraph import workloads


def workloads_size(n: int) -> str:
    """``12k``, ``1M``, ``1.5M``, ``800``: a task count, short."""
    if n >= 1_000_000:
        return f"{n / 1e6:g}M"
    if n >= 1000:
        return f"{n / 1e3:g}k"
    return str(n)

logger = logging.getLogger(__name__)
_ids = itertools.count(1)


DONE_STATES = ("memory", "released", "forgotten", "erred")

#: (engine, workload) -> (tasks, update_graph seconds per task) of the jobs
#: done in this process without a memray capture (which slows update_graph
#: several times): what a running update_graph's expected length is told from
_rates: dict[tuple[str, str], list[tuple[int, float]]] = {}

#: earlier jobs count for an estimate when they are within this factor of
#: its size: a small job's per-task time is mostly fixed costs, which
#: would make a much bigger job expect far too long
SIZE_FACTOR = 10


def expected_seconds(kind: str, workload: str, tasks: int) -> tuple[float, int] | None:
    """(seconds, from how many earlier jobs) an update_graph of ``tasks``
    tasks of ``workload`` is expected to take on ``kind``: the median per-task
    time of the earlier ones of about its size (within :data:`SIZE_FACTOR`),
    times ``tasks``; None without any."""
    rates = sorted(r for n, r in _rates.get((kind, workload), ())
                   if n * SIZE_FACTOR >= tasks and n <= tasks * SIZE_FACTOR)  # fmt: skip
    if not rates:
        return None
    return rates[len(rates) // 2] * tasks, len(rates)


def running_line(elapsed: float, status: dict | None, expected: tuple[float, int] | None,
                 busy: float = 0.0) -> str:
    """What the page says of an update_graph in progress: elapsed time, the
    phase the engine began last (as its status last said: a stock engine's
    blocked loop does not answer until the ingestion ends) and the expected
    length."""
    line = f"update_graph running, {elapsed:.1f} s"
    running = (status or {}).get("running") or []
    if running and running[-1].get("phase"):
        line += f", phase {running[-1]['phase']}" + (" (last seen)" if busy >= 2 else "")
    if expected is not None:
        secs, n = expected
        line += f"; expected about {secs:,.0f} s (from {n} earlier job{'s' if n != 1 else ''})"
    if busy >= 2:
        line += f"; the scheduler's loop has not answered for {busy:.0f} s"
    return line


def progress_fraction(states: dict) -> tuple[int, int]:
    """(done, total) from a scheduler status' task counts by state."""
    total = sum(int(n) for n in states.values())
    done = sum(int(states.get(s, 0)) for s in DONE_STATES)
    return min(done, total), total


class Job:
    def __init__(self, manager, workload: str, tasks: int, kinds: tuple[str, ...],
                 lazy: bool = True, memray: bool = False, ingest_only: bool = False,
                 poller: Any = None, cancel_after: float | None = None):  # fmt: skip
        if workload not in workloads.WORKLOADS:
            raise ValueError(f"unknown workload {workload!r}; choose one of "
                             f"{', '.join(workloads.WORKLOADS)}")  # fmt: skip
        workloads.validate_tasks(tasks)
        if not kinds:
            raise ValueError("choose at least one scheduler (stock, slim or both)")
        self.id = next(_ids)
        self.manager = manager
        self.poller = poller
        self.workload = workload
        #: the requested size (about that many tasks, see slimgraph.workloads)
        self.tasks = int(tasks)
        self.kinds = tuple(kinds)
        self.lazy = lazy
        self.memray = memray
        self.ingest_only = ingest_only
        if cancel_after is not None and not cancel_after >= 0:
            raise ValueError(f"cancel after a number of seconds >= 0, not {cancel_after!r}")
        #: seconds after the ingestion's end at which the computation is
        #: cancelled (None: computed to the end)
        self.cancel_after = None if ingest_only else cancel_after
        #: per engine: queued / starting / building / ingesting / measuring /
        #: computing / released / done / cancelled / error
        self.phases: dict[str, str] = dict.fromkeys(self.kinds, "queued")
        self.messages: dict[str, str] = dict.fromkeys(self.kinds, "queued")
        #: per engine: monotonic time the graph was handed to the Client
        self.submitted_at: dict[str, float] = {}
        self.progress_by_kind: dict[str, tuple[int, int]] = {}
        #: per engine: what was measured (update_graph_s, tasks, state_bytes,
        #: lazy_saved_bytes, compute_s, status, error...)
        self.results: dict[str, dict] = {k: {} for k in self.kinds}
        #: kind -> flamegraph HTML (str) of the memray capture
        self.flamegraphs: dict[str, str] = {}
        #: kind -> the capture's summary (``MemraySummary.to_dict()``: peak,
        #: allocations, top sites), shown in the page
        self.memray_summaries: dict[str, dict] = {}
        self.memray_errors: dict[str, str] = {}
        #: each engine's memory tree at the end of this job's ingestion, as
        #: the poller keeps its live one: (icicle columns, ntasks, sample,
        #: total bytes). The dashboard shows it once the tasks are released.
        self.trees: dict[str, tuple] = {}
        #: per engine: the records of the graph's life (LifeRecords; their
        #: ``bounds`` grow stage by stage while the job runs)
        self.life: dict[str, Any] = {}
        self.started = time.time()
        self.finished: float | None = None
        self._cancel = threading.Event()
        self._futures: dict[str, Any] = {}
        self._samplers: dict[str, Any] = {}
        #: per engine: py-spy recording the run (whatran.Profile), while it lasts
        self._profiles: dict[str, Any] = {}
        #: per engine: how the run's CPU was split into its parts ("py-spy",
        #: or why it was not: py-spy not installed, no ptrace, ...)
        self.profiled: dict[str, str] = {}
        #: engines whose future Cancel cancelled before their run began
        #: (their cancelled tasks are forgotten: what completed is unknown)
        self._cancelled_early: set[str] = set()
        self._threads = [threading.Thread(target=self._run_one_safe, args=(k,),
                                          name=f"slimgraph-job-{self.id}-{k}", daemon=True)
                         for k in self.kinds]  # fmt: skip
        self._waiter = threading.Thread(target=self._wait_all, name=f"slimgraph-job-{self.id}", daemon=True)

    @property
    def label(self) -> str:
        return f"job {self.id} ({self.workload} {workloads_size(self.tasks)})"

    @property
    def axis_label(self) -> str:
        """How the charts label this job's bars."""
        return f"job {self.id}\n{self.workload} {workloads_size(self.tasks)}"

    @property
    def settings(self) -> str:
        return ", ".join([f"lazy {'on' if self.lazy else 'off'}", self.how_far,
                          *(["memray"] if self.memray else [])])  # fmt: skip

    @property
    def how_far(self) -> str:
        if self.ingest_only:
            return "ingest only"
        return "to the end" if self.cancel_after is None else f"cancel after {self.cancel_after:g} s"

    @property
    def phase(self) -> str:
        """The job's state over its engines."""
        if self.finished is None:
            return "running"
        if self._cancel.is_set():
            return "cancelled"
        if all(self.results[k].get("error") for k in self.kinds):
            return "error"
        return "done"

    @property
    def message(self) -> str:
        return "; ".join(f"{k}: {self.messages[k]}" for k in self.kinds)

    @property
    def progress(self) -> tuple[int, int]:
        done = sum(d for d, _ in self.progress_by_kind.values())
        total = sum(t for _, t in self.progress_by_kind.values())
        return done, total

    def build(self) -> Any:
        """The collection this job submits (built once per scheduler kind)."""
        return workloads.build(self.workload, self.tasks)

    @property
    def running(self) -> bool:
        return self.finished is None

    def start(self) -> "Job":
        for t in self._threads:
            t.start()
        self._waiter.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self._waiter.join(timeout)

    def cancel(self) -> None:
        """Cancel the computations; what was measured stays. (A computing
        thread cancels its own, within 0.1 s: see the module docstring.)"""
        self._cancel.set()
        for kind, fut in list(self._futures.items()):
            if self.phases.get(kind) == "computing":
                continue
            self._cancelled_early.add(kind)
            try:
                fut.cancel()
            except Exception:  # noqa: BLE001
                logger.exception("cancel failed")

    # -- the threads ------------------------------------------------------------
    def _wait_all(self) -> None:
        for t in self._threads:
            t.join()
        self.finished = time.time()

    def _run_one_safe(self, kind: str) -> None:
        try:
            self._run_one(kind)
        except Exception as e:  # noqa: BLE001
            logger.exception("job %s on %s failed", self.id, kind)
            self.results[kind]["error"] = f"{type(e).__name__}: {e}"
            self.phases[kind], self.messages[kind] = "error", f"{type(e).__name__}: {e}"
        finally:
            self._futures.pop(kind, None)
            sampler = self._samplers.pop(kind, None)
            if sampler is not None:  # (a failed job's, still reading)
                sampler.stop()
            if kind in self._profiles:  # (likewise: py-spy still recording)
                self._run_parts(kind)

    def _say(self, kind: str, phase: str, message: str) -> None:
        self.phases[kind], self.messages[kind] = phase, message

    def _run_one(self, kind: str) -> None:
        res = self.results[kind]
        self._say(kind, "starting", "starting the engine")
        e = self.manager.get(kind)
        if e.status != "running":
            res["error"] = e.error or e.status
            self._say(kind, "error", res["error"])
            return
        c, feed = e.client, e.feed
        self.manager.set_lazy(e, self.lazy)
        after_id = feed.sync(feed.status, timeout=60)["latest"]
        memray_path = None
        if self.memray:
            try:
                memray_path = feed.sync(feed.memray_arm, timeout=60)
            except Exception as ex:  # noqa: BLE001
                self.memray_errors[kind] = f"{type(ex).__name__}: {ex}"
        if self._cancel.is_set():
            self._say(kind, "cancelled", "cancelled before submitting")
            return
        self._say(kind, "building", f"building the {self.workload} graph")
        obj = self.build()
        if self.poller is not None:
            self.poller.book.expect(self.id, kind, c.id, after_id, self.axis_label)
        self.submitted_at[kind] = time.monotonic()
        self._say(kind, "ingesting", "submitted; update_graph running")
        life = None
        if e.pid is not None:
            from slimgraph.instrument.stages import LifeRecords, Sampler

            sampler = self._samplers[kind] = Sampler(e.pid).start()
            life = self.life[kind] = LifeRecords(tasks=0, samples=sampler.samples)
            life.bounds["ingest"] = [time.time(), None]
        fut = c.compute(obj)
        self._futures[kind] = fut
        del obj
        rec = self._wait_record(kind)
        if life is not None and rec is None:  # (no record: no stages)
            sampler.stop()
            del self.life[kind]
            life = None
        if life is not None:
            life.tasks = rec.tasks
            life.bounds["ingest"][1] = rec.start + rec.total_s
            if not self.ingest_only:
                life.bounds["run"] = [life.bounds["ingest"][1], None]
                self._profile_run(kind, e.pid)
        if rec is not None:
            res.update(record=rec.submission_id, tasks=rec.tasks, update_graph_s=rec.total_s)
            if rec.status == "OK" and rec.tasks and not self.memray:
                _rates.setdefault((kind, self.workload), []).append((rec.tasks, rec.total_s / rec.tasks))
            if self.ingest_only:
                self._say(kind, "measuring", "measuring the scheduler's state after the ingestion")
                self._measure_state(feed, res, kind)
        if self.ingest_only:
            if life is not None:
                life.bounds["release"] = [time.time(), None]
            fut.release()
            res["status"] = "released"
            self._say(kind, "released", self._summary_line(res, "released after update_graph"))
        else:
            self._compute(kind, fut, res, life, feed)
        del fut
        if life is not None:
            self._end_life(kind, feed, res, life, sampler)
        if memray_path is not None:
            self._collect_memray(feed, kind, memray_path)

    def _profile_run(self, kind: str, pid: int) -> None:
        """py-spy samples the scheduler process from now until the run ends
        (:mod:`slimgraph.instrument.whatran`), as ``bench --mode life``
        does: from the moment the ingestion's end is known and py-spy has
        attached (a fraction of a second into the run) to the run's end."""
        import tempfile

        from slimgraph.instrument.whatran import Profile

        # (py-spy writes the file when it stops)
        path = os.path.join(tempfile.mkdtemp(prefix=f"slimgraph-job{self.id}-{kind}-"), "run.txt")
        # (py-spy takes a moment to attach: not this thread's, which ends
        # the run on time)
        got: list = []
        starter = threading.Thread(target=lambda: got.append(Profile(pid, path)), daemon=True,
                                   name=f"slimgraph-job-{self.id}-{kind}-py-spy")
        starter.start()
        self._profiles[kind] = (starter, got, path)

    def _run_parts(self, kind: str) -> tuple[dict | None, str]:
        """The run's py-spy samples by part (None: not sampled) and how the
        run was profiled ("py-spy", or why not); the recording ends."""
        starter, got, path = self._profiles.pop(kind, (None, [], ""))
        if starter is None:
            return None, "not profiled"
        starter.join(90)
        if not got:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            return None, "py-spy did not start"
        prof = got[0]
        try:
            prof.stop()
        finally:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        if prof.parts is None:
            return None, prof.why_not or "no samples"
        if not prof.parts:
            return None, "py-spy took no sample of it (a run too short)"
        return dict(prof.parts), "py-spy"

    def _wait_record(self, kind: str, timeout: float = 3600):
        """The record of this job's update_graph on ``kind`` (from the poller)."""
        t0 = self.submitted_at[kind]
        while time.monotonic() - t0 < timeout:
            rec = self.poller.record_of(kind, self.id) if self.poller is not None else None
            if rec is not None:
                return rec
            fut = self._futures.get(kind)
            if fut is not None and fut.done() and fut.status == "error" and time.monotonic() - t0 > 10:
                return None  # no record came
            snap = self.poller.engine(kind) if self.poller is not None else None
            busy = snap.busy_for() if snap is not None else 0.0
            cancelled = " (cancel asked: waiting for update_graph to end)" if self._cancel.is_set() else ""
            line = running_line(time.monotonic() - t0, snap.status if snap is not None else None,
                                expected_seconds(kind, self.workload, self.tasks), busy)  # fmt: skip
            self.messages[kind] = line + cancelled
            time.sleep(0.2)
        return None

    def _measure_state(self, feed, res: dict, kind: str) -> None:
        """State bytes per task and bytes saved by lazy containers, now; the
        memory tree kept for the dashboard."""
        from slimgraph.dashboard.poller import MEMORY_SAMPLE
        from slimgraph.views.transforms import icicle, lazy_summary, tree_rows

        try:
            tree = feed.sync(feed.memory_tree, MEMORY_SAMPLE, 0.01, timeout=120)
            res["state_bytes"] = tree.total_bytes
            res["state_tasks"] = tree.ntasks
            self.trees[kind] = (icicle(tree_rows(tree), kind=kind), tree.ntasks, tree.sample, tree.total_bytes)
            census = feed.sync(feed.lazysets, 0.01, timeout=120)
            point, _ = lazy_summary(census)
            res["lazy_saved_bytes"] = point["saved_mb"] * 2**20
            res["lazy_held_bytes"] = point["held_mb"] * 2**20
        except Exception as ex:  # noqa: BLE001
            res["measure_error"] = f"{type(ex).__name__}: {ex}"

    def _compute(self, kind: str, fut, res: dict, life: Any = None, feed: Any = None) -> None:
        from slimgraph.instrument.stages import completed

        t1 = time.perf_counter()
        self._say(kind, "computing", "computing")
        ended = threading.Event()
        ended_at: list = []  # (when the result arrived: the run's end, however late this thread looks)

        def on_done(_: Any) -> None:
            ended_at.append(time.time())
            ended.set()

        fut.add_done_callback(on_done)
        # (the run's end, when asked for: N s after the ingestion's end)
        until = None if self.cancel_after is None or life is None else life.bounds["run"][0] + self.cancel_after
        while not ended.is_set() and not self._cancel.is_set() and (until is None or time.time() < until):
            snap = self.poller.engine(kind) if self.poller is not None else None
            st = (snap.status or {}) if snap is not None else {}
            if st.get("states"):
                self.progress_by_kind[kind] = progress_fraction(st["states"])
            done, total = self.progress_by_kind.get(kind, (0, 0))
            self.messages[kind] = f"computing {done:,}/{total:,} tasks ({time.perf_counter() - t1:.1f} s)"
            ended.wait(max(0.0, min(0.1, until - time.time())) if until is not None else 0.1)
        if life is not None:
            life.bounds["run"][1] = ended_at[0] if ended_at else time.time()
            life.run_parts, self.profiled[kind] = self._run_parts(kind)
            res["run_profiled"] = self.profiled[kind]
            try:  # (before a cancel: a cancelled task is forgotten, as a done one is)
                if kind not in self._cancelled_early:
                    life.completed = completed(life.tasks, feed.sync(feed.status, timeout=60)["states"])
            except Exception as ex:  # noqa: BLE001
                res["life_error"] = f"{type(ex).__name__}: {ex}"
            life.bounds["release"] = [time.time(), None]
        planned = until is not None and not fut.done() and not self._cancel.is_set()
        if (self._cancel.is_set() or planned) and not fut.done():
            try:
                fut.cancel()
            except Exception:  # noqa: BLE001
                pass
        # the status, read once: releasing the future below (our last
        # reference) cancels it on the client's loop, any moment after
        res["status"] = status = fut.status
        if status == "error":
            try:
                res["error"] = repr(fut.exception(timeout=5))
            except Exception as ex:  # noqa: BLE001
                res["error"] = repr(ex)
        elif status == "cancelled" and not self._cancel.is_set() and not planned:
            res["error"] = self._why_cancelled(fut)
        res["compute_s"] = time.perf_counter() - t1
        if status == "finished":
            _, total = self.progress_by_kind.get(kind, (1, 1))
            self.progress_by_kind[kind] = (total or 1, total or 1)
        fut.release()
        if planned:
            phase, tail = "done", f"cancelled {self.cancel_after:g} s after its ingestion, as asked"
        else:
            phase = "done" if status == "finished" else ("cancelled" if self._cancel.is_set() else "error")
            tail = f"computed in {res['compute_s']:.1f} s"
        self._say(kind, phase, res.get("error") or self._summary_line(res, tail))

    def _end_life(self, kind: str, feed, res: dict, life: Any, sampler: Any, timeout: float = 900) -> None:
        """The release stage's end (the scheduler holds no task), then the
        life's figures into ``res["life"]``."""
        from slimgraph.instrument.stages import life_figures, settled_blocks

        message = self.messages[kind]
        self.messages[kind] = message + "; releasing"
        try:
            deadline = time.monotonic() + timeout
            while feed.sync(feed.status, timeout=60)["tasks"] and time.monotonic() < deadline:
                time.sleep(0.02)
            life.bounds["release"][1] = time.time()
            sampler.stop()
            life.blocks = settled_blocks(lambda: [(b["wall_end"], b["seconds"]) for b in feed.sync(
                feed.loop_blocks, life.bounds["ingest"][0], timeout=60)], life.bounds["release"][1])  # fmt: skip
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the scheduler still held tasks {timeout:.0f} s after the release")
            res["life"] = life_figures(life)
        except Exception as ex:  # noqa: BLE001
            res["life_error"] = f"{type(ex).__name__}: {ex}"
        finally:
            sampler.stop()
        err = res.get("life_error")
        self.messages[kind] = message + (f" (its whole life not measured: {err})" if err else "")

    @staticmethod
    def _why_cancelled(fut) -> str:
        """What the scheduler said when it cancelled a computation nobody
        here cancelled (its reason and message travel with the future)."""
        try:
            fut.result(timeout=5)
        except CancelledError as ex:
            return f"cancelled by the scheduler: {ex}"
        except Exception as ex:  # noqa: BLE001
            return f"cancelled by the scheduler ({type(ex).__name__}: {ex})"
        return "cancelled by the scheduler"

    @staticmethod
    def _summary_line(res: dict, tail: str) -> str:
        if "update_graph_s" not in res:
            return tail
        return f"update_graph {res['update_graph_s']:.2f} s for {res['tasks']:,} tasks; {tail}"
    def _collect_memray(self, feed, kind: str, path: str) -> None:
        """The flamegraph of the capture at ``path``, once it has finished
        (rendering it takes seconds, in a thread on the scheduler side)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                done = feed.sync(feed.memray_results, 10, False, path, timeout=60)
                html = feed.sync(feed.memray_flamegraph, path, timeout=120) if done else None
            except Exception as ex:  # noqa: BLE001
                self.memray_errors[kind] = f"{type(ex).__name__}: {ex}"
                return
            if done:
                self.memray_summaries[kind] = done[0]
                if html:
                    self.flamegraphs[kind] = html
                else:
                    self.memray_errors[kind] = done[0]["error"] or "the capture produced no flamegraph"
                return
            time.sleep(0.5)
        self.memray_errors[kind] = "the capture did not finish within 60 s"
