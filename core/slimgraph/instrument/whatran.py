"""What the scheduler process ran: py-spy samples put down to what each was doing.

``python -m slimgraph bench --mode life`` and the dashboard's whole-life jobs
both sample the scheduler process from outside with py-spy (100 samples a
second of the thread holding the GIL; nothing in the scheduler is disturbed,
and an idle thread holds no GIL, so it is not counted as busy) and read each
sample twice:

- by **category** (:func:`categorize`): the innermost frame that names what
  the sample was doing (message serialization, comms, a transition by its
  kind, work stealing, heartbeats, plugins, slimgraph's ingestion or model,
  dask's task specs), or else the handler it ran under; the bench's table
  "by what ran";
- by **part of the run** (:func:`part`): dispatch and completions
  interleave in time (every finished task may make its dependents ready,
  which are sent at once), so no time boundary splits the run into the two;
  what a sample was inside of does. The innermost frame that is one of
  distributed's steps of *sending a ready task to a worker* (a transition
  into ``processing``, choosing a worker, opening queue slots, building the
  ``compute-task`` message; on the slim engine its bulk dispatch and its
  messages) makes the sample **dispatch**; else one of the handling of a
  worker's results (``task-finished``, ``task-erred``: the transition out of
  ``processing``, the inputs released and forgotten, the reports) makes it
  **completions**; anything else (comms and serialization of the batched
  messages, heartbeats, work stealing's balancing, the instruments, other
  threads) is **other**. The transition machinery between transitions
  (distributed's log, plugin calls, recommendations) is counted with the
  handling it runs under: completions, unless inside a dispatch step.

distributed's own profiler would do this from inside, but it is off on
Python 3.11 (a deadlock of ``sys._current_frames`` there, dask/distributed
#8616) and would add its own CPU to the figure measured. Where py-spy is not
installed or cannot attach (no ptrace), :class:`Profile` says why and the
split is left out.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

from slimgraph import shim

# -- what ran: by category ---------------------------------------------------
#: innermost frames that name what a sample was doing: (category, test on
#: the function's name and its file); the first match from the leaf wins
_LEAF_RULES: tuple = (
    ("serialization", lambda fn, f: "/distributed/protocol/" in f or f.endswith(("/pickle.py", "/pickletools.py"))
     or "msgpack" in f or fn in ("dumps", "loads")),
    ("comms", lambda fn, f: "/distributed/comm/" in f or f.endswith(("/batched.py", "/tornado/iostream.py"))),
    ("work stealing", lambda fn, f: f.endswith("/distributed/stealing.py")),
    ("heartbeats", lambda fn, f: fn in ("heartbeat_worker", "check_worker_ttl")),
    ("plugins", lambda fn, f: "/distributed/diagnostics/" in f or "/distributed/spans.py" in f),
    ("compute-task messages", lambda fn, f: fn in ("_task_to_msg", "task_to_msg")
     or f.endswith("/slimgraph/model/messages.py")),
    ("slimgraph ingestion", lambda fn, f: "/slimgraph/ingest/" in f or f.endswith("/slimgraph/order.py")),
    ("slimgraph model", lambda fn, f: "/slimgraph/model/" in f or "/slimgraph/runtime/" in f),
    ("dask (task specs, keys)", lambda fn, f: "/dask/" in f),
    ("instruments", lambda fn, f: "/slimgraph/instrument/" in f or "/slimgraph/views/" in f
     or "/distributed/http/" in f or "/bokeh/" in f),
)
#: handlers a sample ran under, when no leaf rule named it
_HANDLERS = {
    "handle_task_finished": "task-finished handling", "stimulus_task_finished": "task-finished handling",
    "handle_task_erred": "task-erred handling", "update_graph": "update_graph (other)",
    "client_releases_keys": "release handling", "_client_releases_keys": "release handling",
    "remove_client": "release handling", "handle_long_running": "other handlers",
}
#: distributed's transition machinery around each transition function
#: (the log, plugin calls, recommendations)
_DISPATCH = shim.TRANSITION_DISPATCH
_FRAME = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")
_TRANSITION = re.compile(r"^_?transition_([a-z_-]+)$")


def _normalized(stack: list) -> list:
    """A sample's frames as ``(function, "/file")``: py-spy names a function
    by its qualified name and its file by the path below its ``sys.path``
    entry (``distributed/scheduler.py``); both forms are read here."""
    return [(fn.rsplit(".", 1)[-1], "/" + f.lstrip("/")) for fn, f in stack]


def _idle(stack: list) -> bool:
    """The loop waiting for events (py-spy, not blocking the process,
    cannot always tell a thread in ``epoll_wait`` idle): no CPU."""
    return bool(stack) and stack[-1][0] in ("select", "poll") and stack[-1][1].endswith("/selectors.py")


def categorize(stack: list) -> str:
    """What a sample (``[(function, file), ...]``, root first) was doing."""
    return _category(_normalized(stack))


def _category(stack: list) -> str:
    if _idle(stack):
        return IDLE
    thread = bool(stack) and stack[0][0] == "_bootstrap"
    for fn, f in reversed(stack):
        if f.endswith("/distributed/scheduler.py"):
            m = _TRANSITION.match(fn)
            if m:
                return "transition " + m.group(1).replace("_", "->", 1)
            if fn in _DISPATCH:
                # (named here, not by the handler above it: on the slim
                # engine the container hook sits between the two)
                return "transitions: distributed's dispatch"
        for name, test in _LEAF_RULES:
            if test(fn, f):
                return name
    if thread:
        return "threads off the loop (other)"
    for fn, _ in reversed(stack):
        if fn in _HANDLERS:
            return _HANDLERS[fn]
    return "scheduler (other)" if stack and stack[-1][1].endswith("/distributed/scheduler.py") else "other"


#: the category of an idle sample (dropped from the counts)
IDLE = "idle"


# -- what ran: by part of the run ----------------------------------------------

#: distributed's steps of sending a ready task to a worker
_DISPATCH_FUNCTIONS = frozenset((
    "_transition_waiting_processing", "_transition_queued_processing", "_transition_no_worker_processing",
    "stimulus_queue_slots_maybe_opened", "decide_worker", "decide_worker_non_rootish",
    "decide_worker_rootish_queuing_enabled", "decide_worker_rootish_queuing_disabled", "_add_to_processing",
    "_task_to_msg", "send_task_to_worker",
))
#: slimgraph's: its bulk dispatch of ready tasks, the slices after a
#: commit, the compute-task messages it builds when sending
_DISPATCH_FILES = ("/slimgraph/ingest/dispatch.py", "/slimgraph/ingest/tail.py", "/slimgraph/model/messages.py")
#: the handling of a worker's results
_COMPLETION_HANDLERS = frozenset((
    "handle_task_finished", "stimulus_task_finished", "handle_task_erred", "stimulus_task_erred",
))


def part(stack: list) -> str | None:
    """The part of a run a sample (``[(function, file), ...]``, root first)
    was in: ``"dispatch"``, ``"completions"`` or ``"other"``; None for an
    idle sample (see the module docstring)."""
    stack = _normalized(stack)
    return None if _idle(stack) else _part(stack)


def _part(stack: list) -> str:
    for fn, f in reversed(stack):
        if f.endswith("/distributed/scheduler.py"):
            if fn in _DISPATCH_FUNCTIONS:
                return "dispatch"
            if fn in _COMPLETION_HANDLERS or _TRANSITION.match(fn):
                return "completions"
        elif f.endswith(_DISPATCH_FILES):
            return "dispatch"
    return "other"


# -- reading py-spy's raw output -------------------------------------------------
def _stacks(text: str):
    """py-spy's raw output (``frame;frame;... count`` a line) as
    ``(stack, count)``, each stack ``[(function, file), ...]`` root first."""
    for line in text.splitlines():
        line = line.strip()
        if not line or " " not in line:
            continue
        frames, _, count = line.rpartition(" ")
        stack = []
        for fr in frames.split(";"):
            m = _FRAME.match(fr)
            stack.append((m.group(1), m.group(2)) if m else (fr, ""))
        yield stack, int(count)


def read(text: str) -> tuple[Counter, Counter]:
    """py-spy's raw output, by category and by part of the run (idle
    samples dropped from both)."""
    categories: Counter = Counter()
    parts: Counter = Counter()
    for stack, count in _stacks(text):
        stack = _normalized(stack)
        if _idle(stack):
            continue
        categories[_category(stack)] += count
        parts[_part(stack)] += count
    return categories, parts


def parse_raw(text: str) -> Counter:
    """py-spy's raw output (``frame;frame;... count`` a line) by category."""
    return read(text)[0]


def parse_parts(text: str) -> Counter:
    """py-spy's raw output by part of the run (idle samples dropped)."""
    return read(text)[1]


# -- recording -------------------------------------------------------------------
class Profile:
    """py-spy recording a scheduler process for one stage (see the module docstring);
    ``path`` names the file its raw recording is written to."""

    def __init__(self, pid: int, path: str) -> None:
        self.path = path
        self.proc: subprocess.Popen | None = None
        self._got: Counter | None = None
        #: the recording by part of the run (:func:`part`), once stopped
        self.parts: Counter | None = None
        self._stopped = False
        exe = shutil.which("py-spy", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        if exe is None:
            self.why_not = "py-spy is not installed (pip install py-spy)"
            return
        self.why_not = None
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--rate", "100", "--nonblocking", "--gil", "--format", "raw",
             "--output", self.path],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        # py-spy writes its output on Control-C only once its handler is set,
        # just after it announces on stdout that it samples; a stage ended
        # before that would kill it with nothing written, so the stage starts
        # a moment after the announcement.
        self._err: list[bytes] = []
        sampling = threading.Event()

        def read_output() -> None:
            for line in self.proc.stdout:
                self._err.append(line)
                if b"Sampling process" in line:
                    sampling.set()
            sampling.set()

        self._reader = threading.Thread(target=read_output, name="py-spy output", daemon=True)
        self._reader.start()
        sampling.wait(60)
        time.sleep(0.25)

    def stop(self) -> Counter | None:
        """The stage's samples by category (None: see ``why_not``); ends the
        recording (again: the same answer)."""
        if self.proc is None or self._stopped:
            return self._got
        self._stopped = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._reader.join(10)
        if os.path.exists(self.path):
            with open(self.path) as fh:
                self._got, self.parts = read(fh.read())
        else:
            err = b"".join(self._err).decode(errors="replace").strip()[-300:]
            self.why_not = f"py-spy could not sample the scheduler (exit {rc}): {err}"
        return self._got
