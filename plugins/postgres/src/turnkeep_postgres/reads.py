"""The read operations: `load`, `list`, `has`, `held`, and the `list` cursor.

Reads take no lock and run on any pooled connection, outside the writer.
`held` reads only the owner and lease columns of the rows asked about.
`load` reads the session row, then its events up to the row's `next_seq`
(rows a concurrent flush adds later are not asked for), and checks they are
exactly `0 .. next_seq-1`: a missing or oversized row is damage inside
acknowledged data (`SessionCorruptError`), never a shorter history. Its
statements read one snapshot (`_snapshot`; `load_after` is one statement):
read apart, a session deleted and stored again under the same id in
between would pair one session's row with the other's events. `list`
pages newest first by `(-updated_at, id)` from the partial index
`sessions_by_update`, with an opaque cursor holding the last key seen.

The numbers come from the session row; events past `counted_seq` that have
no `turn_end` flag (appended by a worker of schema 1 still running) are
classified from their bytes by `turnkeep_postgres.turnends`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import heapq
from collections.abc import AsyncGenerator
from itertools import islice
from typing import Any, Final

import msgspec
from psycopg import AsyncConnection

from turnkeep.backendkit import newer_format
from turnkeep.errors import (
    InvalidCursorError,
    SessionCorruptError,
    SessionNotFoundError,
)
from turnkeep.listfilter import ListFilter
from turnkeep.meta import FORMAT_VERSION, SessionHeader, SessionMeta, SessionSummary
from turnkeep.persistence import LoadedSession, SessionPage
from turnkeep_postgres import turnends
from turnkeep_postgres.statements import Queries

__all__ = [
    "decode_cursor",
    "encode_cursor",
    "has",
    "held",
    "last_seq",
    "list_page",
    "load",
    "load_after",
]

_CURSOR_TAG: Final = "pg1"
_cursor_encoder: Final = msgspec.json.Encoder()
_cursor_decoder: Final = msgspec.json.Decoder(tuple[str, int, str])
_header_decoder: Final = msgspec.json.Decoder(SessionHeader)
_summary_decoder: Final = msgspec.json.Decoder(SessionSummary)
_BIGINT: Final = 2**63 - 1
_SNAPSHOT: Final = b"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"


@contextlib.asynccontextmanager
async def _snapshot(conn: AsyncConnection[Any]) -> AsyncGenerator[None]:
    """Run the statements inside on one snapshot of the database."""
    async with conn.transaction():
        await conn.execute(_SNAPSHOT)
        yield


def encode_cursor(updated_at: int, session_id: str) -> str:
    """The opaque cursor that continues after `(updated_at, session_id)`."""
    raw = _cursor_encoder.encode((_CURSOR_TAG, updated_at, session_id))
    return base64.urlsafe_b64encode(raw).decode("ascii")


def decode_cursor(cursor: str) -> tuple[int, str]:
    """The key a cursor continues after.

    Raises:
        InvalidCursorError: the cursor was not made by `encode_cursor`.
    """
    try:
        tag, updated_at, session_id = _cursor_decoder.decode(
            base64.urlsafe_b64decode(cursor.encode("ascii"))
        )
    except (ValueError, binascii.Error, msgspec.DecodeError) as exc:
        raise InvalidCursorError(f"invalid list cursor {cursor!r}") from exc
    if tag != _CURSOR_TAG:
        raise InvalidCursorError(f"list cursor {cursor!r} is from another backend")
    return updated_at, session_id


async def _metas(
    conn: AsyncConnection[Any], queries: Queries, rows: list[tuple[Any, ...]]
) -> list[SessionMeta]:
    """The `SessionMeta`s of `_META` rows, with unflagged turn ends counted."""
    metas = [_meta(row) for row in rows]
    # (id, counted_seq, next_seq) of the sessions with unflagged events.
    spans = [(str(r[0]), int(r[8]), int(r[5])) for r in rows if r[9]]
    if not spans:
        return metas
    more: dict[str, int] = {}
    for session_id, _, turn_end in await turnends.unrecorded(conn, queries, spans):
        more[session_id] = more.get(session_id, 0) + turn_end
    return [
        msgspec.structs.replace(
            m,
            summary=msgspec.structs.replace(
                m.summary, turns=m.summary.turns + more.get(m.id, 0)
            ),
        )
        if m.id in more
        else m
        for m in metas
    ]


def _meta(row: tuple[Any, ...]) -> SessionMeta:
    """A `SessionMeta` from a `_META` row (id, format, header, summary, ...)."""
    (
        session_id, format_version, header_text, summary_text, updated_at, count,
        turns, size, _counted, _unrecorded,
    ) = row  # fmt: skip
    try:
        header = _header_decoder.decode(header_text)
        summary = _summary_decoder.decode(summary_text)
    except msgspec.DecodeError as exc:
        raise SessionCorruptError(
            f"session {session_id!r}: its stored header or summary is unreadable "
            f"({exc})",
            session_id=session_id,
        ) from exc
    if header.id != session_id:
        raise SessionCorruptError(
            f"session {session_id!r}: its stored header names {header.id!r}",
            session_id=session_id,
        )
    if format_version > header.format_version:
        # The column is what appends check; keep the two in agreement.
        header = msgspec.structs.replace(header, format_version=format_version)
    summary = msgspec.structs.replace(
        summary,
        updated_at=int(updated_at),
        event_count=int(count),
        turns=int(turns),
        size=int(size),
    )
    return SessionMeta(header=header, summary=summary)


async def load(
    conn: AsyncConnection[Any], queries: Queries, session_id: str, max_bytes: int
) -> LoadedSession:
    """Read a stored session's metadata and every durable event's bytes.

    Raises:
        SessionNotFoundError: nothing is stored under this id.
        UnsupportedFormatError: the session's format is newer than the code.
        SessionCorruptError: an acknowledged event is missing or oversized.
    """
    async with _snapshot(conn):
        return await _load(conn, queries, session_id, max_bytes)


async def _load(
    conn: AsyncConnection[Any], queries: Queries, session_id: str, max_bytes: int
) -> LoadedSession:
    cur = await conn.execute(queries.load_meta, {"id": session_id})
    row = await cur.fetchone()
    if row is None:
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    (meta,) = await _metas(conn, queries, [row])
    if meta.header.format_version > FORMAT_VERSION:
        raise newer_format(session_id, meta.header.format_version)
    count = meta.summary.event_count
    # Binary results: bytea arrives as the bytes themselves, not hex text.
    async with conn.cursor(binary=True) as events_cur:
        await events_cur.execute(
            queries.load_events, {"id": session_id, "count": count, "max": max_bytes}
        )
        rows = await events_cur.fetchall()
    events: list[bytes] = []
    index = 0  # the seq the next row must start at (packed rows stand for more)
    for seq, raw, _size, span in rows:
        if seq != index or raw is None:
            break
        events.append(bytes(raw))
        index = seq + span
    if index == count:
        return LoadedSession(meta=meta, events=events)
    # The row and its events are one snapshot: what is missing is damage.
    row_at = len(events)
    if row_at < len(rows) and rows[row_at][0] == index and rows[row_at][1] is None:
        why = f"event {index} is {rows[row_at][2]} bytes, over max_event_bytes"
    else:
        why = f"acknowledged event {index} of {count} is missing"
    raise SessionCorruptError(
        f"session {session_id!r}: {why}; the database was damaged or edited. "
        "Restore it from a backup.",
        session_id=session_id,
        offset=index,
    )


async def load_after(
    conn: AsyncConnection[Any],
    queries: Queries,
    session_id: str,
    window: tuple[int, int],
    max_bytes: int,
) -> list[bytes]:
    """Durable events with seq > `after`, at most `limit`: one statement.

    `window` is `(after, limit)`. The row's `next_seq` bounds the range, so
    rows of a flush landing meanwhile are not asked for; the row and its
    events are read by one statement, so from one snapshot.

    Raises:
        SessionNotFoundError, UnsupportedFormatError, SessionCorruptError:
            as `load`, for the rows asked for.
    """
    after, limit = window
    start = after + 1
    # Bounds past any seq are cut to bigint's largest: no seq is above it,
    # and a larger number would fail the statement instead.
    params = {
        "id": session_id,
        "start": min(start, _BIGINT),
        # Rows are counted by LIMIT: a packed record stands for several seqs.
        "upto": _BIGINT,
        "max": max_bytes,
        "limit": min(limit, _BIGINT),
    }
    async with conn.cursor(binary=True) as cur:
        await cur.execute(queries.load_range, params)
        rows = await cur.fetchall()
    if not rows:
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    version, count = int(rows[0][0]), int(rows[0][1])
    if version > FORMAT_VERSION:
        raise newer_format(session_id, version)
    end = min(count, start + limit)
    if start >= end:
        return []
    events: list[bytes] = []
    expected = start
    first_seq, first_span = rows[0][2], rows[0][5]
    if first_seq is not None and first_seq < start < first_seq + first_span:
        expected = first_seq  # a packed record holding `start`
    for _, _, seq, raw, size, span in rows:
        if seq != expected:
            break
        if raw is None:
            raise SessionCorruptError(
                f"session {session_id!r}: event {seq} is {size} bytes, over "
                "max_event_bytes; the database was damaged or edited",
                session_id=session_id,
                offset=seq,
            )
        events.append(bytes(raw))
        expected = seq + span
    if expected >= end or len(events) == limit:
        return events
    missing = expected
    raise SessionCorruptError(
        f"session {session_id!r}: acknowledged event {missing} of {count} is "
        "missing; the database was damaged or edited. Restore it from a backup.",
        session_id=session_id,
        offset=missing,
    )


async def last_seq(
    conn: AsyncConnection[Any], queries: Queries, session_id: str
) -> int:
    """The last durable seq, from the session row alone."""
    return (await _tail_row(conn, queries, session_id))[1] - 1


async def _tail_row(
    conn: AsyncConnection[Any], queries: Queries, session_id: str
) -> tuple[int, int]:
    cur = await conn.execute(queries.tail_row, {"id": session_id})
    row = await cur.fetchone()
    if row is None:
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    return int(row[0]), int(row[1])


async def list_page(
    conn: AsyncConnection[Any],
    queries: Queries,
    limit: int,
    cursor: str | None,
    where: ListFilter | None = None,
) -> SessionPage:
    """One page of stored sessions (those `where` keeps), newest first.

    A status filter reads one index range per status, each at most a page
    deep, merged here; a time window narrows the range.
    """
    after = None if cursor is None else decode_cursor(cursor)
    if where is None or where.is_empty:
        rows = await _range(conn, queries, None, None, after, limit + 1)
    elif where.statuses is None:
        rows = await _range(conn, queries, None, where, after, limit + 1)
    else:
        # One snapshot for the ranges: a session whose status changes
        # between two of them would be listed twice, or not at all.
        statuses = where.statuses
        async with contextlib.nullcontext() if len(statuses) == 1 else _snapshot(conn):
            ranges = [
                await _range(conn, queries, status, where, after, limit + 1)
                for status in sorted(statuses)
            ]
        rows = list(islice(heapq.merge(*ranges, key=_row_order), limit + 1))
    items = await _metas(conn, queries, rows[:limit])
    more = len(rows) > limit
    last = items[-1] if items else None
    next_cursor = (
        encode_cursor(last.summary.updated_at, last.id)
        if more and last is not None
        else None
    )
    return SessionPage(items=items, next_cursor=next_cursor)


async def _range(
    conn: AsyncConnection[Any],
    queries: Queries,
    status: str | None,
    where: ListFilter | None,
    after: tuple[int, str] | None,
    count: int,
) -> list[tuple[Any, ...]]:
    params: dict[str, object] = {"limit": count}
    if after is not None:
        params.update(updated_at=after[0], id=after[1])
    if where is None:
        query = queries.list_first if after is None else queries.list_after
    else:
        params.update(lower=where.lower, upper=where.upper)
        if status is None:
            query = (
                queries.list_window_first
                if after is None
                else queries.list_window_after
            )
        else:
            params["status"] = status
            query = (
                queries.list_status_first
                if after is None
                else queries.list_status_after
            )
    cur = await conn.execute(query, params)
    return await cur.fetchall()


def _row_order(row: tuple[Any, ...]) -> tuple[int, str]:
    return (-int(row[4]), str(row[0]))  # (updated_at DESC, id), as queried


async def deletion_room(
    conn: AsyncConnection[Any], queries: Queries, session_id: str
) -> int:
    """About how many bytes of WAL deleting `session_id` can write.

    After a checkpoint, the first change to each heap and index page is
    logged as a full-page image: the rows' bytes rounded up to 8 KiB pages
    (tuple headers and a line pointer each), index pages for the rows, and
    a deletion record per row, plus some pages for the session's own row.
    """
    cur = await conn.execute(queries.deletion_size, {"id": session_id})
    found = await cur.fetchone()
    stored, rows = (int(found[0]), int(found[1])) if found is not None else (0, 0)
    page = 8192
    pages = -(-(stored + rows * 28) // page) + rows // 200 + 8
    return pages * page + rows * 64


async def has(conn: AsyncConnection[Any], queries: Queries, session_id: str) -> bool:
    """Whether a session is stored (has at least one durable flush)."""
    cur = await conn.execute(queries.has, {"id": session_id})
    return await cur.fetchone() is not None


async def held(
    conn: AsyncConnection[Any], queries: Queries, session_ids: list[str]
) -> dict[str, bool]:
    """Which sessions an owner holds on a lease that has not run out (one query)."""
    cur = await conn.execute(queries.held, {"ids": session_ids})
    live = {row[0] for row in await cur.fetchall()}
    return {i: i in live for i in session_ids}
