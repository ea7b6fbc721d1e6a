"""``panel serve dashboard`` from a checkout: the app is the package
``slimgraph.dashboard`` (core/slimgraph/dashboard/), run afresh for each
browser session as Panel runs a served script."""
import runpy

runpy.run_module("slimgraph.dashboard.main", run_name="slimgraph_dashboard_session")
