"""slimgraph: a slim, measured update_graph for dask.distributed.

Layout (one module per concept; the folders map the architecture):

- ``shim``        the only user of distributed's and dask's internals
- ``model``       slim task states, edge containers, keys, the task queue,
                  SlimSchedulerState (distributed's state machine on them)
- ``ingest``      the ingestion pipeline: index, build, replay, dispatch, apply
                  (in place or staged), deliveries, the orchestration
- ``order``       fast ordering, value for value equal to dask.order.order
- ``runtime``     GC policy, GIL switch interval, disposal off the loop
- ``distributed`` the drop-in: SlimScheduler, preload hook, install()
- ``instrument``  measuring stock and slim (records, recorder extension,
                  feeds, memory tree, lazy sets, memray, loop monitor)
- ``views``       the dashboard's figures, transforms, refresher, scheduler tab
- ``workloads``   the graphs the bench, profile, dashboard and notebooks build
- ``bench``       the benchmark command
- ``dashboard``   the Panel app (the repository's ``dashboard/`` folder)
"""
from slimgraph import config  # noqa: F401  (registers dask config defaults)

__version__ = "0.1.0"
