"""Measuring stock and slim schedulers: phases, memory, lazy containers, memray.

- :mod:`.recorder`  the ``scheduler.extensions["slimgraph"]`` extension,
  :func:`get_history` (stock and slim); its ``slimgraph_*`` handlers are
  the only scheduler-side surface of everything below
- :mod:`.stock`     phase records for an unmodified stock scheduler
  (:class:`StockRecorderPlugin`, :func:`install`)
- :mod:`.loopmon`   event-loop block monitor
- :mod:`.memory`    per-object memory tree of the live scheduler state
- :mod:`.lazysets`  lazy-container census and time series
- :mod:`.memray_capture`  memray capture of one update_graph
- :mod:`.feed`      one way to read a scheduler: in process (on its loop) or
  through a Client, both through the extension's handlers
- :mod:`.client`    the same as plain functions of a ``Client``
"""
from slimgraph.instrument.recorder import (  # noqa: F401
    SlimgraphExtension,
    get_extension,
    get_history,
)
from slimgraph.instrument.stock_recorder import StockRecorderPlugin, install, uninstall  # noqa: F401
