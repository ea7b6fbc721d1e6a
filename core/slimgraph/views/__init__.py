"""What the dashboard shows, without Panel: Bokeh figures fed by feeds.

- :mod:`.palette`      colours: one per engine, one fixed colour (and hatch)
  per update_graph phase, used by every figure
- :mod:`.transforms`   pure functions: records, memory trees and censuses to
  plot columns (timing rows, the icicle layout, the lazy-container summary)
- :mod:`.figures`      one class per Bokeh figure, each with a named data
  source; :class:`~.figures.Views` holds and lays them out
- :mod:`.refresher`    moves data from feeds
  (:mod:`slimgraph.instrument.feed`) into the figures without blocking a
  scheduler's loop
- :mod:`.tab`          the "slimgraph" tab and ``individual-slimgraph-*``
  pages of a scheduler's own dashboard (an explicit call, :func:`~.tab.add_pages`)
- :mod:`.notebook`     tables and figures for notebooks
- :mod:`.serverproxy`  the JupyterLab launcher tile (entry point)

The Panel app itself (launcher, sessions, the engine processes) is the package
:mod:`slimgraph.dashboard`. Nothing here imports Panel, and importing any of
these modules changes nothing outside it.
"""
