"""slimgraph's Panel dashboard (``panel serve dashboard``).

- ``main.py``     the ``panel serve`` entry (one app per browser session)
- ``app.py``      the app: workload launcher + live views; ``show_in_notebook()``
- ``clusters.py`` embedded stock/slim LocalClusters, or ``SLIMGRAPH_SCHEDULER``
- ``jobs.py``     one submission (thread), progress, cancel, memray capture
- ``workloads.py`` array / dataframe / delayed / bag graphs of a given size
- ``launch.py``   ``slimgraph dashboard``: serve on :5006 with embedded clusters

The views themselves (Bokeh, no Panel) and the scheduler-dashboard tab live
in :mod:`slimgraph.dashboard_tab`.
"""
