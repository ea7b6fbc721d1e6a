"""The ingestion pipeline without a scheduler server.

:class:`OfflineScheduler` is a slim scheduler *state* (distributed's
``SchedulerState`` on slim task states) with no network, no event-loop
server and no workers: the pipeline's edges (messages for clients and
workers, reports, events, metrics) are collected in lists instead of being
sent. It answers the :class:`~slimgraph.ingest.protocol.IngestTarget`
protocol, so :class:`~slimgraph.ingest.pipeline.Pipeline` runs on it
unchanged: what a submission does to the state can be tested, profiled and
benchmarked without starting a Scheduler.

distributed's own ``client_desires_keys``, ``report_on_key``,
``coerce_address`` and ``client_releases_keys`` are borrowed from its
Scheduler class: they only touch the state and the edges above.
"""
from __future__ import annotations

from typing import Any

from slimgraph import shim
from slimgraph.model.queue import TaskQueue
from slimgraph.model.state import SlimSchedulerState


class OfflineScheduler(SlimSchedulerState):
    """A server-less slim scheduler state whose I/O is collected."""

    client_desires_keys = shim.Scheduler.client_desires_keys
    report_on_key = shim.Scheduler.report_on_key
    coerce_address = shim.Scheduler.coerce_address
    client_releases_keys = shim.Scheduler.client_releases_keys

    # (on distributed releases that keep them on the server class)
    locals().update(shim.server_validators())

    def __init__(self, *, validate: bool = False, plugins: Any = ()):
        from sortedcontainers import SortedDict

        super().__init__(
            aliases={},
            clients={},
            workers=SortedDict(),
            host_info={},
            resources={},
            tasks={},
            unrunnable={},
            queued=TaskQueue(),
            validate=validate,
            plugins=plugins,
        )
        shim.init_server_state(self)
        #: ``(client_msgs, worker_msgs)`` of every ``send_all``
        self.sent: list = []
        #: ``(client, msg)`` of every ``report``
        self.reports: list = []
        #: ``(topic, msg)`` of every ``log_event``
        self.events: list = []
        #: the last value of every ``digest_metric``
        self.metrics: dict = {}

    # -- the edges ------------------------------------------------------------
    def send_all(self, client_msgs: dict, worker_msgs: dict) -> None:
        if client_msgs or worker_msgs:
            self.sent.append((client_msgs, worker_msgs))

    def report(self, msg: dict, ts: Any = None, client: str | None = None) -> None:
        self.reports.append((client, msg))

    def log_event(self, topic: Any, msg: Any) -> None:
        self.events.append((topic, msg))

    def digest_metric(self, name: str, value: float) -> None:
        self.metrics[name] = value
