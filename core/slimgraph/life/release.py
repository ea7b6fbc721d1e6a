"""A client's release or cancel of a big graph, in slices.

Why. When a client releases a graph's futures or cancels them, distributed
releases and forgets every task in one call (``client_releases_keys``, also
reached from ``stimulus_cancel``): for a 1M-task array one block of the
event loop of 17.8 s on stock and 19.6 s on slim (``bench``, ``release the
graph``), during which no worker or client is heard.

What. The slim scheduler's ``client-releases-keys`` and ``cancel-keys``
stream handlers run stock's own steps, in stock's order, as a job of
:mod:`slimgraph.runtime.loopwork`: the same first step
(``_client_releases_keys``), then distributed's own transitions one at a
time, taken from the recommendations as ``SchedulerState._transitions``
takes them (``popitem``, new recommendations merged in), then
``stimulus_queue_slots_maybe_opened``; for a cancel, stock's walk over the
keys' dependents, each ``client_releases_keys`` in turn, then the
``cancelled-keys`` report. The job yields only after a transition, when
its slice is spent, after sending the messages collected so far (each
destination gets stock's messages in stock's order; stock sends them all
at the end).

The state between two slices is stock's own between two transitions of
one ``transitions`` call: every task is in one of stock's states, and every
task but those with a recommendation still pending
(``scheduler.slim_work.pending``) passes distributed's
``validate_task_state``; a task waiting for its pending ``released`` may
be in memory with nobody needing it, which ``validate_state`` (never run
inside a call by stock) would refuse. Every other stimulus waits until the job is done
(:mod:`slimgraph.runtime.loopwork`), so the transition log, the plugin
calls and what happens to a stimulus that arrives meanwhile are stock's.

A client closing (``remove_client``) releases what it wanted the same
way, then runs stock's ``remove_client`` (which finds nothing left to
release): its ``remove-client`` event is logged after the release's
transitions, not before them. Where ``client_releases_keys`` is called as
a function (``restart``, an update_graph with lost dependencies) it stays
stock's: one call.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Collection, Iterator

from distributed.metrics import time

from slimgraph import shim

logger = logging.getLogger("distributed.scheduler")


def client_releases_keys(state: Any, keys: Collection, client: str, stimulus_id: str | None) -> Iterator[None]:
    """``Scheduler.client_releases_keys``, in slices."""
    stimulus_id = stimulus_id or f"client-releases-keys-{time()}"
    if not isinstance(keys, list):
        keys = list(keys)
    cs = state.clients[client]
    recs: dict = {}
    shim.client_releases_recs(state, keys, cs, recs)
    yield from transitions(state, recs, stimulus_id)
    state.stimulus_queue_slots_maybe_opened(stimulus_id=stimulus_id)


def transitions(state: Any, recommendations: dict, stimulus_id: str) -> Iterator[None]:
    """``Scheduler.transitions``: distributed's transitions until none are
    recommended, yielding (after sending what they produced) when the
    slice's budget is spent."""
    work = state.slim_work
    budget = work.budget
    # the keys transitioned, kept (as stock's ``_transitions`` keeps them)
    # only to validate them after: a release of 10M tasks would grow this
    # set to 10M keys, each of its resizes one call on the loop
    keys: set | None = set() if state.validate else None
    recs = recommendations.copy()
    work.pending = recs
    client_msgs: dict = {}
    worker_msgs: dict = {}
    try:
        while recs:
            key, finish = recs.popitem()
            if keys is not None:
                keys.add(key)
            new_recs, new_cmsgs, new_wmsgs = shim.transition(state, key, finish, stimulus_id)
            recs.update(new_recs)
            for c, msgs in new_cmsgs.items():
                client_msgs.setdefault(c, []).extend(msgs)
            for w, msgs in new_wmsgs.items():
                worker_msgs.setdefault(w, []).extend(msgs)
            if recs and budget.over():
                state.send_all(client_msgs, worker_msgs)
                client_msgs, worker_msgs = {}, {}
                yield
    finally:
        work.pending = None
    if keys is not None:
        for key in keys:
            state.validate_key(key)
    state.send_all(client_msgs, worker_msgs)


def stimulus_cancel(state: Any, keys: Collection, client: str, force: bool, reason: Any, msg: Any) -> Iterator[None]:
    """``Scheduler.stimulus_cancel``, in slices."""
    logger.info("Client %s requests to cancel %d keys", client, len(keys))
    state.log_event(client, {"action": "cancel", "count": len(keys), "force": force})
    cs = state.clients.get(client)
    if not cs:
        return
    cancelled_keys = []
    clients = []
    for key in keys:
        ts = state.tasks.get(key)
        if not ts:
            continue
        if force or ts.who_wants == {cs}:  # no one else wants this key
            if ts.dependents:
                yield from stimulus_cancel(
                    state, [dts.key for dts in ts.dependents], client, force, reason, msg
                )
            logger.info("Scheduler cancels key %s.  Force=%s", key, force)
            cancelled_keys.append(key)
        assert ts.who_wants
        clients.extend(list(ts.who_wants) if force else [cs])
    for cs in clients:
        yield from client_releases_keys(state, cancelled_keys, cs.client_key, f"cancel-key-{time()}")
    state.report({"op": "cancelled-keys", "keys": cancelled_keys, "reason": reason, "msg": msg})


def remove_client(state: Any, client: str, stimulus_id: str | None, finish: Callable) -> Iterator[None]:
    """``Scheduler.remove_client``: what the client wanted released in
    slices, then ``finish`` (stock's ``remove_client``) for the rest."""
    stimulus_id = stimulus_id or f"remove-client-{time()}"
    cs = state.clients.get(client)
    if cs is not None and cs.wants_what:
        yield from client_releases_keys(state, [ts.key for ts in cs.wants_what], client, stimulus_id)
    finish(client, stimulus_id=stimulus_id)
