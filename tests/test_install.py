"""slimgraph as an installed package, not only as a checkout.

- nothing in the repository edits ``sys.path``: the app, the notebooks and
  the tests import the installed package;
- a wheel built from the sources, installed (not editable) into a fresh
  virtualenv, gives a working ``slimgraph dashboard`` command, ``panel
  serve`` of the installed app, and the JupyterLab launcher tile's entry
  point, all run outside the checkout.

The fresh virtualenv gets slimgraph from the wheel only; its dependencies
(dask, distributed, panel, ...) are this environment's, made visible by a
``.pth`` line (installing them again would download the world and take
minutes; what is under test is slimgraph's packaging). That line adds the
directory without processing its ``.pth`` files, so this environment's
editable slimgraph is not importable there.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest
from subprocs import Proc, dask_scheduler, free_port, get, wait_http

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".venv", ".git", "build", "dist", "test-artifacts", "__pycache__",
             ".ipynb_checkpoints", ".pytest_cache", ".hypothesis", "dask-scratch-space",
             "node_modules"}  # fmt: skip (node_modules: jupyterlab/'s build tools, if installed)


def _sources(suffixes: tuple[str, ...]):
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [
            d for d in dirnames
            if d not in SKIP_DIRS and not d.endswith(".egg-info") and not d.startswith(".venv-")
        ]  # (.venv-<release>: .ci/against-release)
        for name in filenames:
            if name.endswith(suffixes):
                yield Path(dirpath, name)


def test_no_sys_path_edits_anywhere():
    edit = re.compile(r"sys\.path\s*(\.\s*(insert|append|extend)|\[|\+?=)|site\.addsitedir")
    found = []
    for path in _sources((".py", ".ipynb")):
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if edit.search(line):
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "sys.path edits:\n" + "\n".join(found)


def _copy_sources(dest: Path) -> Path:
    def ignore(directory, names):
        return [n for n in names if n in SKIP_DIRS or n.endswith(".egg-info") or n.startswith(".venv-")]

    shutil.copytree(ROOT, dest, ignore=ignore)
    return dest


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    """A new virtualenv with slimgraph installed from a wheel (not editable)."""
    tmp = tmp_path_factory.mktemp("install")
    src = _copy_sources(tmp / "src")
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist),
                    str(src)], check=True, cwd=tmp, capture_output=True, timeout=600)  # fmt: skip
    (wheel,) = dist.glob("slimgraph-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    # this environment's dependencies, after the venv's own site-packages
    Path(purelib, "_slimgraph_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([py, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    return venv


def _venv_json(venv: Path, code: str, cwd: Path) -> dict:
    p = subprocess.run([venv / "bin" / "python", "-c", textwrap.dedent(code)], cwd=cwd,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.install
def test_wheel_installs_the_package_the_app_and_the_tile(fresh_venv, tmp_path):
    out = _venv_json(fresh_venv, """
        import json, os
        from importlib.metadata import distribution, entry_points
        import slimgraph, slimgraph.dashboard
        from slimgraph.views import serverproxy

        (ep,) = [e for e in entry_points(group="jupyter_serverproxy_servers") if e.name == "slimgraph"]
        tile = ep.load()()
        app = os.path.dirname(slimgraph.dashboard.__file__)
        print(json.dumps({
            "slimgraph": slimgraph.__file__, "app": app,
            "app_files": sorted(os.listdir(app)),
            "tile_is_ours": ep.load() is serverproxy.serverproxy,
            "command": tile["command"], "icon": tile["launcher_entry"]["icon_path"],
            "path_info": tile["launcher_entry"]["path_info"],
            "dist": str(distribution("slimgraph").locate_file("")),
        }))
    """, cwd=tmp_path)
    site = str(fresh_venv)
    assert out["slimgraph"].startswith(site) and out["app"].startswith(site), out
    assert {"main.py", "app.py", "clusters.py", "jobs.py", "launch.py", "icon.svg"} <= set(out["app_files"])
    assert out["tile_is_ours"] and out["dist"].startswith(site)
    assert out["command"][1:4] == ["-m", "panel", "serve"] and out["command"][4] == out["app"]
    assert out["command"][0].startswith(site)  # the venv's python runs the app
    assert out["icon"] == os.path.join(out["app"], "icon.svg")
    assert out["path_info"] == "slimgraph/dashboard"


@pytest.mark.install
def test_the_wheel_brings_the_prebuilt_jupyterlab_extension(fresh_venv, tmp_path):
    """``pip install`` of the wheel, with no Node.js anywhere on PATH: JupyterLab
    lists slimgraph's extension as enabled and OK among the prebuilt ones
    of the virtualenv, and the server extension is enabled there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "VIRTUAL_ENV"))}
    env["PATH"] = str(fresh_venv / "bin")
    assert shutil.which("node", path=env["PATH"]) is None
    py = str(fresh_venv / "bin" / "python")

    def run(*args: str) -> str:
        p = subprocess.run([py, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                           env=env)  # fmt: skip
        assert p.returncode == 0, p.stdout + p.stderr
        return re.sub(r"\x1b\[[0-9;]*m", "", p.stdout + p.stderr)

    listing = run("-m", "jupyterlab.labextensions", "list")
    labext = fresh_venv / "share" / "jupyter" / "labextensions"
    section = listing.split(str(labext), 1)
    assert len(section) == 2, listing
    lines = section[1].split("\n\n")[0]
    assert re.search(r"^\s+slimgraph v0\.1\.0 enabled OK \(python, slimgraph\)$", lines, re.M), listing
    assert not (labext / "slimgraph").is_symlink()  # files of the wheel, not a link to a checkout
    pkg = json.loads((labext / "slimgraph" / "package.json").read_text())
    assert (labext / "slimgraph" / pkg["jupyterlab"]["_build"]["load"]).is_file()
    servers = run("-m", "jupyter_server", "extension", "list")
    assert re.search(r"slimgraph\.jupyter\s+enabled", servers), servers
    assert re.search(r"slimgraph\.jupyter\s+OK", servers), servers
    assert (fresh_venv / "etc" / "jupyter" / "jupyter_server_config.d" / "slimgraph.json").is_file()


@pytest.mark.install
def test_the_wheel_names_the_pythons_it_admits(fresh_venv, tmp_path):
    """The wheel's ``Programming Language :: Python :: 3.X`` classifiers are
    exactly the Pythons its ``Requires-Python`` admits (the ones CI runs),
    and this interpreter is one of them."""
    from packaging.specifiers import SpecifierSet

    out = _venv_json(fresh_venv, """
        import json
        from importlib.metadata import metadata
        md = metadata("slimgraph")
        print(json.dumps({"requires": md["Requires-Python"], "classifiers": md.get_all("Classifier")}))
    """, cwd=tmp_path)
    spec = SpecifierSet(out["requires"])
    admitted = [f"3.{n}" for n in range(0, 40) if f"3.{n}" in spec]
    version = re.compile(r"Programming Language :: Python :: (3\.\d+)")
    named = [m.group(1) for m in map(version.fullmatch, out["classifiers"]) if m]
    assert named == admitted and len(admitted) >= 4, out
    assert "%d.%d" % sys.version_info[:2] in admitted


@pytest.mark.install
@pytest.mark.cluster
def test_installed_slimgraph_dashboard_serves_the_app(fresh_venv, tmp_path):
    """The README's main job, ``slimgraph dashboard``, from the installed
    package (embedded stock and slim LocalClusters, one worker each)."""
    port = free_port()
    app = Proc("slimgraph-dashboard", [str(fresh_venv / "bin" / "slimgraph"), "dashboard",
                                       "--port", str(port), "--workers", "1"],
               tmp_path, cwd=tmp_path)  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/dashboard", proc=app, timeout=120)
        code, body = get(f"http://127.0.0.1:{port}/dashboard")
        assert code == 200 and b"slimgraph dashboard" in body
        served = app.log.read_text(errors="replace")  # (not what stopping it logs)
    finally:
        app.stop()
    assert "Traceback" not in served, served


@pytest.mark.install
@pytest.mark.cluster
def test_panel_serve_of_the_installed_app(fresh_venv, tmp_path):
    """``panel serve`` of the installed app's directory (what the JupyterLab
    tile runs), reading a scheduler named by SLIMGRAPH_SCHEDULER."""
    app_dir = _venv_json(fresh_venv, """
        import json, os, slimgraph.dashboard
        print(json.dumps(os.path.dirname(slimgraph.dashboard.__file__)))
    """, cwd=tmp_path)
    port = free_port()
    with dask_scheduler(tmp_path) as (address, _, sched):
        app = Proc("panel-serve-installed", [
            str(fresh_venv / "bin" / "python"), "-m", "panel", "serve", app_dir,
            "--address", "127.0.0.1", "--port", str(port),
            "--allow-websocket-origin", f"127.0.0.1:{port}",
        ], tmp_path, env={"SLIMGRAPH_SCHEDULER": address}, cwd=tmp_path)  # fmt: skip
        try:
            wait_http(f"http://127.0.0.1:{port}/dashboard", proc=app, timeout=120)
            code, body = get(f"http://127.0.0.1:{port}/dashboard")
            assert code == 200 and b"slimgraph dashboard" in body
            served = app.log.read_text(errors="replace")
        finally:
            app.stop()
    assert "Traceback" not in served, served
