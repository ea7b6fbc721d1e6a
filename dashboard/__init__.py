"""slimgraph's Panel dashboard, installed as the package ``slimgraph.dashboard``.

- ``main.py``     the ``panel serve`` entry (one app per browser session):
                  ``panel serve dashboard`` from a checkout, or ``panel serve``
                  of this package's directory (:func:`slimgraph.views.serverproxy.app_dir`)
- ``app.py``      the app: workload launcher + live views; ``show_in_notebook()``
- ``clusters.py`` embedded stock/slim LocalClusters, or ``SLIMGRAPH_SCHEDULER``
- ``jobs.py``     one submission (thread), progress, cancel, memray capture
- ``launch.py``   ``slimgraph dashboard``: serve on :5006 with embedded clusters

The workloads are :mod:`slimgraph.workloads`; the views themselves (Bokeh, no
Panel), the feeds they read and the scheduler-dashboard tab are
:mod:`slimgraph.views` and :mod:`slimgraph.instrument.feed`. Importing this
package imports no Panel (the JupyterLab tile only looks up its directory).
"""
