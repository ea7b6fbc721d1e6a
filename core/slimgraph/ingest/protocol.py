"""What the ingestion pipeline needs from a scheduler.

The pipeline runs on distributed's scheduler state, not on the server: it
reads and writes the state below and calls a handful of distributed's own
methods. The network edges (sending messages, reporting to clients,
logging events) are methods here too, so that a server-less target
(:class:`slimgraph.ingest.offline.OfflineScheduler`) can collect instead
of send. ``SlimScheduler`` satisfies the protocol as distributed's
Scheduler plus :class:`~slimgraph.model.state.SlimSchedulerState`.

Distributed's private methods the pipeline uses (``_transitions``,
``_apply_annotations``, ...) are not listed: they are reached through
:mod:`slimgraph.shim`.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class IngestTarget(Protocol):
    # -- the state the pipeline reads and writes ----------------------------
    tasks: dict
    task_groups: dict
    task_prefixes: dict
    computations: Any
    plugins: dict
    extensions: dict
    aliases: dict
    clients: dict
    queued: Any  # a slimgraph.model.queue.TaskQueue
    transition_log: Any
    transition_counter: int
    transition_counter_max: Any
    validate: bool
    generation: int
    WORKER_SATURATION: float
    total_nthreads: int
    idle_task_count: Any
    rootish_tg_threshold: int
    rootish_tg_dependencies_threshold: int
    #: slim state: compact containers, and a counter of key/group changes
    slim_lazy: bool
    slim_epoch: int

    @property
    def is_idle(self) -> bool: ...

    # -- distributed's own methods ------------------------------------------
    def client_desires_keys(self, keys: Collection, client: str) -> None: ...

    def report_on_key(self, key: Any = None, *, ts: Any = None, client: str | None = None) -> None: ...

    def coerce_address(self, addr: str | tuple, resolve: bool = True) -> str: ...

    def client_releases_keys(self, keys: Collection, client: str, stimulus_id: str | None = None) -> None: ...

    # -- the edges: I/O -----------------------------------------------------
    def send_all(self, client_msgs: dict, worker_msgs: dict) -> None: ...

    def report(self, msg: dict, ts: Any = None, client: str | None = None) -> None: ...

    def log_event(self, topic: Any, msg: Any) -> None: ...

    def digest_metric(self, name: str, value: float) -> None: ...
