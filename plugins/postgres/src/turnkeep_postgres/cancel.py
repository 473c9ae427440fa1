"""Cancel requests for PostgreSQL: one row per session in `cancel_requests`.

A request from another process (on any machine) is the session's latest
`CancelRequest`, kept in its own table (schema migration 6), keyed by the
session and deleted with it (`ON DELETE CASCADE`). Recording one is one
statement in a transaction of its own: it never touches the events or the
session row and needs no lease, so it lands while another worker holds the
session; the number is taken by that statement, so racing requesters each
get their own. A trigger sends `"<number> <id>"` to `cancel_channel(schema)`
from the recording transaction, so an owner that `LISTEN`s hears it when
it commits. The owner's probe is one primary-key lookup.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection, sql

from turnkeep.cancelrequest import CancelRequest, next_request
from turnkeep.errors import SessionNotFoundError

__all__ = ["cancel_requested", "request_cancel"]


async def request_cancel(
    conn: AsyncConnection[Any], schema: str, session_id: str, reason: str
) -> CancelRequest:
    """Record the request after the session's latest (commits it)."""
    first = next_request(None, reason)
    ident = sql.Identifier(schema)
    statement = sql.SQL(
        "INSERT INTO {s}.cancel_requests AS c "
        "(session_id, number, reason, requested_at) "
        "SELECT id, 1, %(reason)s, %(at)s FROM {s}.sessions "
        "WHERE id = %(id)s AND next_seq > 0 "
        "ON CONFLICT (session_id) DO UPDATE SET number = c.number + 1, "
        "reason = excluded.reason, requested_at = excluded.requested_at "
        "RETURNING number, reason, requested_at"
    ).format(s=ident)
    params = {"id": session_id, "reason": reason, "at": first.requested_at}
    cur = await conn.execute(statement, params)
    row = await cur.fetchone()
    await conn.commit()
    if row is None:
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    return CancelRequest(number=int(row[0]), reason=row[1], requested_at=int(row[2]))


async def cancel_requested(
    conn: AsyncConnection[Any], schema: str, session_id: str, after: int
) -> CancelRequest | None:
    """The session's latest request if numbered above `after`."""
    statement = sql.SQL(
        "SELECT c.number, c.reason, c.requested_at FROM {s}.sessions AS s "
        "LEFT JOIN {s}.cancel_requests AS c ON c.session_id = s.id "
        "WHERE s.id = %(id)s AND s.next_seq > 0"
    ).format(s=sql.Identifier(schema))
    cur = await conn.execute(statement, {"id": session_id})
    row = await cur.fetchone()
    if row is None:
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    if row[0] is None or int(row[0]) <= after:
        return None
    return CancelRequest(number=int(row[0]), reason=row[1], requested_at=int(row[2]))
