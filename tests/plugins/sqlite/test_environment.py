"""Plan item 16 for SQLite: environment errors, table-driven.

Each case breaks the environment in one way and checks the backend answers
with a typed turnkeep error, never a silent success, and never a partial
turn. Cases that need permissions to apply run as `nobody` (the suite runs
as root, which bypasses them); the read-only file system case runs in a user
and mount namespace (`unshare -rm`) with a read-only bind mount. (EIO on read
and disk full on WAL growth are in `test_faults.py`.)
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import sqlite3
import subprocess
import tempfile
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import msgspec
import pytest
from tests.support import needs
from tests.support.worker_client import worker_argv

from turnkeep.errors import (
    EventTooLargeError,
    PersistenceError,
    SessionCorruptError,
    SessionOwnershipError,
    StorageError,
    UnsupportedFormatError,
)
from turnkeep_sqlite import SCHEMA_VERSION, SqliteConfig, SqlitePersistence
from turnkeep_sqlite.schema import READ_MARGIN

from .conftest import meta, turn_records

NOBODY = 65534


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as file:
        file.write(data)


def _read(path: Path) -> bytes:
    with open(path, "rb") as file:
        return file.read()


async def _stored(path: Path, turns: int = 2, **options: object) -> SqlitePersistence:
    backend = SqlitePersistence(SqliteConfig(path=path, **options))  # type: ignore[arg-type]
    await backend.create(meta("s"))
    seq = 0
    for n in range(turns):
        records = turn_records(seq, n)
        await backend.append("s", records)
        seq += len(records)
    return backend


async def _next(backend: SqlitePersistence) -> None:
    events = 0
    try:
        events = len((await backend.load("s")).events)
    except PersistenceError:
        events = 6  # the two stored turns; the load failure is not under test here
    await backend.append("s", turn_records(events, 9))


async def case_store_dir_removed(path: Path) -> None:
    backend = await _stored(path)
    try:
        shutil.rmtree(path.parent)
        with pytest.raises(StorageError, match="disappeared"):
            await backend.append("s", turn_records(6, 2))
        with pytest.raises(StorageError):  # poisoned: nothing is acknowledged later
            await backend.append("s", turn_records(6, 2))
    finally:
        await backend.aclose()


async def case_db_file_unlinked(path: Path) -> None:
    backend = await _stored(path)
    try:
        os.unlink(path)
        with pytest.raises(StorageError, match="disappeared"):
            await backend.append("s", turn_records(6, 2))
    finally:
        await backend.aclose()


async def case_db_file_replaced(path: Path) -> None:
    backend = await _stored(path)
    try:
        other = path.with_name("other")
        other.write_bytes(b"")
        other.replace(path)
        with pytest.raises(StorageError, match="replaced"):
            await backend.append("s", turn_records(6, 2))
    finally:
        await backend.aclose()


async def case_locked_past_the_busy_timeout(path: Path) -> None:
    backend = await _stored(path, busy_timeout_ms=200)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(StorageError, match="busy timeout") as info:
            await backend.append("s", turn_records(6, 2))
        assert not isinstance(info.value, sqlite3.Error)
        holder.execute("ROLLBACK")
        await backend.append("s", turn_records(6, 2))  # busy is not poison
        assert len((await backend.load("s")).events) == 9
    finally:
        holder.close()
        await backend.aclose()


async def case_not_a_database(path: Path) -> None:
    os.mkdir(path.parent, 0o700)
    before = b"these are not the pages you are looking for" * 100
    _write(path, before)
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        with pytest.raises(StorageError, match="not an SQLite database"):
            await backend.has("s")
    finally:
        await backend.aclose()
    assert _read(path) == before


async def case_path_is_a_directory(path: Path) -> None:
    os.makedirs(path)
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        with pytest.raises(StorageError):
            await backend.has("s")
    finally:
        await backend.aclose()


async def case_parent_is_a_file(path: Path) -> None:
    path.parent.parent.mkdir(exist_ok=True)
    path.parent.write_bytes(b"")
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        with pytest.raises(StorageError):
            await backend.create(meta("s"))
    finally:
        await backend.aclose()


async def case_damaged_page(path: Path) -> None:
    backend = await _stored(path, turns=30)
    await backend.aclose()  # checkpoints the WAL into the file
    conn = sqlite3.connect(path)
    root = conn.execute(
        "SELECT rootpage FROM sqlite_master WHERE name = 'events'"
    ).fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with path.open("r+b") as file:
        file.seek((root - 1) * page_size)
        file.write(b"\xff" * 64)  # an impossible b-tree page header
    reader = SqlitePersistence(SqliteConfig(path=path))
    try:
        assert await reader.has("s")  # the sessions table is intact
        with pytest.raises(SessionCorruptError):
            await reader.load("s")
    finally:
        await reader.aclose()


async def case_schema_upgraded_while_open(path: Path) -> None:
    backend = await _stored(path)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1:d}")
        with pytest.raises(UnsupportedFormatError):
            await backend.append("s", turn_records(6, 2))
        with pytest.raises(UnsupportedFormatError):
            await backend.load("s")
    finally:
        other.close()
        await backend.aclose()


async def case_event_over_the_size_limit(path: Path) -> None:
    backend = await _stored(path, max_event_bytes=400)
    try:
        with pytest.raises(EventTooLargeError):
            await backend.append("s", turn_records(6, 2, sizes=[10, 500]))
        assert len((await backend.load("s")).events) == 6
    finally:
        await backend.aclose()


async def case_stored_event_over_the_size_limit(path: Path) -> None:
    backend = await _stored(path)
    await backend.aclose()
    conn = sqlite3.connect(path, isolation_level=None)
    # One byte more than a reader of max_event_bytes=1000 may allocate.
    conn.execute(
        "UPDATE events SET raw = zeroblob(?) WHERE seq = 1", (1000 + READ_MARGIN + 1,)
    )
    conn.close()
    reader = SqlitePersistence(SqliteConfig(path=path, max_event_bytes=1000))
    try:
        with pytest.raises(SessionCorruptError, match="max_event_bytes"):
            await reader.load("s")
    finally:
        await reader.aclose()


async def case_acknowledged_event_missing(path: Path) -> None:
    backend = await _stored(path, turns=3)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DELETE FROM events WHERE seq = 4")
    conn.close()
    try:
        with pytest.raises(SessionCorruptError) as info:
            await backend.load("s")
        assert info.value.offset == 4
        with pytest.raises(SessionCorruptError):
            await backend.append("s", turn_records(9, 3))
    finally:
        await backend.aclose()


async def case_last_event_missing_refuses_append(path: Path) -> None:
    backend = await _stored(path, turns=2)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DELETE FROM events WHERE seq = 5")
    conn.close()
    try:
        # Caught in the append's own transaction, without any load first.
        with pytest.raises(SessionCorruptError):
            await backend.append("s", turn_records(6, 2))
    finally:
        await backend.aclose()


async def case_wal_symlink_planted(path: Path) -> None:
    backend = await _stored(path)
    await backend.aclose()
    canary = path.parent.parent / "canary"
    canary.write_bytes(b"canary")
    os.symlink(canary, f"{path}-wal")
    reopened = SqlitePersistence(SqliteConfig(path=path))
    try:
        with pytest.raises(StorageError, match="symlink"):
            await reopened.has("s")
    finally:
        await reopened.aclose()
    assert canary.read_bytes() == b"canary"


async def case_closed_backend(path: Path) -> None:
    backend = await _stored(path)
    await backend.aclose()
    with pytest.raises(PersistenceError, match="closed"):
        await backend.append("s", turn_records(6, 2))


async def case_used_from_a_forked_child(path: Path) -> None:
    backend = await _stored(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
            pid = os.fork()
        if pid == 0:
            code = 1
            try:
                asyncio.run(backend.has("s"))
            except SessionOwnershipError:
                code = 0
            except BaseException:
                code = 2
            os._exit(code)
        _, status = await asyncio.to_thread(os.waitpid, pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        await _next(backend)  # the parent's handle is unaffected
    finally:
        await backend.aclose()


CASES: dict[str, Callable[[Path], Awaitable[None]]] = {
    name.removeprefix("case_"): fn
    for name, fn in dict(globals()).items()
    if name.startswith("case_")
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.asyncio
async def test_environment_error(case: str, tmp_path: Path) -> None:
    await CASES[case](tmp_path / "store" / "s.sqlite3")


# -- cases that need permissions to apply: run as nobody -----------------------


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory nobody can reach (the pytest temp root is root-only)."""
    base = Path(tempfile.mkdtemp(prefix="turnkeep-sqlite-"))
    os.chmod(base, 0o711)  # noqa: S103 - traversable only, like a home directory
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _once(path: Path, *uid: int, mode: str = "once") -> dict[str, str]:
    done = subprocess.run(
        worker_argv("sqlite", mode, str(path), *map(str, uid)),
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    reply: dict[str, str] = msgspec.json.decode(done.stdout.splitlines()[-1])
    return reply


def _as_nobody(path: Path) -> dict[str, str]:
    return _once(path, NOBODY)


def _nobody_store(base: Path) -> Path:
    store = base / "store"
    store.mkdir(mode=0o700)
    os.chown(store, NOBODY, NOBODY)
    path = store / "s.sqlite3"
    assert _as_nobody(path)["outcome"] == "ok"  # a working store first
    return path


def _needs_root() -> None:
    needs.root("to switch to nobody")


def test_read_only_database_file(shared_dir: Path) -> None:
    _needs_root()
    path = _nobody_store(shared_dir)
    path.chmod(0o400)
    before = path.read_bytes()
    assert _as_nobody(path)["outcome"] == "StorageError"
    assert path.read_bytes() == before


def test_read_only_directory(shared_dir: Path) -> None:
    _needs_root()
    path = _nobody_store(shared_dir)
    path.parent.chmod(0o500)
    assert _as_nobody(path)["outcome"] == "StorageError"


def test_eacces_on_open(shared_dir: Path) -> None:
    _needs_root()
    path = _nobody_store(shared_dir)
    path.chmod(0o000)
    assert _as_nobody(path)["outcome"] == "StorageError"


def test_database_owned_by_another_user(shared_dir: Path) -> None:
    _needs_root()
    path = _nobody_store(shared_dir)
    os.chown(path, 0, 0)
    path.chmod(0o666)  # readable and writable: only the owner check refuses it
    reply = _as_nobody(path)
    assert reply["outcome"] == "StorageError"
    assert "belongs to uid 0" in reply["message"]


def test_read_only_file_system(tmp_path: Path) -> None:
    unshare = needs.user_namespaces()
    store = tmp_path / "store"
    path = store / "s.sqlite3"
    assert _once(path)["outcome"] == "ok"
    before = path.read_bytes()
    script = (
        f'mount --bind "{store}" "{store}" && mount -o remount,ro,bind "{store}" '
        f"&& exec {shlex.join(worker_argv('sqlite', 'once', str(path)))}"
    )
    done = subprocess.run(
        [unshare, "-rm", "sh", "-c", script],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    reply = msgspec.json.decode(done.stdout.splitlines()[-1])
    assert reply["outcome"] == "StorageError", reply
    assert path.read_bytes() == before
