"""Real processes for tests: a scheduler from the ``dask`` command line, an app.

Each process runs in a session of its own and is stopped by its id (SIGINT,
then SIGKILL to that session), never by name.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A subprocess in its own session; stopped by its id (SIGINT, then the group)."""

    def __init__(self, name: str, cmd: list[str], tmp: Path, env: dict | None = None, cwd=None):
        self.name = name
        self.log = tmp / f"{name}.log"
        e = dict(os.environ)
        e.update(env or {})
        e.setdefault("PYTHONUNBUFFERED", "1")
        self._fh = open(self.log, "w")
        self.p = subprocess.Popen(cmd, stdout=self._fh, stderr=subprocess.STDOUT, env=e,
                                  cwd=cwd or ROOT, start_new_session=True)  # fmt: skip

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                pass
        try:  # the session we created: our process and its children only
            os.killpg(self.p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.p.wait(5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        self._fh.close()


def wait_http(url: str, timeout: float = 60, proc: Proc | None = None) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.p.poll() is not None:
            raise RuntimeError(f"{proc.name} exited ({proc.p.returncode}):\n{proc.log_tail()}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status < 500:
                    return
        except Exception as e:  # noqa: BLE001
            last = e
        time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer in {timeout} s ({last})"
                       + (f"\n{proc.log_tail()}" if proc else ""))  # fmt: skip


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def dask_command() -> str:
    """The ``dask`` command line of this environment."""
    return str(Path(sys.executable).with_name("dask"))


@contextlib.contextmanager
def dask_scheduler(tmp: Path, *args: str, name: str = "scheduler", env: dict | None = None
                   ) -> Iterator[tuple[str, str, Proc]]:
    """``dask scheduler ARGS`` on free ports, run from ``tmp`` (not the
    checkout); yields (address, dashboard URL, process)."""
    for attempt in range(3):
        port, dport = free_port(), free_port()
        proc = Proc(name, [dask_command(), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                           "--dashboard-address", f"127.0.0.1:{dport}", *args],
                    tmp, env=env, cwd=tmp)  # fmt: skip
        try:
            wait_http(f"http://127.0.0.1:{dport}/health", proc=proc)
            break
        except RuntimeError:
            proc.stop()
            # a free port taken by another process between free_port() and
            # the scheduler's bind (other test processes run beside these):
            # new ports; any other failure is the test's
            if attempt == 2 or "Address already in use" not in proc.log_tail():
                raise
    try:
        yield f"tcp://127.0.0.1:{port}", f"http://127.0.0.1:{dport}", proc
    finally:
        proc.stop()
