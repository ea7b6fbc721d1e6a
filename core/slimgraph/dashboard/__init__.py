"""slimgraph's Panel dashboard, installed as the package ``slimgraph.dashboard``.

- ``main.py``     the ``panel serve`` entry (one app per browser session):
                  ``panel serve dashboard`` from a checkout, or ``panel serve``
                  of this package's directory (:func:`slimgraph.views.serverproxy.app_dir`)
- ``app.py``      the app: workload launcher + live views; ``show_in_notebook()``
- ``clusters.py`` stock/slim engines as scheduler + worker processes, or ``SLIMGRAPH_SCHEDULER``
- ``watchdog.py`` preload of those schedulers: exit when the app is gone
- ``poller.py``   one shared poller per process (snapshot read by every session), jobs' bars
- ``jobs.py``     one submission to one or both engines (a thread each), cancel, memray
- ``summary.py``  per-job figures, stock/slim ratios, the strip and the history rows
- ``launch.py``   ``slimgraph dashboard``: serve on :5006 with the engine processes

The workloads are :mod:`slimgraph.workloads`; the views themselves (Bokeh, no
Panel), the feeds they read and the scheduler-dashboard tab are
:mod:`slimgraph.views` and :mod:`slimgraph.instrument.feed`. Importing this
package imports no Panel (the JupyterLab tile only looks up its directory).
"""
