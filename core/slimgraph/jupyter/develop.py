"""Register the extension for an editable install: ``python -m slimgraph.jupyter.develop``.

A wheel (``pip install .``) carries the prebuilt labextension and the
server extension's config as data files (``pyproject.toml``,
``[tool.setuptools.data-files]``). An editable install (``pip install -e
.``) gets no data files from setuptools, so ``.ci/setup`` runs this after
it: it links ``<sys.prefix>/share/jupyter/labextensions/slimgraph`` to the
checkout's ``core/slimgraph/jupyter/labextension`` (a symbolic link: a
rebuild from ``jupyterlab/`` is seen at once) and writes
``<sys.prefix>/etc/jupyter/jupyter_server_config.d/slimgraph.json``. What is
already there as real files (a wheel's) is left alone.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def develop(prefix: str | None = None) -> list[str]:
    prefix_path = Path(prefix or sys.prefix)
    done = []
    built = HERE / "labextension"
    if not (built / "package.json").exists():
        raise SystemExit(f"{built} has no built labextension (run `npm run build` in jupyterlab/)")
    dest = prefix_path / "share" / "jupyter" / "labextensions" / "slimgraph"
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_symlink() or not dest.exists():
        if dest.is_symlink():
            dest.unlink()
        dest.symlink_to(built, target_is_directory=True)
        done.append(f"{dest} -> {built}")
    conf = prefix_path / "etc" / "jupyter" / "jupyter_server_config.d" / "slimgraph.json"
    if not conf.exists():
        conf.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HERE / "config" / "slimgraph.json", conf)
        done.append(str(conf))
    return done


def main() -> None:
    for line in develop():
        print(f"slimgraph.jupyter: {line}")


if __name__ == "__main__":
    main()
