"""No import cycle in specguard: the import graph of src/specguard, read with ast, is acyclic.

Every import counts, at module level, under TYPE_CHECKING or inside a
function: a cycle hidden in a function is still two modules that each need
the other. ``from pkg import name`` counts as importing ``pkg.name`` when that
is a module, and ``pkg`` (its ``__init__``) otherwise.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    modules = {module_name(p, src): p for p in (src / "specguard").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    deps.add(sub if sub in modules else node.module)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


@functools.cache  # read once per session: test_layering.py reads the same graph (about 1.5 s a read)
def specguard_import_graph() -> dict[str, set[str]]:
    """The import graph of src/specguard (callers must not change it)."""
    return import_graph()


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph (its modules in import order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph[n]):
            if state.get(d) == 1:
                return stack[stack.index(d) :] + [d]
            if d not in state and (found := visit(d)):
                return found
        state[n] = 2
        stack.pop()
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle(tmp_path):
    pkg = tmp_path / "specguard"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from specguard.b import y\n")
    (pkg / "b.py").write_text("def f():\n    from specguard.a.x import g\n")
    (pkg / "c.py").write_text("from specguard import b\n")
    graph = import_graph(tmp_path)
    assert find_cycle(graph) == ["specguard.a.x", "specguard.b", "specguard.a.x"]
    (pkg / "b.py").write_text("")
    assert find_cycle(import_graph(tmp_path)) is None


def test_specguard_has_no_import_cycle():
    assert find_cycle(specguard_import_graph()) is None
