"""The core conformance kit, run against the SQLite backend."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
from pathlib import Path

import pytest

from turnkeep.conformance import MakeBackend, PersistenceContract
from turnkeep.meta import FORMAT_VERSION
from turnkeep.persistence import SessionPersistence
from turnkeep_sqlite import SqliteConfig, SqlitePersistence
from turnkeep_sqlite.owner import live_tokens

from .test_backend import LosesCommitReply


class TestSqliteBackend(PersistenceContract):
    supports_reopen = True
    supports_multiple_processes = True
    supports_tail_damage = True
    supports_committed_damage = True
    supports_format_aging = True
    supports_byte_scan = True
    supports_lost_acknowledgement = True
    supports_held = True
    supports_load_after = True
    supports_wait_for_commit = True
    supports_cancel_requests = True
    supports_audit = True
    supports_owner_death = True

    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> MakeBackend:
        self.path = tmp_path / "store" / "sessions.sqlite3"
        return lambda: SqlitePersistence(SqliteConfig(path=self.path))

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None, timeout=10)

    async def kill_owner(self, backend: SessionPersistence) -> None:
        # What its process's death leaves: rows naming a token no live
        # instance has (the identity is this process's, which still runs).
        token = backend._token  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
        live_tokens().discard(token)  # pyright: ignore[reportUnknownArgumentType]

    async def tear_tail(self, session_id: str) -> None:
        # A crash mid-commit leaves WAL frames without a valid commit frame
        # after the last committed one: append such bytes to the WAL.
        del session_id
        fd = os.open(f"{self.path}-wal", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, os.urandom(4096 + 24) * 2)
        finally:
            os.close(fd)

    async def damage_committed(self, session_id: str) -> None:
        # Remove an acknowledged event from the middle of the log, as a
        # damaged page or a hand edit would.
        conn = self._connect()
        try:
            conn.execute(
                "DELETE FROM events WHERE seq = 5 AND session_key = "
                "(SELECT key FROM sessions WHERE id = ?)",
                (session_id,),
            )
        finally:
            conn.close()

    async def write_newer_format(self, session_id: str) -> None:
        conn = self._connect()
        try:
            conn.execute(
                "UPDATE sessions SET format_version = ? WHERE id = ?",
                (FORMAT_VERSION + 1, session_id),
            )
        finally:
            conn.close()

    async def storage_digest(self) -> bytes:
        return await asyncio.to_thread(file_digest, self.path)

    async def stored_bytes(self) -> dict[str, bytes]:
        # The database, its WAL and index, free pages and all.
        return await asyncio.to_thread(self.files_under, self.path.parent)

    async def lose_next_commit_reply(
        self, backend: SessionPersistence, session_id: str, *, lands: bool
    ) -> None:
        # The writer's next COMMIT (landing or not) reports an I/O error.
        del session_id
        assert isinstance(backend, SqlitePersistence)
        LosesCommitReply.install(backend, lands=lands)


def file_digest(path: Path) -> bytes:
    """sha256 over the database and its WAL (the -shm index is not data)."""
    digest = hashlib.sha256()
    for suffix in ("", "-wal"):
        try:
            digest.update(Path(f"{path}{suffix}").read_bytes())
        except FileNotFoundError:
            digest.update(b"<absent>")
    return digest.digest()
