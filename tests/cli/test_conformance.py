"""`turnkeep conformance`: the contract kit against an installed backend."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import msgspec
from tests.cli.support import cli, one_line_error


def test_runs_the_kit_against_an_installed_backend() -> None:
    result = cli("conformance", "--backend", "sqlite", "--json")
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = msgspec.json.decode(result.stdout)
    assert report["backend"] == "sqlite"
    assert report["failed"] == 0
    assert report["passed"] >= 50
    skipped = [t for t in report["tests"] if t["outcome"] == "skipped"]
    assert skipped, "the damage contracts need the backend's own hooks"
    assert all("does not declare" in t["detail"] for t in skipped)


def test_passes_arguments_to_pytest_and_prints_its_report() -> None:
    result = cli("conformance", "--backend", "jsonl", "--", "-k", "Append")
    assert result.exit_code == 0, result.output
    assert "conformance of 'jsonl':" in result.stdout
    assert " 0 failed" in result.stdout


def test_an_unknown_backend_is_one_line() -> None:
    result = cli("conformance", "--backend", "nosuch")
    assert result.exit_code == 1
    assert "'nosuch'" in one_line_error(result)


def test_the_built_in_memory_backend_is_named_as_such() -> None:
    result = cli("conformance", "--backend", "memory")
    assert result.exit_code == 1
    line = one_line_error(result)
    assert "'memory' is turnkeep's built-in reference backend" in line
    assert "not installed" not in line.replace("not an installed plugin", "")


def test_says_when_pytest_is_missing() -> None:
    code = (
        "import sys; sys.modules['pytest'] = None; sys.argv = ['turnkeep', "
        "'conformance', '--backend', 'jsonl']; from turnkeep.cli import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert "needs pytest" in done.stderr
    assert "turnkeep[conformance]" in done.stderr
    assert "Traceback" not in done.stderr
