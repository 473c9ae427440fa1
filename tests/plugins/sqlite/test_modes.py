"""Plan item 28 for SQLite (modes), with the symlink refusals of R12.

Under umask 000 and 077 the directory the backend creates is 0700 and the
database, `-wal` and `-shm` are 0600. A store directory that is group- or
world-writable, owned by another user, or a symlink is refused; so are
symlinks planted at the database's or its siblings' names, and the link
targets are left untouched. `nobody` (the suite runs as root, so the check
drops privileges in a subprocess) can read none of the files, even when the
directory is opened up; a positive control proves the check can fail.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from tests.support import needs
from tests.support.worker_client import worker_argv

from turnkeep.errors import StorageError
from turnkeep_sqlite import SqliteConfig, SqlitePersistence

from .conftest import meta, turn_records

NOBODY = 65534


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


async def _write_some(path: Path) -> SqlitePersistence:
    backend = SqlitePersistence(SqliteConfig(path=path))
    await backend.create(meta("s"))
    await backend.append("s", turn_records(0, 0))
    return backend


@pytest.mark.parametrize("umask", [0o000, 0o077, 0o022])
@pytest.mark.asyncio
async def test_created_directory_and_files_are_private(
    tmp_path: Path, umask: int
) -> None:
    path = tmp_path / "a" / "b" / "s.sqlite3"
    old = os.umask(umask)
    try:
        backend = await _write_some(path)
    finally:
        os.umask(old)
    try:
        names = sorted(p.name for p in path.parent.iterdir())
        assert names == ["s.sqlite3", "s.sqlite3-shm", "s.sqlite3-wal"]
        for name in names:
            assert _mode(path.parent / name) == 0o600, name
        assert _mode(path.parent) == 0o700
        assert _mode(path.parent.parent) == 0o700  # every directory it created
    finally:
        await backend.aclose()


@pytest.mark.asyncio
async def test_an_existing_wider_file_is_tightened(tmp_path: Path) -> None:
    path = tmp_path / "store" / "s.sqlite3"
    path.parent.mkdir(mode=0o700)
    path.touch()
    path.chmod(0o644)
    backend = await _write_some(path)
    try:
        assert _mode(path) == 0o600
    finally:
        await backend.aclose()


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o1777])
@pytest.mark.asyncio
async def test_a_shared_writable_directory_is_refused(
    tmp_path: Path, mode: int
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    store.chmod(mode)
    backend = SqlitePersistence(SqliteConfig(path=store / "s.sqlite3"))
    try:
        with pytest.raises(StorageError, match="writable by other users"):
            await backend.create(meta("s"))
    finally:
        await backend.aclose()
    assert list(store.iterdir()) == []


@pytest.mark.asyncio
async def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    needs.root("to give the directory away")
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    os.chown(store, NOBODY, NOBODY)
    backend = SqlitePersistence(SqliteConfig(path=store / "s.sqlite3"))
    try:
        with pytest.raises(StorageError, match="belongs to uid"):
            await backend.create(meta("s"))
    finally:
        await backend.aclose()
    assert list(store.iterdir()) == []


def _canary(tmp_path: Path) -> tuple[Path, bytes]:
    canary = tmp_path / "canary"
    canary.write_bytes(b"do not touch")
    canary.chmod(0o644)
    return canary, b"do not touch"


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "-journal"])
@pytest.mark.asyncio
async def test_a_planted_file_symlink_is_refused(tmp_path: Path, suffix: str) -> None:
    canary, content = _canary(tmp_path)
    path = tmp_path / "store" / "s.sqlite3"
    path.parent.mkdir(mode=0o700)
    os.symlink(canary, f"{path}{suffix}")
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        with pytest.raises(StorageError, match="symlink"):
            await backend.create(meta("s"))
        with pytest.raises(StorageError, match="symlink"):
            await backend.load("s")
    finally:
        await backend.aclose()
    assert canary.read_bytes() == content
    assert _mode(canary) == 0o644


@pytest.mark.asyncio
async def test_a_symlinked_store_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    backend = SqlitePersistence(SqliteConfig(path=tmp_path / "link" / "s.sqlite3"))
    try:
        with pytest.raises(StorageError, match="symlink"):
            await backend.create(meta("s"))
    finally:
        await backend.aclose()
    assert list(real.iterdir()) == []


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A directory `nobody` can traverse (the pytest temp root is root-only)."""
    base = Path(tempfile.mkdtemp(prefix="turnkeep-sqlite-modes-"))
    os.chmod(base, 0o711)  # noqa: S103 - traversable only, like a home directory
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _nobody_reads(path: Path) -> str:
    done = subprocess.run(
        worker_argv("sqlite", "read", str(path), str(NOBODY)),
        capture_output=True,
        check=True,
        timeout=60,
    )
    reply: dict[str, str] = msgspec.json.decode(done.stdout.splitlines()[-1])
    return reply["outcome"]


@pytest.mark.asyncio
async def test_nobody_can_read_no_session_file(reachable_dir: Path) -> None:
    needs.root("to switch to nobody")
    path = reachable_dir / "store" / "s.sqlite3"
    backend = await _write_some(path)
    try:
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        assert _nobody_reads(path.parent) == "PermissionError"
        for file in files:
            assert _nobody_reads(file) == "PermissionError", file
        # Even with the directory opened up, the files themselves are private.
        path.parent.chmod(0o755)
        for file in files:
            assert _nobody_reads(file) == "PermissionError", file
        control = path.parent / "control"
        control.write_bytes(b"readable")
        control.chmod(0o644)
        assert _nobody_reads(control) == "ok"  # the check can fail
    finally:
        await backend.aclose()
