"""What the CI scripts read from pyproject.toml, printed one item a line.

    python .ci/pyproject.py requirements VERSION [--full]
        the project's requirements; dask and distributed pinned to VERSION
        ("newest": as declared, so pip takes the newest release they
        admit); the test tools the differential suites need (pytest,
        pytest-timeout, hypothesis), or with --full every test and
        dashboard extra
    python .ci/pyproject.py oldest-distributed
        the lower bound of the ``distributed>=`` requirement
    python .ci/pyproject.py pythons
        every Python X.Y that ``requires-python`` admits

It reads the file with tomllib, so it needs Python 3.11 or newer: the CI
scripts run it with their main interpreter (.ci/setup's, Python 3.11),
whatever interpreter they install for.
"""
from __future__ import annotations

import re
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    raise SystemExit(f".ci/pyproject.py needs Python 3.11 or newer (tomllib); this is {sys.version.split()[0]}")

NAME = re.compile(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?")
#: the test tools the differential suites need (without --full)
TEST_TOOLS = ("pytest", "pytest-timeout", "hypothesis")


def project() -> dict:
    with open("pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def requirements(version: str, full: bool) -> list:
    proj = project()

    def pinned(req: str) -> str:
        m = NAME.match(req)
        name, extras = m.group(1), m.group(2) or ""
        if version != "newest" and name.lower() in ("dask", "distributed"):
            return f"{name}{extras}=={version}"
        return req

    reqs = [pinned(r) for r in proj["dependencies"]]
    extras = proj.get("optional-dependencies", {})
    for req in extras.get("test", []):
        name = NAME.match(req).group(1)
        if name == proj["name"]:  # "slimgraph[dashboard]": the dashboard extras
            if full:
                reqs += extras.get("dashboard", [])
        elif full or name.lower() in TEST_TOOLS:
            reqs.append(req)
    return reqs


def oldest_distributed() -> str:
    for d in project()["dependencies"]:
        m = re.match(r"\s*distributed\s*(?:>=|==)\s*([0-9][0-9.]*)", d)
        if m:
            return m.group(1)
    raise SystemExit("pyproject.toml names no lower bound for distributed")


def pythons() -> list:
    """The 3.X that ``requires-python`` admits; it may use ``>=3.X`` and
    ``<3.Y`` only (anything else is refused, not guessed)."""
    spec = project()["requires-python"]
    lo, hi = None, None
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(>=|<)\s*3\.(\d+)\s*", part)
        if m is None:
            raise SystemExit(f"requires-python {spec!r}: only '>=3.X' and '<3.Y' are understood here")
        if m.group(1) == ">=":
            lo = int(m.group(2))
        else:
            hi = int(m.group(2))
    if lo is None or hi is None:
        raise SystemExit(f"requires-python {spec!r} needs a lower and an upper bound")
    return [f"3.{n}" for n in range(lo, hi)]


def main(argv: list) -> None:
    what = argv[0] if argv else ""
    if what == "requirements" and len(argv) >= 2:
        out = requirements(argv[1], "--full" in argv[2:])
    elif what == "oldest-distributed":
        out = [oldest_distributed()]
    elif what == "pythons":
        out = pythons()
    else:
        raise SystemExit(__doc__)
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
