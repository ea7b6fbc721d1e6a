"""What sending a submission's tasks to workers costs the scheduler.

Why. Compact ingestion builds a task's run_spec when something reads it,
and the reader that matters is distributed's ``_task_to_msg``: the moment
a task goes to a worker. Work taken out of the ingestion could come back
there, once per task, on the event loop. This measures it, stock and slim
on the same submission: the scheduler's own part of dispatching, which is
building each ``compute-task`` message (the scheduler's own
``_task_to_msg``: distributed's on stock, :mod:`slimgraph.model.messages`
on slim) and serializing the messages as a worker's stream does
(``distributed.protocol.dumps`` of a batch). The network and the workers
are left out: they are the same for both engines.

What. A sample of the graph's tasks (the first ``sample`` in priority
order, the order in which they go out), in batches of ``batch`` messages;
the same tasks on both engines, since priorities are equal. Every message
is built and serialized, then dropped. Runs after the other measurements
of a benchmark child: building messages sets ``ts.run_id``, as sending
does.
"""
from __future__ import annotations

import heapq
import time
from typing import Any

from distributed.protocol import dumps

from slimgraph import shim

__all__ = ["sending_cost"]


def sending_cost(scheduler: Any, sample: int = 100_000, batch: int = 1_000) -> dict:
    """``{"tasks", "message_seconds", "serialize_seconds", "seconds"}`` for
    the first ``sample`` tasks by priority (tasks without one, made outside a
    submission, are never sent)."""
    tasks = heapq.nsmallest(sample, (ts for ts in scheduler.tasks.values() if ts.priority is not None),
                            key=lambda ts: ts.priority)
    built = packed = 0.0
    for i in range(0, len(tasks), batch):
        chunk = tasks[i:i + batch]
        t0 = time.perf_counter()
        msgs = [shim.scheduler_task_msg(scheduler, ts) for ts in chunk]
        t1 = time.perf_counter()
        frames = dumps(msgs)
        t2 = time.perf_counter()
        del msgs, frames
        built += t1 - t0
        packed += t2 - t1
    return {"tasks": len(tasks), "message_seconds": built, "serialize_seconds": packed,
            "seconds": built + packed}
