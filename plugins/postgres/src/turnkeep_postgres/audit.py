"""The audit trail for PostgreSQL: rows of the table `audit` (migration 7).

A session's records carry its id in `session_scope` and are deleted with it
(`ON DELETE CASCADE`); the store's log has `session_scope` NULL and
outlives every session. Recording is one transaction of its own: it never
touches the events or the session row and needs no lease, so it lands while
another worker holds the session. The transaction first takes an advisory
lock of the scope, so racing recorders (on any machine) number one after
the other; a unique index on the scope and number guards it. Reading is
one index range.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection, sql

from turnkeep.audit import (
    ROW_COLUMNS,
    AuditRecord,
    numbered,
    record_from_row,
    record_row,
)
from turnkeep.errors import SessionNotFoundError

__all__ = ["audit_records", "record_audit"]


async def record_audit(
    conn: AsyncConnection[Any], schema: str, scope: str | None, record: AuditRecord
) -> AuditRecord:
    """Store `record` after the scope's last (commits it)."""
    ident = sql.Identifier(schema)
    lock = sql.SQL("SELECT pg_advisory_xact_lock(hashtext(%(key)s))")
    source = (
        "FROM {s}.sessions WHERE id = %(scope)s AND next_seq > 0"
        if scope is not None
        else ""
    )
    statement = sql.SQL(
        "INSERT INTO {s}.audit (session_scope, " + ROW_COLUMNS + ") "  # noqa: S608 - constants
        "SELECT %(scope)s, (SELECT coalesce(max(number), 0) + 1 FROM {s}.audit "
        "WHERE coalesce(session_scope, '') = coalesce(%(scope)s, '')), "
        "%(at)s, %(action)s, %(id)s, %(reason)s, %(host)s, %(pid)s, %(detail)s "
        + source
        + " RETURNING number"
    ).format(s=ident)
    _, at, action, session_id, reason, host, pid, detail = record_row(record)
    params = {
        "scope": scope,
        "at": at,
        "action": action,
        "id": session_id,
        "reason": reason,
        "host": host,
        "pid": pid,
        "detail": detail,
    }
    async with conn.transaction():
        await conn.execute(lock, {"key": f"turnkeep-audit {schema} {scope or ''}"})
        cur = await conn.execute(statement, params)
        row = await cur.fetchone()
    if row is None:
        raise SessionNotFoundError(f"no stored session {scope!r}")
    return numbered(record, int(row[0]))


async def audit_records(
    conn: AsyncConnection[Any], schema: str, scope: str | None, after: int, limit: int
) -> list[AuditRecord]:
    """The scope's records numbered above `after`, at most `limit`."""
    ident = sql.Identifier(schema)
    if scope is not None:
        cur = await conn.execute(
            sql.SQL(
                "SELECT 1 FROM {s}.sessions WHERE id = %(id)s AND next_seq > 0"
            ).format(s=ident),
            {"id": scope},
        )
        if await cur.fetchone() is None:
            raise SessionNotFoundError(f"no stored session {scope!r}")
    cur = await conn.execute(
        sql.SQL(
            "SELECT " + ROW_COLUMNS + " FROM {s}.audit "  # noqa: S608 - constants
            "WHERE coalesce(session_scope, '') = coalesce(%(scope)s, '') "
            "AND number > %(after)s ORDER BY number LIMIT %(limit)s"
        ).format(s=ident),
        {"scope": scope, "after": after, "limit": limit},
    )
    return [record_from_row(row) for row in await cur.fetchall()]
