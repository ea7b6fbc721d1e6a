"""A user's settings against the engine's switches (slimgraph.switches).

The user's settings file holds only what a user may need to choose; every
switch that exists to measure a mechanism lives in ``slimgraph.switches``,
is read by the engine through ``switches.get``, and reaches the processes
the benchmark starts when ``bench --without`` / ``--switch`` set it.
"""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import dask.config
import pytest
import yaml

from slimgraph import config, switches
from slimgraph.bench import runner

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "core" / "slimgraph"

#: The settings a user needs (docs/settings.md gives each one's reason).
USER_SETTINGS = ["gc", "offload-threads", "background-rest", "ordering", "history-length",
                 "stack-snapshots", "versions"]


def _table_keys(text: str, prefix: str) -> list:
    return re.findall(r"^\| `" + re.escape(prefix) + r"([a-z-]+)`", text, re.M)


def test_the_user_settings_file_lists_only_the_user_settings():
    with open(PACKAGE / "slimgraph.yaml") as f:
        keys = list(yaml.safe_load(f)["slimgraph"])
    assert keys == USER_SETTINGS
    assert not set(keys) & set(switches.DEFAULTS)
    # docs/settings.md: every key of the file, in its order, and no other
    settings_md = (ROOT / "docs" / "settings.md").read_text()
    assert _table_keys(settings_md, "slimgraph.") == keys
    # the README's short table: some of them, no switch
    readme = (ROOT / "README.md").read_text()
    shown = _table_keys(readme, "slimgraph.")
    assert shown and set(shown) <= set(keys)
    # the switches' table in docs/benchmarks.md: every switch, and no setting
    bench_md = (ROOT / "docs" / "benchmarks.md").read_text()
    section = bench_md[bench_md.index("## Engine switches"):]
    assert sorted(_table_keys(section, "")) == sorted(switches.DEFAULTS)
    # dask's config shows the settings, not the switches
    assert set(dask.config.get("slimgraph")) == set(keys)
    assert not dask.config.get(switches.NAMESPACE, default=None)


def test_settings_and_switches_refuse_each_others_names():
    for name in switches.DEFAULTS:
        with pytest.raises(KeyError):
            config.get(name)
    for name in USER_SETTINGS:
        with pytest.raises(KeyError):
            switches.get(name)
    with pytest.raises(KeyError):
        switches.set(stagign=False)
    assert set(switches.OFF) <= set(switches.DEFAULTS)
    assert all(switches.OFF[k] != switches.DEFAULTS[k] for k in switches.OFF)


def test_every_switch_is_read_by_the_engine_through_switches_get():
    """Each switch has a reader in the engine (the bench's own modules and
    switches.py aside), and no engine module reads one as a user setting."""
    readers: dict = {name: [] for name in switches.DEFAULTS}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "switches.py" or rel.startswith("bench/"):
            continue
        text = path.read_text()
        for name in switches.DEFAULTS:
            if f'switches.get("{name}")' in text:
                readers[name].append(rel)
            assert f'config.get("{name}")' not in text, (rel, name)
            assert f'"slimgraph.{name}"' not in text, (rel, name)
    assert all(readers.values()), {k: v for k, v in readers.items() if not v}


def test_the_bench_flags_reach_every_process_it_starts(monkeypatch):
    """``--without`` every switch that has an off value and ``--switch`` the
    others: a process started afterwards (as the bench starts its children,
    schedulers and workers) reads every one, and a slim scheduler built
    there has eager containers."""
    values = runner.switch_values(sorted(switches.OFF), ["gc-freeze-tasks=123", "gc-full-max=7ms"])
    expected = {**switches.DEFAULTS, **values}
    assert all(expected[k] != switches.DEFAULTS[k] for k in switches.DEFAULTS)
    for var in switches.environ(values):
        monkeypatch.setenv(var, "")  # undone after the test, like apply_switches' own
    saved = copy.deepcopy(dask.config.config)
    try:
        runner.apply_switches(values)
        assert switches.current() == expected
        script = (
            "import asyncio, json\n"
            "from slimgraph import switches\n"
            "from slimgraph.distributed import SlimScheduler\n"
            "async def main():\n"
            "    async with SlimScheduler(dashboard_address=None, dashboard=False, host='127.0.0.1') as s:\n"
            "        return s.slim_lazy\n"
            "print(json.dumps({'switches': switches.current(), 'lazy': asyncio.run(main())}))\n"
        )
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ))  # fmt: skip
    finally:
        dask.config.config.clear()
        dask.config.config.update(saved)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["switches"] == expected
    assert seen["lazy"] is False
    assert switches.current() == switches.DEFAULTS  # this process's config restored


def test_the_bench_refuses_a_switch_it_does_not_know(capsys):
    for argv in (["--switch", "stagign=False"], ["--switch", "staging"], ["--without", "gc-full-max"],
                 ["--without", "history-length"]):
        with pytest.raises(SystemExit):
            runner.main(argv)
    assert "stagign" in capsys.readouterr().err


def test_a_former_setting_or_a_typo_under_slimgraph_is_warned_of_at_a_slim_scheduler(monkeypatch):
    """A user who still sets ``slimgraph.staging`` (a setting before the
    switches moved to their own namespace) or misspells a setting is told,
    once, that the key changes nothing: as a SlimScheduler is made and as
    ``make_slim`` takes a stock one over (the preload)."""
    import asyncio
    import warnings

    from distributed import Scheduler

    from slimgraph.distributed import SlimScheduler, make_slim

    monkeypatch.setattr(config, "_warned", set())

    async def made(make) -> list:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            async with make() as s:
                assert isinstance(s, SlimScheduler)
        return [str(w.message) for w in caught if "slimgraph." in str(w.message)]

    async def stock_made_slim():
        s = Scheduler(dashboard_address=None, dashboard=False, host="127.0.0.1")
        make_slim(s)
        return s

    class _Preloaded:
        def __init__(self):
            self.s = None

        async def __aenter__(self):
            self.s = await stock_made_slim()
            await self.s
            return self.s

        async def __aexit__(self, *exc):
            await self.s.close()

    with dask.config.set({"slimgraph.staging": False, "slimgraph.backgroud-rest": 0.0,
                          "slimgraph.gc": "auto"}):
        first = asyncio.run(made(lambda: SlimScheduler(dashboard_address=None, dashboard=False,
                                                       host="127.0.0.1")))
        again = asyncio.run(made(lambda: SlimScheduler(dashboard_address=None, dashboard=False,
                                                       host="127.0.0.1")))
    assert len(first) == 2, first
    staging = next(m for m in first if "slimgraph.staging" in m)
    assert "slimgraph-switches.staging" in staging and "ignored" in staging
    typo = next(m for m in first if "backgroud-rest" in m)
    assert "not a slimgraph setting" in typo and "background-rest" in typo
    assert again == []  # once per name
    monkeypatch.setattr(config, "_warned", set())
    with dask.config.set({"slimgraph.trim-heap": False}):
        preloaded = asyncio.run(made(_Preloaded))
    assert len(preloaded) == 1 and "slimgraph-switches.trim-heap" in preloaded[0], preloaded
    # a user's real settings are no warning
    monkeypatch.setattr(config, "_warned", set())
    assert config.warn_unknown() == []
