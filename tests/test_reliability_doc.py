"""`docs/reliability.md` defines what the repository cites, and names real tests.

The page states the rules (`R1`...) and the acceptance items of the plan
(`item 1`...). Comments, docstrings and documents cite them; this module
fails when a citation points at nothing, when the page names a test that does
not exist, or when a file refers to a reliability document that is not in the
repository.

Citation grammar (what counts as a citation; anything else is prose):

- a rule: `R` followed by one or two digits, as a token of its own (not
  preceded by a letter, digit, `_`, `.`, `-` or `/`; not followed by a letter,
  digit or `_`, nor by `.` and a digit): `(R4)`, `R9, R10`, `R7/item 34`;
- an item: the word `item` or `items` (capitalised or not, not glued to a
  preceding word), whitespace, then a list of numbers or ranges joined by
  commas, `and` or `or`, where a range is `1-6` (hyphen or en dash) or
  `1 to 6`, and a
  number may be preceded by `part of`: `plan item 35`, `items 7 and 8`,
  `Plan items 10, 11, 18 and 32`, `items 12, 14 and part of 16`;
- a document: a path whose last part is `reliability.md` (in any case), or
  that goes through a `research/` or `shared/` directory; it must name a file
  of the repository (relative to the root or to the citing file), and an
  anchor on the reliability page must exist there.

Files scanned: the text files under `core/`, `plugins/`, `tests/`,
`benchmarks/`, `docs/`, `examples/`, `scripts/` and `.ci/`, and the top-level
`README.md`, `AGENTS.md`, `CHANGELOG.md`, `Makefile` and `pyproject.toml`.
This module is not scanned: its examples of the grammar cite on purpose.

Test names on the page (`path::function` or `path::Class::method`) are
checked by parsing the test files with `ast`, never by running pytest; a
class's methods include those it inherits from classes of its own module or
of the conformance kit.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"
HERE = Path(__file__).resolve()
KIT = ROOT / "core" / "src" / "turnkeep" / "conformance"
RULES = (*range(1, 24), 25)
ITEMS = range(1, 36)

SCANNED_DIRS = (
    "core",
    "plugins",
    "tests",
    "benchmarks",
    "docs",
    "examples",
    "scripts",
    ".ci",
)
SCANNED_FILES = ("README.md", "AGENTS.md", "CHANGELOG.md", "Makefile", "pyproject.toml")
TEXT_SUFFIXES = {"", ".py", ".md", ".toml", ".c", ".sql", ".txt", ".cfg", ".ini", ".sh"}
SKIPPED_DIRS = {
    ".venv",
    "__pycache__",
    ".git",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
}

RULE_RE = re.compile(r"(?<![\w./-])R(\d{1,2})(?!\w)(?!\.\d)")
_NUMBER = r"\d+(?:\s*[-\u2013]\s*\d+|\s+to\s+\d+)?"
_JOIN = r"(?:\s*,\s*(?:(?:and|or)\s+)?|\s+(?:and|or)\s+)(?:part\s+of\s+)?"
ITEM_RE = re.compile(
    rf"(?<![\w-])[Ii]tems?\s+((?:part\s+of\s+)?{_NUMBER}(?:{_JOIN}{_NUMBER})*)(?![\w.]?\d)"
)
RANGE_RE = re.compile(r"(\d+)(?:\s*[-\u2013]\s*|\s+to\s+)?(\d+)?")
_DIRS = r"(?:\.{1,2}/)*(?:[\w-]+/)*"
DOCUMENT_RE = re.compile(
    rf"(?<![\w./-])({_DIRS}(?:(?i:reliability\.md)|(?:research|shared)/[\w./-]*[\w-]))"
    r"(#[\w-]+)?"
)
TEST_REF_RE = re.compile(r"`(tests/[\w/.-]+\.py)::([\w:]+)`")
PATH_REF_RE = re.compile(
    r"`((?:core|plugins|tests|benchmarks|docs|examples|scripts)/[\w/.-]*)(?:::[\w:]+)?`"
)
DEFINITION_RE = re.compile(
    r'^<a id="(r\d+|item-\d+)"></a>\n#{3,4} (R\d+|Item \d+)\. ', flags=re.M
)
HEADING_RE = re.compile(r"^#{2,4} (R\d+|Item \d+)\.", flags=re.M)
STATUS_RE = re.compile(r"^- \*\*Status:\*\* (held|partly held|not held)\b", flags=re.M)
TESTS_RE = re.compile(r"^- \*\*Tests:\*\*(.*?)(?=^- |^#|^<a |\Z)", flags=re.M | re.S)


# -- the grammar ----------------------------------------------------------------


def cited_rules(text: str) -> list[int]:
    """The rule numbers `text` cites, in order."""
    return [int(m.group(1)) for m in RULE_RE.finditer(text)]


def cited_items(text: str) -> list[int]:
    """The item numbers `text` cites, in order (ranges expanded)."""
    found: list[int] = []
    for match in ITEM_RE.finditer(text):
        for low, high in RANGE_RE.findall(match.group(1)):
            first = int(low)
            found.extend(range(first, int(high or first) + 1))
    return found


def cited_documents(text: str) -> list[tuple[str, str]]:
    """`(path, anchor)` of each document `text` refers to (anchor may be "")."""
    return [(m.group(1), m.group(2) or "") for m in DOCUMENT_RE.finditer(text)]


# -- the page -------------------------------------------------------------------


@attrs.frozen
class Page:
    """What `docs/reliability.md` defines."""

    rules: list[int]
    items: list[int]
    anchors: frozenset[str]
    headings: list[str]


def read_page(text: str) -> Page:
    rules: list[int] = []
    items: list[int] = []
    anchors: set[str] = set()
    for anchor, heading in DEFINITION_RE.findall(text):
        number = int(heading.split()[-1].lstrip("R"))
        expected = f"r{number}" if heading.startswith("R") else f"item-{number}"
        assert anchor == expected, f"heading {heading!r} has the anchor {anchor!r}"
        (rules if heading.startswith("R") else items).append(number)
        anchors.add(anchor)
    return Page(rules, items, frozenset(anchors), HEADING_RE.findall(text))


@pytest.fixture(scope="module")
def page_text() -> str:
    return DOC.read_text()


@pytest.fixture(scope="module")
def page(page_text: str) -> Page:
    return read_page(page_text)


# -- the repository -------------------------------------------------------------


def repository_files() -> Iterator[Path]:
    """Every text file that may cite, except this module."""
    for name in SCANNED_FILES:
        yield ROOT / name
    for top in SCANNED_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            parts = set(path.relative_to(ROOT).parts)
            if parts & SKIPPED_DIRS or any(p.endswith(".egg-info") for p in parts):
                continue
            if path.is_file() and path.suffix in TEXT_SUFFIXES and path != HERE:
                yield path


def texts() -> Iterator[tuple[Path, str]]:
    for path in repository_files():
        try:
            yield path, path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # not text


def line_of(text: str, needle: str) -> int:
    return text[: text.find(needle)].count("\n") + 1 if needle in text else 0


def unresolved(sources: Iterable[tuple[Path, str]], page: Page) -> list[str]:
    """Every citation in `sources` the page does not define, as `file:line: what`."""
    problems: list[str] = []
    for path, text in sources:
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for number in sorted(set(cited_rules(text)) - set(page.rules)):
            problems.append(f"{where}:{line_of(text, f'R{number}')}: R{number}")
        for number in sorted(set(cited_items(text)) - set(page.items)):
            problems.append(f"{where}: item {number}")
        for target, anchor in cited_documents(text):
            found = [
                candidate.resolve()
                for candidate in (ROOT / target, path.parent / target)
                if candidate.is_file() and candidate.resolve().is_relative_to(ROOT)
            ]
            if not found:
                at = line_of(text, target)
                problems.append(f"{where}:{at}: {target} is not in the repository")
            elif anchor and found[0] == DOC and anchor[1:] not in page.anchors:
                at = line_of(text, anchor)
                problems.append(f"{where}:{at}: {target}{anchor} has no such anchor")
    return problems


# -- tests, by parsing them -----------------------------------------------------


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _kit_classes() -> dict[str, ast.ClassDef]:
    found: dict[str, ast.ClassDef] = {}
    for path in sorted(KIT.glob("*.py")):
        found.update(_classes(parse(path.read_text())))
    return found


def _test_methods(
    cls: ast.ClassDef, scopes: tuple[dict[str, ast.ClassDef], ...], seen: set[str]
) -> set[str]:
    names = {
        n.name
        for n in cls.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and n.name.startswith("test")
    }
    for base in cls.bases:
        if isinstance(base, ast.Name):
            name = base.id
        elif isinstance(base, ast.Attribute):
            name = base.attr
        else:
            continue
        if name in seen:
            continue
        seen.add(name)
        for scope in scopes:
            if name in scope:
                names |= _test_methods(scope[name], scopes, seen)
                break
    return names


def parse(source: str) -> ast.Module:
    """`ast.parse`, once more after CPython 3.11's spurious AST SystemError.

    CPython before 3.12 keeps the AST builder's recursion depth in state
    that a thread compiling at the same moment (a background event-loop
    thread of an earlier test importing a module) can disturb: the parse
    fails with "AST constructor recursion depth mismatch" (CPython issue
    106905) though the source is fine.
    """
    try:
        return ast.parse(source)
    except SystemError:
        return ast.parse(source)


def collected_names(path: Path, kit: dict[str, ast.ClassDef]) -> set[str]:
    """`function` and `Class::method` names pytest would collect from `path`."""
    tree = parse(path.read_text())
    local = _classes(tree)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name.startswith("test"):
                names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for method in _test_methods(node, (local, kit), {node.name}):
                names.add(f"{node.name}::{method}")
    return names


def missing_tests(text: str) -> list[str]:
    """Every `path::name` in `text` that names no test."""
    kit = _kit_classes()
    cache: dict[str, set[str]] = {}
    missing: list[str] = []
    for path, name in TEST_REF_RE.findall(text):
        file = ROOT / path
        if not file.is_file():
            missing.append(f"{path}::{name} (no such file)")
            continue
        if path not in cache:
            cache[path] = collected_names(file, kit)
        if name not in cache[path]:
            missing.append(f"{path}::{name}")
    return missing


# -- the checks -----------------------------------------------------------------


def test_the_page_defines_every_rule_and_item_once_in_order(page: Page) -> None:
    assert page.rules == list(RULES)
    assert page.items == list(ITEMS)
    defined = [f"R{n}" for n in page.rules] + [f"Item {n}" for n in page.items]
    assert sorted(page.headings) == sorted(defined), "a heading lacks its anchor"


def test_every_citation_in_the_repository_resolves(page: Page) -> None:
    problems = unresolved(texts(), page)
    assert problems == [], "\n".join(problems)


def test_every_test_the_page_names_exists(page_text: str) -> None:
    assert len(TEST_REF_RE.findall(page_text)) > 100
    assert missing_tests(page_text) == []


def test_every_repository_path_the_page_names_exists(page_text: str) -> None:
    paths = PATH_REF_RE.findall(page_text)
    assert len(paths) > 50
    assert [p for p in paths if not (ROOT / p).exists()] == []


def test_every_item_says_what_holds_it(page_text: str) -> None:
    sections = re.split(r'^<a id="item-\d+"></a>\n', page_text, flags=re.M)[1:]
    assert len(sections) == len(ITEMS)
    statuses: dict[str, set[int]] = {
        "held": set(),
        "partly held": set(),
        "not held": set(),
    }
    for number, section in enumerate(sections, start=1):
        section = re.split(r"^#{2,3} ", section, flags=re.M)[0]
        status = STATUS_RE.findall(section)
        tests = TESTS_RE.findall(section)
        assert len(status) == 1, f"item {number}: one Status line"
        assert len(tests) == 1, f"item {number}: one Tests line"
        named = TEST_REF_RE.findall(tests[0])
        statuses[status[0]].add(number)
        if status[0] == "not held":
            assert tests[0].strip() == "none yet.", f"item {number}"
        else:
            assert named, f"item {number} is {status[0]} but names no test"
    assert glance(page_text) == statuses, "the summary table disagrees with the items"


def glance(page_text: str) -> dict[str, set[int]]:
    """The item numbers of each status, as the summary table lists them."""
    table = page_text.split("## At a glance", 1)[1]
    found: dict[str, set[int]] = {
        "held": set(),
        "partly held": set(),
        "not held": set(),
    }
    for row in re.findall(r"^\| [A-J]\. .*\|$", table, flags=re.M):
        cells = [c.strip() for c in row.strip("|").split("|")]
        for status, cell in zip(found, cells[2:], strict=True):
            found[status] |= {int(n) for n in re.findall(r"\d+", cell)}
    return found


@pytest.mark.parametrize(
    ("text", "rules", "items"),
    [
        ("the durability gate (R7).", [7], []),
        ("RELIABILITY R9, R10", [9, 10], []),
        ("registering it (R7/item 34 fault injection)", [7], [34]),
        ("R2D2, CR2, x.R2, a-R2, R2.5, R100, R1_x", [], []),
        ("Plan items 10, 11, 18 and 32: damaged logs", [], [10, 11, 18, 32]),
        ("Plan items 12, 14 and part of 16 for SQLite", [], [12, 14, 16]),
        ("Item 34: a 200 ms delay", [], [34]),
        ("the header is item 18's business", [], [18]),
        ("items 1\u20136 and items 7-8, items 9 to 11 or 12", [], list(range(1, 13))),
        ("for item in items[3]: line_item 4, item 3.5", [], []),
    ],
)
def test_the_citation_grammar(text: str, rules: list[int], items: list[int]) -> None:
    assert cited_rules(text) == rules
    assert cited_items(text) == items


@pytest.mark.parametrize(
    ("text", "documents"),
    [
        ("(RELIABILITY.md R9, R10)", [("RELIABILITY.md", "")]),
        ("checked (research/reliability.md 3.2):", [("research/reliability.md", "")]),
        ("see ../shared/seeds/a.txt.", [("../shared/seeds/a.txt", "")]),
        ("[R4](../reliability.md#r4)", [("../reliability.md", "#r4")]),
        (
            "`docs/reliability.md` and tests/reliability/test_secrets.py",
            [("docs/reliability.md", "")],
        ),
    ],
)
def test_the_document_grammar(text: str, documents: list[tuple[str, str]]) -> None:
    assert cited_documents(text) == documents


def test_citations_the_page_does_not_define_are_reported(page: Page) -> None:
    source = ROOT / "docs" / "example.md"
    text = (
        "Holds R4 and R98, plan items 7 and 36, "
        "see RELIABILITY.md and reliability.md#r99.\n"
    )
    assert unresolved([(source, text)], page) == [
        "docs/example.md:1: R98",
        "docs/example.md: item 36",
        "docs/example.md:1: RELIABILITY.md is not in the repository",
        "docs/example.md:1: reliability.md#r99 has no such anchor",
    ]


def test_a_misnamed_test_is_reported() -> None:
    good = "`tests/test_reliability_doc.py::test_a_misnamed_test_is_reported`"
    inherited = (
        "`tests/plugins/jsonl/test_conformance.py::TestJsonlBackend::"
        "test_damage_inside_acknowledged_data_is_an_error_not_a_shorter_log`"
    )
    bad = "`tests/loop/test_durability.py::test_item_34_does_not_exist`"
    gone = "`tests/no_such_file.py::test_x`"
    assert missing_tests(f"{good} {inherited}") == []
    assert missing_tests(f"{good} {bad} {gone}") == [
        "tests/loop/test_durability.py::test_item_34_does_not_exist",
        "tests/no_such_file.py::test_x (no such file)",
    ]
