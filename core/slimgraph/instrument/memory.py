"""Per-object memory tree of a live scheduler's state.

``memory_tree(scheduler)`` walks the scheduler's tasks and everything they
hold and returns a :class:`MemoryTree`: bytes and object counts per node
(``tasks dict``, ``TaskState``, each container attribute, ``keys``,
``priority``, ``run_spec`` and its parts, ``other attributes``, task groups
and prefixes, scheduler-wide collections, logs, caches), with per-task
figures. Works for stock and slim task states: attributes are read with
``getattr(ts, name)`` (never ``__slots__``); a container shared between
attributes or tasks (copy-on-write) is counted once, under the first node
that reaches it; ``None`` and other singletons cost nothing.

Accuracy
--------
*Exact walk* (``sample=None``): every object reachable from the task states
(stopping at other tasks, workers, clients, groups, prefixes, types,
modules, functions' internals) is counted once by ``sys.getsizeof``, deduped
by ``id``. ``getsizeof`` includes the GC header and a container's
separately allocated table, so totals equal what ``tracemalloc`` traces for
the same objects; the tests check the walk against ``tracemalloc`` on small
graphs within 10 % (what tracemalloc sees but the walk does not: transient
garbage not yet freed, the allocator's own rounding is in neither). Not
counted: pymalloc's arena/pool slack (RSS is above the walk's total), memory that is
not held by Python objects, and the ``key_split`` lru_cache, which cannot be
enumerated: its size is *estimated* from ``cache_info().currsize`` and
per-entry costs measured with tracemalloc (210 B for tuple keys, 77 B for
string keys; the entries also keep keys of forgotten tasks alive).

*Sampled walk* (``sample=k``): ``k`` tasks chosen at random (seeded) are
walked and every per-task node is scaled by ``n/k``; scheduler-wide nodes
(dicts, groups, prefixes, collections, logs, caches) are still walked
exactly. Objects shared between tasks (a layer's name string, a shared
function, copy-on-write containers shared across tasks) are counted once per
sample, so they are over-counted by up to ``n/k``; for stock graphs the
tests see the sampled total within 5 % of the exact one at ``k=500``.

Not freezing the scheduler
--------------------------
The walk is a generator that stops after ``budget_s`` (default 20 ms) of
work. :func:`memory_tree` drains it; :func:`memory_tree_async` yields to the
event loop between slices, so the scheduler keeps running: no slice takes
more than ``budget_s`` plus one step (the largest single step is the
snapshot ``list(scheduler.tasks.values())``, one C call over the tasks).
``max_slice_s`` in the result reports the longest slice. While the walk
yields, the scheduler may change; the result then mixes states from the
walk's start and end (tasks forgotten meanwhile are still counted, new tasks
are not).

Dedupe keeps the ids of shared objects only (objects with more references
than the one owner, found with ``sys.getrefcount``), so the walk's own
memory stays small: keys, the most shared objects, are accounted by their
task and skipped wherever else they are referenced.
"""
from __future__ import annotations

import asyncio
import gc
import itertools
import random
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any, Iterator

from slimgraph import shim
from slimgraph.runtime import gcpause

#: Container-like TaskState attributes, each gets its own node.
CONTAINER_ATTRS = (
    "dependencies",
    "dependents",
    "waiting_on",
    "waiters",
    "who_has",
    "who_wants",
    "processing_on",  # a WorkerState: excluded, so costs 0 but listed
    "annotations",
    "metadata",
    "host_restrictions",
    "worker_restrictions",
    "resource_restrictions",
)


def _attr(ts: Any, name: str) -> Any:
    """An attribute as the task holds it (a slim task without annotations
    holds none; reading ``annotations`` would make an empty one)."""
    if name == "annotations":
        from slimgraph.model.taskstate import stored_annotations

        return stored_annotations(ts)
    return getattr(ts, name, None)


#: Attributes whose values are accounted by their own node.
SPECIAL_ATTRS = ("key", "priority", "run_spec")

#: Objects of these class names are never entered (other tasks, workers...).
_EXCLUDED_NAMES = frozenset({
    "TaskState", "SlimTaskState", "WorkerState", "ClientState", "TaskGroup", "TaskPrefix",
    "Computation", "Scheduler", "SchedulerState", "SlimSchedulerState",
    "Worker", "Client", "Nanny", "IOLoop", "BaseEventLoop", "Future",
})
_NEVER_ENTER = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                types.MethodType, types.CodeType, types.FrameType,
                types.MethodDescriptorType, types.WrapperDescriptorType,
                types.GetSetDescriptorType, types.MemberDescriptorType)
_SINGLETON_IDS = frozenset(id(x) for x in (
    None, True, False, Ellipsis, NotImplemented, (), "", frozenset(), b"",
    *range(-5, 257),
))

#: Containers with more elements than this met while walking one task are
#: walked after the task loop, in slices (a 100k-dependency task or a shared
#: index must not make one task's step long).
BIG_CONTAINER = 2048

#: Estimated bytes per key_split lru_cache entry (tracemalloc, CPython 3.11).
LRU_ENTRY_BYTES_TUPLE_KEY = 210
LRU_ENTRY_BYTES_STR_KEY = 77

_getrefcount = sys.getrefcount
_get_referents = gc.get_referents


_sys_getsizeof = sys.getsizeof
_object_sizeof = object.__sizeof__
_GC_HEADER = sys.getsizeof([]) - [].__sizeof__()
_HAVE_GC = 1 << 14
#: type -> what ``sys.getsizeof`` adds to ``__sizeof__``, for types with a
#: Python ``__sizeof__``; -1 for the others
_PY_SIZEOF: dict[type, int] = {}


def _getsizeof(o) -> int:
    """``sys.getsizeof`` without Python-level ``__sizeof__`` overrides.

    Some classes (dask's ``GraphNode``) define ``__sizeof__`` to report the
    deep size of their contents; here every object reports only itself, so
    the walk counts each object once.
    """
    t = type(o)
    h = _PY_SIZEOF.get(t)
    if h is None:
        m = getattr(t, "__sizeof__", None)
        h = _PY_SIZEOF[t] = _added_by_getsizeof(o, t) if isinstance(m, types.FunctionType) else -1
    if h < 0:
        return _sys_getsizeof(o)
    return _object_sizeof(o) + h


def _added_by_getsizeof(o, t: type) -> int:
    """What ``sys.getsizeof`` adds to ``__sizeof__`` for objects of ``t``,
    read off ``o`` once per type: the collector's header, and the pointers
    CPython keeps before an object whose class has no ``__slots__`` (its
    dict since 3.11, its weak references since 3.12). The same for every
    object of a type; the collector's header alone where ``o`` resists."""
    try:
        return _sys_getsizeof(o) - t.__sizeof__(o)
    except Exception:  # noqa: BLE001 (a __sizeof__ that fails on a half-built object)
        return _GC_HEADER if t.__flags__ & _HAVE_GC else 0


@dataclass
class Node:
    name: str
    path: str
    bytes: int = 0
    count: int = 0
    per_task: bool = False
    children: dict[str, "Node"] = field(default_factory=dict)

    def child(self, name: str, per_task: bool = False) -> "Node":
        c = self.children.get(name)
        if c is None:
            c = self.children[name] = Node(name, f"{self.path}/{name}", per_task=per_task)
        return c

    @property
    def total_bytes(self) -> int:
        return self.bytes + sum(c.total_bytes for c in self.children.values())

    @property
    def total_count(self) -> int:
        return self.count + sum(c.total_count for c in self.children.values())

    def walk(self) -> Iterator["Node"]:
        yield self
        for c in self.children.values():
            yield from c.walk()

    def to_dict(self) -> dict:
        return {"name": self.name, "path": self.path, "bytes": self.bytes,
                "count": self.count, "per_task": self.per_task,
                "children": [c.to_dict() for c in self.children.values()]}

    @classmethod
    def from_dict(cls, d: dict) -> "Node":
        n = cls(d["name"], d["path"], d["bytes"], d["count"], d.get("per_task", False))
        for c in d.get("children", []):
            n.children[c["name"]] = cls.from_dict(c)
        return n


def fmt_bytes(n: float) -> str:
    """``1000 B``, ``1.5 KiB``, ... ``2.0 TiB``: the one byte formatter of
    the package (memory trees here, the dashboard's labels in
    :mod:`slimgraph.views.transforms`)."""
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


@dataclass
class MemoryTree:
    """Result of :func:`memory_tree`. Node bytes are *own* bytes; totals add children."""

    root: Node
    ntasks: int
    sample: int | None = None
    elapsed_s: float = 0.0
    max_slice_s: float = 0.0
    slices: int = 0
    #: Objects deduped through the walk's id table (shared objects).
    shared_objects: int = 0
    #: Longest slice in thread CPU time (async walk only).
    max_slice_cpu_s: float | None = None

    @property
    def total_bytes(self) -> int:
        return self.root.total_bytes

    def find(self, path: str) -> Node | None:
        """Node by path relative to the root, e.g. ``"run_spec/TaskRefs"``."""
        n = self.root
        for part in [p for p in path.split("/") if p]:
            if part == n.name and n is self.root:
                continue
            n = n.children.get(part)  # type: ignore[assignment]
            if n is None:
                return None
        return n

    def bytes_of(self, path: str) -> int:
        n = self.find(path)
        return 0 if n is None else n.total_bytes

    def to_frame(self):
        """One row per node: path, parent, name, bytes, count, bytes_per_task.

        ``bytes``/``count`` include the node's children.
        """
        import pandas as pd

        rows = []
        nt = max(self.ntasks, 1)

        def rec(node: Node, parent: str | None):
            tb = node.total_bytes
            rows.append({"path": node.path, "parent": parent, "name": node.name,
                         "bytes": tb, "count": node.total_count,
                         "bytes_per_task": tb / nt})
            for c in node.children.values():
                rec(c, node.path)

        rec(self.root, None)
        return pd.DataFrame(rows, columns=["path", "parent", "name", "bytes", "count",
                                           "bytes_per_task"])

    def render(self, min_bytes: int = 0, max_depth: int = 10) -> str:
        nt = max(self.ntasks, 1)
        how = "exact" if self.sample is None else f"sampled {self.sample} tasks"
        lines = [f"scheduler state: {self.ntasks:,} tasks, {fmt_bytes(self.total_bytes)}"
                 f" ({self.total_bytes / nt:,.0f} B/task, {how}, walk {self.elapsed_s:.2f} s,"
                 f" longest slice {self.max_slice_s * 1e3:.1f} ms)"]

        def rec(node: Node, prefix: str, depth: int):
            kids = [c for c in sorted(node.children.values(), key=lambda c: -c.total_bytes)
                    if c.total_bytes >= min_bytes]
            for i, c in enumerate(kids):
                last = i == len(kids) - 1
                tb = c.total_bytes
                lines.append(f"{prefix}{'└── ' if last else '├── '}{c.name}: {fmt_bytes(tb)}"
                             f" in {c.total_count:,} objects ({tb / nt:,.1f} B/task)")
                if depth < max_depth:
                    rec(c, prefix + ("    " if last else "│   "), depth + 1)

        rec(self.root, "", 1)
        return "\n".join(lines)

    __str__ = render

    def to_dict(self) -> dict:
        return {"root": self.root.to_dict(), "ntasks": self.ntasks, "sample": self.sample,
                "elapsed_s": self.elapsed_s, "max_slice_s": self.max_slice_s,
                "slices": self.slices, "shared_objects": self.shared_objects,
                "max_slice_cpu_s": self.max_slice_cpu_s}

    @classmethod
    def from_dict(cls, d: dict) -> "MemoryTree":
        return cls(Node.from_dict(d["root"]), d["ntasks"], d.get("sample"),
                   d.get("elapsed_s", 0.0), d.get("max_slice_s", 0.0), d.get("slices", 0),
                   d.get("shared_objects", 0), d.get("max_slice_cpu_s"))


class _Chunks:
    """The referents of one big container, handed out a chunk at a time.

    Iterates the live container: if it changes size meanwhile (a set or
    dict on a running scheduler), the rest is skipped, so the walk of that
    container is approximate, never an error.
    """

    __slots__ = ("_it",)

    def __init__(self, o: Any):
        self._it = iter(o) if type(o) is not dict else itertools.chain.from_iterable(o.items())

    def next_chunk(self) -> list:
        try:
            return list(itertools.islice(self._it, 1024))
        except RuntimeError:  # changed size during iteration
            return []


_CHUNKABLE = (list, tuple, set, frozenset, dict)


class _SeenTable:
    """id -> object table, sharded so no single dict resize stalls a slice
    (one dict of millions of entries takes 100+ ms to grow)."""

    __slots__ = ("_shards", "_n")

    def __init__(self, nshards: int = 1024):
        self._shards: list[dict[int, Any]] = [{} for _ in range(nshards)]
        self._n = nshards - 1

    def __contains__(self, i: int) -> bool:
        return i in self._shards[(i >> 4) & self._n]

    def __setitem__(self, i: int, o: Any) -> None:
        self._shards[(i >> 4) & self._n][i] = o

    def __len__(self) -> int:
        return sum(map(len, self._shards))

    def release(self, cut) -> Iterator[None]:
        """Empty the table shard by shard, yielding when ``cut()`` says so."""
        for shard in self._shards:
            shard.clear()
            if cut():
                yield None


class _Walker:
    def __init__(self, scheduler: Any, sample: int | None, seed: int = 0):
        self.s = scheduler
        self.tasks: dict = scheduler.tasks
        self.sample = sample
        self.seed = seed
        self.seen = _SeenTable()
        self._excl_cache: dict[type, bool] = {}
        self._call_cache: dict[type, bool] = {}
        #: big containers met inside one task's walk, walked later in slices
        self.deferred: list[tuple[Node, list]] = []
        self.deferred_rs: list[tuple[list, str]] = []
        #: compact graphs the tasks keep their run_specs in (walked once)
        self.compact_graphs: dict = {}
        self.root = Node("state", "state")
        self.base = 0
        self._calibrate()

    # -- reference counting -------------------------------------------------
    def _rc(self, o):
        return _getrefcount(o)

    def _calibrate(self) -> None:
        holder = [[]]
        o = holder[0]
        self.base = self._rc(o)

    def _excluded(self, o) -> bool:
        t = type(o)
        r = self._excl_cache.get(t)
        if r is None:
            r = issubclass(t, _NEVER_ENTER) or any(
                k.__name__ in _EXCLUDED_NAMES for k in t.__mro__)
            self._excl_cache[t] = r
        return r

    def _take(self, o, local: set | None = None) -> bool:
        """Should ``o`` be counted now? Dedupes shared objects by id.

        Call with exactly one local reference to ``o`` held by the caller.
        """
        if id(o) in _SINGLETON_IDS:
            return False
        if _getrefcount(o) > self.base:
            i = id(o)
            if i in self.seen:
                return False
            self.seen[i] = o
        return True

    def _is_callable(self, o) -> bool:
        t = type(o)
        r = self._call_cache.get(t)
        if r is None:
            gn = _graph_node_types()
            r = self._call_cache[t] = (
                callable(o) and not issubclass(t, gn) and not issubclass(t, type))
        return r

    def _is_live_key(self, o) -> bool:
        t = type(o)
        if t is not str and t is not tuple and t is not bytes and t is not int \
                and t is not float:
            return False
        try:
            ts = self.tasks.get(o)
        except TypeError:
            return False
        return ts is not None and getattr(ts, "key", None) is o

    # -- generic deep walk -------------------------------------------------
    def deep_list(self, stack: list, node: Node, handled: set | None = None,
                  skip_keys: bool = True) -> None:
        """Deep-walk the objects in ``stack`` (a list the caller gives away).

        Items popped from the stack are referenced only by their owners, so
        the reference-count test in :meth:`_take` sees them as the caller
        would: pass fresh lists (``gc.get_referents(x)``, ``[getattr(...)]``),
        not a list the caller keeps.
        """
        pop = stack.pop
        push = stack.extend
        while stack:
            o = pop()
            i = id(o)
            if i in _SINGLETON_IDS or (handled is not None and i in handled):
                continue
            if self._excluded(o):
                continue
            if skip_keys and self._is_live_key(o):
                continue
            if not self._take(o):
                continue
            node.bytes += _getsizeof(o)
            node.count += 1
            refs = _get_referents(o)
            if len(refs) > BIG_CONTAINER:
                self.deferred.append((node, refs))  # walked later, in slices
            else:
                push(refs)
            refs = None

    def deep_gen(self, stack: list, node: Node, cut) -> Iterator[None]:
        """:meth:`deep_list` that yields when ``cut()`` says the slice is over
        (for big scheduler-wide collections: ``queued`` can hold 1M tasks)."""
        pop = stack.pop
        push = stack.extend
        i = 0
        while stack:
            i += 1
            if not (i & 1023) and cut():
                yield None
            o = pop()
            if type(o) is _Chunks:
                chunk = o.next_chunk()
                if chunk:
                    stack.append(o)
                    push(chunk)
                continue
            if id(o) in _SINGLETON_IDS or self._excluded(o) or self._is_live_key(o):
                continue
            if not self._take(o):
                continue
            node.bytes += _getsizeof(o)
            node.count += 1
            if self._only_excluded(o):
                continue
            if type(o) in _CHUNKABLE and len(o) > BIG_CONTAINER:
                # listing a million referents at once is one long C call
                # (stock's queue heap): hand them out 1024 at a time
                stack.append(_Chunks(o))
                continue
            push(_get_referents(o))

    def _only_excluded(self, o) -> bool:
        """A huge set/list/dict of objects that are never entered (the
        queue's task states, say): counting its own size is all there is to
        do, and listing its million referents would block the loop."""
        t = type(o)
        if t not in (set, frozenset, list, tuple, dict) or len(o) <= BIG_CONTAINER:
            return False
        head = itertools.islice(o.values() if t is dict else o, 64)
        if t is dict:
            head = itertools.chain(head, itertools.islice(o, 64))
        return all(self._excluded(x) for x in head)

    def deep(self, obj, node: Node) -> None:
        """Deep walk from ``obj`` (the caller's reference makes it look shared,
        so the root is deduped through the seen table: use for few roots)."""
        self.deep_list([obj], node)

    # -- per task ------------------------------------------------------------
    def walk_task(self, key, ts, nodes: dict[str, Node]) -> None:
        # the TaskState object itself
        n = nodes["TaskState"]
        n.bytes += _getsizeof(ts)
        n.count += 1
        handled = {id(ts)}
        # keys: the dict's key object and ts.key (usually the same object)
        k = getattr(ts, "key", None)
        self._walk_key(k, nodes["keys"])
        handled.add(id(k))
        if key is not k:
            self._walk_key(key, nodes["keys"])
        # containers: count ids among this task's attributes to dedupe
        # task-local sharing without the global seen table
        values = [_attr(ts, a) for a in CONTAINER_ATTRS]
        ids = [id(v) for v in values]
        for a, v in zip(CONTAINER_ATTRS, values):
            if v is None:
                continue
            vid = id(v)
            handled.add(vid)
            if vid in _SINGLETON_IDS or self._excluded(v):
                continue
            extra = self._rc(v) - self.base
            occurrences = ids.count(vid)
            if extra <= occurrences - 1:
                # only referenced by this task's own attributes
                if ids.index(vid) != CONTAINER_ATTRS.index(a):
                    continue  # counted under its first attribute
                cnode = nodes[a]
                cnode.bytes += _getsizeof(v)
                cnode.count += 1
                if type(v) is dict or not isinstance(v, (set, frozenset, tuple, list)):
                    self._deep_children(v, cnode)
            else:
                if vid in self.seen:
                    continue
                self.seen[vid] = v
                cnode = nodes[a]
                cnode.bytes += _getsizeof(v)
                cnode.count += 1
                if type(v) is dict or not isinstance(v, (set, frozenset, tuple, list)):
                    self._deep_children(v, cnode)
        del v
        # priority: what the task holds. A slim task keeps a shared
        # (user, generation) head and its ordering int, and builds the tuple
        # on access: walking the built tuple would count bytes nobody keeps.
        if hasattr(ts, "_prio_order"):
            held = [ts._prio_head, ts._prio_order]
        else:
            held = [getattr(ts, "priority", None)]
        for h in held:
            handled.add(id(h))
        self.deep_list(held, nodes["priority"])
        # run_spec: a slim task ingested compactly holds its index in a
        # compact graph, which is shared by the submission's tasks and walked
        # once, after the tasks (reading ``run_spec`` would build the node)
        graph = getattr(ts, "_graph", None) if type(ts).__name__ == "SlimTaskState" else None
        if graph is not None:
            handled.add(id(graph))
            self.compact_graphs.setdefault(id(graph), graph)
            spec = ts._spec
            handled.add(id(spec))
            if self._take(spec):
                n = nodes["run_spec/other"]
                n.bytes += _getsizeof(spec)
                n.count += 1
            del spec
        elif getattr(ts, "run_spec", None) is not None:
            handled.add(id(getattr(ts, "run_spec", None)))
            self.walk_run_spec(ts, nodes)
        # anything else the task object references (side objects, exception...)
        self.deep_list(_get_referents(ts), nodes["other attributes"], handled)

    def _deep_children(self, container, node: Node) -> None:
        self.deep_list(_get_referents(container), node)

    def _walk_key(self, k, node: Node) -> None:
        if k is None or id(k) in _SINGLETON_IDS:
            return
        # the key itself is owned by its task: count it without the seen table
        # unless something else already counted it
        if id(k) in self.seen:
            return
        node.bytes += _getsizeof(k)
        node.count += 1
        if type(k) is tuple:
            for e in k:
                if id(e) in _SINGLETON_IDS:
                    continue
                if self._is_live_key(e):
                    continue
                if type(e) is tuple:
                    self._walk_key(e, node)
                elif self._take(e):
                    node.bytes += _getsizeof(e)
                    node.count += 1

    def walk_run_spec(self, ts, nodes: dict[str, Node]) -> None:
        self._run_spec_stack([(getattr(ts, "run_spec", None), "Task objects")], nodes)

    def _run_spec_stack(self, stack: list, nodes: dict[str, Node]) -> None:
        gn_types = _graph_node_types()
        taskref = gn_types[1]
        pop = stack.pop
        while stack:
            o, cat = pop()
            if id(o) in _SINGLETON_IDS or self._is_live_key(o):
                continue
            if self._excluded(o):
                if isinstance(o, (types.FunctionType, types.BuiltinFunctionType,
                                  types.MethodType)) and self._take(o):
                    n = nodes["run_spec/functions"]
                    n.bytes += _getsizeof(o)
                    n.count += 1
                continue
            if self._is_callable(o):
                # partials, Compose, numpy dispatchers...: code, shared by
                # many tasks; count the object, never walk into what it
                # references (module namespaces, caches)
                if self._take(o):
                    n = nodes["run_spec/functions"]
                    n.bytes += _getsizeof(o)
                    n.count += 1
                continue
            if not self._take(o):
                continue
            if isinstance(o, gn_types[0]):
                n = nodes["run_spec/Task objects"]
                n.bytes += _getsizeof(o)
                n.count += 1
                for slot in _slots_of(type(o)):
                    v = getattr(o, slot, None)
                    if v is None:
                        continue
                    if slot == "args":
                        stack.append((v, "run_spec/args"))
                    elif slot == "kwargs":
                        stack.append((v, "run_spec/kwargs"))
                    elif slot == shim.NODE_DEPENDENCIES_SLOT:
                        stack.append((v, "run_spec/dependencies"))
                    elif slot in ("func", "key", "value", "target"):
                        stack.append((v, "run_spec/values" if slot == "value"
                                      else "run_spec/other"))
                    else:
                        stack.append((v, "run_spec/other"))
                    del v
                continue
            if type(o) is taskref or isinstance(o, taskref):
                n = nodes["run_spec/TaskRefs"]
                n.bytes += _getsizeof(o)
                n.count += 1
                k = getattr(o, "key", None)
                if k is not None:
                    stack.append((k, "run_spec/other"))
                del k
                continue
            if cat == "Task objects":
                cat = "run_spec/values"
            n = nodes[cat]
            n.bytes += _getsizeof(o)
            n.count += 1
            # children of containers keep the container's category for
            # args/kwargs/dependencies structure, values otherwise
            t = type(o)
            if t in (tuple, list, dict, set, frozenset):
                child_cat = cat
            else:
                child_cat = "run_spec/values" if cat != "run_spec/other" else cat
            refs = _get_referents(o)
            if len(refs) > BIG_CONTAINER:
                # a huge argument list: walk it later, in slices
                self.deferred_rs.append((refs, child_cat))
            else:
                r = None
                for r in refs:
                    stack.append((r, child_cat))
                r = None
            refs = None


_GN_TYPES: tuple | None = None
_SLOTS: dict[type, tuple[str, ...]] = {}


def _graph_node_types() -> tuple:
    global _GN_TYPES
    if _GN_TYPES is None:
        try:
            from slimgraph.shim import GraphNode, TaskRef
        except ImportError:  # pragma: no cover
            class GraphNode:  # type: ignore[no-redef]
                pass

            class TaskRef:  # type: ignore[no-redef]
                pass
        _GN_TYPES = (GraphNode, TaskRef)
    return _GN_TYPES


def _slots_of(t: type) -> tuple[str, ...]:
    s = _SLOTS.get(t)
    if s is None:
        names: list[str] = []
        for k in t.__mro__:
            for n in getattr(k, "__slots__", ()) or ():
                if isinstance(n, str) and n not in ("__weakref__", "__dict__") \
                        and n not in names:
                    names.append(n)
        s = _SLOTS[t] = tuple(names)
    return s


PER_TASK_NODES = (
    "TaskState", "keys", *CONTAINER_ATTRS, "priority",
    "run_spec/Task objects", "run_spec/args", "run_spec/kwargs",
    "run_spec/dependencies", "run_spec/TaskRefs", "run_spec/functions",
    "run_spec/values", "run_spec/other", "other attributes",
)

SCHEDULER_COLLECTIONS = ("queued", "unrunnable", "replicated_tasks", "unknown_durations",
                         "computations", "task_metadata", "erred_tasks")
WORKER_ATTRS = ("_has_what", "processing", "long_running", "executing", "needs_what",
                "actors", "task_prefix_count")


def _walk(scheduler: Any, sample: int | None, budget_s: float, seed: int = 0
          ) -> Iterator[MemoryTree]:
    """Generator: yields ``None`` between slices, finally the tree."""
    t_start = time.perf_counter()
    w = _Walker(scheduler, sample, seed)
    root = w.root
    slice_t0 = time.perf_counter()
    stats = {"max": 0.0, "slices": 0}

    def cut() -> bool:
        return time.perf_counter() - slice_t0 >= budget_s

    tasks = scheduler.tasks
    n = len(tasks)
    # tasks dict
    d = root.child("tasks dict")
    d.bytes += _getsizeof(tasks)
    d.count += 1
    w.seen[id(tasks)] = tasks
    # One flat snapshot of the task states (not of the keys: scattered in
    # memory, they would cost several times more, and each task state holds
    # its own key). Sampling happens in the next slice.
    vals = list(tasks.values())
    yield None
    slice_t0 = time.perf_counter()
    if sample is not None and sample < len(vals):
        snapshot = vals
        vals = random.Random(seed).sample(snapshot, sample)
        scale = n / len(vals)
        # release the snapshot in chunks: dropping a million references at
        # once touches every task state, scattered in memory, in one call
        while snapshot:
            del snapshot[-32768:]
            if snapshot and cut():
                stats["max"] = max(stats["max"], time.perf_counter() - slice_t0)
                stats["slices"] += 1
                yield None
                slice_t0 = time.perf_counter()
        del snapshot
    else:
        scale = 1.0
        sample = None
    keys = [ts.key for ts in vals]
    # per task nodes, in a fixed order
    nodes: dict[str, Node] = {}
    for name in PER_TASK_NODES:
        parent = root
        parts = name.split("/")
        if name in CONTAINER_ATTRS:
            parts = ["containers", name]
        for p in parts[:-1]:
            parent = parent.child(p)
        nodes[name] = parent.child(parts[-1], per_task=True)
    yield None  # after the snapshot
    slice_t0 = time.perf_counter()
    i = 0
    key = ts = None
    for key, ts in zip(keys, vals):
        w.walk_task(key, ts, nodes)
        i += 1
        if not (i & 7) and cut():
            stats["max"] = max(stats["max"], time.perf_counter() - slice_t0)
            stats["slices"] += 1
            yield None
            slice_t0 = time.perf_counter()
    del keys, vals, key, ts
    # big containers deferred by the task walks (still per-task nodes)
    while w.deferred or w.deferred_rs:
        if w.deferred:
            dnode, refs = w.deferred.pop()
            for _ in w.deep_gen(refs, dnode, cut):
                stats["max"] = max(stats["max"], time.perf_counter() - slice_t0)
                stats["slices"] += 1
                yield None
                slice_t0 = time.perf_counter()
        else:
            refs, dcat = w.deferred_rs.pop()
            while refs:
                chunk = [(r, dcat) for r in refs[-1024:]]
                del refs[-1024:]
                w._run_spec_stack(chunk, nodes)
                if cut():
                    stats["max"] = max(stats["max"], time.perf_counter() - slice_t0)
                    stats["slices"] += 1
                    yield None
                    slice_t0 = time.perf_counter()
        refs = None
    if scale != 1.0:
        for nd in nodes.values():
            nd.bytes = round(nd.bytes * scale)
            nd.count = round(nd.count * scale)

    # groups and prefixes
    for attr, label in (("task_groups", "task groups"), ("task_prefixes", "task prefixes")):
        coll = getattr(scheduler, attr, None)
        if coll is None:
            continue
        gnode = root.child(label)
        dn = gnode.child("dict")
        if w._take(coll):
            dn.bytes += _getsizeof(coll)
            dn.count += 1
        on = gnode.child("objects")
        for j, obj in enumerate(list(coll.values())):
            if w._take(obj):
                on.bytes += _getsizeof(obj)
                on.count += 1
                w.deep_list(_get_referents(obj), gnode.child("attributes"))
            if not (j & 63) and cut():
                stats["max"] = max(stats["max"], time.perf_counter() - slice_t0)
                stats["slices"] += 1
                yield None
                slice_t0 = time.perf_counter()
        obj = None

    # scheduler-wide collections holding tasks, then logs; each may be big
    def pause():
        nonlocal slice_t0
        stats["max"] = max(stats["max"], time.perf_counter() - slice_t0)
        stats["slices"] += 1

    def resume():
        nonlocal slice_t0
        slice_t0 = time.perf_counter()

    cnode = root.child("scheduler collections")
    jobs: list[tuple[Node, Any]] = []
    for attr in SCHEDULER_COLLECTIONS:
        v = getattr(scheduler, attr, None)
        if v is None or isinstance(v, (int, float, str)):
            continue
        jobs.append((cnode.child(attr), v))
    for ws in list(getattr(scheduler, "workers", {}).values()):
        for attr in WORKER_ATTRS:
            v = getattr(ws, attr, None)
            if v is not None:
                jobs.append((cnode.child(f"workers.{attr.lstrip('_')}"), v))
    for cs in list(getattr(scheduler, "clients", {}).values()):
        v = getattr(cs, "wants_what", None)
        if v is not None:
            jobs.append((cnode.child("clients.wants_what"), v))
    for g in w.compact_graphs.values():
        # not per task: one graph per submission, shared by its tasks
        jobs.append((root.child("run_spec").child("compact graphs"), g))
    w.compact_graphs.clear()
    tl = getattr(scheduler, "transition_log", None)
    if tl is not None:
        jobs.append((root.child("logs").child("transition_log"), tl))
    v = None
    while jobs:
        jnode, v = jobs.pop(0)
        stack = [v]
        v = None
        for _ in w.deep_gen(stack, jnode, cut):
            pause()
            yield None
            resume()
        if cut():
            pause()
            yield None
            resume()

    # caches
    knode = root.child("caches")
    try:
        from dask.utils import key_split

        info = key_split.cache_info()
        n_tuple = sum(1 for k in itertools.islice(tasks, 1000) if type(k) is tuple)
        frac = n_tuple / min(max(n, 1), 1000)
        per = frac * LRU_ENTRY_BYTES_TUPLE_KEY + (1 - frac) * LRU_ENTRY_BYTES_STR_KEY
        kn = knode.child("key_split lru_cache (estimated)")
        kn.bytes = round(info.currsize * per)
        kn.count = info.currsize
    except Exception:  # pragma: no cover
        pass

    # Drop the seen table shard by shard: on a stock state it references
    # millions of objects, and freeing it in one go (when the generator is
    # dropped) would be one long block of the loop.
    shared_objects = len(w.seen)
    for _ in w.seen.release(cut):
        pause()
        yield None
        resume()
    stats["max"] = max(stats["max"], time.perf_counter() - slice_t0)
    stats["slices"] += 1
    yield MemoryTree(root=root, ntasks=n, sample=sample,
                     elapsed_s=time.perf_counter() - t_start,
                     max_slice_s=stats["max"], slices=stats["slices"],
                     shared_objects=shared_objects)


def memory_tree(scheduler: Any, sample: int | None = None, *, seed: int = 0) -> MemoryTree:
    """Walk the scheduler state synchronously (blocks until done).

    For tests and the CLI; on a live scheduler use :func:`memory_tree_async`.
    ``sample=k`` walks ``k`` random tasks and scales per-task nodes.
    """
    gen = _walk(scheduler, sample, budget_s=float("inf"), seed=seed)
    out = None
    for out in gen:
        pass
    assert out is not None
    return out


#: ``sample="auto"``: walk everything up to this many tasks, else sample.
AUTO_EXACT_MAX_TASKS = 50_000
AUTO_SAMPLE = 20_000


async def memory_tree_async(scheduler: Any, sample: int | None | str = "auto", *,
                            budget_s: float = 0.02, seed: int = 0) -> MemoryTree:
    """Walk the state in slices of at most ``budget_s`` (+ one step) of loop time.

    Between slices the event loop runs other callbacks. ``sample="auto"``
    walks all tasks up to 50,000 and 20,000 random ones beyond (an exact
    walk of a big state takes long, during which the scheduler keeps
    running but the result ages). ``sample=None`` forces
    the exact walk. See the module docstring for accuracy.
    """
    if sample == "auto":
        sample = None if len(scheduler.tasks) <= AUTO_EXACT_MAX_TASKS else AUTO_SAMPLE
    gen = _walk(scheduler, sample, budget_s=budget_s, seed=seed)
    max_wall = max_cpu = 0.0
    n = 0
    # The cyclic GC stays off until the walk is over, as in census_async:
    # the walk makes only short-lived, acyclic garbage, and a collection
    # (possibly a full one, long on a big state) must not land inside a
    # slice; a young one would also traverse the walk's fresh snapshot of
    # every task state. Collections are deferred, not skipped.
    with gcpause.paused():
        while True:
            c0 = time.thread_time()
            w0 = time.perf_counter()
            out = next(gen)
            dw = time.perf_counter() - w0
            dc = time.thread_time() - c0
            n += 1
            max_wall = max(max_wall, dw)
            max_cpu = max(max_cpu, dc)
            if out is not None:
                # measured around each step from the caller's side: what the
                # event loop actually waited (wall) and what we computed
                # (CPU; wall - CPU is time the OS gave to other processes)
                out.max_slice_s = max_wall
                out.max_slice_cpu_s = max_cpu
                out.slices = n
                return out
            # a timer, not sleep(0): sleep(0) queues our next slice ahead of
            # timers and I/O callbacks that became due meanwhile, so they
            # would wait two slices; after a 1 ms timer they run first
            await asyncio.sleep(0.001)
