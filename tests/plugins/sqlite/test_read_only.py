"""Reads need no writer: a read-only SQLite file or folder reads (issue 12 point 13).

In-process: reads never open the writer connection, and a missing file
reads as an empty store without being created. In a subprocess with the
store read-only (`tests.support.readonly`): reads work, a write fails with a
`StorageError` naming the file, an older schema (which only the writer may
migrate) and a WAL holding data in a read-only folder are refused with
typed errors that say how to fix them, and nothing on disk changes.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.support.readonly import run_read_only

import turnkeep_sqlite.backend
from turnkeep.errors import SessionNotFoundError
from turnkeep_sqlite import SqliteConfig, SqlitePersistence

from .conftest import meta, turn_records

FIXTURES = Path(__file__).parent / "fixtures"

# Runs one operation on the store at argv[1] and prints its outcome as JSON.
_PROGRAM = """
import asyncio, json, sys
from turnkeep_sqlite import SqliteConfig, SqlitePersistence

async def main(path, op):
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        if op == "read":
            page = await backend.list()
            loaded = await backend.load(page.items[0].id)
            has = await backend.has(page.items[0].id)
            result = [[m.id for m in page.items], len(loaded.events), has]
        elif op == "claim":
            result = await backend.claim("s")
        elif op == "delete":
            result = await backend.delete("s")
        print(json.dumps({"result": result}))
    except Exception as exc:
        names = [c.__name__ for c in type(exc).__mro__]
        print(json.dumps({"error": names, "message": str(exc)}))
    finally:
        await backend.aclose()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def _read_only(root: Path, path: Path, op: str) -> dict[str, Any]:
    done = run_read_only(root, [sys.executable, "-c", _PROGRAM, str(path), op])
    assert done.returncode == 0, done.stderr
    return msgspec.json.decode(done.stdout, type=dict[str, Any])


def _files(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
    }


async def _stored(path: Path) -> None:
    backend = SqlitePersistence(SqliteConfig(path=path))
    await backend.create(meta("s"))
    await backend.append("s", turn_records(0, 0))
    await backend.aclose()


@pytest.mark.asyncio
async def test_reads_open_no_writer_connection(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _stored(db_path)

    def no_writer(*args: object, **kwargs: object) -> sqlite3.Connection:
        raise AssertionError("a read opened the writer connection")

    monkeypatch.setattr(turnkeep_sqlite.backend, "connect_writer", no_writer)
    backend = SqlitePersistence(SqliteConfig(path=db_path))
    try:
        assert [m.id for m in (await backend.list()).items] == ["s"]
        assert len((await backend.load("s")).events) == 3
        assert await backend.has("s")
        assert len((await backend.read_intact("s")).events) == 3
        assert backend.writer_stats.groups == 0
    finally:
        await backend.aclose()


@pytest.mark.asyncio
async def test_reads_of_a_missing_file_create_nothing(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "s.sqlite3"
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        assert (await backend.list()).items == []
        assert not await backend.has("s")
        with pytest.raises(SessionNotFoundError):
            await backend.load("s")
        assert not path.parent.exists()
        await backend.create(meta("s"))  # the first write creates and migrates
        await backend.append("s", turn_records(0, 0))
        assert await backend.has("s")
    finally:
        await backend.aclose()


@pytest.mark.parametrize("target", ["folder", "file"])
def test_reads_work_and_writes_are_typed_errors_on_a_read_only_store(
    db_path: Path, target: str
) -> None:
    asyncio.run(_stored(db_path))
    root = db_path.parent if target == "folder" else db_path
    before = db_path.read_bytes()
    assert _read_only(root, db_path, "read") == {"result": [["s"], 3, True]}
    for op in ("claim", "delete"):
        outcome = _read_only(root, db_path, op)
        assert "StorageError" in outcome.get("error", []), outcome
        assert str(db_path) in outcome["message"]
    assert db_path.read_bytes() == before


def test_an_older_schema_cannot_be_read_read_only(tmp_path: Path) -> None:
    path = tmp_path / "v1" / "s.sqlite3"
    path.parent.mkdir(mode=0o700)
    shutil.copyfile(FIXTURES / "schema-v1.sqlite3", path)
    before = _files(path.parent)
    outcome = _read_only(path.parent, path, "read")
    assert "UnsupportedFormatError" in outcome.get("error", []), outcome
    assert "cannot be read read-only" in outcome["message"]
    assert str(path) in outcome["message"]
    assert _files(path.parent) == before


def test_wal_data_in_a_read_only_folder_is_refused(tmp_path: Path) -> None:
    """`immutable=1` would ignore the WAL: refused, not read stale."""
    source = tmp_path / "live" / "s.sqlite3"
    source.parent.mkdir(mode=0o700)
    copy = tmp_path / "copy" / "s.sqlite3"
    copy.parent.mkdir(mode=0o700)
    asyncio.run(_stored(source))
    conn = sqlite3.connect(source, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute("UPDATE sessions SET title = 'in the WAL only'")
        # Copied while open: the -wal holds the update, and no -shm comes along.
        shutil.copyfile(source, copy)
        shutil.copyfile(f"{source}-wal", f"{copy}-wal")
    finally:
        conn.close()
    assert Path(f"{copy}-wal").stat().st_size > 0
    before = _files(copy.parent)
    outcome = _read_only(copy.parent, copy, "read")
    assert "StorageError" in outcome.get("error", []), outcome
    assert "write-ahead log" in outcome["message"]
    assert _files(copy.parent) == before
