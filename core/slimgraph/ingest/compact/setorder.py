"""The iteration order of the dependency sets dask would build, without the nodes.

A dask ``Task`` collects its dependencies in ``Task.__init__``: for each
argument in order, a ``TaskRef`` adds its key (``{k}`` for the first, then
``s.add(k)``), any other node with dependencies (an ``Alias``, a nested
``Task``) contributes its frozenset (``set(fs)`` for the first, then
``s.update(fs)``), and the result is frozen with ``frozenset(s)``. The
scheduler iterates these sets (stock builds its edge sets from them;
``dask.order`` breaks ties by them), and their order depends on the keys'
hashes, on insertion order and on CPython's resizing rules, so it cannot be
predicted from the keys alone. It can be reproduced exactly by doing the
same set operations on the same keys, which is what this module does, with
transient sets that are dropped right away.

The two ways of adding differ in when the table grows: ``s.add(k)`` grows
it after an insertion that fills it to 3/5 (to 4x the size), while
``s.update(fs)`` grows it before inserting when the incoming items would
(to 2x). So an ``Alias`` is not a ``TaskRef``: once a set passes four
items, the same keys in the same order end up in different layouts.
:class:`Collector` keeps the distinction (an alias's one-element frozenset
is fed as a one-element dict, which takes the same growth path without
building a frozenset per key). Up to four items no table grows, and both
ways agree.
"""
from __future__ import annotations

from typing import Any

EMPTY: frozenset = frozenset()


def refs_order(keys: list | tuple) -> tuple:
    """Iteration order of the frozenset a Task whose dependencies are
    ``TaskRef``s to ``keys``, in this argument order, holds."""
    if len(keys) < 2:
        return tuple(keys)
    return tuple(frozenset(set(keys)))


def aliases_frozenset(keys: list) -> frozenset:
    """The frozenset a Task whose arguments are ``Alias``es to ``keys``, in
    this order, holds (``Task(_identity_cast, Alias(k0), ...)``)."""
    if len(keys) <= 4:
        return frozenset(set(keys))
    s = {keys[0]}
    one: dict = {}
    update = s.update
    for k in keys[1:]:
        one[k] = None
        update(one)
        one.clear()
    return frozenset(s)


class Collector:
    """Accumulates one node's contributions exactly as ``Task.__init__``
    does; :meth:`result` is the frozenset the node would hold (``EMPTY``
    when there is none)."""

    __slots__ = ("s", "one")

    def __init__(self) -> None:
        self.s: Any = None
        self.one: Any = None

    def add_ref(self, k: Any) -> None:
        """A ``TaskRef`` argument."""
        s = self.s
        if s is None:
            self.s = {k}
        else:
            s.add(k)

    def add_alias(self, k: Any) -> None:
        """A node argument whose dependencies are just ``k`` (an ``Alias``)."""
        s = self.s
        if s is None:
            self.s = {k}
            return
        one = self.one
        if one is None:
            self.one = one = {}
        one[k] = None
        s.update(one)
        one.clear()

    def add_set(self, fs: frozenset) -> None:
        """A nested node's dependency frozenset."""
        if not fs:
            return
        s = self.s
        if s is None:
            self.s = set(fs)
        else:
            s.update(fs)

    def result(self) -> frozenset:
        s = self.s
        return frozenset(s) if s else EMPTY
