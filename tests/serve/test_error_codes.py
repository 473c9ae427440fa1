"""docs/serve.md names the service's error codes as the service sends them.

Every `Problem` code the service can answer is in the page's Errors table,
spelt the same way, and every `status code` the page quotes elsewhere is
one the service sends (the page said `429 rate_limited` where the service
sends `rate-limited`).
"""

from __future__ import annotations

import re
from pathlib import Path

from turnkeep import errors

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "serve.md").read_text()
SOURCES = sorted((ROOT / "core" / "src" / "turnkeep" / "serve").glob("*.py"))


def sent_codes() -> set[str]:
    """The codes the service's own `Problem`s carry, and turnkeep's errors'."""
    found: set[str] = set()
    for source in SOURCES:
        text = source.read_text()
        found |= set(re.findall(r'Problem\(\s*\d{3},\s*"([a-z-]+)"', text))
        found |= set(re.findall(r'code="([a-z-]+)"', text))
    # The catch-all answers and the status-to-code map of Starlette's own
    # refusals (404, 405) live in problems.py as plain literals.
    problems = (
        ROOT / "core" / "src" / "turnkeep" / "serve" / "problems.py"
    ).read_text()
    found |= set(re.findall(r'"([a-z]+(?:-[a-z]+)+)"', problems))
    found |= {
        cls.code
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.TurnkeepError)
    }
    return found


def table_codes() -> set[str]:
    section = PAGE.split("## Errors", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\| \d{3} \|", line)]
    return {code for row in rows for code in re.findall(r"`([a-z_-]+)`", row)}


def test_every_problem_code_is_in_the_errors_table() -> None:
    ours = set()
    for source in SOURCES:
        ours |= set(re.findall(r'Problem\(\s*\d{3},\s*"([a-z-]+)"', source.read_text()))
    assert ours, "no Problem codes found: the pattern no longer matches the code"
    assert ours <= table_codes(), sorted(ours - table_codes())


def test_every_code_the_page_quotes_is_one_the_service_sends() -> None:
    quoted = set(re.findall(r"`\d{3} ([a-z_-]+)`", PAGE)) | table_codes()
    assert quoted, "the page quotes no codes: the pattern no longer matches"
    unknown = quoted - sent_codes()
    assert not unknown, (
        f"docs/serve.md names codes the service never sends: {sorted(unknown)}"
    )
