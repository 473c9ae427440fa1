"""Cancel requests for SQLite: one row per session in `cancel_requests`.

A request from another process is the session's latest `CancelRequest`,
kept in its own table (schema version 4), keyed by the session's row and
deleted with it (`ON DELETE CASCADE`). Recording one is one operation of
the backend's writer (it may share a group commit with other sessions'
flushes): it never touches `events` or the session row and needs no writer
role, so it lands while another process holds the session; the number is
taken inside its transaction, so racing
requesters each get their own. The owner's probe is one indexed lookup.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from turnkeep.cancelrequest import CancelRequest, next_request
from turnkeep.errors import SessionNotFoundError
from turnkeep_sqlite.writer import Tx

__all__ = ["cancel_requested", "request_cancel"]

_LATEST: Final = (
    "SELECT s.key, c.number, c.reason, c.requested_at FROM sessions AS s "
    "LEFT JOIN cancel_requests AS c ON c.session_key = s.key "
    "WHERE s.id = ? AND s.next_seq > 0"
)


def request_cancel(tx: Tx, session_id: str, reason: str) -> CancelRequest:
    """Record the request after the session's latest."""
    key, latest = _latest(tx.conn, session_id)
    request = next_request(latest, reason)
    tx.conn.execute(
        "INSERT INTO cancel_requests (session_key, number, reason, requested_at) "
        "VALUES (?, ?, ?, ?) ON CONFLICT (session_key) DO UPDATE SET "
        "number = excluded.number, reason = excluded.reason, "
        "requested_at = excluded.requested_at",
        (key, request.number, request.reason, request.requested_at),
    )
    return request


def cancel_requested(
    conn: sqlite3.Connection, session_id: str, after: int
) -> CancelRequest | None:
    """The session's latest request if numbered above `after`."""
    _, latest = _latest(conn, session_id)
    return latest if latest is not None and latest.number > after else None


def _latest(
    conn: sqlite3.Connection, session_id: str
) -> tuple[int, CancelRequest | None]:
    row = conn.execute(_LATEST, (session_id,)).fetchone()
    if row is None:
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    key, number, reason, requested_at = row
    if number is None:
        return key, None
    return key, CancelRequest(number=number, reason=reason, requested_at=requested_at)
