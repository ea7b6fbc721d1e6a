"""What each CPython-specific mechanism saves on the running interpreter.

    python benchmarks/cpython_mechanisms.py [--entries 1000000] [--repeat 3]

For each mechanism of ``slimgraph.shim.cpython`` (and dask's node slots
written directly, ``slimgraph.ingest.compact.fastnodes``) it measures the
plain path, what an interpreter whose check failed does, beside slimgraph's
path, at the size of a big submission, and prints whether each check passed
here. What the event loop feels is the longest stall of another thread: a
thread that asks for the GIL every half millisecond (the switch interval an
ingestion sets) records its longest wait while the operation runs in the
main thread. The node build is timed whole (it runs in the ingestion's
thread, in Python). Medians of ``--repeat`` runs, in a small idle process:
in a scheduler holding a GB, each memo entry released is a cache miss and
the plain paths take several times longer. docs/interpreters.md keeps the
figures per interpreter.
"""
from __future__ import annotations

import argparse
import gc
import io
import pickle
import platform
import statistics
import sys
import threading
import time
from typing import Callable


class _Stalls:
    """The longest wait of a thread that wakes every half millisecond,
    while the ``with`` block runs."""

    def __enter__(self) -> "_Stalls":
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch)
        self._thread.start()
        time.sleep(0.01)
        return self

    def _watch(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(0.0005)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            last = now

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _stall(prepare: Callable[[], object], act: Callable[[object], None]) -> float:
    """The longest stall of another thread while ``act`` runs on what
    ``prepare`` made (made first, outside the measurement)."""
    made = prepare()
    with _Stalls() as st:
        act(made)
    del made
    gc.collect()
    return st.longest


def publish_dict(n: int) -> tuple:
    """A built task dict of ``n`` entries handed to the scheduler's empty
    dict: ``update`` (plain) against the table swap."""
    from slimgraph.shim import cpython

    def prepare():
        return {}, {("x", i): i for i in range(n)}

    def plain(made) -> None:
        made[0].update(made[1])

    def swapped(made) -> None:
        cpython.swap_dict_contents(*made)

    return (lambda: _stall(prepare, plain)), (lambda: _stall(prepare, swapped))


def _memo_payload(n: int) -> bytes:
    # (a tuple and a str per entry: two memo entries each, as a graph's keys)
    return pickle.dumps([(i, f"key-{i}") for i in range(n)], protocol=5)


def release_memo(n: int) -> tuple:
    """An unpickler's memo of ~2n entries released: by the unpickler when it
    goes (plain: one C call) against the hand-over, its lists drained in
    steps (the graph itself stays alive in both)."""
    from slimgraph.ingest import memo
    from slimgraph.runtime.disposal import drain

    data = _memo_payload(n)

    def prepare():
        u = pickle.Unpickler(io.BytesIO(data))
        return [u, u.load()]

    def plain(made) -> None:
        del made[0]

    def handed_over(made) -> None:
        held = memo.hand_over(made[0])
        del made[0]
        drain(held)

    return (lambda: _stall(prepare, plain)), (lambda: _stall(prepare, handed_over))


def load_presized(n: int) -> tuple:
    """The load of a stream read a frame at a time (as slimgraph's decode
    reads it, so that other threads run between frames) whose memo grows by
    doubling (plain), against one whose memo was made at its counted size."""
    from slimgraph.ingest import decode, memo

    data = _memo_payload(n)

    def prepare():
        return pickle.Unpickler(decode._FrameReader(data))

    def load(u, presize: bool) -> None:
        if presize:
            memo.presize_for(u, data)
        u.load()
        memo.hand_over(u)  # (the memo released in steps in both)

    return (lambda: _stall(prepare, lambda u: load(u, False))), (lambda: _stall(prepare, lambda u: load(u, True)))


def build_tasks(n: int) -> tuple:
    """``n`` dask ``Task(key, f, TaskRef(dep))`` nodes, timed whole: the
    constructors (plain) against the slots written directly."""
    from slimgraph.ingest.compact import fastnodes
    from slimgraph.shim.compact import Task, TaskRef

    def timed(make: Callable[[int], object]) -> float:
        t = time.perf_counter()
        out = [make(i) for i in range(n)]
        took = time.perf_counter() - t
        del out
        return took

    return (lambda: timed(lambda i: Task(("y", i), len, TaskRef(("x", i))))), (
        lambda: timed(lambda i: fastnodes.task_on_ref(("y", i), len, ("x", i))))


def checks() -> dict:
    from slimgraph.ingest import memo
    from slimgraph.ingest.compact import fastnodes
    from slimgraph.instrument import blame
    from slimgraph.shim import cpython

    return {
        "dict swap": cpython.dict_swap_available(),
        "dict room": cpython.dict_room({i: i for i in range(100)}) is not None,
        "unpickler memo": memo.available(),
        "fastnodes": fastnodes.ENABLED,
        "thread frames": cpython.thread_frame(threading.get_ident()) is not None,
        "blame snapshots": blame.snapshot_works(),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print(f"CPython {platform.python_version()}, {a.entries:,} entries, median of {a.repeat}")
    for name, ok in checks().items():
        print(f"  check {name:<16} {'passed' if ok else 'FAILED: plain path'}")
    sys.setswitchinterval(0.0005)
    gc.disable()  # (no collection inside a measurement)
    rows = [
        ("publish the task dict", publish_dict, "longest stall", "update", "swap"),
        ("release the unpickler memo", release_memo, "longest stall", "by the unpickler", "handed over"),
        ("unpickle, frame by frame", load_presized, "longest stall", "memo doubling", "presized"),
        ("build Task(k, f, TaskRef(d))", build_tasks, "time", "constructors", "slots written"),
    ]
    for title, make, what, plain_name, slim_name in rows:
        plain, slim = make(a.entries)
        p = statistics.median(plain() for _ in range(a.repeat))
        q = statistics.median(slim() for _ in range(a.repeat))
        print(f"  {title:<30} {what}: {plain_name} {p:.3f} s, {slim_name} {q:.3f} s")


if __name__ == "__main__":
    main()
