"""Legacy task tuples, read without converting them.

Client-side dask.array still builds some layers (reductions, rechunk,
slicing, overlap) as legacy tuples, ``(func, arg, ...)`` with keys as
arguments. On the scheduler dask reads each such value twice:

* ``HighLevelGraph.cull`` finds the keys it references with
  ``keys_in_tasks``: it descends into task tuples, lists and dict values,
  and tests everything else for membership in the graph's keys;
* ``convert_legacy_graph`` turns it into nodes with ``convert_legacy_task``:
  a task tuple becomes a ``Task``, an argument that is a key becomes an
  ``Alias`` (one frozenset each), a list or plain tuple holding nodes
  becomes a nested ``Task(_identity_cast, ...)``, a dict argument a raw
  ``Dict``; the node's dependency frozenset is built from those.

:class:`LegacyReader` walks a value once the way ``convert_legacy_task``
does, without building nodes, and returns the exact frozenset the converted
node would hold (its dependency order, see :mod:`.setorder`) with the
location of each key in it. Where the two readings of dask can disagree (a
key inside a plain tuple, a set, a dict, a tuple subclass, a node inside a
legacy value) it raises :class:`Unsupported` instead of guessing; so the
keys it returns are also exactly what dask's cull finds.

The value itself is kept as it arrived and converted when its run_spec is
read: ``convert_legacy_task(key, value, keys)`` where ``keys`` holds the
keys this reading found. ``convert_legacy_task`` only ever asks whether an
argument is a key of the graph, and the keys it would find are exactly
those, so the result equals stock's conversion against the whole graph.
"""
from __future__ import annotations

from typing import Any

from slimgraph.shim.compact import Alias, GraphNode, Task, identity_cast, is_dask_future
from . import fastnodes
from .setorder import Collector, aliases_frozenset
from .unsupported import Unsupported

_fast_task = fastnodes.task
_fast_alias = fastnodes.alias

#: what a legacy value converts to at the top level
TASK = 0  # a Task (data_producer False)
ALIAS = 1  # an Alias to another key
DATA = 2  # a DataNode (data_producer True)
SELF = 3  # an Alias to its own key: convert_legacy_graph drops it

_SCALARS = frozenset((int, float, bool, type(None), bytes, complex))


class LegacyReader:
    """Reads legacy values against one graph's key locations."""

    __slots__ = ("locate", "index_get")

    def __init__(self, locate: Any, index: dict):
        self.locate = locate
        self.index_get = index.get

    def dependencies(self, key: Any, value: Any) -> tuple[int, frozenset, dict, list]:
        """The top-level kind, the frozenset of dependencies the converted
        node would hold, the locations of its keys that the graph has
        (key -> location), and those locations in argument order."""
        col = Collector()
        out: list = []
        outk: list = []
        kind = self._top(key, value, col, out, outk)
        return kind, col.result(), dict(zip(outk, out)), out

    # -- the walk ---------------------------------------------------------------
    def _found(self, x: Any, loc: int, col: Any, out: list, outk: list) -> None:
        out.append(loc)
        outk.append(x)
        if col is not None:
            col.add_alias(x)

    def _top(self, key: Any, x: Any, col: Any, out: list, outk: list) -> int:
        t = type(x)
        if t is tuple:
            if x and callable(x[0]):
                self._task_args(x, col, out, outk)
                return TASK
            loc = self.locate(x)
            if loc is not None:
                if x == key:
                    out.append(loc)
                    outk.append(x)
                    return SELF
                self._found(x, loc, col, out, outk)
                return ALIAS
            return TASK if self._container(x, col, out, outk, False) else DATA
        if t is str:
            loc = self.index_get(x)
            if loc is not None:
                if x == key:
                    out.append(loc)
                    outk.append(x)
                    return SELF
                self._found(x, loc, col, out, outk)
                return ALIAS
            return DATA
        if t is list:
            return TASK if self._container(x, col, out, outk, True) else DATA
        if t in _SCALARS:
            return DATA
        if t is dict:
            self._check_dict(x)
            return DATA
        self._unusual(x)
        if is_dask_future(x):
            k = x.key
            loc = self.locate(k)
            if loc is not None:
                out.append(loc)
                outk.append(k)
            if k == key:
                return SELF
            if col is not None:
                col.add_alias(k)
            return ALIAS
        return DATA

    def _walk(self, x: Any, col: Any, out: list, outk: list) -> bool:
        """Read ``x`` as a nested argument; True if it converts to a node
        (its dependencies then went into ``col``)."""
        t = type(x)
        if t is tuple:
            if x and callable(x[0]):
                if col is None:
                    self._task_args(x, None, out, outk)
                else:
                    sub = Collector()
                    self._task_args(x, sub, out, outk)
                    col.add_set(sub.result())
                return True
            loc = self.locate(x)
            if loc is not None:
                self._found(x, loc, col, out, outk)
                return True
            return self._container(x, col, out, outk, False)
        if t is str:
            loc = self.index_get(x)
            if loc is not None:
                self._found(x, loc, col, out, outk)
                return True
            return False
        if t is list:
            return self._container(x, col, out, outk, True)
        if t in _SCALARS:
            return False
        if t is dict:
            # returned as it is (not converted), but the cull reads its values
            self._check_dict(x)
            return False
        self._unusual(x)
        if is_dask_future(x):
            k = x.key
            loc = self.locate(k)
            if loc is not None:
                out.append(loc)
                outk.append(k)
            if col is not None:
                col.add_alias(k)
            return True
        return False

    def _task_args(self, x: tuple, col: Any, out: list, outk: list) -> None:
        locate = self.locate
        for a in x[1:]:
            t = type(a)
            if t is list:
                self._container(a, col, out, outk, True)
            elif t is tuple and a and type(a[0]) is str:
                loc = locate(a)
                if loc is not None:
                    self._found(a, loc, col, out, outk)
                else:
                    self._container(a, col, out, outk, False)
            elif t in _SCALARS:
                continue
            elif isinstance(a, dict):
                # becomes a raw Dict node: its items are not converted
                if t is not dict:
                    raise Unsupported(f"{t.__name__} argument in a legacy task")
                self._check_dict(a)
                for k, v in a.items():
                    if isinstance(v, GraphNode) or is_dask_future(v) or is_dask_future(k):
                        raise Unsupported("graph node inside a dict argument of a legacy task")
            else:
                self._walk(a, col, out, outk)

    def _container(self, x: Any, col: Any, out: list, outk: list, cull_reads_it: bool) -> bool:
        """A list or plain tuple: a nested Task(_identity_cast) when any
        element converts to a node. dask's cull reads a list's elements but
        tests a tuple as a whole, so keys inside a tuple would be read
        differently by the two: unsupported."""
        mark = len(out)
        # fast path: elements that are keys or plain scalars (a reduction's
        # list of input keys)
        locate = self.locate
        ks = None
        for e in x:
            t = type(e)
            if t is tuple and e and type(e[0]) is str:
                loc = locate(e)
                if loc is None:
                    break
                out.append(loc)
                if ks is None:
                    ks = [e]
                else:
                    ks.append(e)
            elif t in _SCALARS:
                continue
            else:
                break
        else:
            if ks is None:
                return False
            if not cull_reads_it:
                raise Unsupported("key inside a plain tuple of a legacy task")
            outk.extend(ks)
            if col is not None:
                col.add_set(aliases_frozenset(ks))
            return True
        del out[mark:]
        if col is None:
            node = False
            for e in x:
                if self._walk(e, None, out, outk):
                    node = True
        else:
            sub = Collector()
            node = False
            for e in x:
                if self._walk(e, sub, out, outk):
                    node = True
            if node:
                col.add_set(sub.result())
        if not cull_reads_it and len(out) > mark:
            raise Unsupported("key inside a plain tuple of a legacy task")
        return node

    def _check_dict(self, d: dict) -> None:
        """A dict value: dask's converter leaves it as it is, its cull reads
        its values; only allowed when those hold no key."""
        probe: list = []
        for v in d.values():
            self._walk(v, None, probe, [])
        if probe:
            raise Unsupported("key inside a dict of a legacy task")

    @staticmethod
    def _unusual(x: Any) -> None:
        if isinstance(x, GraphNode):
            raise Unsupported("graph node inside a legacy value")
        if isinstance(x, (list, tuple, set, frozenset, dict)):
            raise Unsupported(f"{type(x).__name__} inside a legacy value")
        if isinstance(x, str):
            raise Unsupported(f"str subclass {type(x).__name__} inside a legacy value")


class Skeleton:
    """A legacy task with its keys taken out: ``(head, arg, ...)`` where each
    argument was one key (-1) or a list of ``n`` keys (n). A reduction
    layer's tasks share one, so a task keeps only its keys (the graph's own
    key objects) instead of its tuple, its list and its copies of the keys.
    """

    __slots__ = ("head", "shape", "nkeys", "one_list")

    def __init__(self, head: Any, shape: tuple):
        self.head = head
        self.shape = shape
        self.nkeys = sum(1 if n < 0 else n for n in shape)
        #: a reduction's shape, ``(head, [k0, k1, ...])``, built by
        #: :mod:`.fastnodes` where the installed dask allows
        self.one_list = fastnodes.ENABLED and len(shape) == 1 and shape[0] > 0

    def build(self, key: Any, keys: tuple) -> Any:
        """What ``convert_legacy_task(key, self.rebuild(keys), ...)`` returns
        (every argument key being a key of the graph), built directly: each
        key becomes ``Alias(k)``, each list of keys a nested
        ``Task(None, _identity_cast, Alias(k), ..., typ=list)``."""
        if self.one_list:
            deps = aliases_frozenset(keys)
            inner = _fast_task(None, identity_cast, tuple(map(_fast_alias, keys)), {"typ": list}, deps)
            return _fast_task(key, self.head, (inner,), {}, frozenset(set(deps)))
        args: list = []
        i = 0
        for n in self.shape:
            if n < 0:
                args.append(Alias(keys[i]))
                i += 1
            else:
                args.append(Task(None, identity_cast, *[Alias(k) for k in keys[i : i + n]], typ=list))
                i += n
        return Task(key, self.head, *args)

    def rebuild(self, keys: tuple) -> tuple:
        """The legacy tuple, with ``keys`` (in argument order) in place."""
        args: list = [self.head]
        i = 0
        for n in self.shape:
            if n < 0:
                args.append(keys[i])
                i += 1
            else:
                args.append(list(keys[i : i + n]))
                i += n
        return tuple(args)


def skeleton_shape(value: Any, found: int) -> tuple | None:
    """The shape of a legacy task whose arguments are only keys and lists of
    keys (all ``found`` of them located), or None."""
    shape = []
    n = 0
    for a in value[1:]:
        t = type(a)
        if t is str or (t is tuple and a and type(a[0]) is str):
            shape.append(-1)
            n += 1
        elif t is list and a:
            for e in a:
                if not (type(e) is tuple and e and type(e[0]) is str) and type(e) is not str:
                    return None
            shape.append(len(a))
            n += len(a)
        else:
            return None
    return tuple(shape) if n == found and shape else None


__all__ = ["ALIAS", "DATA", "SELF", "TASK", "LegacyReader", "Skeleton", "skeleton_shape"]
