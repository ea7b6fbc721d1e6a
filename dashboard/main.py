"""``panel serve dashboard``: the slimgraph dashboard (one app per session)."""
import os
import sys

_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _root not in sys.path:  # so ``dashboard`` imports as a package
    sys.path.insert(0, _root)

import panel as pn  # noqa: E402

from dashboard.app import build  # noqa: E402

pn.extension()
build().servable(title="slimgraph dashboard")
