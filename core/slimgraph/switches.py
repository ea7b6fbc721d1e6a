"""Engine switches: what the benchmark and the tests turn off or retune to
measure an effect. They are not user settings.

A user's settings are few (``slimgraph.yaml`` beside :mod:`slimgraph.config`,
docs/settings.md). Most of the engine's mechanisms can also be turned off,
or their thresholds moved, so that their effect can be measured against the
engine without them (lazy containers against eager sets, compact ingestion
against dask's materialization, a staged ingestion against one on the loop)
and so that a test can reach a path the defaults avoid (a small graph
offloaded to a thread, a commit paced three messages at a time). Those
switches live here: the defaults below are the engine as shipped, and
nothing but the benchmark (``python -m slimgraph bench --without NAME``,
``--switch NAME=VALUE``), the tests, the dashboard's and notebooks'
comparisons of lazy and eager containers set them.

They are read through dask's config system under a namespace of their own,
``slimgraph-switches``, which is kept out of the user's settings file and
whose defaults are not registered with dask (``dask config list`` does not
show them): :func:`get` falls back to :data:`DEFAULTS`. A switch reaches a
process the benchmark starts (a scheduler, a child replaying a submission)
as an environment variable, ``DASK_SLIMGRAPH_SWITCHES__LAZY_CONTAINERS=False``
(:func:`environ`), which dask reads at import like any other; in the
process itself, :func:`set` is ``dask.config.set`` with the names checked.
An engine module reads a switch with ``switches.get("name")`` where it
would read a setting, so setting it behaves exactly as the old setting of
the same name did.
"""
from __future__ import annotations

from typing import Any, Mapping

import dask.config

NAMESPACE = "slimgraph-switches"

#: Each switch and its default: the engine as shipped. The reason for each
#: default is in docs/design.md, the measurements in benchmarks/LOG.md.
DEFAULTS: dict[str, Any] = {
    # a task's containers allocated only when they hold something, compact
    # and copy-on-write (slimgraph.model.containers); False: sets, as stock
    "lazy-containers": True,
    # materialize as a compact graph, no dask node per task until a run_spec
    # is read (slimgraph.ingest.compact); False: dask's _materialize_graph
    "compact-ingestion": True,
    # gc "auto" freezes after ingestions of at least this many new tasks
    # (slimgraph.runtime.gcpolicy)
    "gc-freeze-tasks": 30000,
    # while frozen, a full collection that follows one longer than this
    # freezes first (slimgraph.runtime.gcpause)
    "gc-full-max": "50ms",
    # build off the event loop and publish in one commit
    # (slimgraph.ingest.pipeline); False: ingest on the loop, as stock
    "staging": True,
    # send a staged commit's ready tasks in bulk (slimgraph.ingest.dispatch);
    # False: distributed's transitions one by one
    "bulk-dispatch": True,
    # a commit's messages to one worker beyond this many go in slices of
    # this many (slimgraph.ingest.pacing); 0: all at once
    "pace-messages": 500,
    # a commit with at least dispatch-slice-min-tasks ready tasks sends them
    # in slices of about this long (slimgraph.ingest.tail); 0: in the commit
    "dispatch-slice": "40ms",
    "dispatch-slice-min-tasks": 10000,
    # below these, a submission is deserialized (bytes) and ingested (tasks)
    # on the event loop, as stock (slimgraph.ingest.pipeline)
    "offload-min-bytes": 262144,
    "offload-min-tasks": 2000,
    # GIL switch interval while an ingestion is in flight
    # (slimgraph.runtime.switching); None: Python's own
    "switch-interval": 0.0005,
    # give a big ingestion's freed heap back to the OS
    # (slimgraph.runtime.disposal); False: keep it mapped, as stock
    "trim-heap": True,
}

#: The value that turns each switch's mechanism off (``bench --without
#: NAME``); for a minimum, no minimum (every submission offloaded, every
#: commit's ready tasks sliced). The collector's thresholds
#: (``gc-freeze-tasks``, ``gc-full-max``) have no such value and are set
#: with ``--switch NAME=VALUE``.
OFF: dict[str, Any] = {
    "lazy-containers": False,
    "compact-ingestion": False,
    "staging": False,
    "bulk-dispatch": False,
    "pace-messages": 0,
    "dispatch-slice": 0,
    "dispatch-slice-min-tasks": 0,
    "offload-min-bytes": 0,
    "offload-min-tasks": 0,
    "switch-interval": None,
    "trim-heap": False,
}


def _name(name: str) -> str:
    name = name.replace("_", "-")
    if name not in DEFAULTS:
        raise KeyError(f"no engine switch {name!r}; the switches are {sorted(DEFAULTS)}")
    return name


def get(name: str) -> Any:
    """The value of switch ``name`` (its default unless set)."""
    name = _name(name)
    return dask.config.get(f"{NAMESPACE}.{name}", default=DEFAULTS[name])


def current() -> dict[str, Any]:
    """Every switch and its value in this process."""
    return {name: get(name) for name in DEFAULTS}


def changed() -> dict[str, Any]:
    """The switches whose value differs from the default in this process."""
    return {name: v for name, v in current().items() if v != DEFAULTS[name]}


def _values(values: Mapping[str, Any] | None, kw: dict) -> dict[str, Any]:
    out = {_name(k): v for k, v in (values or {}).items()}
    out.update((_name(k), v) for k, v in kw.items())
    return out


def set(values: Mapping[str, Any] | None = None, **kw: Any) -> dask.config.set:
    """``dask.config.set`` of switches, by name (``staging`` or, as a
    keyword, ``offload_min_tasks``): a context manager, or process-wide when
    not used as one. An unknown name raises ``KeyError``."""
    return dask.config.set({f"{NAMESPACE}.{k}": v for k, v in _values(values, kw).items()})


def environ(values: Mapping[str, Any]) -> dict[str, str]:
    """The environment variables that set ``values`` in a process started
    with them (dask parses each value with ``ast.literal_eval``, hence the
    ``repr``)."""
    prefix = "DASK_" + NAMESPACE.upper().replace("-", "_") + "__"
    return {prefix + k.upper().replace("-", "_"): repr(v) for k, v in _values(values, {}).items()}


def parse(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` (as ``bench --switch`` takes it) to a name and a value,
    the value read as dask reads an environment variable's: a Python literal
    (``False``, ``0``, ``None``), else the text (``0.1ms``)."""
    import ast

    name, sep, raw = text.partition("=")
    if not sep:
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw
    return _name(name.strip()), value
