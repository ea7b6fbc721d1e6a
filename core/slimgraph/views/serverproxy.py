"""The JupyterLab launcher tile: a ``jupyter_serverproxy_servers`` entry point.

jupyter-server-proxy calls :func:`serverproxy` and, when the tile is
clicked, runs its command: ``panel serve`` of the installed Panel app
(package :mod:`slimgraph.dashboard`) on a port it picks, under the Jupyter
server's base URL. The app starts its own LocalClusters unless the
environment variable ``SLIMGRAPH_SCHEDULER`` names a scheduler to read.
"""
from __future__ import annotations

import sys
from pathlib import Path


def app_dir() -> Path:
    """The installed Panel app's directory (``panel serve`` wants the
    directory holding ``main.py``); importing the package imports no Panel."""
    import slimgraph.dashboard

    return Path(slimgraph.dashboard.__file__).resolve().parent


def serverproxy() -> dict:
    """``jupyter_serverproxy_servers`` entry point: ``panel serve`` the app."""
    directory = app_dir()
    icon = directory / "icon.svg"
    return {
        "command": [
            sys.executable, "-m", "panel", "serve", str(directory),
            "--port", "{port}",
            "--allow-websocket-origin", "*",
            "--prefix", "{base_url}slimgraph",
        ],  # fmt: skip
        "absolute_url": True,
        "timeout": 120,
        "launcher_entry": {
            "title": "slimgraph dashboard",
            "icon_path": str(icon) if icon.exists() else "",
            # panel serve serves DIR/main.py at /<name of DIR>
            "path_info": f"slimgraph/{directory.name}",
        },
    }
