"""A user's settings, through dask's config system.

Defaults live in ``slimgraph.yaml`` beside this module and are merged into
``dask.config`` under the ``slimgraph`` namespace on import, so the usual
``DASK_SLIMGRAPH__GC=pause`` environment variables, YAML files in
``~/.config/dask`` and ``dask.config.set`` all work. Only what a user may
need to choose is here (docs/settings.md); the switches that turn the
engine's mechanisms off to measure them are :mod:`slimgraph.switches`'s,
and :func:`get` refuses their names.
"""
from __future__ import annotations

import os
import warnings

import dask.config
import yaml

_FN = os.path.join(os.path.dirname(__file__), "slimgraph.yaml")

with open(_FN) as f:
    defaults = yaml.safe_load(f)

dask.config.update_defaults(defaults)

GC_POLICIES = ("auto", "pause", "freeze", "stock")
ORDERINGS = ("fast", "dask")
VERSION_POLICIES = ("refuse", "warn")
SNAPSHOT_POLICIES = ("safe", "always")


def get(name: str):
    """Read ``slimgraph.<name>`` and validate the closed-choice settings.

    Falls back to the packaged default when the key is missing: tools such
    as distributed's test fixtures replace ``dask.config.config`` with a copy
    taken before slimgraph registered its defaults. A name that is no
    setting (an engine switch, say) raises ``KeyError``.
    """
    if name not in defaults["slimgraph"]:
        raise KeyError(f"no slimgraph setting {name!r} (the engine's switches are slimgraph.switches')")
    value = dask.config.get(f"slimgraph.{name}", default=defaults["slimgraph"][name])
    if name == "gc" and value not in GC_POLICIES:
        raise ValueError(f"slimgraph.gc must be one of {GC_POLICIES}, got {value!r}")
    if name == "ordering" and value not in ORDERINGS:
        raise ValueError(f"slimgraph.ordering must be one of {ORDERINGS}, got {value!r}")
    if name == "versions" and value not in VERSION_POLICIES:
        raise ValueError(f"slimgraph.versions must be one of {VERSION_POLICIES}, got {value!r}")
    if name == "stack-snapshots" and value not in SNAPSHOT_POLICIES:
        raise ValueError(f"slimgraph.stack-snapshots must be one of {SNAPSHOT_POLICIES}, got {value!r}")
    return value


def warn_unknown() -> list:
    """Warn (once per name and process) of keys under ``slimgraph`` that
    are no setting: a former setting that is now an engine switch (set
    before the switches moved out, e.g. ``DASK_SLIMGRAPH__STAGING=False``)
    or a typo. Such a key changes nothing, which a user should hear rather
    than find out. Returns the names warned of now."""
    from slimgraph import switches

    given = dask.config.get("slimgraph", default={}) or {}
    known = defaults["slimgraph"]
    out = []
    for name in given:
        canon = name.replace("_", "-") if isinstance(name, str) else name
        if canon in known or canon in _warned:
            continue
        _warned.add(canon)
        out.append(canon)
        if canon in switches.DEFAULTS:
            msg = (f"slimgraph.{canon} is no longer a setting and is ignored: it is an engine "
                   f"switch for measuring, {switches.NAMESPACE}.{canon} "
                   f"(python -m slimgraph bench --switch {canon}=VALUE; docs/settings.md)")
        else:
            msg = (f"slimgraph.{canon} is not a slimgraph setting and is ignored "
                   f"(the settings: {', '.join(known)}; docs/settings.md)")
        warnings.warn(msg, UserWarning, stacklevel=2)
    return out


_warned: set = set()
