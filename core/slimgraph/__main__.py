"""``python -m slimgraph {bench,profile,dashboard}``."""
from __future__ import annotations

import sys

USAGE = """usage: python -m slimgraph COMMAND [options]

commands:
  bench      stock vs slim update_graph on the same submission (time, memory)
  profile    one submission against a real scheduler: phase table and memory tree
  dashboard  the live dashboard (panel serve), its stock and slim engines in
             scheduler processes of their own
"""


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return
    cmd, rest = argv[0], argv[1:]
    if cmd == "bench":
        from slimgraph.bench.runner import main as run
    elif cmd == "profile":
        from slimgraph.profile import main as run
    elif cmd == "dashboard":
        from slimgraph.dashboard.launch import main as run
    else:
        print(USAGE, file=sys.stderr)
        raise SystemExit(f"unknown command {cmd!r}")
    rc = run(rest)
    if rc:
        raise SystemExit(rc)


if __name__ == "__main__":
    main()
