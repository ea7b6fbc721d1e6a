"""``slimgraph dashboard``: serve the app on port 5006, with stock and slim engine processes.

``main()`` is what the CLI calls (``slimgraph dashboard``, ``python -m
slimgraph dashboard``). It is ``panel serve`` of the app run in this
process: the app is served at ``/dashboard``, the stock and slim engines
(a scheduler process and a worker process each) start in the background
right away (so the first submission does not wait for them), and Ctrl-C or
SIGTERM stops them.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="slimgraph dashboard", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=5006)
    p.add_argument("--address", default="127.0.0.1", help="interface to listen on")
    p.add_argument("--scheduler", default=None,
                   help="read this scheduler instead of starting engine processes "
                        "(default: $SLIMGRAPH_SCHEDULER)")  # fmt: skip
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--show", action="store_true", help="open a browser")
    p.add_argument("--allow-websocket-origin", action="append", default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.scheduler:
        os.environ["SLIMGRAPH_SCHEDULER"] = args.scheduler
    os.environ.setdefault("SLIMGRAPH_WORKERS", str(args.workers))
    os.environ.setdefault("SLIMGRAPH_THREADS", str(args.threads))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    import panel as pn

    from slimgraph.dashboard import clusters
    from slimgraph.dashboard.app import build

    pn.extension("tabulator")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the engines on SIGTERM too
    mgr = clusters.manager()
    if not mgr.remote:
        mgr.start_in_background()
    origins = args.allow_websocket_origin or [
        f"localhost:{args.port}", f"127.0.0.1:{args.port}", f"{args.address}:{args.port}",
    ]  # fmt: skip
    print(f"slimgraph dashboard: http://{args.address}:{args.port}/dashboard", flush=True)
    try:
        pn.serve(
            {"dashboard": build},
            port=args.port,
            address=args.address,
            websocket_origin=origins,
            show=args.show,
            title="slimgraph dashboard",
            start=True,
        )
    except KeyboardInterrupt:
        pass
    finally:
        clusters.reset_manager()
    return 0


if __name__ == "__main__":
    sys.exit(main())
