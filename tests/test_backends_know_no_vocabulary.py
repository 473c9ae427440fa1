"""No backend knows the event vocabulary or the codec's byte layout.

Backends (`plugins/*/src` and core's reference backend, `memory.py`) learn
which records end a turn from `EventRecord.is_turn_end` and read it from
stored bytes through `turnkeep.backendkit`. This reads their source for what
would mean otherwise: the codec's prefixes and the turn-end type by name, a
bytes literal spelling a turn end or the `type` key, or a string (other than
documentation) naming `turn/end`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("jsonl", "sqlite", "postgres")
FORBIDDEN_NAMES = frozenset({"TURN_END_PREFIX", "TYPE_PREFIX", "TURN_END_TYPE"})
FORBIDDEN_IN_BYTES = (b"turn/end", b'"type"')


def backend_sources() -> list[Path]:
    files = [p for b in BACKENDS for p in (ROOT / "plugins" / b / "src").rglob("*.py")]
    return sorted([*files, ROOT / "core" / "src" / "turnkeep" / "memory.py"])


def docstrings(tree: ast.Module) -> set[int]:
    """The ids of the nodes that are docstrings (or bare string statements)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            found.add(id(node.value))
    return found


def offences(path: Path) -> list[tuple[int, str]]:
    """`(line, what)` of everything in `path` that speaks the codec's language."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    prose = docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        where: int = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            found.append((where, f"uses {node.id}"))
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_NAMES:
            found.append((where, f"uses .{node.attr}"))
        elif isinstance(node, ast.alias) and node.name in FORBIDDEN_NAMES:
            found.append((where, f"imports {node.name}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, bytes):
            if any(part in node.value for part in FORBIDDEN_IN_BYTES):
                found.append((where, f"bytes literal {node.value!r}"))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in prose
            and "turn/end" in node.value
        ):
            found.append((where, f"string {node.value!r}"))
    return found


def test_every_backend_is_read() -> None:
    sources = backend_sources()
    for backend in BACKENDS:
        assert any(f"turnkeep_{backend}" in p.parts for p in sources), backend
    assert ROOT / "core" / "src" / "turnkeep" / "memory.py" in sources


def test_no_backend_knows_the_vocabulary_or_the_codecs_bytes() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in backend_sources()
        for line, what in offences(path)
    ]
    assert not found, "ask turnkeep.backendkit instead:\n" + "\n".join(found)


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Counts `turn/end` events (prose is fine)."""\n'
        "from turnkeep.codec import TURN_END_PREFIX\n"
        "import turnkeep.meta as m\n"
        "a = m.TURN_END_TYPE\n"
        'b = b\'{"type":"turn/end"\'\n'
        "c = \"SELECT count(*) WHERE type = 'turn/end'\"\n"
        "d = TYPE_PREFIX\n",
        encoding="utf-8",
    )
    found = sorted(offences(sample))
    assert [line for line, _ in found] == [2, 4, 5, 6, 7], found
