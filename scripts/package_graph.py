#!/usr/bin/env python3
"""The package-level import graph of specguard and its cycles: ``python scripts/package_graph.py [--edges]``.

A package is a top-level subpackage of specguard (``check``, ``report``, ...) or a top-level module; every import
counts, at module level or inside a function (tests/unit/test_import_graph.py reads them). Prints each strongly
connected component of more than one package with the module imports that make its edges, so what to move to
break it is in front of you; ``--edges`` prints the whole graph. tests/unit/test_layering.py holds the order.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit.test_layering import package_graph, strongly_connected  # noqa: E402


def main() -> int:
    graph, why = package_graph()
    if "--edges" in sys.argv:
        for pkg in sorted(graph):
            print(f"{pkg} -> {', '.join(sorted(graph[pkg])) or '-'}")
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    for comp in cycles:
        print(f"cycle of {len(comp)}: {', '.join(sorted(comp))}")
        for a in sorted(comp):
            for b in sorted(graph[a] & comp):
                for mod, dep in sorted(why[a, b]):
                    print(f"  {a} -> {b}: {mod} imports {dep}")
    return 1 if cycles else 0


if __name__ == "__main__":
    raise SystemExit(main())
