"""Two JUnit XML reports of the same tests (stock, slim): counts per file, side by side,
and the tests that pass on the first but not on the second (exit 1 if any)."""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def outcomes(path: str) -> dict:
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        tags = {child.tag for child in case}
        if "failure" in tags or "error" in tags:
            out[name] = "failed"
        elif "skipped" in tags:
            out[name] = "skipped"
        else:
            out[name] = "passed"
    return out


def main(stock_path: str, slim_path: str) -> int:
    stock, slim = outcomes(stock_path), outcomes(slim_path)
    files = sorted({n.split("::")[0] for n in stock} | {n.split("::")[0] for n in slim})
    print(f"{'file':45} {'stock passed':>13} {'slim passed':>12} {'stock failed':>13} {'slim failed':>12}")
    for f in files:
        a = Counter(v for n, v in stock.items() if n.split("::")[0] == f)
        b = Counter(v for n, v in slim.items() if n.split("::")[0] == f)
        print(f"{f:45} {a['passed']:13} {b['passed']:12} {a['failed']:13} {b['failed']:12}")
    a, b = Counter(stock.values()), Counter(slim.values())
    print(f"{'all':45} {a['passed']:13} {b['passed']:12} {a['failed']:13} {b['failed']:12}")
    lost = sorted(n for n, v in stock.items() if v == "passed" and slim.get(n) != "passed")
    for n in lost:
        print("passes on stock only:", n)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
