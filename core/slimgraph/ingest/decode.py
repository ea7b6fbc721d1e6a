"""Unpickling a submitted graph: dask's ``Task`` objects without their Python ``__setstate__``.

Why. A delayed graph arrives as one pickled ``Task`` per Delayed object.
Unpickling calls ``Task.__setstate__`` for each, a Python method that walks
the class's slot names and sets them one ``setattr`` at a time: at 1M
requested tasks (812k Tasks) about a quarter of the 3.6 s ``pickle.loads``
takes, in one call that holds the GIL.

What. :func:`deserialize` unpickles with an ``Unpickler`` that makes each
``dask._task_spec.Task`` as an instance of the shim's ``DecodedTask``
(:mod:`slimgraph.shim.nodes`), a subclass
without slots of its own whose ``__setstate__`` assigns the nine slots in one
statement and then makes the object a plain ``Task`` (``__class__``
assignment, allowed between classes with the same layout). What comes out is
what ``pickle.loads`` gives: ``Task`` objects with the same slot values
(``type(t) is Task``). Subclasses of ``Task`` (distributed's P2P barriers)
unpickle as before. Measured on the bench's 1M delayed submission: 3.6-3.8 s
-> 2.7-2.9 s.

The unpickler reads through :class:`_FrameReader`, whose methods are
Python. Pickle protocol 5 cuts its stream into frames of ~64 KiB and the
unpickler reads one frame at a time; with a C reader (``io.BytesIO``) the
whole ``load`` is one C call that never lets another thread have the GIL,
so the event loop waited for it from a thread: up to 0.41 s in-process at
1M delayed tasks (0.75 s inside a loaded scheduler process). A Python
``read`` per frame is a point where the interpreter hands the GIL over:
the longest hold drops to what the unpickler does between two frames. Its
memo (a reference to every object it made) goes in steps too
(:mod:`slimgraph.ingest.memo`; freed with the unpickler, it was a
0.19-0.23 s block at 1M delayed tasks).

Only for what distributed's ``pickle`` serializer makes with a single frame
(as a scheduler receives it: with the ``num-sub-frames`` entry distributed's
wire encoding adds; until 2026-12-06 that entry sent every real client's
submission the C way, and the loop waited up to 0.48 s for the unpickling
of a 1M-task array, in the bench's client mode) and only when dask's
``Task`` has the slots the shim knows (dask 2026.3 to 2026.8); anything
else goes to distributed's own ``deserialize``.
"""
from __future__ import annotations

import io
import pickle
from typing import Any

from slimgraph import shim
from slimgraph.ingest import memo
from slimgraph.runtime.disposal import drain
from slimgraph.shim.nodes import DECODES, decoding_class

#: whether dask's Task pickles the state the shim's ``DecodedTask`` assigns
#: (the slots this module knows)
FAST = DECODES


class _FrameReader:
    """The frames' bytes, read by Python methods (see the module's docstring)."""

    __slots__ = ("_f",)

    def __init__(self, data: Any) -> None:
        self._f = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._f.read(n)

    def readinto(self, buffer: Any) -> int:
        return self._f.readinto(buffer)

    def readline(self) -> bytes:
        return self._f.readline()


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        # dask's Task filled by the shim's ``DecodedTask`` (plain Tasks
        # come out); every other class as pickle finds it
        return decoding_class(module, name) or super().find_class(module, name)


#: header entries of a one-frame pickled submission: what distributed's
#: ``pickle`` serializer writes, and the frame count its wire encoding adds
#: (``distributed.protocol.dumps``; what a scheduler receives has it)
_PLAIN_HEADER = frozenset({"serializer", "writeable", "num-sub-frames"})


def plain(header: dict, frames: list) -> bool:
    """Whether ``header`` and ``frames`` are a plain one-frame pickle that
    :func:`deserialize` unpickles itself (no out-of-band buffers, no
    compression, no split frames to merge)."""
    return (
        header.get("serializer") == "pickle"
        and len(frames) == 1
        and set(header) <= _PLAIN_HEADER
        and header.get("num-sub-frames", 1) == 1
        and not header.get("writeable")
    )


def deserialize(header: dict, frames: list) -> Any:
    """``distributed.protocol.deserialize(header, frames)``, faster for
    pickled Tasks (see the module's docstring)."""
    if FAST and plain(header, frames):
        unpickler = _Unpickler(_FrameReader(frames[0]))
        # its memo made at its final size (slimgraph.ingest.memo.presize)
        memo.presize_for(unpickler, frames[0])
        out = unpickler.load()
        # its memo released in steps, not when the unpickler goes (slimgraph.ingest.memo)
        held = memo.hand_over(unpickler)
        del unpickler
        drain(held)
        return out
    return shim.deserialize(header, frames)
