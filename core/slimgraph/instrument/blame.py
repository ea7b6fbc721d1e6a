"""Whose block was it? Attributing an event-loop block to its cause.

A block of the scheduler's event loop has one of two shapes:

- the loop thread *runs* something for a long time: a handler (distributed's
  ``update_graph``, a Bokeh page of dask's dashboard being built, a
  heartbeat), or a callback of ours (a commit, a slice of ready tasks);
- the loop thread *waits*: it has left its selector and wants the GIL back,
  which another thread holds (an ingestion thread in one long C call such as
  dask's ``pickle.loads``, or any other thread).

The event-loop monitor (:mod:`slimgraph.instrument.loopmon`) measures the
length of a block; this module says what it was spent on. While a block
lasts, the monitor's watchdog thread takes a snapshot of every thread's
stack (``sys._current_frames()``) every few milliseconds and hands it to
:func:`classify`, which answers a *cause* and a short *label*:

``ingestion``
    the engine's own ingestion of a submission: the loop thread is inside
    slimgraph's pipeline (``slimgraph.ingest``, the engine's model, its
    ordering, its runtime) or inside stock's ``Scheduler.update_graph``; or
    the loop waits for the GIL while a thread of that ingestion (one with
    such frames, slimgraph's own ingest threads, or distributed's offload
    thread, where stock deserializes and materializes) is busy in the
    engine's code.
``dask's own``
    the loop waits for the GIL while a thread of the ingestion stands in
    dask's or distributed's code: dask's deserialize (``pickle.loads``) and
    materialize, which no engine that calls them can shorten; or the loop
    itself runs such code for the ingestion (a small graph is unpickled on
    the loop, as stock does, and the first dataframe graph imports pandas). A snapshot
    taken right after such a call may already show the engine's code that
    called it: the error goes the engine's way, never the other.
``engine``
    slimgraph's engine (its task states, containers, queue: the code that
    replaces stock's data model) working for another of distributed's
    handlers: a worker's results, a cancel. Stock's counterpart is
    distributed's own code, an ``other handler``.
``garbage collection``
    a collection ran (in any thread): timed by a gc callback, since no
    snapshot can be taken inside one. Stock's ingestion spends a third of
    its time there; the slim engine pauses and freezes the collector
    (:mod:`slimgraph.runtime.gcpause`), and what is left shows here.
``instruments``
    slimgraph's measuring and dashboard code running on the loop (records,
    memory trees, the lazy-container census): the innermost frame is
    theirs (a recorder's wrapper around distributed's code is not).
``other handler``
    the loop runs anything else: dask's dashboard pages, worker heartbeats,
    another client's requests.
``other thread``
    the loop waits for the GIL while a thread that is not an ingestion's
    is busy.
``no CPU``
    the operating system ran other processes: the loop thread had work but
    spent more of the block waiting on the kernel's run queue than running,
    or the thread whose GIL it waited for did (preempted while holding it).
    Read from the threads' ``/proc/self/task/<id>/schedstat`` (Linux),
    so a machine shared with workers, clients and a browser is told apart
    from a slow handler.
``unknown``
    no thread could be told busy (a snapshot taken as the block ended).

Who was busy is read from each thread's CPU clock, not guessed from its
frame: over the last few snapshots (:data:`SHARE_WINDOW`), the thread that
used the CPU is the one that ran. The loop is blamed on what it runs when it used a fair share of the
CPU while it had work (a handler sharing the GIL with a busy thread gets
about half); otherwise on the busiest other thread, whose GIL it was
waiting for. A snapshot cannot be taken while one thread holds the GIL in
a single C call, nor while the watchdog loses the GIL to two busy threads
(the watchdog wakes late): the next one then weighs the whole stretch it
missed, and the CPU clocks still say who held the GIL; a loop that ran its
share of a stretch no snapshot saw it in is ``unknown``. The
attribution is a sample: exact to a few milliseconds for the loop's own
work, to one snapshot for a single long call.
"""
from __future__ import annotations

import ctypes
import faulthandler
import os
import re
import sys
import threading
import time
from typing import Any

from slimgraph import config
from slimgraph.runtime.threads import THREAD_NAME

#: The package directory: frames from here are slimgraph's.
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: Sub-packages of slimgraph that measure or show rather than ingest.
_INSTRUMENT_DIRS = tuple(_PKG + d + os.sep for d in ("instrument", "views", "bench", "dashboard"))
#: slimgraph's ingestion pipeline (staging, commit, the slices after it,
#: the plugin calls it owes) and its ordering.
_INGEST_DIRS = (_PKG + "ingest" + os.sep, _PKG + "order.py")

CAUSES = ("ingestion", "dask's own", "engine", "garbage collection", "instruments", "other handler",
          "other thread", "no CPU", "unknown")

#: Functions of distributed's scheduler module that are stock's ingestion:
#: update_graph and the materialize step the shim wraps (its private name
#: lives in the shim), read on first use.
_STOCK_INGESTION: frozenset | None = None


def _stock_ingestion() -> frozenset:
    global _STOCK_INGESTION
    if _STOCK_INGESTION is None:
        from slimgraph import shim

        _STOCK_INGESTION = frozenset({"update_graph", shim.STOCK_FUNCTIONS["materialize"][1]})
    return _STOCK_INGESTION

#: distributed's offload thread: stock materializes (and orders) a
#: submission there; in a scheduler little else runs there (large messages
#: are deserialized there too, a big submission first of all). slimgraph's
#: steps run in threads of its own (THREAD_NAME, slimgraph.runtime.threads).
_OFFLOAD = "Dask-Offload"

#: Where an idle thread stands: the innermost frame of a thread that waits
#: (for work, a lock, the selector) is one of these functions of these
#: standard-library files.
_IDLE = {
    "selectors.py": {"select", "poll"},
    "threading.py": {"wait", "_wait_for_tstate_lock", "join", "acquire"},
    "queue.py": {"get", "put"},
    "thread.py": {"_worker"},  # concurrent.futures' worker between jobs
    "base_events.py": {"_run_once", "run_forever"},
    "socket.py": {"accept"},
    "socketserver.py": {"serve_forever"},
}


def _base(filename: str) -> str:
    return filename.rsplit(os.sep, 1)[-1]


class Frame:
    """One frame of a snapshot: what :func:`classify` reads of a code
    object (``co_filename``, ``co_name``, ``co_qualname``), and the line."""

    __slots__ = ("co_filename", "co_name", "co_qualname", "lineno")

    def __init__(self, filename: str, name: str, qualname: str, lineno: int):
        self.co_filename = filename
        self.co_name = name
        self.co_qualname = qualname
        self.lineno = lineno

    def __repr__(self) -> str:
        return f"<{self.co_qualname} at {self.co_filename}:{self.lineno}>"


def _is_idle(codes: list) -> bool:
    if not codes:
        return True
    c = codes[0]
    names = _IDLE.get(_base(c.co_filename))
    return names is not None and c.co_name in names


def _slim(c) -> bool:
    """A frame of slimgraph's engine (not of its instruments)."""
    f = c.co_filename
    return f.startswith(_PKG) and not f.startswith(_INSTRUMENT_DIRS)


def _ingestion_frame(codes: list):
    """The outermost frame that makes a stack a submission's ingestion:
    slimgraph's pipeline (``slimgraph.ingest``, its ordering) or an
    ``update_graph`` (stock's, or the drop-in's), or None."""
    found = None
    stock = _stock_ingestion()
    for c in codes:
        f = c.co_filename
        if f.startswith(_INGEST_DIRS):
            found = c
        elif c.co_name in stock and (
                f.startswith(_PKG) or (f.endswith(os.sep + "scheduler.py") and "distributed" in f)):
            found = c
    return found


def _innermost_own(codes: list):
    """The innermost frame that is not the standard library's: where the
    time goes (an instrument's wrapper around distributed's code is not)."""
    return next((c for c in codes if _owner(c.co_filename) != "python"), None)


def _owner(filename: str) -> str:
    """A short name for the package a file belongs to."""
    if filename.startswith(_PKG):
        return "slimgraph"
    parts = filename.split(os.sep)
    for i, p in enumerate(parts):
        if p in ("site-packages", "dist-packages") and i + 1 < len(parts):
            return parts[i + 1].removesuffix(".py")
    return "python"


#: Packages whose frames only carry a callback to its handler.
_CARRIERS = frozenset({"python", "tornado"})


def _qual(c) -> str:
    return getattr(c, "co_qualname", c.co_name)


def _callback(codes: list) -> list:
    """The frames of the callback the loop runs: those inside the innermost
    ``Handle._run`` (what is outside it is the loop and the program that
    started it)."""
    for i, c in enumerate(codes):
        if c.co_name == "_run" and _base(c.co_filename) == "events.py":
            return codes[:i]
    return codes


def _label_of_loop(codes: list) -> str:
    """``package: outermost interesting function > innermost one of that
    package``, then ``/ package: innermost function`` when the time goes
    into another package's code (slimgraph's engine under distributed's
    handler, say)."""
    inner = [c for c in codes if _owner(c.co_filename) not in _CARRIERS]
    if not inner:
        return f"python: {_qual(codes[0])}" if codes else "python"
    outer = inner[-1]
    pkg = _owner(outer.co_filename)
    deepest = next((c for c in inner if _owner(c.co_filename) == pkg), outer)
    head = f"{pkg}: {_qual(outer)}" if deepest is outer else f"{pkg}: {_qual(outer)} > {_qual(deepest)}"
    last = inner[0]
    if _owner(last.co_filename) != pkg:
        head += f" / {_owner(last.co_filename)}: {_qual(last)}"
    return head


def _where_busy(codes: list) -> str:
    """What a busy non-loop thread is doing, for a label."""
    if not codes:
        return "?"
    # (pickle.loads is C: the Python frame that called it shows)
    return f"{_owner(codes[0].co_filename)}: {_qual(codes[0])}"


#: The CPU share (of the time between two snapshots) from which the loop
#: counts as running its handler rather than waiting for the GIL: two
#: threads that both want the GIL get about half each.
LOOP_SHARE = 0.25

#: The CPU shares are read over the last this many seconds at least (not
#: only since the previous snapshot): ten milliseconds hold one or two of
#: the interpreter's GIL switch intervals, too few to tell a handler that
#: shares the GIL (half of the time, on average) from one that waits. A
#: single long call is still seen: the stretch it fills is longer than this.
SHARE_WINDOW = 0.05


def classify(frames: dict, loop_tid: int | None, cpu: dict, elapsed: float,
             skip: tuple = (), waits: dict | None = None, names: dict | None = None,
             loop_busy: float | None = None, loop_seen: tuple | None = None) -> tuple[str, str]:
    """``(cause, label)`` of one snapshot of every thread's stack.

    ``frames`` is :func:`snapshot`'s (each thread's code objects, innermost
    first); ``loop_tid`` the event loop's
    thread; ``cpu`` each thread's CPU seconds since an earlier snapshot
    (at least :data:`SHARE_WINDOW` back), ``elapsed`` seconds ago: a thread that used (nearly) none was waiting,
    for work or for the GIL, whatever its frame shows; ``skip``: thread ids
    never to blame (the watchdog itself).

    The loop is blamed on what it runs when it got a fair share of the CPU
    (:data:`LOOP_SHARE`) or at least as much as the busiest other thread: a
    handler that shares the GIL with a busy thread takes longer, but the
    block is the handler's (the loop has nothing to wait for otherwise).
    Else on the busiest thread, whose GIL the loop was waiting for.

    ``waits``: seconds on the kernel's run queue over the same stretch, of
    the threads read (:class:`RunQueueClocks`; the monitor reads the
    loop's and the ingestion threads'). A loop that had work but waited for
    a CPU longer than it ran, a loop waiting for the GIL of a thread that
    waited for a CPU longer than it ran (preempted while holding the GIL),
    or (when no thread ran) any thread that waited for a CPU for a fair
    share of the stretch, makes it ``no CPU``. ``names``: thread id ->
    name, as read with the clocks (a thread may end before it is
    classified; by default, the live threads' names now).

    ``loop_busy``: the seconds of the stretch in which the loop had work
    (the blocks in it; by default all of it). The loop's share is read
    against them: before a block began and after it ended the loop was
    idle, and a stretch reaching back into that idle time would make a
    handler sharing the GIL look like a loop waiting for it.
    ``loop_seen``: what an earlier snapshot of the same block saw the loop
    run, ``(cause, label)``; it is the answer when the loop had its share
    of its busy part but is idle now (``unknown`` when no snapshot saw it). The watchdog needs the GIL too, and
    among three threads that want it, it can wait for it until the block
    is over (hundreds of milliseconds, seen with a page built on the loop
    while an ingestion thread ran Python).
    """
    waits = waits or {}
    if names is None:
        names = {t.ident: t.name for t in threading.enumerate()}
    loop = frames.get(loop_tid, []) if loop_tid is not None else []
    loop_cpu = cpu.get(loop_tid, 0.0)
    busiest, busiest_cpu = None, 0.0
    for tid, used in cpu.items():
        if tid == loop_tid or tid in skip or tid not in frames:
            continue
        if used > busiest_cpu:
            busiest, busiest_cpu = tid, used
    floor = 0.1 * elapsed
    running = bool(loop) and not _is_idle(loop)
    loop_wait = waits.get(loop_tid, 0.0)
    if running and loop_wait >= LOOP_SHARE * elapsed and loop_wait > loop_cpu:
        return "no CPU", f"the loop waited for a CPU, running {_label_of_loop(_callback(loop))}"
    busy = elapsed if loop_busy is None else min(max(loop_busy, 1e-6), elapsed)
    # the busiest thread's CPU in the loop's busy part, taken as evenly spread
    had_share = (loop_cpu >= LOOP_SHARE * busy or loop_cpu >= busiest_cpu * busy / elapsed) and loop_cpu > 0.1 * busy
    if running and had_share:
        return _on_loop(_callback(loop))
    if not running and had_share and loop_busy is not None:
        return loop_seen or ("unknown", "the loop ran a callback no snapshot saw")
    if busiest is not None and busiest_cpu > floor:
        codes = frames[busiest]
        name = str(names.get(busiest, busiest))
        who = f"thread {name}: {_where_busy(codes)}"
        held = waits.get(busiest, 0.0)
        if held >= LOOP_SHARE * elapsed and held > busiest_cpu:
            # the thread the loop waited for held the GIL while it waited on
            # the kernel's run queue: the machine's CPUs were busy elsewhere
            return "no CPU", f"{who}, holding the GIL, waited for a CPU"
        if _ingestion_frame(codes) is not None or name.startswith((_OFFLOAD, THREAD_NAME)):
            inner = _innermost_own(codes)
            if _owner(codes[0].co_filename) in ("dask", "distributed") or (inner is not None and _dasks_own(inner)):
                # (or what dask's unpickling calls: toolz rebuilding a curried function)
                return "dask's own", who
            return "ingestion", who
        if any(_slim(c) for c in codes):
            return "engine", who
        return "other thread", who
    starved = max(((w, tid) for tid, w in waits.items() if tid not in skip), default=None)
    if starved is not None and starved[0] >= LOOP_SHARE * elapsed:
        tid = starved[1]
        who = "the loop" if tid == loop_tid else f"thread {names.get(tid, tid)}"
        return "no CPU", f"{who} waited for a CPU"
    return "unknown", "no busy thread seen"


def _dasks_own(c) -> bool:
    """A frame of code every engine calls and none can shorten: dask's (and
    what it imports while it unpickles a graph: pandas' modules on a
    scheduler's first dataframe submission), or distributed's serialization.
    distributed's scheduler module is not: it is stock's ingestion."""
    f = c.co_filename
    owner = _owner(f)
    if owner == "distributed":
        return (os.sep + "protocol" + os.sep) in f
    return owner not in ("slimgraph", "python", "tornado")


def loop_runs(frames: dict, loop_tid: int | None) -> tuple | None:
    """What the loop runs in a snapshot, ``(cause, label)`` as
    :func:`classify` would name it, or None when it is idle."""
    loop = frames.get(loop_tid, []) if loop_tid is not None else []
    if not loop or _is_idle(loop):
        return None
    return _on_loop(_callback(loop))


def _on_loop(codes: list) -> tuple[str, str]:
    """The cause of a callback the loop runs (its frames, innermost first).
    Inside an ingestion, time spent in dask's own code (the innermost frame
    that is not the standard library's) is ``dask's own``, as it is when
    the ingestion's thread runs it."""
    label = _label_of_loop(codes)
    if _ingestion_frame(codes) is not None:
        inner = _innermost_own(codes)
        if inner is not None and _dasks_own(inner):
            return "dask's own", label
        return "ingestion", label
    inner = _innermost_own(codes)
    if inner is not None and inner.co_filename.startswith(_INSTRUMENT_DIRS):
        return "instruments", label
    if any(_slim(c) for c in codes):
        return "engine", label
    return "other handler", label


def thread_cpu(names: dict | None = None) -> dict:
    """CPU seconds used so far by each live Python thread (Linux: a
    per-thread clock), keyed by thread id; ``names`` (if given) gets each
    thread's name."""
    out = {}
    for t in threading.enumerate():
        tid = t.ident
        if tid is None:
            continue
        if names is not None:
            names[tid] = t.name
        try:
            out[tid] = time.clock_gettime(time.pthread_getcpuclockid(tid))
        except (OSError, AttributeError, OverflowError):
            continue
    return out


def _libc(name: str, argtypes: list, restype: Any):
    """A libc function called without letting the GIL go (ctypes'
    ``PyDLL``), or None where there is no such libc. The watchdog's system
    calls take microseconds; letting the GIL go for each would cost it a
    switch interval to get it back while other threads want it, and
    shift when it samples (see :class:`RunQueueClocks`)."""
    try:
        import ctypes.util

        fn = getattr(ctypes.PyDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = restype
    return fn


def _gil_holding_pread():
    return _libc("pread", [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long], ctypes.c_ssize_t)


#: names of the threads whose run-queue clocks the watchdog reads besides
#: the loop's: slimgraph's ingestion threads and distributed's offload
#: thread (stock's), which the loop waits for while they hold the GIL
WAITED_FOR = (THREAD_NAME, _OFFLOAD)


class RunQueueClocks:
    """Seconds each live Python thread has spent runnable but not running
    (waiting on the kernel's run queue for a CPU), keyed by thread id.

    Linux keeps the figure per thread in ``/proc/self/task/<id>/schedstat``
    (its second field, in nanoseconds). The files stay open: a ``pread`` of
    one costs about half a microsecond. It is called through ctypes'
    ``PyDLL``, which keeps the GIL: ``os.pread`` lets it go for the system
    call, and getting it back while other threads want it costs up to a
    switch interval each time (reading every thread's during a block
    delayed the watchdog by tens of milliseconds, the thread that had held
    the GIL was gone before its stack was taken, and a handler sharing the
    GIL was seen waiting more often). The watchdog reads the loop thread's
    and the ingestion threads' (:data:`WAITED_FOR`: the threads the loop
    waits for during an ingestion), once per wake-up. Where the files are
    missing, :meth:`read` answers ``{}`` and no block is called ``no CPU``.
    """

    def __init__(self) -> None:
        self._fds: dict = {}  # native id -> open file descriptor
        self.available = os.path.exists(f"/proc/self/task/{threading.get_native_id()}/schedstat")
        self._buf = ctypes.create_string_buffer(128)
        self._pread = _gil_holding_pread()

    def _read(self, fd: int) -> bytes:
        if self._pread is None:
            return os.pread(fd, 128, 0)
        n = self._pread(fd, self._buf, 128, 0)
        if n < 0:
            raise OSError("pread failed")
        return self._buf.raw[:n]

    def read(self, only: int | None = None, named: tuple = ()) -> dict:
        """``{thread id: seconds}``; ``only``: that thread's alone, and
        those of the threads whose names start with one of ``named``."""
        if not self.available:
            return {}
        out, seen = {}, set()
        for t in threading.enumerate():
            nid = t.native_id
            if nid is None or t.ident is None:
                continue
            if only is not None and t.ident != only and not (named and t.name.startswith(named)):
                if nid in self._fds:
                    seen.add(nid)  # (an open file stays open while its thread lives)
                continue
            seen.add(nid)
            fd = self._fds.get(nid)
            try:
                if fd is None:
                    fd = self._fds[nid] = os.open(f"/proc/self/task/{nid}/schedstat", os.O_RDONLY)
                out[t.ident] = int(self._read(fd).split()[1]) / 1e9
            except (OSError, IndexError, ValueError):
                # the thread has ended (its id may come back for a new one)
                self._drop(nid)
        for nid in [n for n in self._fds if n not in seen]:
            self._drop(nid)
        return out

    def _drop(self, nid: int) -> None:
        fd = self._fds.pop(nid, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        for nid in list(self._fds):
            self._drop(nid)


def snapshot() -> dict:
    """Every thread's stack now: ``{thread id: [Frame, ...]}``, innermost
    first.

    The stacks are walked by :func:`faulthandler.dump_traceback`, in C,
    holding the GIL from the first thread to the last: no other thread
    runs meanwhile. A walk in Python (``sys._current_frames()`` and
    ``f_back``) can be switched out between two frames; when the thread it
    walks has moved on, following ``f_back`` from a suspended coroutine's
    frame can read a freed caller frame in CPython 3.11. That crashed a
    scheduler process (a segfault in the walk, once in the test suite, with
    the 0.5 ms switch interval of an ingestion), even when each thread was
    walked at once. The text is parsed afterwards; faulthandler names
    functions, not qualified names, which :func:`_qualname` finds in the
    modules (for labels). Up to 100 frames per thread (faulthandler's
    limit), innermost first: what is cut is the outermost part."""
    with _dump_lock:
        fd = _dump_fd()
        # the walk first: the system calls after it let the GIL go (the
        # file is emptied after each read, ready for the next walk)
        try:
            faulthandler.dump_traceback(fd, all_threads=True)
            text = _read_all(fd).decode("ascii", "replace")
        finally:
            _rewind(fd)
    return _parse(text)


def walk_is_safe(version: tuple = tuple(sys.version_info[:3])) -> bool:
    """Whether faulthandler's walk of every thread is safe on this CPython
    release. On 3.12.0-3.12.7 and 3.13.0 it can crash the process when
    another thread's newest frame is one the C stack owns (a Python
    callback called from C, such as a weakref's): CPython issue 123967,
    fixed in 3.12.8 and 3.13.1. It happens in a moment no check can catch
    beforehand, so those releases take no snapshots (unless the setting
    ``slimgraph.stack-snapshots: always`` takes that risk, for measuring)."""
    if sys.implementation.name != "cpython":
        return False
    return not ((3, 12, 0) <= version < (3, 12, 8) or (3, 13, 0) <= version < (3, 13, 1))


_SNAPSHOT_WORKS: bool | None = None


def snapshot_works() -> bool:
    """Whether :func:`snapshot` may be taken on this interpreter and reads
    its tracebacks (their text is CPython's faulthandler's, not a promised
    format): the walk is safe (:func:`walk_is_safe`), and a snapshot taken
    here shows this thread in this function, under its qualified name.
    Checked on first use, then remembered."""
    global _SNAPSHOT_WORKS
    if _SNAPSHOT_WORKS is None and not walk_is_safe() and config.get("stack-snapshots") != "always":
        _SNAPSHOT_WORKS = False
    if _SNAPSHOT_WORKS is None:
        try:
            mine = snapshot().get(threading.get_ident(), [])
            names = [f.co_qualname for f in mine[:3]]
            _SNAPSHOT_WORKS = "snapshot_works" in names and all(f.lineno > 0 for f in mine[:3])
        except Exception:  # noqa: BLE001 (an unreadable traceback: no snapshots)
            _SNAPSHOT_WORKS = False
    return _SNAPSHOT_WORKS


_LSEEK = _PREAD = _FTRUNCATE = None
_DUMP_BUF: Any = None


def _read_all(fd: int) -> bytes:
    """What the walk wrote, read without letting the GIL go."""
    global _LSEEK, _PREAD, _FTRUNCATE, _DUMP_BUF
    if _LSEEK is None:
        _LSEEK = _libc("lseek", [ctypes.c_int, ctypes.c_long, ctypes.c_int], ctypes.c_long) or False
        _PREAD = _gil_holding_pread() or False
        _FTRUNCATE = _libc("ftruncate", [ctypes.c_int, ctypes.c_long], ctypes.c_int) or False
    if not (_LSEEK and _PREAD and _FTRUNCATE):
        return os.pread(fd, os.lseek(fd, 0, os.SEEK_CUR), 0)
    size = _LSEEK(fd, 0, os.SEEK_CUR)
    if _DUMP_BUF is None or len(_DUMP_BUF) < size:
        _DUMP_BUF = ctypes.create_string_buffer(max(size, 65536) * 2)
    n = _PREAD(fd, _DUMP_BUF, size, 0)
    return _DUMP_BUF.raw[: max(n, 0)]


def _rewind(fd: int) -> None:
    if _LSEEK and _FTRUNCATE:
        _LSEEK(fd, 0, os.SEEK_SET)
        _FTRUNCATE(fd, 0)
    else:
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)


_dump_lock = threading.Lock()
_DUMP_FD: int | None = None
_dump_file = None  # (where there is no memfd: a temporary file, kept open)


def _dump_fd() -> int:
    """The file the walks are written to (made once; the monitor makes it
    when it starts, not in the middle of a block)."""
    global _DUMP_FD, _dump_file
    if _DUMP_FD is None:
        try:
            _DUMP_FD = os.memfd_create("slimgraph-stacks", os.MFD_CLOEXEC)
        except (AttributeError, OSError):
            import tempfile

            _dump_file = tempfile.TemporaryFile()
            _DUMP_FD = _dump_file.fileno()
    return _DUMP_FD


_HEAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+) ")
_LINE = re.compile(r'^  File "(.*)", line (\d+|\?\?\?) in (.*)$')
#: (filename, line, name) -> Frame: a block's snapshots see the same frames
_FRAMES: dict = {}


def _parse(text: str) -> dict:
    out: dict = {}
    cur: list | None = None
    for line in text.splitlines():
        m = _HEAD.match(line)
        if m is not None:
            cur = out[int(m.group(1), 16)] = []
            continue
        if cur is None or not line.startswith("  File "):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        filename, lineno, name = m.group(1), m.group(2), m.group(3)
        key = (filename, lineno, name)
        f = _FRAMES.get(key)
        if f is None:
            if len(_FRAMES) > 20_000:
                _FRAMES.clear()
            n = int(lineno) if lineno.isdigit() else 0
            f = _FRAMES[key] = Frame(filename, name, _qualname(filename, n, name), n)
        cur.append(f)
    return out


#: filename -> [(first line, last line, name, qualname)] of its code objects
_CODES: dict = {}
_MODULE_FILES: dict = {}  # filename -> module, refreshed when one is missing
_MODULES_SEEN = 0


def _qualname(filename: str, lineno: int, name: str) -> str:
    """The qualified name (``Class.method``) of the function ``name`` whose
    code covers ``lineno`` in ``filename``, found among the code objects of
    the module loaded from that file; ``name`` if there is none."""
    codes = _CODES.get(filename)
    if codes is None:
        codes = _CODES[filename] = _codes_of(filename)
    best = None
    for first, last, n, q in codes:
        if n == name and first <= lineno <= last and (best is None or first > best[0]):
            best = (first, q)
    return best[1] if best is not None else name


def _codes_of(filename: str) -> list:
    global _MODULES_SEEN
    if filename not in _MODULE_FILES and len(sys.modules) != _MODULES_SEEN:
        _MODULES_SEEN = len(sys.modules)
        for mod in list(sys.modules.values()):
            f = getattr(mod, "__file__", None)
            if isinstance(f, str):
                _MODULE_FILES.setdefault(f, mod)
    mod = _MODULE_FILES.get(filename)
    if mod is None:
        return []
    found: list = []
    seen: set = set()

    def add(code, qualname: str) -> None:
        if id(code) in seen or code.co_filename != filename:
            return
        seen.add(id(code))
        lines = [ln for _, _, ln in code.co_lines() if ln is not None]
        last = max(lines) if lines else code.co_firstlineno
        found.append((code.co_firstlineno, last, code.co_name, qualname))
        for c in code.co_consts:
            if hasattr(c, "co_lines"):
                add(c, _code_qualname(c, f"{qualname}.<locals>.{c.co_name}"))

    def visit(obj, depth: int = 0) -> None:
        obj = getattr(obj, "__func__", obj)
        code = getattr(obj, "__code__", None)
        if code is not None:
            add(code, _code_qualname(code, getattr(obj, "__qualname__", code.co_name)))
        elif isinstance(obj, property):
            for fn in (obj.fget, obj.fset, obj.fdel):
                if fn is not None:
                    visit(fn, depth)
        elif isinstance(obj, type) and depth < 3 and getattr(obj, "__module__", None) == mod.__name__:
            for v in list(vars(obj).values()):
                visit(v, depth + 1)

    try:
        for v in list(vars(mod).values()):
            visit(v)
    except Exception:  # noqa: BLE001 (labels only: a module that resists goes unnamed)
        pass
    return found


def _code_qualname(code, otherwise: str) -> str:
    """A code object's qualified name: its own since 3.11; before, the one
    its function (or, for a nested code object, its parent) gives it."""
    return getattr(code, "co_qualname", otherwise)
