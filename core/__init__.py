"""slimgraph: a slim, measured update_graph for dask.distributed.

Layout (one module per concept):

- ``taskstate``   the slim, slotted TaskState with lazily allocated containers
- ``containers``  the copy-on-write edge containers those task states hold
- ``keys``        key interning and per-name task group/prefix names
- ``ingest``      update_graph as explicit, timed phases (pure state in, state out)
- ``state``       SlimSchedulerState: distributed's SchedulerState on the slim parts
- ``order``       fast ordering, value for value equal to dask.order.order
- ``phases``      phase and submission records shared by stock and slim
- ``instrument``  measuring stock and slim schedulers (phases, memory, memray)
- ``distributed`` the drop-in: preload module, SlimScheduler, install()
- ``bench``       the benchmark command's workloads and runner
"""
from slimgraph import config  # noqa: F401  (registers dask config defaults)

__version__ = "0.1.0"
