"""The event loop's share for slimgraph's background work after a commit.

Why. After a staged commit, three kinds of work go on in steps on the
scheduler's event loop: the ready tasks the commit did not send
(:mod:`slimgraph.ingest.tail`, slices of ``slimgraph.dispatch-slice``), the
plugin calls owed (:mod:`slimgraph.ingest.deliveries`), and each worker's
paced ``compute-task`` messages, which distributed serializes on the loop
when it writes a batch (:mod:`slimgraph.ingest.pacing`). Each step is short,
but each used to start again at the very next turn of the loop, so every
turn held one step of each. Another client's round trip needs a few turns
(the read, the handler, the write), and paid for a step in each: with a
300k-task array on persisted inputs (``slimgraph.bench.e2e.run_kind``, slim,
the bench's load), the second client's pings took 100-200 ms each for the
8 s the 213k ready tasks went out (146 pings in that time, median 62 ms,
p99 0.50 s).

What. After a step that took ``d`` seconds, its actor sleeps ``d`` times
``slimgraph.background-rest`` (1.0: the loop is left to other handlers at
least as long as the step held it), so each kind of step takes at most about
half of the loop's time. Same run with it: 260 pings after the commit,
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
