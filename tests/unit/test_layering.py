"""Dependencies point downward: the import statements of a package name only the packages below it.

The order is the Layout (docs/layout.md), top to bottom (``layout_order``): a package (or top-level module) may import
those listed below it and those on its own line, nothing above. Every import counts, inside functions too.
Within that order, vLLM knowledge (``vllm/``) is shared by preflight, inventory, sizing and the load generator, so it imports
none of them; inventory reads command lines through ``vllm/``, not through preflight; the generic check
runner knows nothing of the embedded default (``embedded/`` resolves ``embedded:`` names before it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.test_import_graph import specguard_import_graph
from tests.unit.test_layout import layout_block

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "specguard"


def imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` statement in ``path`` names, at any depth."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def imports_of(part: str) -> dict[str, set[str]]:
    """Module file (relative to the package) -> what it imports, for a subpackage or one module."""
    target = PACKAGE / part
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    assert files, f"nothing to read at {target}"
    return {str(f.relative_to(PACKAGE)): imported_modules(f) for f in files}


def package_of(module: str) -> str:
    """``specguard.check.plan`` -> ``check``; a top-level module is its own package (``specguard.errors`` -> ``errors``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], set[tuple[str, str]]]]:
    """Package -> the packages it imports, and per edge the (module, imported module) pairs that make it."""
    graph: dict[str, set[str]] = {}
    why: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for module, deps in specguard_import_graph().items():
        a = package_of(module)
        graph.setdefault(a, set())
        for dep in deps:
            b = package_of(dep)
            if b not in (a, "specguard"):
                graph[a].add(b)
                why.setdefault((a, b), set()).add((module, dep))
    return graph, why


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components (each package in exactly one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: set[str] = set()
            while True:
                w = stack.pop()
                comp.add(w)
                if w == v:
                    break
            out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def offending(part: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{module} imports {name}"
        for module, names in imports_of(part).items()
        for name in sorted(names)
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


@pytest.mark.parametrize(
    ("part", "forbidden"),
    [
        ("inventory", ("specguard.preflight",)),
        (
            "vllm",
            (
                "specguard.preflight",
                "specguard.inventory",
                "specguard.sizing",
                "specguard.check",
                "specguard.embedded",
                "specguard.loadgen",
            ),
        ),
        ("check/runner.py", ("specguard.embedded",)),
    ],
)
def test_imports_point_downward(part: str, forbidden: tuple[str, ...]) -> None:
    assert offending(part, forbidden) == []


def test_the_check_finds_an_import_it_forbids() -> None:
    # The check itself must see imports inside functions too (specguard imports lazily in many places).
    assert offending("inventory", ("specguard.vllm",)) != []


def layout_order() -> dict[str, int]:
    """Package or top-level module (``check``, ``errors``) -> its line's rank in the Layout (docs/layout.md), 0 at the top."""
    rank: dict[str, int] = {}
    for i, names in enumerate(layout_block()):
        for name in names:
            rank[name.removesuffix("/").removesuffix(".py")] = i
    return rank


def upward_imports(graph: dict[str, set[str]], rank: dict[str, int]) -> list[str]:
    """Each edge that points up the order (or from or to a package the order does not list)."""
    bad: list[str] = []
    for a in sorted(graph):
        if a in ("specguard", "__main__"):  # the package itself and ``python -m specguard``: above everything
            continue
        for b in sorted(graph[a]):
            if a not in rank or b not in rank:
                bad.append(f"{a} -> {b}: not in the Layout (docs/layout.md)")
            elif rank[b] < rank[a]:
                bad.append(f"{a} -> {b}: {b} is above {a} in the Layout (docs/layout.md)")
    return bad


def test_every_package_imports_only_those_below_it_in_the_readme_layout() -> None:
    graph, why = package_graph()
    bad = upward_imports(graph, layout_order())
    # on failure, the module imports behind each edge: what to move (scripts/package_graph.py prints the same)
    culprits = {line: sorted(why.get((line.split(" -> ")[0], line.split(" -> ")[1].split(":")[0]), ())) for line in bad}
    assert culprits == {}


def test_the_package_graph_has_no_cycle() -> None:
    graph, _ = package_graph()
    assert [sorted(c) for c in strongly_connected(graph) if len(c) > 1] == []


def test_the_order_check_finds_an_upward_import() -> None:
    rank = layout_order()
    assert rank["cli"] < rank["check"] < rank["report"] < rank["canary"] < rank["verdict"] < rank["vllm"] < rank["errors"]
    assert upward_imports({"vllm": {"check"}, "check": {"vllm"}}, rank) == [
        "vllm -> check: check is above vllm in the Layout (docs/layout.md)"
    ]
    assert upward_imports({"newpkg": {"errors"}}, rank) == ["newpkg -> errors: not in the Layout (docs/layout.md)"]
    assert strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [{"a", "b"}, {"c"}]
