"""Chart kits built ahead of page loads, one figure per turn of the event loop.

Why. Every page of the app runs on one Panel event loop: its refreshes,
widget answers and page loads. A new page's charts (ten Bokeh figures, about
650 models) used to be built inside that page's deferred load, in the same
turn of the loop that serializes and sends them; py-spy of the app during
page loads put the building at a third of that turn. While it ran, no other
page's charts moved (``bench --mode dashboard``: refresh gaps over 2 s, each
during a page load in another tab).

What. A :class:`Shelf` keeps one finished kit per key (the engine kinds a
page shows). A page load takes it, if there is one, and builds its own
otherwise; taking a kit starts the next one, built a figure per turn with a
short pause between steps, so that other callbacks run in between. A kit
goes to one page only: a Bokeh model belongs to a single document.

Only under a server, on its loop thread (no thread touches Bokeh models
here); a notebook cell builds its charts directly.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Hashable, Iterator

logger = logging.getLogger(__name__)

#: seconds between two steps of a kit being built
PAUSE = 0.02


def run_to_end(steps: Iterator[None]) -> Any:
    """Drain a step iterator (a generator); returns its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


class Shelf:
    """Finished kits, one per key, built ahead on the event loop.

    ``make(key)`` returns a generator that builds a kit a step at a time
    (``yield`` between steps) and returns it."""

    def __init__(self, make: Callable[[Hashable], Iterator[None]], pause: float = PAUSE):
        self.make = make
        self.pause = pause
        self._ready: dict[Hashable, Any] = {}
        self._building: set[Hashable] = set()
        #: kits handed out, and page loads that found none (for tests and logs)
        self.taken = 0
        self.missed = 0

    def take(self, key: Hashable) -> Any | None:
        """The finished kit for ``key`` (None: none yet); it leaves the shelf."""
        kit = self._ready.pop(key, None)
        if kit is None:
            self.missed += 1
        else:
            self.taken += 1
        return kit

    def ready(self, key: Hashable) -> bool:
        return key in self._ready

    def stock(self, key: Hashable, loop: Any = None) -> bool:
        """Start building a kit for ``key`` on ``loop`` (default: the current
        Tornado loop), unless one is on the shelf or being built. Returns
        whether a build started."""
        if key in self._ready or key in self._building:
            return False
        if loop is None:
            from tornado.ioloop import IOLoop

            loop = IOLoop.current()
        steps = self.make(key)
        self._building.add(key)

        def step() -> None:
            try:
                next(steps)
            except StopIteration as stop:
                self._building.discard(key)
                self._ready[key] = stop.value
                return
            except Exception:  # noqa: BLE001 (a page load builds its own)
                self._building.discard(key)
                logger.warning("building a chart kit ahead failed", exc_info=True)
                return
            loop.call_later(self.pause, step)

        loop.call_later(self.pause, step)
        return True
