"""The slim scheduler-side TaskState.

distributed's ``TaskState`` has 34 slots (304 bytes) and allocates two sets
on creation. Most of those slots stay at their defaults for the whole life of
most tasks: errors, restrictions, annotations, actors, retries, metadata. And
the execution-time fields (``who_has``, ``processing_on``, ``nbytes``,
``run_id``, ``type``) are only needed once a task runs.

This class keeps 14 slots for what every task needs from the moment it
is submitted, and moves everything else to one side object, :class:`Extra`,
allocated the first time any of those attributes is set to a non-default
value. Every attribute distributed's ``SchedulerState`` reads or writes is
still there, with the same name and the same defaults, so distributed's own
transition code runs on it unchanged.

``priority`` is stored as a shared ``(-user priority, generation)`` head plus
the per-task ordering integer; the tuple distributed reads is built on access.

A task state hashes like its key (as stock's does, without caching the
hash in a slot), so sets of task states iterate in stock's order.
"""
from __future__ import annotations

import ast
import itertools
from operator import attrgetter
from typing import Any, ClassVar

from slimgraph import shim
from slimgraph.model.containers import NO_EDGES, Edges
from slimgraph.runtime import steps

_StockTaskState = shim.StockTaskState
_DEFAULT_DATA_SIZE = shim.DEFAULT_DATA_SIZE
_new_dict = dict.__new__

#: Attributes a task has once it runs, kept in :class:`Extra`, with the
#: default every task has.
EXEC_DEFAULTS: dict[str, Any] = {
    "who_has": None,
    "processing_on": None,
    "nbytes": -1,
    "run_id": None,
    "type": None,
}

#: Attributes most tasks never set, kept in :class:`Rare` (behind their
#: task's Extra), with the default every task has.
RARE_DEFAULTS: dict[str, Any] = {
    # failures
    "exception": None,
    "traceback": None,
    "exception_text": None,
    "traceback_text": None,
    "exception_blame": None,
    "erred_on": None,
    "suspicious": 0,
    "retries": 0,
    # restrictions and annotations
    "host_restrictions": None,
    "worker_restrictions": None,
    "resource_restrictions": None,
    "loose_restrictions": False,
    "annotations": None,
    "metadata": None,
    "actor": False,
    "has_lost_dependencies": False,
    "_queueable": True,
}

#: Every attribute kept outside the task state's own slots.
EXTRA_DEFAULTS: dict[str, Any] = {**EXEC_DEFAULTS, **RARE_DEFAULTS}


def _written_out_init(defaults: dict, shared: dict | None = None) -> Any:
    """An ``__init__`` that sets each slot to its default in a statement of
    its own, made from ``defaults`` (as dataclasses write theirs); a slot
    in ``shared`` is set to that object (by name).

    Why: sending a task to a worker sets its ``run_id``, which makes its
    :class:`Extra`. A loop of ``object.__setattr__`` over the defaults was
    a large part of what the slim engine added per ``compute-task``
    message; written out, the assignments are plain bytecode."""
    for value in defaults.values():  # (each default is its own repr)
        try:
            same = ast.literal_eval(repr(value)) == value
        except (ValueError, SyntaxError):
            same = False
        if not same:
            raise TypeError(f"default {value!r} cannot be written out")
    body = "".join(f"    self.{name} = {value!r}\n" for name, value in defaults.items())
    namespace: dict = {}
    for name in shared or ():
        body += f"    self.{name} = _shared_{name}\n"
        namespace[f"_shared_{name}"] = shared[name]
    exec(f"def __init__(self):\n{body}", namespace)  # noqa: S102 (our own constants)
    return namespace["__init__"]


class Rare:
    """The attributes of one task that most tasks never set (failures,
    restrictions, annotations, actors)."""

    __slots__ = tuple(RARE_DEFAULTS)

    __init__ = _written_out_init(RARE_DEFAULTS)


class _Shared:
    """Mixed into the shared defaults: writing one is a bug (it would set
    the attribute of every task at once), so it raises."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{name!r} of the shared default {type(self).__name__} is read-only")


class _SharedRare(_Shared, Rare):
    __slots__ = ()


#: The Rare of every Extra until one of its attributes is set: shared,
#: never written (a setter copies it first).
NO_RARE = Rare()
NO_RARE.__class__ = _SharedRare


class Extra:
    """The execution-time attributes of one task (set once it is sent to a
    worker) and, behind ``more``, its rare ones.

    Why two objects: every task that runs gets an Extra (``run_id``,
    ``processing_on``, ``who_has``, ``nbytes``, ``type``); with the rare
    attributes in it too, each would be over twice the size, made on the
    event loop when the task is sent, and every full garbage collection
    would walk all those slots. So an Extra has 6 slots (80 bytes), the rare
    ones live behind ``more``."""

    __slots__ = (*EXEC_DEFAULTS, "more")

    __init__ = _written_out_init(EXEC_DEFAULTS, {"more": NO_RARE})


#: The Extra every task reads until one of its Extra attributes is set to
#: something else: shared, never written (a setter copies it first).
#:
#: Why a shared default rather than None: the getters can then be
#: ``operator.attrgetter("_x.name")`` (``"_x.more.name"``), C code, instead
#: of a Python function that tests for None. distributed's transitions and
#: ``_task_to_msg`` read these attributes of every task they touch
#: (``actor``, ``who_has``, ``resource_restrictions``, ...), so a Python
#: getter's call would be paid on every read.
NO_EXTRA = Extra()


class _SharedExtra(_Shared, Extra):
    __slots__ = ()


NO_EXTRA.__class__ = _SharedExtra


def _extra_property(name: str, default: Any) -> property:
    if name in EXEC_DEFAULTS:
        mset = Extra.__dict__[name].__set__

        def fset(self: SlimTaskState, value: Any) -> None:
            x = self._x
            if x is NO_EXTRA:
                if value is default or (value == default and type(value) is type(default)):
                    return
                x = self._x = Extra()
            mset(x, value)

        return property(attrgetter(f"_x.{name}"), fset, doc=f"``{name}`` (default {default!r}), kept in Extra")

    rset = Rare.__dict__[name].__set__

    def rare_fset(self: SlimTaskState, value: Any) -> None:
        x = self._x
        m = x.more
        if m is NO_RARE:
            if value is default or (value == default and type(value) is type(default)):
                return
            if x is NO_EXTRA:
                x = self._x = Extra()
            m = x.more = Rare()
        rset(m, value)

    return property(attrgetter(f"_x.more.{name}"), rare_fset, doc=f"``{name}`` (default {default!r}), kept in Rare")


def has_extra(ts: Any) -> bool:
    """Whether ``ts`` has an Extra of its own (some attribute of it is not
    at its default, or was not)."""
    return ts._x is not NO_EXTRA


class SlimTaskState:
    """A task as the scheduler tracks it. Drop-in for distributed's TaskState."""

    __slots__ = (
        "key",
        # the run_spec: the node itself, or (``_graph`` set) the int that
        # names the task in that compact graph (its index, or its priority:
        # ``CompactGraph.index_of``), built into a node when read
        "_spec",
        "_graph",
        "_state",
        "group",
        "_prio_head",
        "_prio_order",
        "dependencies",
        "dependents",
        "waiting_on",
        "waiters",
        "who_wants",
        "_x",
        # Sequence number in the scheduler's TaskQueue (ties in priority are
        # broken by insertion order, as in stock's HeapSet).
        "_qseq",
    )

    _run_id_iterator: ClassVar[itertools.count] = itertools.count()

    def __init__(self, key: Any, run_spec: Any, state: str, group: Any, validate: bool = False):
        self.key = key
        self._spec = run_spec
        self._graph = None
        self._state = state
        self._prio_head = None
        self._prio_order = None
        self.dependencies = NO_EDGES
        self.dependents = NO_EDGES
        self.waiting_on = None
        self.waiters = None
        self.who_wants = None
        self._x = NO_EXTRA
        self._qseq = None
        self.group = group
        group.add(self)

    @classmethod
    def detached(cls, key: Any, run_spec: Any, group: Any, graph: Any = None) -> "SlimTaskState":
        """A released task whose group has NOT counted it yet: bulk ingestion
        creates many and updates each group's counts once
        (``shim.count_added``). With ``graph`` (a compact graph),
        ``run_spec`` is the int naming the task there (see :attr:`run_spec`)."""
        ts = cls.__new__(cls)
        ts.key = key
        ts._spec = run_spec
        ts._graph = graph
        ts._state = "released"
        ts._prio_head = None
        ts._prio_order = None
        ts.dependencies = NO_EDGES
        ts.dependents = NO_EDGES
        ts.waiting_on = None
        ts.waiters = None
        ts.who_wants = None
        ts._x = NO_EXTRA
        ts._qseq = None
        ts.group = group
        return ts

    @property
    def __class__(self) -> type:
        """distributed's TaskState, so that ``isinstance(ts, TaskState)`` holds
        (``validate_state``, ``Scheduler.story``, plugins that check). Only
        the ``__class__`` fallback of isinstance sees it: ``type(ts)`` is
        still SlimTaskState, and pickle and copy go by ``type``. The same
        device as ``unittest.mock``'s ``spec``."""
        return _StockTaskState

    def __hash__(self) -> int:
        # (not cached in a slot as stock caches it: the int a 64-bit hash
        # is costs 32 bytes more, 43 B/task of state at 1M tasks, for 2.5 %
        # of an array's run stage and nothing of a delayed tree's, counted
        # by callgrind: benchmarks/LOG.md)
        return hash(self.key)

    def __lt__(self, other: "SlimTaskState") -> bool:
        """Queue order: priority, then insertion order (see slimgraph.model.queue)."""
        a = self._prio_head
        b = other._prio_head
        if a is b or a == b:
            x = self._prio_order
            y = other._prio_order
            if x != y:
                return x < y
            return self._qseq < other._qseq
        if type(a) is tuple and type(b) is tuple:
            return a < b
        return (self.priority, self._qseq) < (other.priority, other._qseq)

    # --- priority --------------------------------------------------------
    @property
    def priority(self) -> tuple | None:
        head = self._prio_head
        if head is None:
            return None
        if type(head) is tuple:
            return (head[0], head[1], self._prio_order)
        return head  # a full priority set by someone else (stored as-is)

    @priority.setter
    def priority(self, value: tuple | None) -> None:
        if value is not None and type(value) is tuple and len(value) == 3:
            self._prio_head = _prio_head(value[0], value[1])
            self._prio_order = value[2]
        else:
            # Unusual shapes (e.g. 2-tuples) are stored whole; a list marks it.
            self._prio_head = None if value is None else _Whole(value)
            self._prio_order = None

    # --- run_spec ----------------------------------------------------------
    @property
    def run_spec(self) -> Any:
        """The task's node, as stock holds it. A task ingested through a
        compact graph (:mod:`slimgraph.ingest.compact`) keeps only the int
        naming it there; the node is built when read, equal to stock's (``==``
        and the same token). Reads in a row of the same task share one
        build (the graph keeps the last one)."""
        g = self._graph
        if g is None:
            return self._spec
        return g.task_run_spec(self._spec)

    @run_spec.setter
    def run_spec(self, value: Any) -> None:
        self._spec = value
        self._graph = None

    def spec_data_producer(self) -> bool:
        """``bool(run_spec and run_spec.data_producer)``, without building it."""
        g = self._graph
        if g is None:
            spec = self._spec
            return bool(spec and getattr(spec, "data_producer", False))
        return g.task_spec_data_producer(self._spec)

    def has_run_spec(self) -> bool:
        """``bool(run_spec)`` (stock's pure-data test), without building it."""
        g = self._graph
        if g is None:
            return bool(self._spec)
        return g.task_truthy(self._spec)

    # --- state -----------------------------------------------------------
    # (the getters are C-level ``attrgetter``s, not Python functions:
    # distributed reads ``state`` and ``prefix`` several times per
    # transition, 63k ``prefix`` reads in a 10k-task array's run)
    def _set_state(self, value: str) -> None:
        shim.count_moved(self.group, self._state, value)
        self._state = value

    state = property(attrgetter("_state"), _set_state, doc="The task's state; setting it counts the move in its group")
    prefix = property(attrgetter("group.prefix"), doc="The task's TaskPrefix")
    group_key = property(attrgetter("group.name"), doc="The name of the task's group")

    # --- the API distributed calls --------------------------------------
    def add_dependency(self, other: SlimTaskState) -> None:
        """Add ``other`` as a dependency (copy-on-write on both ends)."""
        deps = self.dependencies
        if other in deps:
            return
        self.dependencies = _plus(deps, other)
        self.group.dependencies.add(other.group)
        other.dependents = _plus(other.dependents, self)

    def get_nbytes(self) -> int:
        nbytes = self.nbytes
        if nbytes >= 0:
            return nbytes
        return shim.DEFAULT_DATA_SIZE

    def set_nbytes(self, nbytes: int) -> None:
        diff = nbytes
        old = self.nbytes
        if old >= 0:
            diff -= old
        self.group.update_nbytes(diff)
        for ws in self.who_has or ():
            ws.nbytes += diff
        self.nbytes = nbytes

    def get_nbytes_deps(self) -> int:
        # (get_nbytes written out: work stealing calls this for every task
        # it weighs)
        total = 0
        for dts in self.dependencies:
            nbytes = dts._x.nbytes
            total += nbytes if nbytes >= 0 else _DEFAULT_DATA_SIZE
        return total

    def validate(self) -> None:
        ClientState, WorkerState = shim.ClientState, shim.WorkerState
        for cs in self.who_wants or ():
            assert isinstance(cs, ClientState), (repr(cs), self.who_wants)
        for ws in self.who_has or ():
            assert isinstance(ws, WorkerState), (repr(ws), self.who_has)
        for ts in self.dependencies:
            assert isinstance(ts, SlimTaskState), (repr(ts), self.dependencies)
        for ts in self.dependents:
            assert isinstance(ts, SlimTaskState), (repr(ts), self.dependents)
        shim.validate_task_state(self)

    def _to_dict_no_nest(self, *, exclude: Any = ()) -> dict[str, Any]:
        """As stock's: every public, non-callable member (``dump_cluster_state``
        leaves out run_specs this way: GraphNodes are callable)."""
        from distributed.utils import recursive_to_dict

        out = recursive_to_dict(self, exclude=exclude, members=True)
        if out.get("waiters", ()) is None:  # allocated lazily; stock's is a set
            out["waiters"] = []
        return out

    def __repr__(self) -> str:
        return f"<TaskState {self.key!r} {self._state}>"

    def _repr_html_(self) -> str:
        from distributed.utils import get_template  # type: ignore[attr-defined]

        return get_template("task_state.html.j2").render(
            state=self._state, nbytes=self.nbytes, key=str(self.key)
        )


for _name, _default in EXTRA_DEFAULTS.items():
    setattr(SlimTaskState, _name, _extra_property(_name, _default))


class NoAnnotations(dict):
    """What ``ts.annotations`` reads as while a task has none.

    Stock gives every submitted task an empty dict (64 B each); the slim
    engine stores nothing, but code written for stock (``"span" in
    ts.annotations``, ``ts.annotations["x"] = ...``) must keep working. So a
    read returns this empty dict, made on the spot and not stored; the first
    write through it stores it on the task, where it becomes the task's
    annotations.
    """

    __slots__ = ("_ts",)

    def __init__(self, ts: SlimTaskState):
        super().__init__()
        self._ts = ts

    def _adopt(self) -> None:
        ts = self._ts
        if ts is not None:
            self._ts = None
            ts.annotations = self

    def __setitem__(self, key: Any, value: Any) -> None:
        self._adopt()
        dict.__setitem__(self, key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._adopt()
        dict.update(self, *args, **kwargs)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._adopt()
        return dict.setdefault(self, key, default)

    def __ior__(self, other: Any) -> "NoAnnotations":
        self._adopt()
        return dict.__ior__(self, other)


def stored_annotations(ts: Any) -> dict | None:
    """A task's annotations as stored: None when it has none (no
    NoAnnotations made). Stock task states are read as they are."""
    if type(ts) is not SlimTaskState:
        return getattr(ts, "annotations", None)
    return ts._x.more.annotations


def _annotations_property() -> property:
    """The Extra-backed property, reading as :class:`NoAnnotations` when unset."""
    base = _extra_property("annotations", None)
    bget, bset = base.fget, base.fset

    def fget(self: SlimTaskState) -> dict:
        value = bget(self)
        if value is None:  # (made without a Python __init__: read on every task)
            value = _new_dict(NoAnnotations)
            value._ts = self
        return value

    def fset(self: SlimTaskState, value: Any) -> None:
        if type(value) is NoAnnotations and value._ts is not None:
            value = None  # a read handed back: still none
        bset(self, value)

    return property(fget, fset, doc="``annotations``: a dict, empty (NoAnnotations) if none")


SlimTaskState.annotations = _annotations_property()


class _Whole(tuple):
    """Marks a priority stored whole (not of the usual 3-tuple shape)."""

    __slots__ = ()


_PRIO_HEADS: dict[tuple, tuple] = {}


def _prio_head(user: Any, generation: Any) -> tuple:
    """Intern ``(user, generation)``: a handful of distinct values per process.

    The table is bounded: user priorities and generations are few, but a
    pathological client could send many; past 4096 entries we stop interning.
    """
    k = (user, generation)
    head = _PRIO_HEADS.get(k)
    if head is None:
        if len(_PRIO_HEADS) >= 4096:
            return k
        _PRIO_HEADS[k] = head = k
    return head


def sorted_by_priority(tasks: list, qseq: int | None = None) -> list | None:
    """``tasks`` in ascending priority, or None if two of them tie (or a
    priority has an unusual shape): then the caller sorts (and breaks ties)
    itself.

    Why not ``sorted``: its comparisons run in C, holding the GIL for the
    whole sort, which stalls the event loop even when a worker thread sorts.
    Here tasks are grouped by priority head (a handful) and placed in
    buckets by their ordering integer, in Python steps the interpreter can
    switch between. ``qseq``: also give every task that sequence number.
    """
    ordered = _sorted_one_head(tasks, qseq)
    if ordered is not None:
        return ordered
    by_head: dict = {}
    for ts in tasks:
        if qseq is not None:  # (numbering them in the same pass)
            ts._qseq = qseq
        h = ts._prio_head
        lst = by_head.get(h)
        if lst is None:
            by_head[h] = lst = []
        lst.append(ts)
    if any(type(h) is not tuple for h in by_head):
        return None
    out: list = []
    try:
        for h in sorted(by_head):
            lst = by_head[h]
            orders = [ts._prio_order for ts in lst]
            lo = min(orders)
            hi = max(orders)
            if type(lo) is not int or type(hi) is not int or hi - lo > 4 * len(lst) + 1024:
                return None
            slots: list = [None] * (hi - lo + 1)
            for ts, o in zip(lst, orders):
                i = o - lo
                if slots[i] is not None:
                    return None
                slots[i] = ts
            out.extend(ts for ts in slots if ts is not None)
    except TypeError:  # orders that are not all ints
        return None
    return out if len(out) == len(tasks) else None


def _sorted_one_head(tasks: list, qseq: Any) -> list | None:
    """:func:`sorted_by_priority` for the commonest run: every task holds
    the same (interned) priority head, as one submission without priority
    annotations does, and distinct int orders. Their orders are read in one
    pass (numbering the tasks too) and sorted by :func:`sorted_by_orders`.
    None where that does not hold (the general way decides)."""
    if len(tasks) < 2:
        return None
    head = tasks[0]._prio_head
    if type(head) is not tuple:
        return None
    orders: list = []
    add = orders.append
    if qseq is None:
        for ts in tasks:
            if ts._prio_head is not head:
                return None
            add(ts._prio_order)
    else:
        for ts in tasks:
            ts._qseq = qseq
            if ts._prio_head is not head:
                return None
            add(ts._prio_order)
    return sorted_by_orders(tasks, orders)


def sorted_by_orders(tasks: list, orders: list) -> list | None:
    """``tasks`` sorted by ``orders`` (their ``_prio_order``, all under one
    priority head), or None if two tie or one is not a 64-bit int. numpy
    sorts, and lets go of the GIL while it does (a list's sort would hold
    it); the orders are the ones the replay read as it queued the tasks, so
    no task's head and order is read again."""
    import numpy as np

    if len(tasks) < 2:
        return list(tasks)
    try:
        o = steps.int64_array(orders)  # (ints only)
    except (TypeError, OverflowError):
        return None
    perm = np.argsort(o, kind="stable")
    so = o[perm]
    if not (so[1:] > so[:-1]).all():  # a tie: the general way breaks it
        return None
    # in steps (slimgraph.runtime.steps): one C call over every queued task
    # (scattered in memory) would hold the GIL throughout, a block of the
    # loop; the positions read through a view of the permutation, neither
    # copied (a copy of 80 MB at 10M tasks is one call too) nor a list of
    # ints that would be freed in one call
    return steps.list_map(tasks.__getitem__, memoryview(np.ascontiguousarray(perm, dtype=np.int64)))


def _plus(container: Any, item: Any) -> Any:
    if type(container) is set:
        new = set(container)
        new.add(item)
        return new
    new = set(container)
    new.add(item)
    return Edges(new)
