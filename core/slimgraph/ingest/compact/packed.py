"""Tasks kept packed in arrays: a delayed graph's run_specs without an object each.

Why. A delayed submission arrives as one pickled ``Task`` per Delayed
object. Kept as they were decoded, those tasks and their keys hold most of
what the scheduler's process grows by (1M delayed tree, 812k tasks: 1,700
B/task in all, of which ~470 B in the live ``Task`` objects, their argument
tuples and dependency frozensets), and they pin more than that: they were
allocated between the decode's temporaries, so the heap pages they sit on
cannot be returned once the temporaries go (the decoded layers alone,
keys and tasks kept: 1,515 B/task; keys only: 345; keys made again after
the decode: 159).

What. :func:`pack` moves every plain ``Task`` a :class:`ValueSource` kept
(no keyword arguments, not a data producer, not a member of a fused chain)
into a :class:`PackedSource`: its function as an index into a list of the
distinct functions, and its arguments as tagged 64-bit integers in one
array -- a reference to another task of the graph by that task's index, a
small ``int`` by its value, anything else (literals, Futures, references
to keys outside the graph) as an index into a list that keeps the object
as it arrived. A task with a nested node among its arguments stays as it
arrived. Reading the run_spec builds the ``Task`` (equal to the decoded one:
``==`` and the same token). Its dependency frozenset is made by inserting
the keys in the argument order, or, where that gives another iteration
order than the decoded frozenset's, in an order found here that gives the
same one (kept as extra items), so even what iterates it sees stock's
order.

:func:`remake_keys` then makes the graph's string keys again, one string
of each step's keys joined and split, so the keys the scheduler keeps sit
together on fresh pages instead of among the decode's garbage.
"""
from __future__ import annotations

from array import array
from itertools import permutations
from typing import Any

import numpy as np

from slimgraph.shim.compact import GraphNode, Task, TaskRef
from slimgraph.shim.nodes import data_producer_of, dependencies_of, set_dependencies
from .fastnodes import ENABLED as FAST_NODES, NO_DEPS as _NO_DEPS, task as fast_task, task_on_ref
from .graph import MASK, NODE, SHIFT, FusedSource, TaskOnlySource, ValueSource

#: item tags (the low two bits of an item): an argument that references a
#: task of the graph (by its index), an int argument (by its value), an
#: argument kept as an object; and, after a task's arguments, positions of
#: arguments whose keys, inserted in that order, make the dependency
#: frozenset the task arrived with (only where the argument order does not)
REF, INT, OBJ, ORDER = 0, 1, 2, 3
_TAG_BITS = 2
_INT_LIMIT = 1 << 60
#: dependency sets up to this size are searched for an insertion order
_MAX_SEARCH = 5

#: keys per step of :func:`remake_keys` (one join and one split each)
REMAKE_STEP = 50_000


class PackedSource(TaskOnlySource):
    """Plain tasks as arrays; ``build`` makes the ``Task``."""

    __slots__ = ("funcs", "fidx", "off", "items", "objects", "_func_ids")

    def __init__(self) -> None:
        self.funcs: list = []
        self._func_ids: dict = {}
        #: per task: index into funcs
        self.fidx = array("l")
        #: per task: where its items start in items (and one past the end)
        self.off = array("q", [0])
        self.items = array("q")
        #: arguments kept as objects (tag OBJ)
        self.objects: list = []
        self.live = 0

    def __len__(self) -> int:
        return len(self.fidx)

    def build(self, graph: Any, i: int, local: int) -> Any:
        """The ``Task`` as it arrived: its slots set as ``Task.__init__``
        sets them (0.4 us less a task than calling it: this runs once per
        task sent to a worker), its dependency frozenset made by inserting
        the keys in an order that gives the same iteration order."""
        keys = graph.keys
        off = self.off
        a = off[local]
        if FAST_NODES and off[local + 1] - a == 1:
            # one argument (a delayed graph's leaves and chains): no loop
            x = self.items[a]
            tag = x & 3
            if tag == REF:
                return task_on_ref(keys[i], self.funcs[self.fidx[local]], keys[x >> _TAG_BITS])
            if tag == INT:
                return fast_task(keys[i], self.funcs[self.fidx[local]], (x >> _TAG_BITS,), {}, _NO_DEPS)
        args: list = []
        deps: list = []
        order = None
        plain = True
        for x in self.items[a : off[local + 1]]:
            tag = x & 3
            if tag == REF:
                k = keys[x >> _TAG_BITS]
                args.append(TaskRef(k))
                deps.append(k)
            elif tag == INT:
                args.append(x >> _TAG_BITS)
            elif tag == OBJ:
                args.append(self.objects[x >> _TAG_BITS])
                plain = False
            else:
                if order is None:
                    order = []
                order.append(args[x >> _TAG_BITS].key)
        if not plain:  # (a reference to a key outside the graph is an object)
            deps = [a.key for a in args if isinstance(a, TaskRef)]
        func = self.funcs[self.fidx[local]]
        fs = frozenset(order if order is not None else deps) if (order or deps) else _NO_DEPS
        if FAST_NODES:
            return fast_task(keys[i], func, tuple(args), {}, fs)
        t = Task(keys[i], func, *args)
        set_dependencies(t, fs)
        return t

    def build_member(self, local: int, key: Any, dep_keys: Any) -> Any:  # pragma: no cover
        raise AssertionError("packed tasks are never members of a fused chain")


def pack(graph: Any) -> int:
    """Move the plain tasks of ``graph``'s :class:`ValueSource` segments
    into one :class:`PackedSource` (appended to its segments, the tasks'
    codes pointing there). Returns how many tasks it packed.

    A task is plain when it is a ``Task`` (not a subclass) without keyword
    arguments, not a data producer, no argument a nested node, and its
    dependency frozenset can be made again from its reference arguments.
    Written out in one frame: it runs once per task of a delayed graph,
    812k times at 1M."""
    segments = graph.segments
    vsegs = [n for n, seg in enumerate(segments) if type(seg) is ValueSource and NODE in seg.kinds]
    if not vsegs:
        return 0
    codes = graph.codes
    # the tasks coded to those segments, found in C (an array graph has
    # a million tasks and a few such values: 0.12 s looping over them all)
    candidates = np.flatnonzero(np.isin(np.frombuffer(codes, dtype=np.int64) >> SHIFT, vsegs)).tolist()
    # values a fused chain reads by their code stay where they are
    members: set = set()
    for seg in segments:
        if type(seg) is FusedSource:
            for member_codes, _keys in seg.records:
                members.update(member_codes)
    packed = PackedSource()
    head = len(segments) << SHIFT
    keys = graph.keys
    off = graph.deps.off
    idx = graph.deps.idx
    items = packed.items
    append = items.append
    objects = packed.objects
    fidx = packed.fidx
    poff = packed.off
    funcs = packed.funcs
    func_ids = packed._func_ids
    n = 0
    last_seg = -1
    src = values = kinds = None
    for i in candidates:
        code = codes[i]
        s = code >> SHIFT
        if s != last_seg:
            last_seg = s
            src = segments[s]
            values = src.values
            kinds = src.kinds
        local = code & MASK
        if kinds[local] != NODE or (members and code in members):
            continue
        v = values[local]
        if type(v) is not Task or v.kwargs or data_producer_of(v):
            continue
        a = off[i]
        nd = off[i + 1] - a
        args = v.args
        # the common shapes first: a delayed graph's leaves (one literal)
        # and chains (one reference to the task before)
        x = args[0] if len(args) == 1 else None
        if nd == 0 and type(x) is int and -_INT_LIMIT <= x < _INT_LIMIT and not dependencies_of(v):
            append((x << _TAG_BITS) | INT)
        elif nd == 1 and type(x) is TaskRef and (x.key is keys[idx[a]] or x.key == keys[idx[a]]) \
                and len(dependencies_of(v)) == 1:
            append(idx[a] << _TAG_BITS)
        else:
            only = keys[idx[a]] if nd == 1 else None
            refs = {keys[j]: j for j in idx[a : a + nd]} if nd > 1 else None
            if not _pack_args(v, args, only, idx[a] if nd == 1 else -1, refs, items, objects):
                continue
        func = v.func
        f = func_ids.get(id(func))
        if f is None:
            f = func_ids[id(func)] = len(funcs)
            funcs.append(func)
        fidx.append(f)
        poff.append(len(items))
        codes[i] = head + n
        # freed now, 0.45 s at 1M: what the engine makes next then fills the
        # decode's pages (freed after the ingestion, off the loop: 1,613
        # B/task in all, against 750)
        values[local] = None
        src.live -= 1
        n += 1
    packed.live = n
    if n:
        segments.append(packed)
        for s in vsegs:
            if segments[s].live <= 0:
                segments[s] = None
    return n


def _pack_args(v: Any, args: tuple, k0: Any, j0: int, refs: dict | None, items: array, objects: list) -> bool:
    """Append task ``v``'s items (its only dependency ``k0`` at index
    ``j0``, or its dependencies' keys -> indices in ``refs``); False, and
    nothing appended, when it cannot be packed."""
    n0 = len(items)
    o0 = len(objects)
    append = items.append
    ref_keys = []
    ok = True
    for x in args:
        t = type(x)
        if t is TaskRef:
            k = x.key
            ref_keys.append(k)
            if refs is None:
                if k0 is not None and (k is k0 or k == k0):
                    append(j0 << _TAG_BITS)
                    continue
            else:
                j = refs.get(k, -1)
                if j >= 0:
                    append(j << _TAG_BITS)
                    continue
        elif t is int and -_INT_LIMIT <= x < _INT_LIMIT:
            append((x << _TAG_BITS) | INT)
            continue
        elif isinstance(x, TaskRef):  # a Future
            ref_keys.append(x.key)
        elif isinstance(x, GraphNode):  # its dependencies are the task's too
            ok = False
            break
        append((len(objects) << _TAG_BITS) | OBJ)
        objects.append(x)
    if ok:
        fs = dependencies_of(v)
        if len(ref_keys) <= 1:
            ok = len(fs) == len(ref_keys) and (not fs or ref_keys[0] in fs)
        else:
            ok = _dependency_order(fs, ref_keys, append)
    if not ok:  # left as it arrived: undo what this task appended
        del items[n0:]
        del objects[o0:]
    return ok


def _dependency_order(fs: frozenset, ref_keys: list, append: Any) -> bool:
    """Whether the keys of a task's reference arguments (``ref_keys``, in
    argument order) make ``fs`` again; appends the positions of an
    insertion order that reproduces ``fs``'s iteration order when the
    argument order does not. False: none found (the task stays unpacked)."""
    target = list(fs)
    if list(frozenset(ref_keys)) == target:
        return True
    if len(target) > _MAX_SEARCH or set(ref_keys) != fs:
        return False
    # a set this small is one table of 8 slots, whose layout depends on the
    # insertion order through collisions only: some order makes it again
    # (the one it was made with)
    for candidate in permutations(target):
        if list(frozenset(candidate)) == target:
            for k in candidate:
                append((ref_keys.index(k) << _TAG_BITS) | ORDER)
            return True
    return False


def remake_keys(keys: list) -> int:
    """Make ``keys``' ``str`` items again (equal strings, new objects), in
    steps; steps with other keys, or a key holding a NUL, stay as they are.
    Returns how many keys it made."""
    made = 0
    for lo in range(0, len(keys), REMAKE_STEP):
        chunk = keys[lo : lo + REMAKE_STEP]
        if type(chunk[0]) is not str or not all(type(k) is str for k in chunk):
            continue
        joined = "\0".join(chunk)
        if joined.count("\0") != len(chunk) - 1:
            continue
        keys[lo : lo + len(chunk)] = joined.split("\0")
        made += len(chunk)
    return made
