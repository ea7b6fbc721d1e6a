"""What one ``update_graph`` call asks for, once its graph is numbered."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slimgraph.ingest.index import GraphIndex


@dataclass
class Submission:
    """Everything update_graph was asked to do, after materialization."""

    client: str
    keys: set
    stimulus_id: str
    start: float
    index: GraphIndex
    priorities: Any  # list by index, or dict key -> int
    annotations_by_type: dict
    global_annotations: dict | None
    user_priority: Any = 0
    submitting_task: Any = None
    actors: Any = None
    fifo_timeout: Any = 0.0
    code: tuple = ()
    span_metadata: Any = None
    #: whether the scheduler had unfinished work when the submission
    #: arrived, which decides whether it joins the latest Computation
    #: (None: look at ingestion; see :func:`joins_last_computation`)
    busy: bool | None = None


def joins_last_computation(state: Any, sub: Submission) -> bool:
    """Stock adds a submission to the latest Computation unless the scheduler
    is idle when it looks: after deserializing on the loop and one offloaded
    materialization, a moment after the submission arrived. The slim path
    gets to its task states several offloaded steps later, by when quick
    earlier submissions have often finished (ten quick ``submit`` calls then
    make several Computations where stock makes one); so it looks on arrival
    (``sub.busy``), the moment closest to stock's that comes no later."""
    busy = (not state.is_idle) if sub.busy is None else sub.busy
    return busy and bool(state.computations)
