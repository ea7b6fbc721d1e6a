"""A real scheduler process and worker processes, for the end-to-end modes.

The scheduler is ``python -m distributed.cli.dask_scheduler`` (the slim one
with ``--preload slimgraph.distributed``, the drop-in), the workers one
``dask worker`` process with ``workers`` single-threaded workers. On a clean
exit the scheduler shuts its workers down, as a cluster's shutdown does (a
terminated dask-worker takes seconds to close its nannies); whatever is left
is terminated, then killed. On failure the processes' log stays for a look.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

__all__ = ["Cluster", "cluster_processes", "wait_scheduler_file"]


class Cluster:
    """What :func:`cluster_processes` yields."""

    def __init__(self, tmp: str) -> None:
        self.tmp = tmp
        self.scheduler_file = os.path.join(tmp, "scheduler.json")
        self.procs: list = []

    @property
    def scheduler_pid(self) -> int:
        return self.procs[0].pid


def wait_scheduler_file(path: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until the scheduler has written its file (it listens then)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) or os.path.getsize(path) == 0:
        if proc.poll() is not None:
            raise RuntimeError(f"the scheduler process exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the scheduler process did not start within {timeout:g} s")
        time.sleep(0.1)


def _shutdown(scheduler_file: str) -> None:
    from distributed import Client

    # (a client of its own, not the default one: a default client shut down
    # leaves dask's config naming the distributed scheduler)
    with Client(scheduler_file=scheduler_file, timeout="30s", set_as_default=False) as closer:
        closer.shutdown()


@contextlib.contextmanager
def cluster_processes(kind: str, workers: int, nice: int = 0, shutdown: bool = True) -> Iterator[Cluster]:
    """A ``kind`` (``"stock"`` or ``"slim"``) scheduler process and ``workers``
    worker processes at niceness ``nice``, until the block ends."""
    c = Cluster(tempfile.mkdtemp(prefix=f"slimgraph-{kind}-"))
    py = sys.executable
    cmd = [py, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
           "--port", "0", "--dashboard-address", ":0", "--scheduler-file", c.scheduler_file]
    if kind == "slim":
        cmd += ["--preload", "slimgraph.distributed"]
    logs = open(os.path.join(c.tmp, "processes.log"), "w")
    ok = False
    c.procs.append(subprocess.Popen(cmd, stdout=logs, stderr=subprocess.STDOUT))
    try:
        wait_scheduler_file(c.scheduler_file, c.procs[0])
        c.procs.append(subprocess.Popen(
            [py, "-m", "distributed.cli.dask_worker", "--scheduler-file", c.scheduler_file,
             "--nworkers", str(workers), "--nthreads", "1", "--no-dashboard",
             "--memory-limit", "0"],
            stdout=logs, stderr=subprocess.STDOUT,
            preexec_fn=(lambda: os.nice(nice)) if nice else None))
        yield c
        if shutdown:
            _shutdown(c.scheduler_file)
        ok = True
    finally:
        _stop(c.procs, wait_first=ok)
        logs.close()
        if ok:
            shutil.rmtree(c.tmp, ignore_errors=True)
        else:
            print(f"  {kind}: scheduler and worker logs in {c.tmp}", file=sys.stderr)


def _stop(procs: list, wait_first: bool) -> None:
    if wait_first:  # (shut down: they are on their way out)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=20)
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
    for p in reversed(procs):
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def wait_for(cond: Any, timeout: float, every: float = 0.05) -> bool:
    """Poll ``cond()`` until true (True) or ``timeout`` seconds (False)."""
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            return False
        time.sleep(every)
    return True
