"""Plan items 32 and 33 for SQLite: schema versions.

32. A database whose `PRAGMA user_version` is newer than the code (in the
    file header, or only in a not yet checkpointed WAL), or that belongs to
    another application, is refused by `load` and `append` with the files
    byte-identical afterwards (sha256) and no file added.
33. The committed schema-v1 fixture loads to the expected metadata and
    events, migrated to the current schema with `turns` and `size` counted
    from its events; migrating is idempotent (a second open changes nothing
    and logs nothing; the v2 step run again computes the same numbers); two
    processes opening a new file, or a copy of the v1 fixture, at once apply
    each migration exactly once (100 races in CI, 2,000 in soak).
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.support.worker_client import SpawnWorker

from turnkeep.errors import StorageError, UnsupportedFormatError
from turnkeep_sqlite import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    SqliteConfig,
    SqlitePersistence,
    schema as schema_module,
)
from turnkeep_sqlite.schema import _turns_and_size  # pyright: ignore[reportPrivateUsage]

from .conftest import meta, turn_records

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


def _v1_fixture(directory: Path) -> Path:
    path = directory / "s.sqlite3"
    path.parent.mkdir(mode=0o700, exist_ok=True)
    shutil.copyfile(FIXTURES / "schema-v1.sqlite3", path)
    return path


def _numbers(raws: list[bytes]) -> dict[str, int]:
    """The summary numbers of stored events (decoded for their type)."""
    types = [msgspec.json.decode(r, type=dict[str, Any])["type"] for r in raws]
    return {
        "event_count": len(raws),
        "turns": types.count("turn/end"),
        "size": sum(map(len, raws)),
    }


def _expected_v1() -> dict[str, tuple[dict[str, Any], list[bytes]]]:
    """Per session: its metadata as schema 2 reports it, and its events."""
    expected: dict[str, Any] = msgspec.json.decode(
        (FIXTURES / "schema-v1.expected.json").read_bytes()
    )
    out: dict[str, tuple[dict[str, Any], list[bytes]]] = {}
    for sid, want in expected.items():
        raws = [base64.b64decode(e) for e in want["events"]]
        meta = want["meta"]
        summary = {**meta["summary"], **_numbers(raws)}
        out[sid] = ({**meta, "summary": summary}, raws)
    return out


@pytest.mark.asyncio
async def test_the_schema_v1_fixture_loads(tmp_path: Path) -> None:
    path = _v1_fixture(tmp_path / "store")
    expected = _expected_v1()
    assert {m["summary"]["turns"] for m, _ in expected.values()} == {3}
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        page = await backend.list()
        assert {m.id: msgspec.to_builtins(m) for m in page.items} == {
            sid: meta for sid, (meta, _) in expected.items()
        }
        for sid, (meta, raws) in expected.items():
            loaded = await backend.load(sid)
            assert msgspec.to_builtins(loaded.meta) == meta
            assert loaded.events == raws
        # ...and it stays writable, counting on from the migrated numbers.
        await backend.claim("golden-parent")
        more = turn_records(15, 9)
        await backend.append("golden-parent", more)
        raws = [*expected["golden-parent"][1], *(r.raw for r in more)]
        summary = (await backend.load("golden-parent")).meta.summary
        numbers = {"event_count": summary.event_count, "turns": summary.turns}
        assert {**numbers, "size": summary.size} == _numbers(raws)
    finally:
        await backend.aclose()
    assert [v for v, _ in _migrations(path)] == list(range(1, SCHEMA_VERSION + 1))
    conn = sqlite3.connect(path)
    try:
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        listed = {
            name: [
                r[0]
                for r in conn.execute("SELECT name FROM pragma_index_info(?)", (name,))
            ]
            for name in ("sessions_recent", "sessions_by_status")
        }
    finally:
        conn.close()
    assert "sessions_by_status" in indexes  # version 3
    assert "cancel_requests" in indexes  # version 4
    assert "audit_by_scope" in indexes  # version 5
    assert listed == {  # version 6
        "sessions_recent": ["updated_at", "id", "listing"],
        "sessions_by_status": ["status", "updated_at", "id", "listing"],
    }


def test_the_v2_step_is_idempotent(tmp_path: Path) -> None:
    path = _v1_fixture(tmp_path / "store")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        _turns_and_size(conn)
        first = conn.execute(
            "SELECT id, next_seq, turns, size FROM sessions ORDER BY id"
        ).fetchall()
        _turns_and_size(conn)  # again, columns present: the same numbers
        again = conn.execute(
            "SELECT id, next_seq, turns, size FROM sessions ORDER BY id"
        ).fetchall()
        conn.execute("ROLLBACK")  # and all of it rolls back: still version 1
        columns = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
    finally:
        conn.close()
    assert first == again
    expected = _expected_v1()
    assert first == [
        (sid, n["event_count"], n["turns"], n["size"])
        for sid, n in sorted((s, _numbers(r)) for s, (_, r) in expected.items())
    ]
    assert "turns" not in columns


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
    assert [v for v, _ in _migrations(db_path)] == list(range(1, SCHEMA_VERSION + 1))
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
    count: int,
    tmp_path: Path,
    spawn_worker: SpawnWorker,
    *,
    from_v1: bool = False,
) -> None:
    workers = [spawn_worker(), spawn_worker()]
    expected = _expected_v1()
    for race in range(count):
        path = tmp_path / f"r{race}" / "s.sqlite3"
        if from_v1:
            _v1_fixture(path.parent)
        for w in workers:
            w.send(op="open", path=str(path))
        for w in workers:
            w.recv()
        # The first write opens the writer, which migrates; a read of a file
        # that needs it (v1) has the writer migrate first. A read of a
        # missing file creates nothing, so the fresh races start with a write.
        op = "has" if from_v1 else "release"
        for w in workers:
            w.send(op=op, id="s")
        replies = [w.recv() for w in workers]
        assert all(r.get("result") is (False if from_v1 else None) for r in replies), (
            replies
        )
        migrations = _migrations(path)
        assert [v for v, _ in migrations] == list(range(1, SCHEMA_VERSION + 1)), (
            f"race {race}: {migrations}"
        )
        if from_v1:
            conn = sqlite3.connect(path)
            try:
                rows = conn.execute("SELECT id, turns, size FROM sessions").fetchall()
            finally:
                conn.close()
            assert {r[0]: r[1:] for r in rows} == {
                sid: (n["turns"], n["size"])
                for sid, n in ((s, _numbers(r)) for s, (_, r) in expected.items())
            }
        for w in workers:
            w.call(op="close")


@pytest.mark.slow
def test_concurrent_first_opens_migrate_once(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    _migration_races(100, tmp_path, spawn_worker)


@pytest.mark.slow
def test_concurrent_first_opens_of_a_v1_database_migrate_once(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    _migration_races(100, tmp_path, spawn_worker, from_v1=True)


@pytest.mark.soak
def test_concurrent_first_opens_migrate_once_soak(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    _migration_races(2000, tmp_path, spawn_worker)


def _json_missing(conn: sqlite3.Connection) -> None:
    def refuse(*_: object) -> str:
        raise sqlite3.OperationalError("no such function: json_object")

    conn.create_function("json_object", -1, refuse, deterministic=True)


def _lacking(monkeypatch: pytest.MonkeyPatch, lacks: str) -> None:
    """Make this SQLite look older, or its writer connections JSON-less."""
    if lacks == "generated columns":
        monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 30, 1))
        return
    connect = schema_module._connect  # pyright: ignore[reportPrivateUsage]

    def without_json(path: Path) -> sqlite3.Connection:
        conn = connect(path)
        _json_missing(conn)
        return conn

    monkeypatch.setattr(schema_module, "_connect", without_json)


@pytest.mark.parametrize("operation", ["write", "read"])
@pytest.mark.parametrize("lacks", ["generated columns", "JSON functions"])
@pytest.mark.asyncio
async def test_a_sqlite_without_what_version_6_needs_is_refused_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lacks: str, operation: str
) -> None:
    path = _v1_fixture(tmp_path / "store")
    before = path.read_bytes()
    _lacking(monkeypatch, lacks)
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        attempt = backend.claim("golden-parent") if operation == "write" else None
        with pytest.raises(
            UnsupportedFormatError, match=f"has no {lacks}.*nothing was changed"
        ) as info:
            await (attempt if attempt is not None else backend.list())
        # A read that needs the migration says what is missing, not that
        # the file should be made writable.
        assert "write access" not in str(info.value)
    finally:
        await backend.aclose()
    assert path.read_bytes() == before
    assert [v for v, _ in _migrations(path)] == [1]


@pytest.mark.asyncio
async def test_a_version_6_file_is_not_written_by_a_sqlite_without_json(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _stored_db(db_path)  # migrated to version 6 already
    _lacking(monkeypatch, "JSON functions")
    backend = SqlitePersistence(SqliteConfig(path=db_path))
    try:
        assert [m.id for m in (await backend.list()).items] == ["s"]  # reads work
        with pytest.raises(UnsupportedFormatError, match="has no JSON functions"):
            await backend.claim("s")
    finally:
        await backend.aclose()


@pytest.mark.asyncio
async def test_a_row_holding_a_blob_where_text_belongs_stops_the_migration_unchanged(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store" / "s.sqlite3"
    _v5_store(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("UPDATE sessions SET title = x'00ff' WHERE id = 'b'")
    finally:
        conn.close()
    before = _rows(path)
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        with pytest.raises(StorageError, match=r"'b' hold a BLOB.*nothing was changed"):
            await backend.claim("a")
    finally:
        await backend.aclose()
    assert _rows(path) == before
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 0
    finally:
        conn.close()


def _v5_store(path: Path) -> None:
    """A version-5 database built by the first five steps, with rows in
    every table that references `sessions`."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("BEGIN")
        for version, step in schema_module._MIGRATIONS[:5]:  # pyright: ignore[reportPrivateUsage]
            step(conn)
            conn.execute(f"PRAGMA user_version = {version:d}")
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")
        records = turn_records(0, 0, sizes=[5, 7, 7])  # 4 events, one turn
        # Keys neither contiguous nor in id order: a rebuild must copy them.
        for key, sid in ((9, "a"), (4, "b")):
            conn.execute(
                "INSERT INTO sessions (key, id, format_version, created_at, cwd, "
                "updated_at, title, next_seq, turns, size) "
                "VALUES (?, ?, 2, 1, '/w', ?, ?, ?, 1, 0)",
                (key, sid, 10 + key, f"title {sid}", len(records)),
            )
            for record in records:
                conn.execute(
                    "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                    (key, record.seq, record.type, record.time, record.raw),
                )
            conn.execute(
                "UPDATE sessions SET size = "
                "(SELECT sum(length(raw)) FROM events WHERE session_key = ?) "
                "WHERE key = ?",
                (key, key),
            )
            conn.execute("INSERT INTO cancel_requests VALUES (?, 1, 'stop', 5)", (key,))
            conn.execute(
                "INSERT INTO audit (session_key, number, at, action, session_id, "
                "reason, host, pid, detail) "
                "VALUES (?, 1, 5, 'test', ?, 'r', 'h', 1, '{}')",
                (key, sid),
            )
        conn.execute("COMMIT")
    finally:
        conn.close()


def _rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        # The events' columns of version 6 (version 7 adds `span`, 1 for each).
        columns = {"events": "session_key, seq, type, time, raw"}
        return {
            table: conn.execute(
                f"SELECT {columns.get(table, '*')} FROM {table} ORDER BY 1, 2"  # noqa: S608 - test tables
            ).fetchall()
            for table in ("events", "cancel_requests", "audit")
        }
    finally:
        conn.close()


@pytest.mark.asyncio
async def test_version_6_rebuilds_sessions_keeping_every_row_that_references_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store" / "s.sqlite3"
    _v5_store(path)
    before = _rows(path)
    assert [len(rows) for rows in before.values()] == [8, 2, 2]
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        listed = {m.id: m for m in (await backend.list()).items}
        assert list(listed) == ["a", "b"]  # newest first
        for sid, meta in listed.items():
            loaded = await backend.load(sid)
            assert loaded.meta == meta
            assert len(loaded.events) == 4
            assert meta.summary.title == f"title {sid}"
            assert meta.summary.size == sum(map(len, loaded.events))
        assert _rows(path) == before
        # The foreign keys hold again: deleting a session takes its rows.
        await backend.delete("a")
    finally:
        await backend.aclose()
    after = _rows(path)
    assert all(row[0] == 4 for row in after["events"])
    assert [row[0] for row in after["cancel_requests"]] == [4]
    assert [row[1] for row in after["audit"]] == [4]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        (sql,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'sessions'"
        ).fetchone()
    finally:
        conn.close()
    assert "STORED" in sql
    conn = sqlite3.connect(path)
    try:
        keys = conn.execute("SELECT id, key FROM sessions ORDER BY id").fetchall()
    finally:
        conn.close()
    assert keys == [("b", 4)]
    assert [v for v, _ in _migrations(path)] == [6, 7]  # the first five were by hand
