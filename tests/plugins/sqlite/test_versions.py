"""Plan items 32 and 33 for SQLite: schema versions.

32. A database whose `PRAGMA user_version` is newer than the code (in the
    file header, or only in a not yet checkpointed WAL), or that belongs to
    another application, is refused by `load` and `append` with the files
    byte-identical afterwards (sha256) and no file added.
33. The committed schema-v1 fixture loads to the expected metadata and
    events; migrating is idempotent (a second open changes nothing and logs
    nothing); two processes opening a new file at once apply each migration
    exactly once (100 races in CI, 2,000 in soak).
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from turnkeep.errors import StorageError, UnsupportedFormatError
from turnkeep_sqlite import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    SqliteConfig,
    SqlitePersistence,
)

from .conftest import Worker, meta, turn_records

FIXTURES = Path(__file__).parent / "fixtures"


def _snapshot(directory: Path) -> dict[str, str]:
    # The -shm file is SQLite's shared-memory WAL index (read marks and
    # locks), rewritten by every reader: its presence counts, not its bytes.
    return {
        p.name: "index"
        if p.name.endswith("-shm")
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
    }


async def _stored_db(path: Path) -> None:
    backend = SqlitePersistence(SqliteConfig(path=path))
    await backend.create(meta("s"))
    await backend.append("s", turn_records(0, 0))
    await backend.aclose()


async def _refused(path: Path, error: type[Exception]) -> None:
    before = _snapshot(path.parent)
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        with pytest.raises(error):
            await backend.load("s")
        with pytest.raises(error):
            await backend.append("s", turn_records(3, 1))
        with pytest.raises(error):
            await backend.create(meta("t"))
    finally:
        await backend.aclose()
    assert _snapshot(path.parent) == before  # not a byte changed, no file added


@pytest.mark.asyncio
async def test_newer_schema_in_the_header_is_refused_untouched(db_path: Path) -> None:
    await _stored_db(db_path)
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()  # the last connection: checkpointed, no -wal left
    assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]
    await _refused(db_path, UnsupportedFormatError)


@pytest.mark.asyncio
async def test_newer_schema_only_in_the_wal_is_refused_untouched(db_path: Path) -> None:
    await _stored_db(db_path)
    keep = sqlite3.connect(db_path, isolation_level=None)
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        keep.execute("PRAGMA wal_autocheckpoint = 0")
        keep.execute("SELECT count(*) FROM sessions").fetchone()
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 7}")
        conn.execute("INSERT INTO schema_migrations VALUES (99, 0, 0)")
        with db_path.open("rb") as file:
            file.seek(60)
            assert int.from_bytes(file.read(4), "big") == SCHEMA_VERSION  # header: old
        await _refused(db_path, UnsupportedFormatError)
    finally:
        conn.close()
        keep.close()


@pytest.mark.asyncio
async def test_a_database_of_another_application_is_refused_untouched(
    db_path: Path,
) -> None:
    db_path.parent.mkdir(mode=0o700)
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.commit()
    conn.close()
    await _refused(db_path, StorageError)
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA application_id = 1234")
    conn.close()
    await _refused(db_path, StorageError)


@pytest.mark.asyncio
async def test_the_schema_v1_fixture_loads(tmp_path: Path) -> None:
    path = tmp_path / "store" / "s.sqlite3"
    path.parent.mkdir(mode=0o700)
    shutil.copyfile(FIXTURES / "schema-v1.sqlite3", path)
    expected = msgspec.json.decode((FIXTURES / "schema-v1.expected.json").read_bytes())
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        page = await backend.list()
        assert {m.id for m in page.items} == set(expected)
        for sid, want in expected.items():
            loaded = await backend.load(sid)
            assert msgspec.to_builtins(loaded.meta) == want["meta"]
            assert loaded.events == [base64.b64decode(e) for e in want["events"]]
        # ...and it stays writable.
        await backend.claim("golden-parent")
        await backend.append("golden-parent", turn_records(15, 9))
    finally:
        await backend.aclose()


def _migrations(path: Path) -> list[tuple[int, int]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT version, pid FROM schema_migrations").fetchall()
    finally:
        conn.close()


@pytest.mark.asyncio
async def test_migration_is_idempotent(db_path: Path) -> None:
    await _stored_db(db_path)
    before = _snapshot(db_path.parent)
    assert [v for v, _ in _migrations(db_path)] == [1]
    backend = SqlitePersistence(SqliteConfig(path=db_path))
    try:
        assert await backend.has("s")
    finally:
        await backend.aclose()
    assert _snapshot(db_path.parent) == before
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    finally:
        conn.close()


def _migration_races(
    count: int, tmp_path: Path, spawn_worker: Callable[..., Worker]
) -> None:
    workers = [spawn_worker(), spawn_worker()]
    for race in range(count):
        path = tmp_path / f"r{race}" / "s.sqlite3"
        for w in workers:
            w.send(op="open", path=str(path))
        for w in workers:
            w.recv()
        for w in workers:
            w.send(op="has", id="s")  # the first use opens and migrates
        replies = [w.recv() for w in workers]
        assert all(r.get("result") is False for r in replies), replies
        migrations = _migrations(path)
        assert [v for v, _ in migrations] == list(range(1, SCHEMA_VERSION + 1)), (
            f"race {race}: {migrations}"
        )
        for w in workers:
            w.call(op="close")


@pytest.mark.slow
def test_concurrent_first_opens_migrate_once(
    tmp_path: Path, spawn_worker: Callable[..., Worker]
) -> None:
    _migration_races(100, tmp_path, spawn_worker)


@pytest.mark.soak
def test_concurrent_first_opens_migrate_once_soak(
    tmp_path: Path, spawn_worker: Callable[..., Worker]
) -> None:
    _migration_races(2000, tmp_path, spawn_worker)
