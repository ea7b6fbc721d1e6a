"""Applying a build and its plan to the scheduler: in place, or as a staged commit.

A :class:`~slimgraph.ingest.build.Build` and its
:class:`~slimgraph.ingest.replay.Plan` are values; nothing the scheduler
holds has changed yet. Applying them does, in stock's order:

1. publish the build: the generation, the Computation, new task groups and
   prefixes, the counts added to the scheduler's own groups, the new tasks
   (a dict made off the loop, adopted: :func:`add_tasks`), changes to tasks the scheduler already had
   (run_specs, edges, priorities), stock's warning for resubmitted keys;
2. ``who_wants`` and actors (distributed's own ``client_desires_keys``,
   which also reports keys already in memory);
3. spans (:mod:`slimgraph.ingest.spans`), and the plugins' ``update_graph``
   hooks with stock's arguments;
4. the transitions: a *stock* plan hands the initial recommendations to
   distributed's own ``transitions``; otherwise the plan's counts, log
   entries and queue run are published, and its hand-offs (and, while a
   worker is idle, its queued root-ish tasks) go to workers in the order
   the replay visited them: in bulk, as the shadow in the build thread
   decided with distributed's own worker choice, when its assumptions still
   hold (:mod:`slimgraph.ingest.dispatch`), else through distributed's own
   transition one by one;
5. the reports stock sends for touched tasks already in memory or erred.

Plugins that listen (to ``update_graph``, or to the transitions the replay
made) are told of everything in stock's order and with stock's arguments,
by :mod:`slimgraph.ingest.deliveries`: right away when applying in place,
in short slices after a staged commit.

Two appliers share that sequence. :func:`apply_in_place` runs it right
after the build, on the event loop, with nothing in between. :func:`commit`
first checks (:func:`still_valid`) that nothing the build read has changed
while it was made in a worker thread, and refuses otherwise: then the
caller ingests the submission in place from scratch.

One change is common and cheap to absorb: another client's submission
committed during the build and moved the *generation clock* (stock's
``_set_priorities``: a submission arriving more than its ``fifo_timeout``
after the last generation change starts a new generation). The build is
then committed as stock would have ingested it right after those
submissions, at its own start time: stock's rule applied to the clock as
it is now gives its generation (:func:`regeneration`), and
:func:`rehead` moves the build's priorities to it. Within the build every
task's generation is the same, so only the generation in each priority
changes, never the order of the build's tasks among themselves (its queue
run stays sorted, its transitions stay as replayed).
"""
from __future__ import annotations

import contextlib
from operator import attrgetter
from time import perf_counter
from typing import Any

from slimgraph import shim
from slimgraph.shim import cpython
from slimgraph.ingest import deliveries, dispatch, tail
from slimgraph.ingest.build import Build, generation, seed_copy, task_read, warn_collisions
from slimgraph.ingest.replay import INLINED, Plan, blame, initial_recommendations
from slimgraph.ingest.spans import observe
from slimgraph.ingest.submission import joins_last_computation
from slimgraph.instrument.records import SubmissionRecord
from slimgraph.model.taskstate import _prio_head
from slimgraph.runtime import steps


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
    if plan.stock:
        # stock's own order: recommendations, spans, hooks, transitions
        recs = initial_recommendations(state.tasks.__getitem__, b.sub.keys)
        blame(b.touched, recs)
        with rec.phase("plugins") as p:
            owed = _plugins(state, b)
            for _ in owed:
                pass
            p.tasks = len(b.touched)
        with rec.phase("transitions") as p:
            shim.transitions(state, recs, client_msgs, worker_msgs, b.sub.stimulus_id)
            p.tasks = len(b.touched)
        return client_msgs, worker_msgs
    with rec.phase("plugins") as p:
        owed = _plugins(state, b)
        p.tasks = len(b.touched)
    with rec.phase("transitions") as p:
        d = owing(state)
        earlier = bool(d)
        _transitions(state, b, plan, client_msgs, worker_msgs, owed)
        if earlier:  # behind calls still owed from a big submission: in slices
            d.start(state)
        else:  # a small submission's calls, now (as stock)
            d.flush()
        p.tasks = len(b.touched)
    return client_msgs, worker_msgs


def commit(state: Any, b: Build, plan: Plan) -> tuple[dict, dict] | None:
    """The staged commit: publish a build made off the event loop, if
    :func:`still_valid` (None: refused, nothing changed). Plugin calls it
    owes are delivered afterwards, in slices (:func:`owing`)."""
    if plan.stock:
        return None
    plan.refused = invalidation(state, b, plan)
    if plan.refused is not None:
        return None
    if clock_moved(state, b):
        # the same generation, but stock's rule decides the clock anew
        _, b.moved_generation = generation(state, b.sub)
    client_msgs: dict = {}
    worker_msgs: dict = {}
    _publish(state, b)
    who_wants(state, b)
    owed = _plugins(state, b)
    _transitions(state, b, plan, client_msgs, worker_msgs, owed)
    if plan.tail is not None:
        tail.tails(state).add(plan.tail)
    d = owing(state)
    if d:
        d.start(state)
    return client_msgs, worker_msgs


def owing(state: Any) -> deliveries.Deliveries:
    """The plugin calls ``state`` still owes (made on first use)."""
    d = state.slim_deliveries
    if d is None:
        d = state.slim_deliveries = deliveries.Deliveries()
    return d


def report(state: Any, b: Build, outside_only: bool = False) -> None:
    """Stock reports touched tasks that are in memory or erred at the end
    (``outside_only``: a staged build's own tasks are neither)."""
    client = b.sub.client
    for ts in b.outside_tasks if outside_only else b.touched:
        if ts._state in ("memory", "erred"):
            state.report_on_key(ts=ts, client=client)


def still_valid(state: Any, b: Build, plan: Plan) -> bool:
    """Whether everything the build and its replay read is as it was."""
    return invalidation(state, b, plan) is None


#: :func:`invalidation`'s answer when only the generation clock moved and
#: the build's generation must change: :func:`rehead` makes it valid again
CLOCK_MOVED = "another submission started a new generation during the build"


def invalidation(state: Any, b: Build, plan: Plan) -> str | None:
    """What changed since the build read it (None: nothing that matters)."""
    r = b.reads
    moved = clock_moved(state, b)
    if state.total_nthreads != r.nthreads or state.WORKER_SATURATION != r.saturation:
        return "the workers' threads changed"
    if state.validate or state.transition_counter_max:
        return "validation was switched on"
    if r.aliases is not None and state.aliases != r.aliases:
        return "the worker aliases changed"
    if r.submitting is not None:
        sts, prio = r.submitting
        now = state.tasks.get(b.sub.submitting_task)
        if now is not sts or (sts is not None and sts.priority != prio):
            return "the submitting task changed"
    if not plan.complete and any(listeners(state).values()):
        return "a plugin now listens to transitions"
    if (b.hook_tasks is None) and any(shim.listens_to_update_graph(p) for p in state.plugins.values()):
        return "a plugin now listens to update_graph"
    tasks = state.tasks
    for ts, read in r.outside:
        if tasks.get(ts.key) is not ts or task_read(ts) != read:
            return f"a task the graph needs changed ({ts.key!r})"
    if state.slim_epoch != r.epoch:
        if added_keys_of(state, b):
            return "another submission added some of the graph's keys"
        if any(tg.name in state.task_groups for tg in b.new_groups):
            return "another submission added one of the graph's task groups"
    groups = state.task_groups
    for d in b.live_groups.values():
        if groups.get(d.group.name) is not d.group or not d.unchanged():
            return f"a task group the graph joins changed ({d.group.name!r})"
    for sg in b.span_groups or ():
        if sg.group.span_id != sg.span_id_read:
            return "a task group's span changed"
    if moved and regeneration(state, b) is not None:
        return CLOCK_MOVED
    return None


def added_keys_of(state: Any, b: Build) -> bool:
    """Whether the scheduler now holds a key the build made a task for."""
    if b.seed is None:
        return not state.tasks.keys().isdisjoint(b.tasks.keys())  # iterates the smaller
    own = b.tasks.get
    seeded = b.seed_ids
    for k in state.tasks:  # (seeded: the scheduler held few)
        ts = own(k)
        if ts is not None and id(ts) not in seeded:
            return True
    return False


def clock_moved(state: Any, b: Build) -> bool:
    """Whether the generation clock moved since the build read it."""
    return shim.generation_clock(state) != b.reads.clock


def regeneration(state: Any, b: Build) -> Any:
    """The generation ``b``'s priorities must take to be committed now (see
    the module docstring), or None if they keep the one they have."""
    gen, _ = generation(state, b.sub)
    return None if gen == b.generation else gen


def can_rehead(b: Build, plan: Plan) -> bool:
    """Whether :func:`rehead` can move ``b`` to another generation: not
    when its queue run mixes tasks queued before (their priorities stay,
    so the run's order could change) or has full priorities set elsewhere."""
    return not plan.stock and not plan.requeued and b.sub.submitting_task is None


def rehead(b: Build, plan: Plan, gen: Any) -> None:
    """Give the build's priorities generation ``gen`` (in a worker thread:
    nothing here is published yet). The messages the shadow dispatch made
    carry priorities too: they are marked stale, and updated as they are
    published."""
    old = b.generation
    moved: dict = {}

    def head_of(h: Any) -> Any:
        n = moved.get(h)
        if n is None:
            n = moved[h] = _prio_head(h[0], gen) if type(h) is tuple and h[1] == old else h
        return n

    # The build's tasks share a handful of interned heads, in runs: the
    # last one moved is kept at hand, so most tasks cost an identity test
    # and a store (a call and a tuple hash each made it 0.8 s at 1M tasks,
    # longer than other clients take to move the clock again; the commit
    # then made the last move on the event loop)
    last = new = None
    for ts in b.new:
        h = ts._prio_head
        if h is last:
            ts._prio_head = new
        elif h is not None:
            last = h
            ts._prio_head = new = head_of(h)
    b.priorities = [(ts, head_of(h) if h is not None else h, o) for ts, h, o in b.priorities]
    b.generation = gen
    if plan.dispatch is not None:
        # the messages the shadow made carry the old priorities: publishing
        # writes the new ones, task by task, as it fills in their other
        # fields (rewriting 745k messages here held the event loop 0.7 s
        # when the commit made the last move, in a real-use 1M array run)
        plan.dispatch.stale_priorities = True


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
    add_tasks(state, b)
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


def seed_current(state: Any, b: Build) -> bool:
    """Whether the scheduler's entries are still the ones ``b``'s task dict
    was seeded with (True when not seeded: nothing to compare)."""
    if b.seed is None:
        return True
    keys, values = b.seed
    tasks = state.tasks
    return len(tasks) == len(keys) and list(tasks.values()) == values and list(tasks) == keys


def reseed(state: Any, b: Build) -> None:
    """In a worker thread, before the commit: make ``b``'s seeded task dict
    again from the scheduler's entries as they are now, followed by the new
    tasks (another client's submissions added and removed tasks during the
    build: a real-use run's load does so every half second). The commit
    then adopts it if nothing changed in between; it adds the new entries
    on the loop otherwise (``update``: 0.49 s at 1M).

    The new entries go in steps (slimgraph.runtime.steps), so that the
    thread gives the GIL up between them (one ``update`` of a million
    entries held it 0.18 s); the step that outgrows the dict's table
    rehashes it whole."""
    copied = seed_copy(state, b)
    update = copied.update
    steps.each_step(b.new, lambda part: update(zip(map(_key_of, part), part)))
    b.tasks = copied


_key_of = attrgetter("key")


def add_tasks(state: Any, b: Build) -> str:
    """Add the build's tasks to the scheduler's task dict, in stock's order
    (the scheduler's entries, then the build's, as ``update`` leaves them).

    The scheduler's dict stays the same object (distributed's
    ``wait_for_state`` and plugins hold it). Adding a million entries with
    ``update`` would allocate a new table of ~40 MB that the loop is the
    first to touch (0.1 to 0.6 s of page faults at 1M tasks). So the table
    is made and touched in the build thread, and the commit hands its
    contents to the scheduler's dict in O(1) (slimgraph.shim.cpython):
    when the scheduler holds no task, or when the build's dict was seeded
    with the scheduler's entries (slimgraph.ingest.build.seed, or
    :func:`reseed` after they changed) and those are still the ones
    copied. The build's dict object then holds the scheduler's old table,
    freed off the loop with the build's other temporaries. Otherwise (the
    entries changed meanwhile, the scheduler held many, or the interpreter
    failed the swap's check): ``update``.

    Returns how: ``"adopted"``, ``"seeded"`` or ``"updated"``."""
    tasks = state.tasks
    seed = b.seed
    if b.tasks and cpython.dict_swap_available() and (
        (seed is None and not tasks) or (seed is not None and seed_current(state, b))
    ):
        old = b.tasks
        cpython.swap_dict_contents(tasks, old)
        b.tasks = tasks
        b.scratch.append(old)
        b.adopted = True
        return "adopted" if seed is None else "seeded"
    tasks.update(b.new_items())
    return "updated"


def who_wants(state: Any, b: Build) -> None:
    sub = b.sub
    state.client_desires_keys(keys=sub.keys, client=sub.client)
    actors = sub.actors
    if actors is True:
        actors = list(sub.keys)
    for k in actors or ():
        state.tasks[k].actor = True


def _plugins(state: Any, b: Build) -> Any:
    """Spans now; returns the plugins' ``update_graph`` hooks, owed."""
    sub = b.sub
    hooked = [p for p in list(state.plugins.values()) if shim.listens_to_update_graph(p)]
    if hooked and b.hook_tasks is None:  # (in place: a plugin came meanwhile)
        from slimgraph.ingest.build import _hook_arguments

        _hook_arguments(b)
        if state.extensions.get("spans") is not None:
            b.hook_annotations["span"] = {}
    annotations = b.hook_annotations
    out: dict = annotations["span"] if annotations is not None and "span" in annotations else {}
    spans_ext = state.extensions.get("spans")
    if spans_ext and b.span_groups is not None:
        observe(spans_ext, b.span_groups, sub.span_metadata, sub.code, out, b.touched)
        if annotations is not None and not out:
            annotations.pop("span", None)
    if not hooked:
        return iter(())
    if b.priorities:  # priorities given when publishing: read them now
        b.hook_priority = {ts.key: ts.priority for ts in b.touched}
    kwargs = {
        "client": sub.client,
        "tasks": b.hook_tasks,
        "keys": sub.keys,
        "annotations": annotations,
        "priority": b.hook_priority,
        "stimulus_id": sub.stimulus_id,
    }
    stack = b.layout_stack if b.hook_tasks is not None and len(b.layout_stack or ()) == len(b.hook_tasks) else None
    # the calls own the arguments from now on (nothing reads them after the
    # commit), so that they can free them off the loop when made
    b.hook_tasks = b.hook_priority = b.layout_stack = None
    return deliveries.update_graph_hooks(state, hooked, kwargs, stack)


def listeners(state: Any) -> dict:
    """Plugins that may act on each inlined transition: {(start, finish): [plugins]}."""
    plugins = list(state.plugins.values())
    return {
        pair: [p for p in plugins if shim.listens_to_transition(p, *pair)] for pair in INLINED
    }


def _transitions(state: Any, b: Build, plan: Plan, client_msgs: dict, worker_msgs: dict, owed: Any) -> None:
    """Publish the plan's transitions (module docstring, step 4).

    Plugins that listen to update_graph or to the replay's transitions are
    told of everything (hooks, the replay's transitions and the ones
    distributed's own code makes here) through the deliveries, in stock's
    order: while the hand-offs run they are taken out of the scheduler's
    plugins, so distributed's transition code does not tell them early.

    Hand-offs held in the queue (:func:`slimgraph.ingest.tail.hold`): the
    commit sends those that fit ``slimgraph-switches.dispatch-slice`` (none while an
    earlier commit's are still going out), queues the rest and leaves them
    to ``plan.tail`` (:mod:`slimgraph.ingest.tail`).
    """
    sid = b.sub.stimulus_id
    for tg, moves in plan.moves.values():
        for (old, new), n in moves.items():
            shim.count_moved(tg, old, new, n)
    held = plan.held_members
    if held is not None:
        for tg, n in plan.held_groups.values():
            shim.count_held(tg, "waiting", "queued", n)
    for dts, lst in plan.outside_waiters.items():
        w = dts.waiters
        if type(lst) is tuple:
            lst, made_ahead = lst
            if w is None:  # still none: the set the replay made, by insertion as below
                dts.waiters = made_ahead
                continue
        if w is None or type(w) is not set or w is dts.dependents:
            w = set(w or ())
        w.update(lst)
        dts.waiters = w
    pairs = listeners(state) if plan.complete else {}
    hooked = {id(p) for p in state.plugins.values() if shim.listens_to_update_graph(p)}
    told_later = {id(p): p for ps in pairs.values() for p in ps}
    for name, p in state.plugins.items():
        if id(p) in hooked:
            told_later[id(p)] = p
    owed_before = state.slim_deliveries
    if owed_before is not None:
        # plugins still owed calls from an earlier submission hear of these
        # transitions after those, through the queue (not as they happen)
        told_later.update(owed_before.owed_to)
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
    log = state.transition_log
    entries_of: Any = None  # the step's log entries (a shim.StepEntries, as the step starts)

    def unqueue(ts: Any) -> None:  # a queued root-ish task an idle worker takes
        members.discard(ts)
        shim.count_unmoved(ts.group, "waiting", "queued")
        ts._state = "waiting"

    def one(ts: Any, pos: int, assumed: int) -> None:  # distributed's own transition
        nonlocal assumed_total
        shim.transitions(state, {ts.key: "processing"}, client_msgs, worker_msgs, sid)
        assumed_total += assumed
        records = entries_of.take()
        if pos >= first or told_later:
            made.append((pos, assumed, records))

    deadline = unhold = None
    if held is not None:
        deadline = -1.0 if tail.tails(state) else perf_counter() + tail.slice_seconds()

        def unhold(tasks: list) -> None:  # sent by the commit after all
            for ts in tasks:
                held.discard(ts)
            tail.release_held(tasks)

    # the told-later plugins hear of these transitions through the owed
    # calls; their log entries go in at their places among the replay's
    with contextlib.ExitStack() as stack:
        if owed_before is not None:
            stack.enter_context(owed_before.told_by_caller())
        entries_of = stack.enter_context(shim.own_step(state, told_later))
        qi = ni = 0
        bulk = plan.dispatch
        if bulk is not None and bulk.holds(state):
            # distributed's own choices, made in the build thread on a
            # shadow of the workers, published in bulk (slimgraph.ingest.dispatch)
            keep_from = None if told_later else first
            qi, ni = dispatch.publish(
                state, bulk, plan, sid, worker_msgs, keep_from, made, one, unqueue, deadline, unhold
            )
            plan.dispatched = ni
            state.slim_dispatched += ni
        while True:  # one by one (the rest, if the shadow was wrong somewhere)
            if deadline is not None and perf_counter() > deadline:
                break  # the rest in slices, after the commit
            nxt_other = others[ni][0] if ni < len(others) else None
            take_queued = qi < len(queued) and state.idle_task_count
            if take_queued and (nxt_other is None or at[qi] < nxt_other):
                ts = queued[qi]
                pos, assumed = at[qi], 2
                qi += 1
                unqueue(ts)
            elif nxt_other is not None:
                pos, ts = others[ni]
                assumed = 0
                ni += 1
                if unhold is not None:
                    unhold([ts])
            else:
                break
            one(ts, pos, assumed)
    if held is not None:
        state.queued.merge_staged(held, plan.held_sorted, plan.seq_base, plan.seq_span)
        if ni < len(others):
            plan.tail = tail.Tail(state, plan, sid, ni, told_later, made if told_later else None)
    if plan.requeued:
        add = state.queued.add
        for ts in queued:
            if ts in members:
                add(ts)
    else:
        state.queued.merge_staged(members, plan.queued_sorted, plan.seq_base, plan.seq_span)
    if type(entries) is not list:
        entries = list(entries)
    premade = plan.premade[1] if plan.premade is not None and plan.premade[0] == sid else None
    log.extend(_log_tail(entries, first, made, sid, plan.now, getattr(log, "maxlen", None), premade))
    state.transition_counter += plan.n_entries - assumed_total
    if told_later:
        d = owing(state)
        d.add(owed, told_later)
        if plan.complete:
            calls = _in_stock_order(entries, made, plan.tail)
            # the calls own the entries from now on (nothing reads them
            # after the commit), so that they can free them off the loop
            plan.entries = []
        else:  # no plugin listens to the replay's transitions
            calls = _made_in_order(made, plan.tail)
        later = {pair: [p for p in ps if id(p) in told_later] for pair, ps in pairs.items()}
        d.add(deliveries.transition_calls(calls, later, sid, told_later), told_later)
        if plan.tail is not None:
            d.gates.append(plan.tail)


def _log_tail(entries: list, first: int, made: list, sid: str, now: float, maxlen: int | None,
              premade: list | None = None) -> list:
    """The log records of this commit, as many as a log of ``maxlen`` keeps:
    the replay's entries (from log position ``first``), with the records
    distributed's own code made spliced in at their positions. Only the
    kept ones are made (with a plugin listening to every transition the
    replay keeps them all: 1M records made to be dropped cost the commit
    1 s), and those the replay made already (``premade``: the records of
    the entries' last ones) are taken from there."""
    parts: list = []  # (lo, hi) of entries, or a list of records; in log order
    cur = first
    for pos, assumed, records in made:
        if pos < first:
            continue  # before the log's tail (kept only for the plugins)
        if cur < pos:
            parts.append((cur - first, pos - first))
        if records:
            parts.append(records)
        cur = pos + assumed
    if cur - first < len(entries):
        parts.append((cur - first, len(entries)))
    need = float("inf") if maxlen is None else maxlen
    kept: list = []
    for part in reversed(parts):
        if need <= 0:
            break
        if type(part) is tuple:
            lo, hi = part
            if hi - lo > need:
                lo = hi - int(need)
            if premade is not None and lo >= len(entries) - len(premade):
                base = len(entries) - len(premade)
                kept.append(premade[lo - base : hi - base])
            else:
                kept.append(_records(entries, lo, hi, sid, now))
        else:
            kept.append(part if len(part) <= need else part[len(part) - int(need):])
        need -= len(kept[-1])
    out: list = []
    for part in reversed(kept):
        out.extend(part)
    return out


def _records(entries: list, lo: int, hi: int, sid: str, now: float) -> list:
    if lo >= hi:
        return []
    return [shim.Transition(key, start, finish, r, sid, now) for key, start, finish, r in entries[lo:hi]]


def _in_stock_order(entries: list, made: list, tail: Any = None) -> Any:
    """``(key, start, finish)`` of every transition, in stock's order: the
    replay's entries (all of them: ``plan.complete``), with those that
    distributed's own code made spliced in where they happened.

    With a ``tail`` still sending hand-offs (it appends their records to
    ``made`` as it goes), the entries run up to the first hand-off it has
    not sent, then :data:`deliveries.WAIT` until it has."""
    cur = 0
    i = 0
    while True:
        if i < len(made):
            pos, assumed, records = made[i]
            i += 1
            for key, start, finish, _ in entries[cur:pos]:
                yield key, start, finish
            for t in records:
                yield t.key, t.start, t.finish
            cur = pos + assumed
            continue
        if tail is None or tail.done or tail.gate_open:
            break
        upto = tail.next_pos
        if upto is not None and upto > cur:
            for key, start, finish, _ in entries[cur:upto]:
                yield key, start, finish
            cur = upto
        yield deliveries.WAIT
    for key, start, finish, _ in entries[cur:]:
        yield key, start, finish
    box = [entries]
    del entries
    deliveries.free_later(box)


def _made_in_order(made: list, tail: Any = None) -> Any:
    """``(key, start, finish)`` of the transitions distributed's own code
    made (and the bulk dispatch), in order; with a ``tail``, as it sends."""
    i = 0
    while True:
        if i < len(made):
            for t in made[i][2]:
                yield t.key, t.start, t.finish
            i += 1
            continue
        if tail is None or tail.done or tail.gate_open:
            return
        yield deliveries.WAIT
