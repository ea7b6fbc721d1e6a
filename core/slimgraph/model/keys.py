"""Keys: one canonical key object per task, and names computed once per name.

*Interning.* A submitted graph carries each key several times: as the dict
key, as ``Task.key``, and inside every dependent's ``TaskRef`` and
dependency frozenset, often as distinct but equal tuples. The slim engine
keeps exactly one of them, the graph dict's key object: it is the key of
``Scheduler.tasks``, ``TaskState.key``, and what every bookkeeping structure
(priorities, who_wants, the ordering's index) refers to. Edges are held as
task-state references, never as keys.

*Names.* Stock computes ``key_split`` and ``key_split_group`` for every key
through a 100,000-entry ``lru_cache`` that thrashes on larger graphs and keeps
up to 100k keys alive. A tuple key's task group and prefix depend only on its
first element, so :class:`NameResolver` resolves each *name* once per
submission and forgets it afterwards: no global cache, nothing retained.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from slimgraph.shim import key_split, key_split_group  # key_split: uncached


def group_name(key: Any) -> str:
    """distributed's ``key_split_group``, minus its detour through the cached
    ``key_split`` for plain string names (the common case it ends in)."""
    t = type(key)
    if t is bytes:
        return group_name(key.decode())
    if t is str and key and key[0] not in "(<" and not (len(key) == 32 and _HEX32(key)):
        return key_split(key)
    return key_split_group(key)


_HEX32 = re.compile(r"[a-f0-9]{32}").match


class NameResolver:
    """Maps keys to their TaskGroup, creating groups and prefixes as needed.

    Lives for one submission. ``group_of(key)`` costs one dict lookup for a
    tuple key whose name was seen before.
    """

    __slots__ = ("_by_name", "_by_stem", "_make_group")

    def __init__(self, make_group: Callable[[str, str], Any]):
        # name (tuple key's first element, or a whole non-tuple key) -> group
        self._by_name: dict[Any, Any] = {}
        # a str key's stem (see group_of) -> group
        self._by_stem: dict[str, Any] = {}
        self._make_group = make_group

    def group_of(self, key: Any) -> Any:
        if type(key) is str:
            # A delayed graph's keys are "name-token", every one distinct:
            # by name, each would be a dict entry and two key_split parses.
            # key_split stops at the first "-"-separated word that is
            # not all letters, so when the last word is not, the key and its
            # stem (all before the last "-") split alike; and for a str key
            # that does not start with "(" or "<" and is not 32 hex digits
            # (a key with a "-" is not), key_split_group is key_split. Keys
            # of one stem share a group.
            stem, dash, last = key.rpartition("-")
            if dash and not last.isalpha() and key[0] not in "(<":
                tg = self._by_stem.get(stem)
                if tg is None:
                    name = key_split(key)
                    tg = self._by_stem[stem] = self._make_group(name, name)
                return tg
        name = key[0] if type(key) is tuple else key
        tg = self._by_name.get(name)
        if tg is None:
            tg = self._make_group(group_name(key), key_split(key))
            self._by_name[name] = tg
        return tg


def validate_key_type(key: Any) -> bool:
    """Keys are str, bytes, int, float, or tuples of those (dask's rule)."""
    t = type(key)
    if t is str or t is int or t is float or t is bytes:
        return True
    if t is tuple:
        return all(validate_key_type(k) for k in key)
    return False
