"""How long the event loop is left to others after a slice of slimgraph's work.

Why. After a staged commit, work goes on in steps on the scheduler's event
loop: the ready tasks the commit did not send (:mod:`slimgraph.ingest.tail`),
the plugin calls owed (:mod:`slimgraph.ingest.deliveries`), each worker's
paced ``compute-task`` messages, which distributed serializes on the loop
when it writes a batch (:mod:`slimgraph.ingest.pacing`), and a big
release (:mod:`slimgraph.life.release`). Each step is short, but when each
started again at the very next turn of the loop, every turn held one step
of each. Another client's round trip needs a few turns (the read, the
handler, the write), and paid for a step in each: with a 300k-task array
on persisted inputs (``slimgraph.bench.e2e.run_kind``, slim, the bench's
load), the second client's pings took 100-200 ms each for the 8 s the 213k
ready tasks went out (146 pings in that time, median 62 ms, p99 0.50 s).

What. After a slice that took ``d`` seconds, and where the turn after it
found others' work (:mod:`slimgraph.runtime.loopwork`, the executor, and
the pacers), the loop is left to other handlers for ``d`` times
``slimgraph.background-rest`` (1.0: at least as long as the slice held
it). Resting after every step, same run: 260 pings after the commit,
median 29 ms, p99 0.21 s (4 over 100 ms against 37); the ready tasks went
out in 15.3 s instead of 7.9, still far faster than two workers run them.
What is sent, to which worker, and in what order, does not change.
"""
from __future__ import annotations

from slimgraph import config

__all__ = ["ratio", "rest_after"]


def ratio() -> float:
    """``slimgraph.background-rest`` (0: no rest)."""
    r = float(config.get("background-rest") or 0.0)
    if r < 0:
        raise ValueError(f"slimgraph.background-rest must be >= 0, got {r!r}")
    return r


def rest_after(seconds: float) -> float:
    """How long to leave the loop to others after a step of ``seconds``."""
    return max(0.0, seconds) * ratio()
