"""``slimgraph.gc``: what the cyclic garbage collector does around an ingestion.

Stock loses a third of its ingestion time to full collections that
traverse the new task states again and again (baseline: 37.8 s of a 105 s
1M-task run). The pipeline therefore pauses the collector while it
ingests (:mod:`slimgraph.runtime.gcpause`), and after a big ingestion
freezes what it built (``gc.freeze()``), so that the first collection
afterwards does not traverse a million objects on the event loop (9.4 s
after a 1M-task array ingestion). docs/design.md, *Garbage collection*,
gives the reasons and the ``auto`` threshold; benchmarks/LOG.md the
measurements.

Overlapping ingestions (one awaits its offloaded phases while another
runs) are safe because :mod:`~slimgraph.runtime.gcpause` counts the holds.
"""
from __future__ import annotations

from dask.utils import parse_timedelta

from slimgraph import config, switches
from slimgraph.runtime import gcpause


def enter() -> str:
    """Start an ingestion under the configured policy; returns it for :func:`exit`."""
    policy = config.get("gc")
    if policy != "stock":
        gcpause.hold()
    return policy


def shield(policy: str) -> bool:
    """Shield the rest of an ingestion from explicit collections (see
    :func:`slimgraph.runtime.gcpause.shield`): a submission whose graph is
    big enough to be unpickled in a thread, or, once its size is known
    (:func:`big`), one whose task states will be frozen at its end. Returns
    whether it is shielded; pass that to :func:`exit`, which ends it (and
    the freeze it made, unless the ingestion's own freeze keeps it)."""
    if policy == "stock":
        return False
    gcpause.shield()
    return True


def big(policy: str, tasks: int) -> bool:
    """Whether an ingestion of ``tasks`` tasks will be frozen at its end."""
    return policy == "freeze" or (policy == "auto" and tasks >= switches.get("gc-freeze-tasks"))


def exit(policy: str, new_tasks: int = 0, shielded: bool = False) -> None:
    """End an ingestion that made ``new_tasks`` task states."""
    if policy == "stock":
        return
    if policy == "freeze" or (policy == "auto" and new_tasks >= switches.get("gc-freeze-tasks")):
        # The new task states are long-lived: keep them out of every future
        # collection's traversal until the scheduler is idle. (Another
        # ingestion still running is frozen with them, as it would be at its
        # own exit: a freeze keeps only cyclic garbage.) Frozen before the
        # collector is back on, so that no collection can start in between
        # and traverse them after all.
        gcpause.freeze_until_idle(float(parse_timedelta(switches.get("gc-full-max"), default="s")))
    if shielded:
        gcpause.unshield()
    gcpause.release()
