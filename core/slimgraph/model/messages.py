"""The ``compute-task`` message of a slim task, read from its own fields.

Why. Sending a task to a worker is where the slim engine pays for being
slim: distributed's ``SchedulerState._task_to_msg`` reads a dozen
attributes of the task, and on a :class:`SlimTaskState` several of them are
properties (``priority`` is rebuilt from its head and order, ``run_id``'s
setter makes the task's ``Extra``, ``annotations`` makes an empty
``NoAnnotations``, ``run_spec`` is built from a compact graph). Through
them, building a message cost well over stock's, the whole of slim's extra
cost at dispatch.

What. :func:`compute_task_msg` builds the same message from the slots
directly: the same keys in the same order, the same values (the same
objects where stock passes the task's own: the key, the annotations
dict, the restrictions), the run id taken from distributed's own counter
and set on the task, the stimulus id made by distributed's clock, the
dependencies walked once for both ``who_has`` and ``nbytes`` (stock walks
the same container twice, in the same order). Tasks that are not slim
(a stock scheduler's, a test's) go to distributed's own method.

Equal to stock's by construction and by test (``tests/test_messages.py``
builds both messages for every task of real submissions). At import the
installed distributed's method is checked to build exactly these fields
(:func:`slimgraph.shim.compute_task_fields`); if a release changes them,
:data:`ENABLED` is False and every message is distributed's own.
"""
from __future__ import annotations

from typing import Any

from distributed.metrics import time
from distributed.protocol.serialize import ToPickle

from slimgraph import shim
from slimgraph.model.taskstate import NO_EXTRA, Extra, SlimTaskState

__all__ = ["FIELDS", "ENABLED", "compute_task_msg"]

#: The message's fields, in the order distributed's ``_task_to_msg`` writes them.
FIELDS = ("op", "key", "run_id", "priority", "stimulus_id", "who_has", "nbytes", "run_spec",
          "resource_restrictions", "actor", "annotations", "span_id")

#: Whether the installed distributed builds exactly :data:`FIELDS`.
ENABLED = shim.compute_task_fields() == FIELDS

_next_run_id = shim.next_run_id
_stock_msg = shim.task_to_msg


def compute_task_msg(state: Any, ts: Any) -> dict:
    """distributed's ``compute-task`` message for ``ts`` (setting
    ``ts.run_id``), as ``SchedulerState._task_to_msg`` builds it.
    ``state`` is the scheduler state (or a shadow of it) sending the task."""
    if type(ts) is not SlimTaskState or not ENABLED:
        return _stock_msg(state, ts)
    run_id = _next_run_id()
    x = ts._x
    if x is NO_EXTRA:
        x = ts._x = Extra()
    x.run_id = run_id
    head = ts._prio_head
    priority = (head[0], head[1], ts._prio_order) if type(head) is tuple else head
    assert priority, ts
    who_has = {}
    nbytes = {}
    for dts in ts.dependencies:
        key = dts.key
        holders = dts.who_has
        who_has[key] = tuple([ws.address for ws in holders]) if holders else ()
        nbytes[key] = dts.nbytes
    g = ts._graph
    more = x.more
    msg = {
        "op": "compute-task",
        "key": ts.key,
        "run_id": run_id,
        "priority": priority,
        "stimulus_id": f"compute-task-{time()}",
        "who_has": who_has,
        "nbytes": nbytes,
        "run_spec": ToPickle(ts._spec if g is None else g.task_run_spec(ts._spec)),
        "resource_restrictions": more.resource_restrictions,
        "actor": more.actor,
        "annotations": more.annotations or {},
        "span_id": ts.group.span_id,
    }
    if state.validate:
        assert all(who_has.values())
    return msg
