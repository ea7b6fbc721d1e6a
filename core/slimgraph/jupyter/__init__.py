"""slimgraph in JupyterLab: the server half of slimgraph's own extension.

The browser half is the prebuilt labextension (TypeScript in the
repository's ``jupyterlab/`` folder, built into ``slimgraph/labextension/``
and installed to ``share/jupyter/labextensions/slimgraph``): a sidebar with
the latest submission's figures and slimgraph's views in main-area panes.
Everything it shows comes from here, under ``<base_url>slimgraph-lab/api/``:

- ``schedulers.py`` which schedulers to show (the engines of a running
  ``slimgraph dashboard``, ``SLIMGRAPH_SCHEDULER``, addresses and dashboard
  URLs entered in the sidebar, dask-labextension's clusters and configured
  dashboard) and one asynchronous Client per scheduler on the server's loop;
- ``summary.py``    a scheduler's figures, read through its ``slimgraph_*``
  handlers (:class:`slimgraph.instrument.feed.RemoteFeed`, the one remote
  surface) and turned into the dashboard's own figures
  (:func:`slimgraph.dashboard.summary.engine_figures`); never scraped
  from pages;
- ``handlers.py``   the jupyter_server handlers.

The server extension is enabled by the ``jupyter_server_config.d`` file the
package installs (``etc/jupyter/jupyter_server_config.d/slimgraph.json``);
importing this module imports neither distributed nor tornado's handlers.
"""
from __future__ import annotations

from typing import Any

#: the extension's URL prefix under the server's base URL (``/slimgraph`` is
#: the launcher tile's app, served by jupyter-server-proxy)
URL_PREFIX = "slimgraph-lab"


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": "slimgraph.jupyter"}]


def _jupyter_labextension_paths() -> list[dict]:
    """Where the prebuilt labextension is, for ``jupyter labextension develop``
    (an installed package has it in ``share/jupyter/labextensions/slimgraph``)."""
    return [{"src": "labextension", "dest": "slimgraph"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    from slimgraph.jupyter.handlers import setup_handlers

    setup_handlers(server_app)
    server_app.log.info("slimgraph: JupyterLab server extension loaded at /%s/api", URL_PREFIX)
