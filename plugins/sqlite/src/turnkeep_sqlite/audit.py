"""The audit trail for SQLite: rows of the table `audit` (schema version 5).

A session's records are keyed by its row (`session_key`) and deleted with
it (`ON DELETE CASCADE`); the store's log has no session row
(`session_key` NULL) and outlives every session. Recording is one
operation of the backend's writer (it may share a group commit with other
sessions' flushes): it never touches `events` or the session row and needs
no writer role, so it lands while another process holds the session.
The number is taken inside its transaction (SQLite serialises writers), so
racing recorders each get their own; a unique index on the scope and number
guards it. Reading is one index range.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from turnkeep.audit import (
    ROW_COLUMNS,
    AuditRecord,
    numbered,
    record_from_row,
    record_row,
)
from turnkeep.errors import SessionNotFoundError
from turnkeep_sqlite.writer import Tx

__all__ = ["audit_records", "record_audit"]

_KEY: Final = "SELECT key FROM sessions WHERE id = ? AND next_seq > 0"
_INSERT: Final = (
    f"INSERT INTO audit (session_key, {ROW_COLUMNS}) "  # noqa: S608 - constant columns
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def record_audit(tx: Tx, scope: str | None, record: AuditRecord) -> AuditRecord:
    """Store `record` after the scope's last."""
    key = _key(tx.conn, scope)
    (last,) = tx.conn.execute(
        "SELECT coalesce(max(number), 0) FROM audit WHERE coalesce(session_key, 0) = ?",
        (key or 0,),
    ).fetchone()
    stored = numbered(record, last + 1)
    tx.conn.execute(_INSERT, (key, *record_row(stored)))
    return stored


def audit_records(
    conn: sqlite3.Connection, scope: str | None, after: int, limit: int
) -> list[AuditRecord]:
    """The scope's records numbered above `after`, at most `limit`."""
    key = _key(conn, scope)
    rows = conn.execute(
        f"SELECT {ROW_COLUMNS} FROM audit WHERE coalesce(session_key, 0) = ? "  # noqa: S608 - constant column list
        "AND number > ? ORDER BY number LIMIT ?",
        (key or 0, after, limit),
    ).fetchall()
    return [record_from_row(row) for row in rows]


def _key(conn: sqlite3.Connection, scope: str | None) -> int | None:
    if scope is None:
        return None
    row = conn.execute(_KEY, (scope,)).fetchone()
    if row is None:
        raise SessionNotFoundError(f"no stored session {scope!r}")
    return row[0]
