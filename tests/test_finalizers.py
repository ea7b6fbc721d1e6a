"""dask's Graph page removes its plugin when its session is discarded, on
stock and on slim, with or without a frozen collector
(slimgraph.runtime.finalizers)."""
from __future__ import annotations

import asyncio
import gc
import sys
import time
import urllib.request

import dask
import pytest
from distributed import Scheduler

from slimgraph import shim
from slimgraph.distributed import SlimScheduler
from slimgraph.runtime import gcpause

#: Bokeh discards a session nobody connected to after this long (ms).
BOKEH = {
    "distributed.scheduler.dashboard.bokeh-application.unused_session_lifetime_milliseconds": 300,
    "distributed.scheduler.dashboard.bokeh-application.check_unused_sessions_milliseconds": 100,
}


def _layouts(s: Scheduler) -> list:
    """The Graph pages' plugins (each named ``graph-layout-<uuid>``)."""
    return [p for p in s.plugins.values() if type(p) is shim.GraphLayout]


def _open(s: Scheduler, page: str) -> None:
    port = s.http_server.port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/{page}", timeout=30) as r:
        assert r.status == 200


async def _until(cond, timeout: float = 10.0, every: float = 0.2) -> bool:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            return False
        await asyncio.sleep(every)
    return True


@pytest.fixture
def collector():
    """The collector as the test found it, unfrozen, afterwards."""
    yield
    gcpause.on_idle()
    gc.unfreeze()
    gc.collect()


def _run(kind: type, frozen: bool) -> dict:
    async def main() -> dict:
        async with kind(dashboard_address="127.0.0.1:0", host="127.0.0.1") as s:
            await asyncio.to_thread(_open, s, "graph")
            added = len(_layouts(s)) == 1
            watched = getattr(s, "slim_finalizers", None)
            refs = [w.ref for w in watched.watched] if watched else []
            if frozen:
                # a big graph held: what exists now is kept by the collector
                gcpause.freeze_until_idle()
            # Bokeh discards the session nobody connected to (after 0.3 s)
            # and destroys its document; full collections follow, as under
            # load. (A frozen stock scheduler must still have it after 5 s.)
            def collected() -> bool:
                gc.collect()
                return not _layouts(s)

            gone = await _until(collected, timeout=5.0 if frozen and kind is Scheduler else 15.0)
            out = {"added": added, "gone": gone, "ran": getattr(getattr(s, "slim_finalizers", None), "ran", None)}
            if frozen and kind is SlimScheduler:
                # when the freeze ends the collector frees the component and
                # calls its real finalizer: it must do nothing a second time
                # (distributed's would raise: its plugin is gone)
                raised: list = []
                hook, sys.unraisablehook = sys.unraisablehook, raised.append
                try:
                    gcpause.on_idle()
                    gc.collect()
                finally:
                    sys.unraisablehook = hook
                out["freed"] = bool(refs) and all(r() is None for r in refs)
                out["raised"] = [repr(u.exc_value) for u in raised]
            return out

    with dask.config.set(BOKEH):
        return asyncio.run(main())


@pytest.mark.parametrize("kind", [Scheduler, SlimScheduler], ids=["stock", "slim"])
def test_the_graph_pages_plugin_goes_with_its_session(kind, collector):
    """No freeze: once Bokeh has destroyed the page's document, the next
    full collection finalizes its component, which removes the plugin, on
    both engines (on slim, the watch may come first: the same result)."""
    out = _run(kind, frozen=False)
    assert out["added"] and out["gone"], out


def test_under_a_freeze_stock_keeps_the_plugin_and_slim_removes_it_as_stock_would(collector):
    """The collector frozen (as while a slim scheduler holds a big graph):
    distributed's own Graph page keeps telling its plugin of every
    transition on a plain scheduler; the slim one runs the component's
    finalizer when its document is destroyed, once: the real finalizer,
    when the freeze ends and the component is freed, does nothing."""
    stock = _run(Scheduler, frozen=True)
    assert stock["added"] and not stock["gone"], stock
    slim = _run(SlimScheduler, frozen=True)
    assert slim["added"] and slim["gone"] and slim["ran"] == 1, slim
    assert slim["freed"] and not slim["raised"], slim
