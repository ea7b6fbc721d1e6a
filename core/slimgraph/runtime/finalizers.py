"""Finalizers a frozen collector holds back, run when stock's would run.

While a big graph is held, the slim scheduler keeps the cyclic garbage
collector frozen (:mod:`slimgraph.runtime.gcpause`): a full collection
over a million tasks' objects takes seconds (5.7-6.9 s measured at 1M,
12 M tracked objects). The price is that a reference cycle which becomes
garbage meanwhile is kept until the freeze ends. Mostly that is memory.
Once it is behaviour: an object whose ``__del__`` changes the scheduler.

dask's own dashboard has such objects. Its Graph page builds a component
that registers a ``GraphLayout`` plugin and removes it in its ``__del__``.
On stock, that runs when the page's Bokeh session is discarded: Bokeh's
``Document.destroy`` detaches the document's models and calls
``gc.collect()``, which finds the component's cycle. Under a freeze it
never runs, so the plugin stays registered. It is told of every transition
until the scheduler is idle.

So a slim scheduler watches every plugin that a component with a
finalizer adds and holds (for dask's Graph page, its ``layout``). Such a
component has a Bokeh ``root`` model, which the page's document holds
(and the document holds the component). dask's pages are built into
their document in one synchronous call on the event loop, so whenever the
check runs, a component's root is in a document until that document is
destroyed (``Document.destroy`` detaches every model). A component whose
root is in no document, or which has none (its construction failed), is
garbage on stock: its own ``__del__`` is called, as stock's next full
collection would call it. Its class is then swapped for a subclass without
a finalizer, so the collector's real call, when the freeze ends, does
nothing a second time.

Components are held by weak reference. Without a freeze the collector
frees them as on stock and the watch lapses. The check runs every
:data:`INTERVAL` seconds on the event loop while anything is watched.

Why it stays: behaviour. Stock removes the Graph page's plugin when the
page's session is discarded; without this, a frozen slim scheduler keeps
it (``tests/test_finalizers.py``). Its time: before this module, a 1M-task
delayed cancel (``bench --mode client --workload delayed --tasks 1000000``,
py-spy on the scheduler) spent 115 of 1,103 samples in
``GraphLayout.transition`` and took 34 s against stock's 22 s. At 300k
(``--workload delayed --tasks 300000 --real-use --compute-seconds 30``,
slim, two runs each) no target moves for it: the cancel's answer 20.1 and
23.9 s with it, 13.6 and 15.2 s without; the longest loop block 1.85 and
0.87 s against 4.05 and 1.06 s, in dask's Status page rebuilt every 5 s.

What this does not do: a component that stock would still keep alive
after its document is destroyed (say, from a traceback) is finalized here
anyway. The memory of other discarded sessions stays held until the
freeze ends.
"""
from __future__ import annotations

import asyncio
import logging
import weakref
from types import FrameType
from typing import Any

logger = logging.getLogger("distributed.scheduler")

#: Seconds between two checks of the watched components.
INTERVAL = 0.5

_finalized_classes: dict = {}


def _without_finalizer(cls: type) -> type:
    """``cls`` with a ``__del__`` that does nothing (cached per class)."""
    sub = _finalized_classes.get(cls)
    if sub is None:
        sub = type(cls.__name__, (cls,), {"__del__": lambda self: None,
                                          "__module__": cls.__module__,
                                          "__qualname__": cls.__qualname__})
        _finalized_classes[cls] = sub
    return sub


class _Watched:
    """One component, weakly held."""

    __slots__ = ("ref",)

    def __init__(self, owner: Any):
        self.ref = weakref.ref(owner)


class HeldFinalizers:
    """The components one scheduler watches (see the module docstring)."""

    def __init__(self) -> None:
        self.watched: list[_Watched] = []
        #: finalizers called here, for diagnostics and tests
        self.ran = 0
        self._timer: asyncio.TimerHandle | None = None

    def adding(self, plugin: Any, caller: FrameType | None) -> None:
        """``plugin`` is being added from ``caller``'s frame. If that frame is a
        method of a component with its own finalizer that holds the plugin,
        watch the component."""
        owner = caller.f_locals.get("self") if caller is not None else None
        if owner is None or getattr(type(owner), "__del__", None) is None:
            return
        if not any(v is plugin for v in getattr(owner, "__dict__", {}).values()):
            return
        try:
            self.watched.append(_Watched(owner))
        except TypeError:  # no weak references: cannot be watched without keeping it
            return
        self._schedule()

    def stop(self) -> None:
        """The scheduler closed: no more checks (its loop may be ending)."""
        self.watched = []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        if self._timer is not None or not self.watched:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timer = loop.call_later(INTERVAL, self._tick)

    def _tick(self) -> None:
        self._timer = None
        try:
            self.check()
        finally:
            self._schedule()

    def check(self) -> int:
        """Finalize every watched component whose root has left its
        document; drop the ones gone. Returns how many were finalized."""
        keep, done = [], 0
        for w in self.watched:
            owner = w.ref()
            if owner is None:
                continue
            root = getattr(owner, "root", None)
            if root is not None and getattr(root, "document", None) is not None:
                keep.append(w)
                continue
            self._finalize(owner)
            done += 1
        self.watched = keep
        self.ran += done
        return done

    @staticmethod
    def _finalize(owner: Any) -> None:
        cls = type(owner)
        try:
            cls.__del__(owner)
        except Exception:
            logger.info("slimgraph: finalizer of %s failed", cls.__qualname__, exc_info=True)
        try:
            owner.__class__ = _without_finalizer(cls)
        except TypeError:
            logger.info("slimgraph: could not disarm the finalizer of %s", cls.__qualname__)
