"""Edge containers: compact, immutable, shared copy-on-write.

Stock distributed gives every task four ``set`` objects (``dependencies``,
``dependents``, ``waiting_on``, ``waiters``) of 216 bytes each, even empty or
holding one item. In a freshly submitted graph those four hold the same two
lists of neighbours twice: a task waits on all of its dependencies, and all of
its dependents wait on it.

The slim task state therefore holds:

- ``dependencies`` / ``dependents``: an :class:`Edges` (a tuple with the
  read-only half of the ``set`` API), or the shared empty :data:`NO_EDGES`.
  Its items are in the order a ``set`` built by the same insertions would
  iterate them, which is the order stock's sets iterate: distributed makes
  choices while iterating these containers (which dependency is
  recommended first, hence which root reaches a worker first), so the
  order is part of behaving like stock.

  The order must survive a thaw too: a thawed container is ``set(edges)``,
  a set built by inserting the items in that iteration order, and stock's
  set was built by inserting them in another order (its own insertion
  order). Where two items' hashes collide the two sets can iterate
  differently (for 4-item sets, about 2 % of them). So :func:`freeze` keeps
  the compact tuple only when rebuilding the set from it gives the same
  order (*thaw-stable*); otherwise it keeps the set built stock's way, a
  real ``set``, which the slim engine treats as already thawed.
- ``waiting_on`` / ``waiters``: ``None`` when empty, and at ingestion the very
  same object as ``dependencies`` / ``dependents`` when their contents are
  equal. The first time a transition is about to mutate one of them it is
  *thawed*: replaced by a private ``set`` copy (see
  :func:`slimgraph.model.state._transition`). A thawed
  set stays, emptied or not, as stock's sets do, until its task is forgotten.

Nothing here knows about the scheduler: these are plain containers.
"""
from __future__ import annotations

from typing import Any, Iterable

class Edges(tuple):
    """An immutable set of task states stored as a tuple.

    Iteration, ``len``, truth and ``in`` are the tuple's (``in`` compares by
    identity first, and task states compare by identity). The set-like read
    methods that distributed uses on these attributes return real sets.
    Equality is set equality, so validation code comparing against sets works.
    """

    __slots__ = ()

    def issubset(self, other: Iterable[Any]) -> bool:
        if not isinstance(other, (set, frozenset, Edges, dict)):
            other = set(other)
        return all(x in other for x in self)

    def issuperset(self, other: Iterable[Any]) -> bool:
        return all(x in self for x in other)

    def isdisjoint(self, other: Iterable[Any]) -> bool:
        return not any(x in self for x in other)

    def difference(self, *others: Iterable[Any]) -> set:
        return set(self).difference(*others)

    def union(self, *others: Iterable[Any]) -> set:
        return set(self).union(*others)

    def intersection(self, *others: Iterable[Any]) -> set:
        return set(self).intersection(*others)

    def copy(self) -> set:
        return set(self)

    def __or__(self, other: Iterable[Any]) -> set:  # type: ignore[override]
        return set(self) | set(other)

    def __sub__(self, other: Iterable[Any]) -> set:
        return set(self) - set(other)

    def __and__(self, other: Iterable[Any]) -> set:
        return set(self) & set(other)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (set, frozenset, Edges)):
            return len(self) == len(other) and all(x in other for x in self)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "{" + ", ".join(map(repr, self)) + "}" if self else "set()"


#: The one empty edge container every root (or leaf) shares.
NO_EDGES = Edges()


def freeze(items: list | tuple) -> Edges | set:
    """Pack distinct task states, given in stock's insertion order.

    Returns an :class:`Edges` in the iteration order of the set stock would
    build from them (task states hash like their keys, as in stock), or that
    set itself when its order would not survive a thaw (see module
    docstring).
    """
    n = len(items)
    if n == 0:
        return NO_EDGES
    if n == 1:
        return Edges(items)
    built = set(items)
    order = tuple(built)
    if thaw_stable(order):
        return Edges(order)
    return built


def thaw_stable(order: tuple | list) -> bool:
    """Whether a set built by inserting ``order`` iterates in ``order``."""
    return len(order) < 2 or tuple(set(order)) == tuple(order)
