"""The threads an ingestion's work runs in, off the event loop.

distributed gives a scheduler one thread for work off its event loop
(``distributed.utils.offload``), and a staged ingestion keeps a thread busy
for seconds at a time (materializing, building, ordering a million tasks).
In that one thread everything else offloaded waits behind it: another
client's one-task submission (its graph is materialized off the loop, as
stock does) waited 1.5-3.8 s for every ``submit`` while a 200k-task array
was being staged (a second client timing each submit, and the
scheduler's own record of when the task first changed state), and
distributed's deserialization of large messages would wait the same way.

So slimgraph's steps run in a pool of their own, of
``slimgraph.offload-threads`` threads (default 2): a submission's step
starts while another submission's step is still running. What one client
sends stays in order: distributed handles a client's messages one at a
time (it awaits each ``update_graph`` before reading the next), so a
client's second submission starts only after its first has been
committed; submissions of different clients already interleaved step by
step in the single thread, and now also run side by side. Nothing the
steps share is unguarded: materializing and ordering read only their own
submission, the build reads the scheduler's state as it did before
(the commit checks what it read), and the process-wide policies (the
collector's pause and freeze, the switch interval) count their holds.

The threads are named ``slimgraph-ingest_<n>``, so that the loop's block
monitor can tell them apart from other threads.

Lifetime: the pool lives while a slim scheduler of the process does.
Schedulers :func:`attach` when made and :func:`detach` when closed; the last
detach shuts the pool down (its threads end as soon as a step still running
is done, as distributed's test harness expects of a closed scheduler), and
the next offload makes a new one.
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from slimgraph import config

__all__ = ["THREAD_NAME", "attach", "detach", "executor", "offload"]

#: the prefix of the pool's thread names
THREAD_NAME = "slimgraph-ingest"

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
#: the schedulers the pool serves (weakly: one never closed does not keep it)
_users: "weakref.WeakSet[Any]" = weakref.WeakSet()


def attach(owner: Any) -> None:
    """``owner`` (a slim scheduler) may offload until it :func:`detach` es."""
    with _lock:
        _users.add(owner)


def detach(owner: Any) -> None:
    """``owner`` is closed: the last one shuts the pool down."""
    global _executor
    with _lock:
        _users.discard(owner)
    _shut_down_if_unused()


def _shut_down_if_unused() -> None:
    global _executor
    with _lock:
        if _users or _executor is None:
            return
        pool, _executor = _executor, None
    pool.shutdown(wait=False)


def executor() -> ThreadPoolExecutor:
    """The pool (made on first use, ``slimgraph.offload-threads`` threads)."""
    global _executor
    with _lock:
        if _executor is None:
            n = int(config.get("offload-threads"))
            if n < 1:
                raise ValueError(f"slimgraph.offload-threads must be at least 1, got {n}")
            _executor = ThreadPoolExecutor(max_workers=n, thread_name_prefix=THREAD_NAME)
        return _executor


async def offload(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in one of the pool's threads, in the calling
    task's context (context variables are seen there as here)."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    try:
        return await asyncio.get_running_loop().run_in_executor(executor(), call)
    finally:
        if not _users:  # a caller that is no scheduler, or one closed meanwhile
            _shut_down_if_unused()
