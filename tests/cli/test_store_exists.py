"""A store named explicitly must exist: a typo is an error, not an empty store.

`--store` and `migrate --from` name a store to read; a path there that does
not exist is refused with exit status 1 and "no store at PATH" (a typo
read as an empty store said "no sessions stored", exit 0). The commands
that make a store (`import`, `migrate --to`) still make it, and the default
store not existing yet is still normal. A path of the wrong kind (a
directory for SQLite, a file for JSONL) says so.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest
from tests.cli.conftest import make_store, new_store
from tests.cli.support import cli, converse, one_line_error


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.parametrize("command", [("ls",), ("show", "s"), ("verify", "--all")])
def test_a_named_store_that_does_not_exist_is_an_error(
    backend: str, command: tuple[str, ...], tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-store"
    result = cli("--store", f"{backend}:{missing}", *command)
    assert result.exit_code == 1
    assert f"no store at {missing}" in one_line_error(result)
    assert not missing.exists(), "refusing it made nothing"


def test_migrate_from_a_store_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    target = new_store("sqlite", tmp_path / "to")
    missing = tmp_path / "no-such-store"
    result = cli("migrate", "--from", f"jsonl:{missing}", "--to", target.spec, "--all")
    assert result.exit_code == 1
    assert f"no store at {missing}" in one_line_error(result)
    assert "verified" not in result.stdout
    assert not target.path.exists()


def test_import_and_migrate_make_the_store_they_name(tmp_path: Path) -> None:
    chat = tmp_path / "chat.json"
    chat.write_bytes(msgspec.json.encode([{"role": "user", "content": "hi"}]))
    imported = new_store("jsonl", tmp_path / "imported")
    assert cli("import", str(chat), "--id", "s", store=imported).exit_code == 0
    migrated = new_store("sqlite", tmp_path / "migrated")
    done = cli("migrate", "--from", imported.spec, "--to", migrated.spec, "--all")
    assert done.exit_code == 0, done.output
    assert "s" in cli("ls", "--json", store=migrated).stdout


def test_the_default_store_not_existing_yet_is_normal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    result = cli("ls")
    assert result.exit_code == 0, result.stderr
    assert "no sessions stored" in result.stdout


def test_a_directory_where_the_sqlite_file_belongs_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir(mode=0o700)
    result = cli("--store", f"sqlite:{folder}", "ls")
    assert result.exit_code == 1
    assert f"{folder} is a directory; the SQLite store is a database file" in (
        one_line_error(result)
    )


def test_a_sticky_temporary_directory_is_named_as_a_directory() -> None:
    # Not a complaint about its parent's permissions.
    result = cli("--store", "sqlite:/tmp", "ls")
    assert result.exit_code == 1
    assert "/tmp is a directory" in one_line_error(result)


def test_a_file_where_the_jsonl_directory_belongs_says_so(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    result = cli("--store", f"jsonl:{file}", "ls")
    assert result.exit_code == 1
    assert f"{file} is a file; the JSONL store is a directory" in one_line_error(result)


def test_an_existing_store_reads_as_before(tmp_path: Path) -> None:
    store = make_store("jsonl", tmp_path)
    asyncio.run(converse(store, "s", prompts=("hi",)))
    assert "s" in cli("ls", store=store).stdout


def test_only_a_refused_access_is_told_to_check_permissions() -> None:
    import errno

    from turnkeep.cli.runtime import describe_error
    from turnkeep.errors import StorageError

    denied = StorageError("cannot use /x for the SQLite database: Permission denied")
    denied.__cause__ = PermissionError(errno.EACCES, "Permission denied")
    assert "check the store's location and permissions" in describe_error(denied)
    damaged = StorageError("/x is not an SQLite database; point `path` at a new file")
    assert "permissions" not in describe_error(damaged)
