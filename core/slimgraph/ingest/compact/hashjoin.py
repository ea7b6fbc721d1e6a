"""Where keys sit in a list, found without a dict: a sorted table of hashes.

Why. The delayed path locates every layer's dependencies (the toposort)
and every task's dependencies (the cull) among all of a delayed graph's
keys (a layer per task). A dict of those keys answers that, but it is
built by insertion, and its last doubling is one C call that makes a fresh
table of tens of MB and moves every entry into it while holding the GIL:
long on a busy machine (page faults on a busy VM), a block of the event
loop although it runs in the ingestion's thread.

What. The keys' hashes in a numpy array, sorted once (``argsort``, which
gives the GIL up while it sorts); a lookup is a binary search of the
item's hash (``searchsorted``, likewise) followed by one ``==`` with the
key found there. Equality is the dict's: keys that compare equal hash
alike, so the only key an item can equal is the one with its hash; an
item whose hash is there but which does not equal that key is not a key.
The Python work (the hashes, the ``==``) goes in steps
(:mod:`slimgraph.runtime.steps`), so the thread hands the GIL over between
them, and no table ever grows.

Two distinct keys with the same hash (``-1`` and ``-2`` among ints; for
str keys a 64-bit collision) or a key listed twice leave the table
undecided: :meth:`KeyTable.of` returns None and the caller takes the
general path.

What it keeps: a 1M-task delayed submission's update_graph time, and its
longest event-loop block half as long: with the general path for every
graph, ``bench --workload delayed --tasks 1000000 --only slim`` took
16.3-17.0 s, longest block 0.093-0.096 s (the dict's growth), against
12.4-12.9 s and 0.050 s (benchmarks/LOG.md, 2026-12-07, fifth session).
"""
from __future__ import annotations

from array import array
from operator import eq, is_
from typing import Any, Sequence

import numpy as np

from slimgraph.runtime import steps
from slimgraph.runtime.disposal import drain


#: items per step: each item an object read somewhere in a heap of a GB
#: (a cache miss), so a step of sequential size would hold the GIL too long
_STEP = 4096


def hashes(items: Sequence) -> np.ndarray:
    """``hash(item)`` of each item, as int64, a step at a time."""
    return steps.int64s(hash, items, _STEP)


def _pairwise(fn: Any, left: list, right: list) -> np.ndarray:
    """``fn(l, r)`` of each pair, as bools, a step at a time (into a
    ``bytearray``: see :func:`slimgraph.runtime.steps.int64s`)."""
    out = bytearray()
    for lo in range(0, len(left), _STEP):
        out.extend(map(fn, left[lo : lo + _STEP], right[lo : lo + _STEP]))
    return np.frombuffer(out, dtype=bool)


class KeyTable:
    """The positions of ``keys`` (unique, hashes distinct), by hash."""

    __slots__ = ("keys", "sorted_hashes", "at")

    def __init__(self, keys: Sequence, sorted_hashes: np.ndarray, at: np.ndarray):
        #: what a position names (the ``==`` check reads it)
        self.keys = keys
        #: the keys' hashes, ascending
        self.sorted_hashes = sorted_hashes
        #: ``at[j]``: the position of the key whose hash is ``sorted_hashes[j]``
        self.at = at

    @classmethod
    def of(cls, keys: Sequence) -> "KeyTable | None":
        """The table of ``keys`` (position = index in ``keys``), or None
        when two of them hash alike (a key listed twice, or a collision)."""
        h = hashes(keys)
        at = np.argsort(h, kind="stable")
        sh = h[at]
        if len(sh) > 1 and bool((sh[1:] == sh[:-1]).any()):
            return None
        return cls(keys, sh, at)

    def renumbered(self, keys: Sequence, position: np.ndarray) -> "KeyTable":
        """The same keys listed anew as ``keys``, where the key at position
        ``p`` here is at ``position[p]`` there (the hashes are not computed
        or sorted again)."""
        return KeyTable(keys, self.sorted_hashes, position[self.at])

    def locate(self, items: Sequence) -> np.ndarray:
        """The position of each item among the keys, -1 where it is none of
        them (int64)."""
        n = len(items)
        if not n or not len(self.at):
            return np.full(n, -1, dtype=np.int64)
        h = hashes(items)
        sh = self.sorted_hashes
        j = np.searchsorted(sh, h)
        np.minimum(j, len(sh) - 1, out=j)
        same_hash = sh[j] == h
        pos = np.where(same_hash, self.at[j], -1)
        # the ``==`` of each item with the key of its hash (where there is one)
        hit = np.flatnonzero(same_hash)
        if len(hit):
            # (positions read from an array('q'): a list of an int per key,
            # freed at once, would be one long C call)
            cand = steps.list_map(self.keys.__getitem__, array("q", pos[hit].tobytes()), _STEP)
            wanted = items if len(hit) == n else steps.list_map(items.__getitem__, array("q", hit.tobytes()), _STEP)
            # the dict's equality: the same object, or ``==`` (a NaN key
            # finds itself)
            equal = _pairwise(is_, cand, wanted)
            other = np.flatnonzero(~equal)
            if len(other):
                ol = steps.tolist(other)
                equal[other] = _pairwise(eq, [cand[i] for i in ol], [wanted[i] for i in ol])
            pos[hit[~equal]] = -1
            # (emptied in steps: one list of a reference per key, freed at
            # once, touches every object it names in one C call)
            drain([cand] if wanted is items else [cand, wanted])
        return pos

