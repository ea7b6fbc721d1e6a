"""A submission from the launcher: one workload, to one or both schedulers.

A :class:`Job` runs in a thread of its own (never on Panel's loop, never on
a scheduler's loop). It talks to each scheduler only through its entry's
Client (the submission) and feed (records, progress, memray: the
``slimgraph`` extension's handlers), so the same code drives embedded
LocalClusters and a remote scheduler. The graph is
:mod:`slimgraph.workloads`'s, of any positive size. With
"both" the kinds run one after the other (stock, then slim) so their
update_graph timings do not compete for the GIL of this process.

The app reads a job's plain attributes from its periodic callback; the job
never touches Panel objects.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any

from slimgraph import workloads

logger = logging.getLogger(__name__)
_ids = itertools.count(1)


DONE_STATES = ("memory", "released", "forgotten", "erred")


def progress_fraction(states: dict) -> tuple[int, int]:
    """(done, total) from a scheduler status' task counts by state."""
    total = sum(int(n) for n in states.values())
    done = sum(int(states.get(s, 0)) for s in DONE_STATES)
    return min(done, total), total


class Job:
    def __init__(self, manager, workload: str, tasks: int, kinds: tuple[str, ...],
                 lazy: bool = True, memray: bool = False):  # fmt: skip
        if workload not in workloads.WORKLOADS:
            raise ValueError(f"unknown workload {workload!r}; choose one of "
                             f"{', '.join(workloads.WORKLOADS)}")  # fmt: skip
        workloads.validate_tasks(tasks)
        self.id = next(_ids)
        self.manager = manager
        self.workload = workload
        #: the requested size (about that many tasks, see slimgraph.workloads)
        self.tasks = int(tasks)
        self.kinds = tuple(kinds)
        self.lazy = lazy
        self.memray = memray
        self.kind: str | None = None
        self.phase = "queued"  # queued / starting / submitting / computing / done / cancelled / error
        self.message = "queued"
        self.progress = (0, 0)
        self.results: dict[str, dict] = {}
        #: kind -> flamegraph HTML (str) of the memray capture
        self.flamegraphs: dict[str, str] = {}
        self.memray_errors: dict[str, str] = {}
        self.started = time.time()
        self.finished: float | None = None
        self._cancel = threading.Event()
        self._future: Any = None
        self._client: Any = None
        self._thread = threading.Thread(target=self._run, name=f"slimgraph-job-{self.id}", daemon=True)

    def build(self) -> Any:
        """The collection this job submits (built once per scheduler kind)."""
        return workloads.build(self.workload, self.tasks)

    @property
    def running(self) -> bool:
        return self.finished is None

    def start(self) -> "Job":
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def cancel(self) -> None:
        self._cancel.set()
        fut, client = self._future, self._client
        if fut is not None and client is not None:
            try:
                client.cancel(fut)
            except Exception:  # noqa: BLE001
                logger.exception("cancel failed")

    # -- the thread -----------------------------------------------------------
    def _run(self) -> None:
        try:
            for kind in self.kinds:
                if self._cancel.is_set():
                    break
                self._run_one(kind)
            if self._cancel.is_set():
                self.phase, self.message = "cancelled", "cancelled"
            else:
                errs = [k for k, r in self.results.items() if r.get("error")]
                self.phase = "error" if errs and len(errs) == len(self.kinds) else "done"
                self.message = "; ".join(
                    f"{k}: {r['error']}" if r.get("error") else
                    f"{k}: update_graph {r.get('update_graph_s', 0):.2f} s, "
                    f"{r.get('tasks', 0):,} tasks, computed in {r.get('compute_s', 0):.1f} s ({r.get('status')})"
                    for k, r in self.results.items()
                )  # fmt: skip
        except Exception as e:  # noqa: BLE001
            logger.exception("job failed")
            self.phase, self.message = "error", f"{type(e).__name__}: {e}"
        finally:
            self._future = None
            self.finished = time.time()

    def _run_one(self, kind: str) -> None:
        self.kind = kind
        self.phase, self.message = "starting", f"{kind}: starting the cluster"
        e = self.manager.get(kind)
        if e.status != "running":
            self.results[kind] = {"error": e.error or e.status}
            return
        c = self._client = e.client
        feed = e.feed
        self.manager.set_lazy(e, self.lazy)
        last_id = feed.sync(feed.status, timeout=60)["latest"]
        memray_path = None
        if self.memray:
            try:
                memray_path = feed.sync(feed.memray_arm, timeout=60)
            except Exception as ex:  # noqa: BLE001
                self.memray_errors[kind] = f"{type(ex).__name__}: {ex}"
        self.phase, self.message = "submitting", f"{kind}: building the {self.workload} graph"
        obj = self.build()
        t0 = time.perf_counter()
        self.message = f"{kind}: submitted, update_graph running"
        fut = c.compute(obj)
        self._future = fut
        res: dict[str, Any] = {}
        rec = None
        while not self._cancel.is_set():
            try:
                recs = feed.sync(feed.records, last_id, timeout=0.5)
            except TimeoutError:  # the loop is busy: update_graph holds it
                recs = []
            if recs:
                rec = recs[-1]
                break
            if fut.done() and time.perf_counter() - t0 > 10:
                break  # no record came (a scheduler that does not record?)
            self.message = f"{kind}: update_graph running ({time.perf_counter() - t0:.1f} s)"
            time.sleep(0.2)
        if rec is not None:
            res.update(update_graph_s=rec.total_s, tasks=rec.tasks, record=rec.submission_id)
        self.phase = "computing"
        t1 = time.perf_counter()
        while not fut.done() and not self._cancel.is_set():
            try:
                self.progress = progress_fraction(feed.sync(feed.status, timeout=2)["states"])
            except Exception:  # noqa: BLE001  (a busy loop: keep the last value)
                pass
            done, total = self.progress
            self.message = f"{kind}: computing {done:,}/{total:,} tasks ({time.perf_counter() - t1:.1f} s)"
            time.sleep(0.25 if e.cluster is not None else 1.0)
        if self._cancel.is_set() and not fut.done():
            try:
                c.cancel(fut)
            except Exception:  # noqa: BLE001
                pass
        res["status"] = fut.status
        if fut.status == "error":
            try:
                res["error"] = repr(fut.exception(timeout=5))
            except Exception as ex:  # noqa: BLE001
                res["error"] = repr(ex)
        res["compute_s"] = time.perf_counter() - t1
        if fut.status == "finished":
            self.progress = (self.progress[1] or 1, self.progress[1] or 1)
        fut.release()
        self._future = None
        self.results[kind] = res
        if memray_path is not None:
            self._collect_memray(feed, kind, memray_path)

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
                if html:
                    self.flamegraphs[kind] = html
                else:
                    self.memray_errors[kind] = done[0]["error"] or "the capture produced no flamegraph"
                return
            time.sleep(0.5)
        self.memray_errors[kind] = "the capture did not finish within 60 s"
