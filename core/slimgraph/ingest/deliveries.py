"""Plugin calls an ingestion owes, made in stock's order without a long block.

Stock calls every plugin's ``update_graph`` hook and then, for each of the
submission's initial transitions, every plugin's ``transition`` hook, all
inside ``update_graph`` on the event loop. A plugin that listens (dask's
own Graph page registers one; so does any user plugin that records
transitions) turns a million-task submission into millions of calls in one
block. A staged ingestion therefore publishes the graph first and *owes*
those calls: :class:`Deliveries` makes them afterwards, on the event loop,
in slices of :data:`SLICE` seconds, in exactly stock's order and with
stock's arguments.

Order with everything else is kept by queueing behind: while calls are owed
to a plugin, the transitions that happen meanwhile (the workers start at
once) are not told to it by distributed's transition code; their calls join
the queue instead (:meth:`Deliveries.transition`). Another submission's
calls join it too, and a plugin that is removed first hears everything owed
to it. So a plugin sees the same sequence of calls as on stock, with stock's
arguments; what differs is only *when* a call comes (at or after the
commit) and so the scheduler state it may look at meanwhile.

Forgotten tasks. Plugins look tasks up when they hear of them: dask's
graph layout skips a task that is not in ``scheduler.tasks``, reads the
live edges of the tasks it lays out and a forgotten task's edges. A task
with edges is therefore forgotten only after everything owed has been
delivered (forgetting it changes its neighbours' edges). A task without
any (a second client's ``submit``, released within a second) is forgotten
at once and stays, for the calls owed, a *ghost*: while they are made (and
only then, synchronously, so no other handler sees it),
``scheduler.tasks`` holds it again (:func:`slimgraph.shim.forgotten_in_tasks`,
as distributed's own transition does around its plugin calls); its own
calls wait behind the big graph's. Delivering everything owed at once
before each such forget instead would block the loop for seconds (6.6 s
in ``bench --mode client --real-use`` at 200k tasks with dask's Graph page
open). Past :data:`GHOSTS` ghosts, the next forget delivers everything
first.

The scheduler's objects are only reached through the shim: its plugin
table withholds the owed-to plugins for a transition
(:func:`slimgraph.shim.plugins_withheld`), and the ghosts are in its tasks
only inside :func:`slimgraph.shim.forgotten_in_tasks`. A commit or a
tail's slice that sends ready tasks itself queues its transitions' calls
on its own: it says so with :meth:`Deliveries.told_by_caller`.

Two plugins need more than a queue of calls:

- distributed's ``GraphLayout`` (the dashboard's Graph page) lays out every
  submitted task in its ``update_graph`` hook: one call, about 22 us per
  task (20 s at 1M). Its hook is delivered in slices of tasks in priority
  order, which lays out exactly what one call lays out (its own loop takes
  the tasks in that order and visits dependencies first; the differential
  test compares the layouts).
- Hooks are delivered before every transition call, as in stock.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections import deque
from typing import Any, Iterator

from slimgraph import shim
from slimgraph.shim import cpython
from slimgraph.runtime import disposal, loopwork

logger = logging.getLogger("distributed.scheduler")

#: Longest run of plugin calls between two event-loop turns (seconds).
SLICE = 0.02
#: What a batch yields when its next call is for a transition that has not
#: happened yet (ready tasks still being sent after the commit,
#: :mod:`slimgraph.ingest.tail`): delivery pauses there and comes back.
WAIT = object()
#: Tasks per ``GraphLayout.update_graph`` slice.
LAYOUT_SLICE = 500
#: Most tasks kept as ghosts (see the module docstring): each slice puts
#: them back in ``scheduler.tasks`` for its calls.
GHOSTS = 10_000


class Deliveries:
    """Owed plugin calls for one scheduler state, in order.

    Each owed batch is a generator that makes one call (or a few) per
    ``next()``; :meth:`flush` runs them all now, :meth:`start` in slices
    on the event loop.
    """

    def __init__(self) -> None:
        self.steps: deque[Iterator[None]] = deque()
        #: the plugins calls are owed to (id -> plugin): they hear of later
        #: transitions through the queue too, until it is empty
        self.owed_to: dict = {}
        #: how many callers are inside :meth:`told_by_caller` (the slim
        #: state's ``_transition`` reads it; only that method writes it)
        self.suspended = 0
        self._job: Any = None
        self._flushing = False
        #: key -> task forgotten while calls were owed; and the dict they
        #: are put back in while calls are made (the scheduler's tasks)
        self.ghosts: dict = {}
        self._state: Any = None
        #: tails whose owed calls wait for ready tasks they have not sent
        #: yet (slimgraph.ingest.tail): a flush opens them
        self.gates: list = []

    def __bool__(self) -> bool:
        return bool(self.steps)

    def add(self, step: Iterator[None], plugins: dict | None = None) -> None:
        """Owe ``step``'s calls (to ``plugins``: id -> plugin)."""
        self.steps.append(step)
        if plugins:
            self.owed_to.update(plugins)

    def _emptied(self) -> None:
        if not self.steps:
            self.owed_to = {}
            self.ghosts = {}
            self.gates = []

    @contextlib.contextmanager
    def told_by_caller(self) -> Iterator[None]:
        """Inside, transitions do not come through :meth:`transition`: the
        caller (a commit or a tail's slice sending ready tasks through
        distributed's own transitions) withholds the owed-to plugins itself
        and queues their calls behind the owed ones, in stock's order."""
        self.suspended += 1
        try:
            yield
        finally:
            self.suspended -= 1

    def _haunted(self) -> Any:
        """Context: the ghosts are in the scheduler's tasks again, for the
        calls made inside (see the module docstring)."""
        if not self.ghosts or self._state is None:
            return contextlib.nullcontext()
        return shim.forgotten_in_tasks(self._state, self.ghosts)

    def transition(self, state: Any, key: Any, finish: str, stimulus_id: str, kwargs: dict, run: Any) -> Any:
        """A transition while calls are owed: ``run()`` (distributed's own
        transition) with the owed-to plugins left out, and their calls for
        it queued behind the owed ones."""
        ts = state.tasks.get(key)
        forgetting = finish == "forgotten"
        if forgetting and ts is not None and (ts.dependencies or ts.dependents or len(self.ghosts) >= GHOSTS):
            self.flush()
            return run()
        owed_to = self.owed_to
        counter = state.transition_counter
        with shim.plugins_withheld(state, owed_to):
            out = run()
        if forgetting and ts is not None and state.tasks.get(key) is not ts:
            self.ghosts[key] = ts
            self._state = state
        log = state.transition_log
        if ts is not None and state.transition_counter != counter and log and log[-1].key == key:
            t = log[-1]  # what distributed logged is what it tells plugins
            listening = [p for p in owed_to.values() if shim.listens_to_transition(p, t.start, t.finish)]
            if listening:
                self.steps.append(_told_later(listening, key, t.start, t.finish, stimulus_id, kwargs))
        return out

    def flush(self) -> None:
        """Make every owed call now (re-entrant calls do nothing).

        Calls waiting for ready tasks a tail has not sent yet do not wait
        any longer: the gate opens, the calls owed so far are made, and
        the plugins hear of the tail's later transitions as they happen
        (a task with edges is being forgotten, typically because the graph
        was released: most of those ready tasks will never be sent)."""
        if self._flushing:
            return
        self._flushing = True
        for tail in self.gates:
            tail.open_gate()
        try:
            with self._haunted():
                steps = self.steps
                while steps:
                    for _ in steps[0]:
                        pass
                    steps.popleft()
        finally:
            self._flushing = False
            self._emptied()

    def start(self, state: Any) -> None:
        """Deliver in slices, a background job on ``state``'s executor
        (:mod:`slimgraph.runtime.loopwork`; idempotent)."""
        if self._job is None:
            self._job = self._drain()
            loopwork.of(state).spawn(self._job)

    def _drain(self) -> Iterator[Any]:
        """The job: owed calls until its slice is spent, then a turn of
        the executor (:data:`loopwork.WAITING` while the next call waits
        for a tail)."""
        steps = self.steps
        try:
            while steps:
                deadline = time.perf_counter() + SLICE
                waiting = False
                with self._haunted():
                    while steps and not self._flushing:
                        step = steps[0]
                        done = True
                        for x in step:
                            if x is WAIT:
                                waiting = True
                            if waiting or time.perf_counter() > deadline:
                                done = False
                                break
                        if done:
                            steps.popleft()
                        else:
                            break
                self._emptied()
                yield loopwork.WAITING if waiting else None
        finally:
            self._job = None

    async def wait(self) -> None:
        """Until everything owed is delivered (tests)."""
        while self.steps or self._job is not None:
            await asyncio.sleep(0.005)


# ---------------------------------------------------------------------------
# the batches
def _told_later(plugins: list, key: Any, start: str, finish: str, sid: str, kwargs: dict) -> Iterator[None]:
    """One transition's calls to plugins it was kept from (see
    :meth:`Deliveries.transition`)."""
    for p in plugins:
        try:
            p.transition(key, start, finish, stimulus_id=sid, **kwargs)
        except Exception:
            logger.info("Plugin failed with exception", exc_info=True)
    yield


def update_graph_hooks(state: Any, plugins: list, kwargs: dict, stack: list | None = None) -> Iterator[None]:
    """Every listening plugin's ``update_graph`` hook, stock's arguments.
    ``stack``: :func:`layout_stack` of the tasks, if known already."""
    for plugin in plugins:
        if type(plugin) is shim.GraphLayout and len(kwargs["tasks"]) > LAYOUT_SLICE:
            if stack is None:
                stack = layout_stack(kwargs["tasks"], kwargs["priority"])
            yield from _layout_in_slices(state, plugin, kwargs, stack)
            continue
        try:
            plugin.update_graph(state, **kwargs)
        except Exception as e:
            logger.exception(e)
        yield
    box = [kwargs.pop("tasks", None), kwargs.pop("priority", None), stack]
    stack = None
    free_later(box)


#: drains under way (a task nobody holds may be collected before it ran)
def free_later(box: list) -> None:
    """The big containers in ``box`` that the calls just made were the last
    to hold (a million log entries and hook arguments, once delivered):
    freed in steps in a worker thread, not in one cascade when the batch is
    dropped on the event loop (0.1-0.2 s each at 1M tasks). Containers
    something else still holds (a plugin kept its ``tasks``) are left
    alone."""
    disposal.free_later(disposal.big(*disposal.take_sole(box)))


def layout_stack(tasks: list, priority: dict) -> list:
    """The stack ``GraphLayout.update_graph`` starts from: the tasks sorted
    by priority, most important last (it pops from the end)."""
    return sorted(tasks, key=lambda k: shim.TupleComparable(priority.get(k, 0)), reverse=True)


def _layout_in_slices(state: Any, plugin: Any, kwargs: dict, stack: list) -> Iterator[None]:
    """``GraphLayout.update_graph`` in slices of the stack its one call
    starts from, the slice it would pop first first. Each slice is already
    in stack order (its own sort keeps it), and the call lays out a task's
    dependencies before the task whatever slice they are in, so the slices
    lay out exactly what the one call does, in the same order. A layout
    dict that a slice would make grow grows first, in a turn of its own
    (:func:`grow_ahead`)."""
    for end in range(len(stack), 0, -LAYOUT_SLICE):
        part = dict(kwargs)
        part["tasks"] = stack[max(0, end - LAYOUT_SLICE) : end]
        for name in LAYOUT_DICTS:
            d = getattr(plugin, name, None)
            if type(d) is not dict or len(d) < GROW_AHEAD_MIN:  # (small: grows where it is, quickly)
                continue
            need = GROW_AHEAD
            if name == "index_edge":  # (an entry per dependency)
                tasks = state.tasks
                need += 2 * sum(len(ts.dependencies) for ts in map(tasks.get, part["tasks"]) if ts is not None)
            if grow_ahead(d, need):
                yield
        try:
            plugin.update_graph(state, **part)
        except Exception as e:
            logger.exception(e)
        yield


#: The layout's dicts that gain an entry per task laid out (or per edge).
LAYOUT_DICTS = ("x", "y", "index", "collision", "index_edge")
#: Room a layout dict must have before a slice: what a slice may add (its
#: tasks, the dependencies laid out with them, an edge per dependency).
GROW_AHEAD = 8 * LAYOUT_SLICE
#: Smaller layout dicts grow where they are: their new table is quick to make.
GROW_AHEAD_MIN = 65_536


def grow_ahead(d: dict, need: int) -> bool:
    """Make ``d`` grow now if fewer than ``need`` entries would make it
    grow; returns whether it grew (the caller then ends its turn).

    Why. The layout's dicts gain an entry for each task laid out, together,
    so the slice whose tasks filled their tables grew them all in one call:
    each a new table of ~40 MB at a million tasks (a new hash table is made
    and every entry moved into it, its pages touched for the first time).
    Here each grows in a turn of its own: placeholder keys are added until
    the dict has grown, then removed. The dict holds what it held, in the
    same order; only its table is bigger earlier, by the ``need`` entries
    it would have reached within a slice anyway.

    It moves issue #14's target (slim's longest loop block <= 0.2 s, client
    mode). A 1M-task array with dask's Graph page open (``bench --mode
    client --workload array --tasks 1000000 --compute-seconds 20
    --dashboard-pages browser --background-nice 10``, slim, two runs
    each): the longest block in the plugins phase 0.13 and 0.06 s with it,
    0.32 and 0.13 s without; the layout's longest turn 0.085 and 0.067 s
    (a dict grown ahead: 0.06-0.07 s) against 0.12 and 0.17 s.
    """
    room = cpython.dict_room(d)
    if room is None or room >= need:
        return False
    size = sys.getsizeof(d)
    added = []
    # (str placeholders: a str-keyed dict's compact table stays str-keyed)
    for i in range(room + 1):
        k = f"\0slimgraph-placeholder-{i}"
        d[k] = None
        added.append(k)
        if sys.getsizeof(d) != size:
            break
    for k in added:
        del d[k]
    return sys.getsizeof(d) != size


def transition_calls(calls: Iterator[tuple], pairs: dict, sid: str, plugins: dict) -> Iterator[None]:
    """``plugin.transition`` for each ``(key, start, finish)`` of ``calls``:
    for the plugins listed in ``pairs[(start, finish)]``, or, for another
    transition, those of ``plugins`` that listen to it."""
    pairs = dict(pairs)
    for call in calls:
        if call is WAIT:
            yield WAIT
            continue
        key, start, finish = call
        ps = pairs.get((start, finish))
        if ps is None:
            ps = pairs[start, finish] = [
                p for p in plugins.values() if shim.listens_to_transition(p, start, finish)
            ]
        for p in ps:
            try:
                p.transition(key, start, finish, stimulus_id=sid)
            except Exception:
                logger.info("Plugin failed with exception", exc_info=True)
        yield
