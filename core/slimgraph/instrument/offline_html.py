"""memray's HTML reports made self-contained, so they work offline.

Why: ``memray flamegraph`` writes a page that loads d3, d3-flame-graph,
bootstrap, jQuery, lodash and plotly from CDNs (jsdelivr, datatables.net).
Opened where there is no internet (a cluster's login node, a plane, this
project's CI), it is an unstyled page without a flamegraph. memray's wheel
carries the same libraries in ``memray/reporters/templates/assets/vendor``,
unused by its templates.

What: :func:`self_contained` replaces each ``<script src="https://...">``
and stylesheet ``<link href="https://...">`` whose file name one of those
vendored files has with the file's contents, inline; :func:`remote_assets`
lists what still points at the network (empty when it worked). The page is
otherwise memray's, byte for byte.
"""
from __future__ import annotations

import re
from pathlib import Path

__all__ = ["remote_assets", "self_contained", "vendored_assets"]

_SCRIPT = re.compile(r'<script\s+src="(https?://[^"]+)"\s*>\s*</script>')
_STYLE = re.compile(r'<link\s+rel="stylesheet"\s+href="(https?://[^"]+)"\s*/?>')


def vendored_assets() -> dict[str, Path]:
    """``{file name: path}`` of the libraries memray ships (empty if none)."""
    try:
        import memray.reporters.templates as templates
    except ImportError:  # pragma: no cover - memray is a dependency
        return {}
    vendor = Path(templates.__file__).parent / "assets" / "vendor"
    return {p.name: p for p in vendor.glob("*.*")} if vendor.is_dir() else {}


def _name(url: str) -> str:
    return url.rsplit("/", 1)[-1].split("?", 1)[0]


def self_contained(html: str, assets: dict[str, Path] | None = None) -> str:
    """``html`` with every CDN script and stylesheet that has a vendored
    copy inlined."""
    assets = vendored_assets() if assets is None else assets

    def inliner(tag: str, suffix: str):
        def inline(m: re.Match) -> str:
            path = assets.get(_name(m.group(1)))
            if path is None or not path.name.endswith(suffix):
                return m.group(0)
            # (a literal closing tag inside would end the element early)
            body = path.read_text(encoding="utf-8").replace(f"</{tag}", f"<\\/{tag}")
            return f"<{tag}>/* {path.name}, inlined from memray's vendored copy */\n{body}\n</{tag}>"

        return inline

    return _STYLE.sub(inliner("style", ".css"), _SCRIPT.sub(inliner("script", ".js"), html))


def remote_assets(html: str) -> list[str]:
    """The scripts and stylesheets ``html`` still loads from the network."""
    return [m.group(1) for m in _SCRIPT.finditer(html)] + [m.group(1) for m in _STYLE.finditer(html)]
