"""How long measuring a big live state blocks the scheduler's event loop.

    python benchmarks/live_blocks.py --tasks 1000000 [--scheduler slim|stock]

Ingests one array graph of ~N tasks into an in-process scheduler (no
workers: the state stays put), then, with an event-loop monitor running
(a 5 ms timer; a block is the longest gap between two ticks), runs

- the instrument's incremental memory tree (``memory_tree_async``, default
  sampling) -- target of the measurement issue: <= 50 ms;
- the lazy-container census (``census_async``);
- one full refresh of the dashboard views (records, census, memory icicle)
  as the dashboard does it -- target of the dashboard issue: <= 50 ms;

and prints the longest block of each, and for contrast how long an exact,
synchronous walk of the same state blocks.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time


class Gaps:
    """Longest gap between ticks of a short timer on the running loop."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.max_gap = 0.0

    def start(self) -> "Gaps":
        self.max_gap = 0.0
        self._last = time.perf_counter()
        self._stop = False
        self._handle = asyncio.get_running_loop().call_later(self.interval, self._tick)
        return self

    def _tick(self) -> None:
        now = time.perf_counter()
        self.max_gap = max(self.max_gap, now - self._last - self.interval)
        self._last = now
        if not self._stop:
            self._handle = asyncio.get_running_loop().call_later(self.interval, self._tick)

    async def stop(self) -> float:
        await asyncio.sleep(self.interval * 2)
        self._stop = True
        self._handle.cancel()
        return self.max_gap


async def main(tasks: int, kind: str) -> None:
    from distributed import Client, Scheduler

    from slimgraph.workloads import array
    from slimgraph.distributed import SlimScheduler
    from slimgraph.instrument import stock_recorder as stock_hooks
    from slimgraph.instrument.lazysets import census_async
    from slimgraph.instrument.memory import memory_tree, memory_tree_async
    from slimgraph.instrument.recorder import get_history

    cls = SlimScheduler if kind == "slim" else Scheduler
    async with cls(dashboard_address=":0", host="127.0.0.1") as s:
        if kind == "stock":
            stock_hooks.install(s)
        async with Client(s.address, asynchronous=True) as c:
            fut = c.compute(array(tasks))
            t0 = time.monotonic()
            hist = get_history(s)
            while not len(hist) or hist.latest().status == "running":
                await asyncio.sleep(0.5)
                print(f"  ingesting... {time.monotonic() - t0:.0f} s", file=sys.stderr)
            n = len(s.tasks)
            print(f"{kind} scheduler holds {n:,} tasks")
            # The first collection after a big ingestion traverses everything
            # it allocated (slim, gc: pause: all of it is still in the young
            # generation). It lands on the loop wherever it falls; run it
            # here, timed, so that the figures below are the instruments' own.
            import gc

            t = time.perf_counter()
            gc.collect()
            print(f"first full collection after the ingestion: {time.perf_counter() - t:.2f} s "
                  "(not an instrument cost; see docs/design.md, Garbage collection)")

            g = Gaps().start()
            tree = await memory_tree_async(s)
            print(f"memory_tree_async (sample={tree.sample}): longest block {await g.stop() * 1e3:.1f} ms")

            g = Gaps().start()
            await census_async(s)
            print(f"census_async: longest block {await g.stop() * 1e3:.1f} ms")

            from bokeh.document import Document

            from slimgraph.instrument.feed import LocalFeed
            from slimgraph.views.figures import Views
            from slimgraph.views.refresher import Refresher

            views = Views(kinds=(kind,))
            doc = Document()
            doc.add_root(views.layout())
            r = Refresher(views, {kind: LocalFeed(s)}, doc, post=lambda f: f())
            g = Gaps().start()
            await r.refresh_fast()
            await r.refresh_lazy(kind)
            await r.refresh_memory(kind)
            print(f"dashboard refresh (records, census, memory): longest block {await g.stop() * 1e3:.1f} ms")

            g = Gaps().start()
            memory_tree(s, sample=None)
            print(f"for contrast, exact synchronous walk: block {await g.stop() * 1e3:.0f} ms")
            del fut


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=1_000_000)
    ap.add_argument("--scheduler", choices=("slim", "stock"), default="slim")
    a = ap.parse_args()
    asyncio.run(main(a.tasks, a.scheduler))
