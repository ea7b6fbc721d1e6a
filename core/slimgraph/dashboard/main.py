"""``panel serve``: the slimgraph dashboard (one app per browser session).

Served from a checkout (``panel serve dashboard``) or from the installed
package's directory; either way the app is the installed package
``slimgraph.dashboard``.
"""
import panel as pn

from slimgraph.dashboard.app import build

pn.extension("tabulator")  # the job history table needs its resources
build().servable(title="slimgraph dashboard")
