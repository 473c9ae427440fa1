"""`turnkeep plugins`: what is installed, its versions, what is active and why."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.cli.support import Store, cli, one_line_error

from turnkeep.storespec import event_type_plugins


def report(*args: str, store: Store | None = None) -> dict[str, Any]:
    result = cli("plugins", "--json", *args, store=store)
    assert result.exit_code == 0, result.output
    decoded: dict[str, Any] = msgspec.json.decode(result.stdout)
    return decoded


def test_lists_installed_plugins_with_their_versions() -> None:
    found = {p["name"]: p for p in report()["plugins"]}
    for name in ("jsonl", "sqlite", "postgres"):
        dist = f"turnkeep-{name}"
        assert found[name]["distribution"] == dist
        assert found[name]["version"] == importlib.metadata.version(dist)
        assert found[name]["backends"] == [name]
        assert found[name]["loaded"] is True
    table = cli("plugins")
    assert table.exit_code == 0
    assert "turnkeep-sqlite" in table.stdout
    assert "built-in backends: memory" in table.stdout


def test_the_default_backend_and_why(tmp_path: Path) -> None:
    shown = report()
    assert shown["active"] == "jsonl"
    assert "the default" in shown["reason"]
    assert shown["location"]  # the default store directory


def test_a_store_option_wins_and_loads_its_plugin_and_the_event_types(
    store: Store,
) -> None:
    shown = report(store=store)
    assert shown["active"] == store.name
    assert shown["reason"] == "set by the --store option"
    assert shown["location"] == str(store.path)
    loaded = {p["name"] for p in shown["plugins"] if p["loaded"]}
    # No other backend: only the plugins that declare event types
    # (entry-point group `turnkeep.event_types`) come along.
    assert loaded == {store.name, *event_type_plugins()}
    assert "openai-agents" in event_type_plugins()


def test_configured_in_a_file_or_the_environment(
    isolated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNKEEP_PERSISTENCE", "sqlite")
    monkeypatch.setenv("TURNKEEP_SQLITE__PATH", str(tmp_path / "env.db"))
    shown = report()
    assert shown["active"] == "sqlite"
    assert shown["reason"] == "set by the TURNKEEP_PERSISTENCE environment variable"
    assert shown["location"] == str(tmp_path / "env.db")
    (isolated / "pyproject.toml").write_text(
        '[tool.turnkeep]\npersistence = "memory"\n'
    )
    shown = report()
    assert shown["active"] == "memory"
    assert shown["reason"] == f"set by {isolated / 'pyproject.toml'} [tool.turnkeep]"
    (isolated / "turnkeep.toml").write_text(
        f'persistence = "jsonl"\n[backends.jsonl]\npath = "{tmp_path / "s"}"\n'
    )
    shown = report()
    assert shown["active"] == "jsonl"
    assert shown["reason"] == f"set by {isolated / 'turnkeep.toml'}"
    assert shown["location"] == str(tmp_path / "s")


def test_a_dsn_password_is_never_printed(pg_password_spec: str) -> None:
    result = cli("--store", pg_password_spec, "plugins", "--json")
    assert "hunter2" not in result.stdout
    assert "hunter2" not in result.stderr


def test_invalid_configuration_is_one_line(isolated: Path) -> None:
    (isolated / "turnkeep.toml").write_text("no_such_key = 1\n")
    result = cli("plugins")
    assert result.exit_code == 1
    assert "no_such_key" in one_line_error(result)


@pytest.fixture
def pg_password_spec() -> str:
    # Never connected to: `plugins` only builds the backend's configuration.
    return "postgres:postgresql://user:hunter2@127.0.0.1:1/db?schema=x"


def test_redaction_off_is_warned_about(isolated: Path) -> None:
    shown = report()
    assert shown["redaction"] is True
    assert shown["warnings"] == []
    assert "warning" not in cli("plugins").stdout
    (isolated / "turnkeep.toml").write_text("redact_secrets = false\n")
    shown = report()
    assert shown["redaction"] is False
    assert any("redaction is off" in w for w in shown["warnings"])
    table = cli("plugins")
    assert table.exit_code == 0
    assert "warning: secret redaction is off" in " ".join(table.stdout.split())
