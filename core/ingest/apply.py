"""Applying a build and its plan to the scheduler: in place, or as a staged commit.

A :class:`~slimgraph.ingest.build.Build` and its
:class:`~slimgraph.ingest.replay.Plan` are values; nothing the scheduler
holds has changed yet. Applying them does, in stock's order:

1. publish the build: the generation, the Computation, new task groups and
   prefixes, the counts added to the scheduler's own groups, the new tasks
   (one ``dict.update``), changes to tasks the scheduler already had
   (run_specs, edges, priorities), stock's warning for resubmitted keys;
2. ``who_wants`` and actors (distributed's own ``client_desires_keys``,
   which also reports keys already in memory);
3. spans, and every plugin's ``update_graph`` hook with stock's arguments;
4. the transitions: a *stock* plan hands the initial recommendations to
   distributed's own ``transitions``; otherwise the plan's counts, log
   entries and queue run are published, and its hand-offs (and, while a
   worker is idle, its queued root-ish tasks) go through distributed's own
   transition, in the order the replay visited them; plugins listening to
   transitions are told of every transition in stock's order;
5. the reports stock sends for touched tasks already in memory or erred.

Two appliers share that sequence. :func:`apply_in_place` runs it right
after the build, on the event loop, with nothing in between. :func:`commit`
first checks (:func:`still_valid`) that nothing the build read has changed
while it was made in a worker thread, and refuses otherwise: then the
caller ingests the submission in place from scratch.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from slimgraph import shim
from slimgraph.ingest.build import Build, warn_collisions
from slimgraph.ingest.replay import INLINED, Plan, blame, initial_recommendations
from slimgraph.ingest.spans import observe
from slimgraph.ingest.submission import joins_last_computation
from slimgraph.instrument.records import SubmissionRecord

#: plugin failures are logged where stock logs them
stock_logger = logging.getLogger("distributed.scheduler")


def apply_in_place(state: Any, b: Build, plan: Plan, rec: SubmissionRecord) -> tuple[dict, dict]:
    """Publish ``b`` and apply ``plan`` now (see module docstring), timing
    phases ``who_wants``, ``plugins`` and ``transitions``. Returns the
    messages to send: ``(client_msgs, worker_msgs)``."""
    client_msgs: dict = {}
    worker_msgs: dict = {}
    _publish(state, b)
    with rec.phase("who_wants") as p:
        who_wants(state, b)
        p.tasks = len(b.sub.keys)
    recs = _stock_recommendations(state, b) if plan.stock else None
    with rec.phase("plugins") as p:
        _plugins(state, b)
        p.tasks = len(b.touched)
    with rec.phase("transitions") as p:
        if plan.stock:
            shim.transitions(state, recs, client_msgs, worker_msgs, b.sub.stimulus_id)
        else:
            _transitions(state, b, plan, client_msgs, worker_msgs)
        p.tasks = len(b.touched)
    return client_msgs, worker_msgs


def commit(state: Any, b: Build, plan: Plan) -> tuple[dict, dict] | None:
    """The staged commit: :func:`apply_in_place` of a build made off the
    event loop, if :func:`still_valid` (None: refused, nothing changed)."""
    if plan.stock or not still_valid(state, b, plan):
        return None
    client_msgs: dict = {}
    worker_msgs: dict = {}
    _publish(state, b)
    who_wants(state, b)
    _plugins(state, b)
    _transitions(state, b, plan, client_msgs, worker_msgs)
    return client_msgs, worker_msgs


def report(state: Any, b: Build) -> None:
    """Stock reports touched tasks that are in memory or erred at the end."""
    client = b.sub.client
    for ts in b.touched:
        if ts._state in ("memory", "erred"):
            state.report_on_key(ts=ts, client=client)


def still_valid(state: Any, b: Build, plan: Plan) -> bool:
    """Whether everything the build and its replay read is as it was."""
    r = b.reads
    if shim.generation_clock(state) != r.clock:
        return False
    if state.total_nthreads != r.nthreads or state.WORKER_SATURATION != r.saturation:
        return False
    if state.validate or state.transition_counter_max:
        return False
    if r.aliases is not None and state.aliases != r.aliases:
        return False
    if not plan.complete and any(listeners(state).values()):
        return False  # a plugin now listens: it must be told of every transition
    if state.slim_epoch != r.epoch:
        if not state.tasks.keys().isdisjoint(b.tasks):
            return False
        if any(tg.name in state.task_groups for tg in b.new_groups):
            return False
    groups = state.task_groups
    return all(
        groups.get(d.group.name) is d.group and d.unchanged() for d in b.live_groups.values()
    )


# ---------------------------------------------------------------------------
def _publish(state: Any, b: Build) -> None:
    sub = b.sub
    state.slim_epoch += 1  # new keys and groups: a staged build re-checks
    if b.moved_generation is not None:
        shim.set_generation_clock(state, *b.moved_generation)
    if joins_last_computation(state, sub):
        computation = state.computations[-1]
    else:
        computation = shim.Computation()
        state.computations.append(computation)
    if sub.code:
        computation.code.add(sub.code)
    if sub.global_annotations:
        computation.annotations.update(sub.global_annotations)
    groups = state.task_groups
    for tg in b.new_groups:
        groups[tg.name] = tg
        computation.groups.add(tg)
    prefixes = state.task_prefixes
    for name, tp in b.prefixes.items():
        real = prefixes.get(name)
        if real is None:
            prefixes[name] = tp
        else:
            shim.adopt_prefix(real, tp)
    for d in b.live_groups.values():
        d.apply()
    state.tasks.update(b.tasks)
    for ts, spec in b.run_specs:
        ts.run_spec = spec
    for ts, attr, value in b.edges_of_existing:
        if type(value) is list:  # stock adds to the task's own set
            target = getattr(ts, attr)
            for x in value:
                target.add(x)
        else:
            setattr(ts, attr, value)
    for ts, head, order in b.priorities:
        ts._prio_head = head
        ts._prio_order = order
    if b.collisions:
        warn_collisions(b.collisions)


def who_wants(state: Any, b: Build) -> None:
    sub = b.sub
    state.client_desires_keys(keys=sub.keys, client=sub.client)
    actors = sub.actors
    if actors is True:
        actors = list(sub.keys)
    for k in actors or ():
        state.tasks[k].actor = True


def _stock_recommendations(state: Any, b: Build) -> dict:
    recs = initial_recommendations(state.tasks.__getitem__, b.sub.keys)
    blame(b.touched, recs)
    return recs


def _plugins(state: Any, b: Build) -> None:
    """Spans, then every plugin's ``update_graph`` hook (stock's arguments)."""
    sub = b.sub
    annotations_for_plugin: defaultdict = defaultdict(dict)
    tasks = state.tasks
    for key in b.keys_with_annotations:
        ts = tasks[key]
        if ts.annotations:
            for annot, value in ts.annotations.items():
                annotations_for_plugin[annot][key] = value
    spans_ext = state.extensions.get("spans")
    if spans_ext and b.span_groups is not None:
        span_ann = observe(spans_ext, b.span_groups, sub.span_metadata, sub.code)
        if span_ann:
            annotations_for_plugin["span"] = span_ann
        else:
            annotations_for_plugin.pop("span", None)
    hooked = [p for p in list(state.plugins.values()) if shim.listens_to_update_graph(p)]
    if not hooked:
        return
    # Only built when some plugin listens: stock builds them always.
    tasks_for_plugin = [ts.key for ts in b.touched]
    priorities_for_plugin = {ts.key: ts.priority for ts in b.touched}
    for plugin in hooked:
        try:
            plugin.update_graph(
                state,
                client=sub.client,
                tasks=tasks_for_plugin,
                keys=sub.keys,
                annotations=annotations_for_plugin,
                priority=priorities_for_plugin,
                stimulus_id=sub.stimulus_id,
            )
        except Exception as e:
            stock_logger.exception(e)


def listeners(state: Any) -> dict:
    """Plugins that may act on each inlined transition: {(start, finish): [plugins]}."""
    plugins = list(state.plugins.values())
    return {
        pair: [p for p in plugins if shim.listens_to_transition(p, *pair)] for pair in INLINED
    }


def _transitions(state: Any, b: Build, plan: Plan, client_msgs: dict, worker_msgs: dict) -> None:
    """Publish the plan's transitions (module docstring, step 4)."""
    sid = b.sub.stimulus_id
    for tg, moves in plan.moves.values():
        for (old, new), n in moves.items():
            shim.count_moved(tg, old, new, n)
    for dts, lst in plan.outside_waiters.items():
        w = dts.waiters
        if w is None or type(w) is not set or w is dts.dependents:
            w = set(w or ())
        w.update(lst)
        dts.waiters = w
    notify = _notifier(state, plan, sid) if plan.complete else None

    # Ready tasks, in the order the replay visited them: hand-offs always go
    # through distributed's transition; queued root-ish ones do too while a
    # worker is idle (it takes them). The log entries the replay made for
    # those are replaced by the ones distributed makes.
    queued = plan.queued
    at = plan.queued_at
    members = plan.queued_members
    others = plan.handoffs
    entries = plan.entries
    first = plan.n_entries - len(entries)  # log position of entries[0]
    made: list = []  # (position, entries assumed, Transition records made)
    assumed_total = 0
    cur = 0  # plugins have been told of the entries before this position
    log = state.transition_log
    state.transition_log = capture = []
    try:
        qi = ni = 0
        while True:
            nxt_other = others[ni][0] if ni < len(others) else None
            take_queued = qi < len(queued) and state.idle_task_count
            if take_queued and (nxt_other is None or at[qi] < nxt_other):
                ts = queued[qi]
                pos, assumed = at[qi], 2
                qi += 1
                members.discard(ts)
                shim.count_unmoved(ts.group, "waiting", "queued")
                ts._state = "waiting"
            elif nxt_other is not None:
                pos, ts = others[ni]
                assumed = 0
                ni += 1
            else:
                break
            if notify is not None:
                notify(cur, pos)
                cur = pos + assumed
            shim.transitions(state, {ts.key: "processing"}, client_msgs, worker_msgs, sid)
            assumed_total += assumed
            if pos >= first:
                made.append((pos, assumed, capture[:]))
            capture.clear()
    finally:
        state.transition_log = log
    if notify is not None:
        notify(cur, plan.n_entries)
    state.queued.merge_staged(members, plan.queued_sorted, plan.seq_base, plan.seq_span, plan.requeued)
    # the log: the replay's entries, with those of the tasks above spliced in
    now = plan.now
    if type(entries) is not list:
        entries = list(entries)
    out: list = []
    cur = first
    for pos, assumed, records in made:
        out.extend(_records(entries, cur - first, pos - first, sid, now))
        out.extend(records)
        cur = pos + assumed
    out.extend(_records(entries, cur - first, len(entries), sid, now))
    log.extend(out)
    state.transition_counter += plan.n_entries - assumed_total


def _records(entries: list, lo: int, hi: int, sid: str, now: float) -> list:
    if lo >= hi:
        return []
    return [shim.Transition(key, start, finish, r, sid, now) for key, start, finish, r in entries[lo:hi]]


def _notifier(state: Any, plan: Plan, sid: str) -> Any:
    """``notify(lo, hi)``: tell plugins of the replay's entries ``lo..hi-1``
    (a complete log), as stock's transitions tell them of each. Those that
    distributed's own code makes tell them themselves, when they happen."""
    pairs = listeners(state)
    entries = plan.entries
    if not any(pairs.values()):
        return lambda lo, hi: None

    def notify(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            key, start, finish, _ = entries[i]
            for p in pairs.get((start, finish), ()):
                try:
                    p.transition(key, start, finish, stimulus_id=sid)
                except Exception:
                    stock_logger.info("Plugin failed with exception", exc_info=True)

    return notify
