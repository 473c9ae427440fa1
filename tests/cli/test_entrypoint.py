"""The installed `turnkeep` script: help with examples, exit codes, errors."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli.support import SCRIPT, cli

from turnkeep.cli.app import cli as group

COMMANDS = (
    "ls",
    "show",
    "tail",
    "title",
    "rm",
    "prune",
    "fork",
    "verify",
    "repair",
    "recover",
    "resolve",
    "cancel",
    "audit",
    "export",
    "import",
    "backup",
    "migrate",
    "plugins",
    "dev",
    "conformance",
    "serve",
)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def test_the_script_is_installed_and_lists_every_command() -> None:
    done = run("--help")
    assert done.returncode == 0, done.stderr
    for command in COMMANDS:
        assert f"  {command} " in done.stdout or f"  {command}\n" in done.stdout, (
            command
        )
    assert "Exit status: 0 ok, 1 problems found or bad input, 2 usage." in done.stdout
    version = run("--version")
    assert importlib.metadata.version("turnkeep") in version.stdout


def test_the_group_holds_exactly_the_commands() -> None:
    assert set(group.commands) == set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command: str) -> None:
    result = cli(command, "--help")
    assert result.exit_code == 0
    assert "Examples:" in result.stdout
    assert f"turnkeep {command}" in result.stdout


def test_usage_errors_exit_2() -> None:
    assert run("no-such-command").returncode == 2
    assert run("show").returncode == 2  # missing ID
    assert run("ls", "--limit", "0").returncode == 2


def test_errors_are_one_line_and_tracebacks_need_debug(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir(mode=0o700)
    spec = f"jsonl:{tmp_path / 'store'}"
    done = run("--store", spec, "show", "nope")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("turnkeep: ")
    assert "'nope'" in done.stderr
    assert "Traceback" not in done.stderr
    debug = run("--store", spec, "--debug", "show", "nope")
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    after = run("show", "nope", "--store", spec, "--debug")  # options after it too
    assert "Traceback (most recent call last)" in after.stderr


@pytest.mark.parametrize("module", ["click", "rich", "watchfiles"])
def test_without_the_cli_extra_the_command_names_the_extra(module: str) -> None:
    # `sys.modules[name] = None` makes importing it fail as if not installed.
    code = (
        f"import sys; sys.modules[{module!r}] = None; "
        "from turnkeep.cli import main; main(['ls'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, done.stderr
    assert f"({module} is not installed)" in done.stderr
    assert "pip install 'turnkeep[cli]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unrelated_missing_module_is_not_blamed_on_the_extra() -> None:
    code = (
        "import sys; sys.modules['turnkeep.cli.view'] = None; "
        "from turnkeep.cli import main; main(['ls'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert "ModuleNotFoundError" in done.stderr
    assert "turnkeep[cli]" not in done.stderr
