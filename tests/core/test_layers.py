"""The layers of `turnkeep` stay visible: no import circles, no upward imports.

Imports are read from the source with `ast`, so imports under
`TYPE_CHECKING` and inside functions count as much as module-level ones.
Layers, bottom up: the seam (every module directly in `turnkeep/`, and the
conformance kit), the agent loop (`turnkeep.agent`), the service
(`turnkeep.serve`), then the command (`turnkeep.cli`) and the test doubles
(`turnkeep.testing`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core" / "src"
PACKAGE = CORE / "turnkeep"
MAX_LINES = 500
HOST_MAX_LINES = 350
"""The host keeps the manager, lifecycle and typed hook facade only."""

# What each layer may not import (a prefix matches the package and below).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "seam": ("turnkeep.agent", "turnkeep.serve", "turnkeep.cli", "turnkeep.testing"),
    "turnkeep.agent": ("turnkeep.serve", "turnkeep.cli", "turnkeep.testing"),
    "turnkeep.serve": ("turnkeep.cli", "turnkeep.testing"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(CORE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The `turnkeep` modules that `name` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                if full in known:
                    found.add(full)  # `from turnkeep import errors`
                elif source in known:
                    found.add(source)
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def layer(name: str) -> str:
    if name == "turnkeep":
        return "api"  # the public namespace re-exports every layer
    for upper in (
        "turnkeep.agent",
        "turnkeep.serve",
        "turnkeep.cli",
        "turnkeep.testing",
    ):
        if name == upper or name.startswith(upper + "."):
            return upper
    return "seam"


def upward_imports(edges: dict[str, set[str]]) -> Iterator[str]:
    for name, targets in sorted(edges.items()):
        for banned in FORBIDDEN.get(layer(name), ()):
            for target in sorted(targets):
                if target == banned or target.startswith(banned + "."):
                    yield f"{name} imports {target}"


def test_core_has_no_import_circle() -> None:
    assert cycles(graph()) == []


def test_the_seam_never_imports_the_layers_above_it() -> None:
    assert list(upward_imports(graph())) == []


def test_no_core_module_is_over_the_size_limit() -> None:
    long = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_host_stays_thin() -> None:
    lines = (PACKAGE / "host.py").read_text(encoding="utf-8").splitlines()
    assert len(lines) < HOST_MAX_LINES


def test_the_walk_sees_type_checking_imports_and_finds_a_circle() -> None:
    # The checks above are only as good as the import walk: it must see an
    # import under TYPE_CHECKING and report the circle it closes.
    known = modules()
    edges = graph()
    assert "turnkeep.session" in imported(
        "turnkeep.hookspecs", known["turnkeep.hookspecs"], known
    )
    edges["turnkeep.errors"] = {*edges["turnkeep.errors"], "turnkeep.host"}
    assert any("turnkeep.errors" in c and "turnkeep.host" in c for c in cycles(edges))
    edges["turnkeep.session"] = {"turnkeep.agent.loop"}
    assert "turnkeep.session imports turnkeep.agent.loop" in list(upward_imports(edges))
    edges["turnkeep.agent.loop"] = {"turnkeep.serve.app"}
    edges["turnkeep.serve.api"] = {"turnkeep.cli.runtime"}
    found = list(upward_imports(edges))
    assert "turnkeep.agent.loop imports turnkeep.serve.app" in found
    assert "turnkeep.serve.api imports turnkeep.cli.runtime" in found


@pytest.mark.parametrize("name", ["turnkeep.agent", "turnkeep.serve", "turnkeep.cli"])
def test_each_layer_is_a_package_of_its_own(name: str) -> None:
    assert name in modules()
