"""The read path: `load`, `list` and `has` on their own threads and connections.

Reads never go through the writer, nor need it: a small pool of threads,
each with its own read-only connection (`schema.connect_reader`), runs them
as short WAL read transactions, so a reader never holds (or waits for) the
write lock, a caller holding a result holds no transaction at all, and a
file or folder the user cannot write reads like any other. A store whose
file does not exist yet reads as empty (nothing is created); one whose
schema is older than this code raises `Outdated`, for the backend to
migrate it through the writer. `load` reads the session row and its events in one
snapshot and checks that exactly `next_seq` events are there, so a damaged
or truncated log is reported, never returned shorter. Values are bounded by
`SQLITE_LIMIT_LENGTH` (see `schema.connect_reader`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import heapq
import sqlite3
import threading
import time
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import chain, islice
from typing import Any, Final, TypeVar

import attrs
import msgspec

from turnkeep.backendkit import newer_format
from turnkeep.errors import (
    InvalidCursorError,
    SessionCorruptError,
    SessionNotFoundError,
    TurnkeepError,
)
from turnkeep.listfilter import ListFilter
from turnkeep.meta import (
    FORMAT_VERSION,
    ForkPoint,
    SessionHeader,
    SessionMeta,
    SessionSummary,
)
from turnkeep.persistence import LoadedSession, SessionPage
from turnkeep.salvage import Damage, IntactLog
from turnkeep_sqlite.config import SqliteConfig
from turnkeep_sqlite.owner import holder_alive
from turnkeep_sqlite.schema import (
    SCHEMA_VERSION,
    empty_database,
    reader_schema,
    retry_busy,
)
from turnkeep_sqlite.sqlerrors import is_corrupt, primary_code, storage_error

__all__ = [
    "MAX_CURSOR_CHARS",
    "Outdated",
    "Readers",
    "has",
    "held",
    "intact",
    "last_seq",
    "list_page",
    "load",
    "load_after",
]

_HELD_BATCH: Final = 500
"""Ids per `held` query: well under SQLite's limit on bound parameters."""

T = TypeVar("T")

MAX_CURSOR_CHARS: Final = 2048
"""Longer `list` cursors are refused before they are decoded."""

_TOOBIG: Final = 18
# Selects the metadata columns in this order (see `_meta`).
_LOAD_META: Final = (
    "SELECT key, id, format_version, created_at, cwd, parent_id, parent_seq, "
    "updated_at, title, first_prompt, status, next_seq, turns, size "
    "FROM sessions WHERE id = ? AND next_seq > 0"
)
# A listing reads `sessions.listing` from an index alone (schema step 6);
# a filtered one also its order, to merge the ranges of several statuses.
_LIST_COLUMNS: Final = "SELECT updated_at, id, listing FROM sessions"
_LIST_FIRST: Final = (
    "SELECT listing FROM sessions WHERE next_seq > 0 "
    "ORDER BY updated_at DESC, id LIMIT ?"
)
_LIST_AFTER: Final = (
    "SELECT listing FROM sessions WHERE next_seq > 0 "
    "AND (updated_at < ?1 OR (updated_at = ?1 AND id > ?2)) "
    "ORDER BY updated_at DESC, id LIMIT ?3"
)
_TAIL_META: Final = (
    "SELECT key, format_version, next_seq FROM sessions WHERE id = ? AND next_seq > 0"
)
_cursor_encoder: Final = msgspec.json.Encoder()
_cursor_decoder: Final = msgspec.json.Decoder(tuple[int, str])
_listing_decoder: Final = msgspec.json.Decoder(SessionMeta)


class Outdated(Exception):
    """The file's schema needs a migration, which only the writer may run.

    Never leaves the package: the backend catches it (`SqlitePersistence`).
    """

    def __init__(self, version: int) -> None:
        super().__init__(f"schema version {version}, needs {SCHEMA_VERSION}")
        self.version = version


@attrs.define(eq=False)
class Readers:
    """A pool of reader threads, one connection each, for one database.

    Args:
        opener: opens a reader connection; `None` when the file does not
            exist (the store is empty), and with it whether the connection
            may be kept for later reads (an `immutable` one may not).
        closer: closes one.
    """

    config: SqliteConfig
    opener: Callable[[], tuple[sqlite3.Connection, bool] | None]
    closer: Callable[[sqlite3.Connection], None]
    _executor: ThreadPoolExecutor = attrs.field(init=False)
    _local: threading.local = attrs.field(init=False, factory=threading.local)
    _lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _connections: list[sqlite3.Connection] = attrs.field(
        init=False, factory=list[sqlite3.Connection]
    )

    def __attrs_post_init__(self) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=self.config.read_threads,
            thread_name_prefix=f"turnkeep-sqlite-read:{self.config.path.name}",
        )

    async def run(self, read: Callable[[sqlite3.Connection], T]) -> T:
        """Run `read` in one read transaction on a reader thread.

        Raises:
            Outdated: the file must be migrated first.
        """
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._transaction, read)

    def close(self, *, wait: bool = True) -> None:
        """Stop the threads and close their connections (with `wait`, blocks)."""
        self._executor.shutdown(wait=wait)
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            self.closer(conn)

    def _connection(self) -> tuple[sqlite3.Connection, bool] | None:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, True
        opened = self.opener()
        if opened is None:
            return None
        conn, keep = opened
        if keep:
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn, keep

    def _transaction(self, read: Callable[[sqlite3.Connection], T]) -> T:
        path = self.config.path
        try:
            opened = self._connection()
            if opened is None:
                return _read_empty(self.config, read)
            conn, keep = opened
            try:
                return self._read(conn, read)
            finally:
                if not keep:
                    self.closer(conn)
        except (TurnkeepError, Outdated):
            raise
        except sqlite3.Error as exc:
            raise storage_error(exc, "reading", path) from exc

    def _read(
        self, conn: sqlite3.Connection, read: Callable[[sqlite3.Connection], T]
    ) -> T:
        path = self.config.path

        def begin() -> int:
            # BEGIN is deferred: the snapshot starts at the first read, which
            # can meet a busy WAL index (recovery) and then waits like a write
            # (still inside the transaction BEGIN opened, when it retries).
            if not conn.in_transaction:
                conn.execute("BEGIN")
            return reader_schema(conn, path)

        deadline = time.monotonic() + self.config.busy_timeout_ms / 1000
        try:
            version = retry_busy(begin, deadline=deadline, path=path)
            if version == SCHEMA_VERSION:
                with _gc_paused():
                    result = read(conn)
                conn.execute("COMMIT")
                return result
            if version != 0:
                raise Outdated(version)
        except BaseException:
            # Keep the read's own error: ending the snapshot may fail too.
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        # Never migrated (a file another writer just created): as empty as
        # a missing file.
        return _read_empty(self.config, read)


def _read_empty(config: SqliteConfig, read: Callable[[sqlite3.Connection], T]) -> T:
    """Run `read` against an empty database of the current schema."""
    conn = empty_database(config)
    try:
        return read(conn)
    finally:
        conn.close()


@contextlib.contextmanager
def _gc_paused() -> Generator[None]:
    """Pause the cyclic GC while a read builds its (acyclic) result.

    A listing or load allocates tens of thousands of tuples and structs at
    once; the collections they trigger would traverse all of them, only to
    find nothing to free (measured: about a third of a 5,000-session list).
    The GC is switched back on only if it was on, so a caller's choice holds.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def deletion_room(conn: sqlite3.Connection, session_id: str) -> int:
    """About how many bytes of write-ahead log deleting `session_id` writes.

    With `secure_delete` every page the session's rows free is rewritten
    (zeroed), and each page written goes to the WAL first: its stored
    bytes, rounded up to pages, plus a page per 64 rows for the b-tree and
    index pages above them, plus a few for the `sessions` row and its
    indexes.
    """
    page: int = conn.execute("PRAGMA page_size").fetchone()[0]
    stored, rows = conn.execute(
        "SELECT coalesce(sum(length(raw) + length(type) + 32), 0), count(*) "
        "FROM events WHERE session_key = (SELECT key FROM sessions WHERE id = ?)",
        (session_id,),
    ).fetchone()
    pages = -(-int(stored) // page) + int(rows) // 64 + 8
    return pages * (page + 24) + 32  # a WAL frame header per page, a file header


def has(conn: sqlite3.Connection, session_id: str) -> bool:
    """Whether `session_id` is stored (visible)."""
    return (
        conn.execute(
            "SELECT 1 FROM sessions WHERE id = ? AND next_seq > 0", (session_id,)
        ).fetchone()
        is not None
    )


def held(conn: sqlite3.Connection, session_ids: Sequence[str]) -> dict[str, bool]:
    """Whether a live owner holds each session: its row's owner record alone.

    One indexed lookup per id (by the unique `id`), in batches; the logs are
    not read and nothing is written.
    """
    ids = list(dict.fromkeys(session_ids))
    found: dict[str, bool] = {}
    for start in range(0, len(ids), _HELD_BATCH):
        batch = ids[start : start + _HELD_BATCH]
        marks = ", ".join("?" * len(batch))
        rows = conn.execute(
            "SELECT id, owner_token, owner_info FROM sessions "  # noqa: S608 - only "?" marks are interpolated
            f"WHERE id IN ({marks})",
            batch,
        )
        for session_id, token, info in rows:
            found[session_id] = holder_alive(token, info)
    return {i: found.get(i, False) for i in ids}


def load(conn: sqlite3.Connection, session_id: str) -> LoadedSession:
    """Read one session's metadata and every durable event, in one snapshot."""
    try:
        row = conn.execute(_LOAD_META, (session_id,)).fetchone()
        if row is None:
            raise SessionNotFoundError(f"no stored session {session_id!r}")
        meta = _meta(row[1:])
        if meta.header.format_version > FORMAT_VERSION:
            raise newer_format(session_id, meta.header.format_version)
        count = meta.summary.event_count
        # Unpacking the one-column rows in C: a tenth of a 100k-event load
        # went to building the row list and picking each row's column.
        events: list[bytes] = list(
            chain.from_iterable(
                conn.execute(
                    "SELECT raw FROM events WHERE session_key = ? AND seq < ? "
                    "ORDER BY seq",
                    (row[0], count),
                )
            )
        )
    except sqlite3.Error as exc:
        if is_corrupt(exc) or primary_code(exc) == _TOOBIG:
            raise SessionCorruptError(
                f"session {session_id!r} cannot be read: {exc} (a damaged "
                "database, or an event over max_event_bytes)",
                session_id=session_id,
            ) from exc
        raise
    if len(events) != count and _spanned(conn, row[0], count) != count:
        # seq is unique and below `count`, so a short read means a gap (packed
        # records stand for several seqs: their spans must add up).
        first_gap = _first_gap(conn, row[0], count)
        raise SessionCorruptError(
            f"session {session_id!r}: {count} events were acknowledged but only "
            f"{len(events)} are stored (first missing seq {first_gap}); the "
            "database was damaged or edited",
            session_id=session_id,
            offset=first_gap,
        )
    return LoadedSession(meta=meta, events=events)


def load_after(
    conn: sqlite3.Connection, session_id: str, after: int, limit: int
) -> list[bytes]:
    """Durable events with seq > `after`, at most `limit`: one index range."""
    row = conn.execute(_TAIL_META, (session_id,)).fetchone()
    if row is None:
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    key, version, count = row
    if version > FORMAT_VERSION:
        raise newer_format(session_id, version)
    start, end = after + 1, min(count, after + 1 + limit)
    if start >= end:
        return []
    try:
        # From the row holding seq `start`: a packed record may begin before.
        rows = conn.execute(
            "SELECT seq, span, raw FROM events WHERE session_key = ? AND seq >= "
            "coalesce((SELECT max(seq) FROM events WHERE session_key = ? "
            "AND seq <= ?), 0) AND seq < ? ORDER BY seq LIMIT ?",
            (key, key, start, count, limit),
        ).fetchall()
    except sqlite3.Error as exc:
        if is_corrupt(exc) or primary_code(exc) == _TOOBIG:
            raise SessionCorruptError(
                f"session {session_id!r}: events from seq {start} cannot be read: "
                f"{exc}",
                session_id=session_id,
            ) from exc
        raise
    events: list[bytes] = []
    expected = start
    if rows and rows[0][0] < start < rows[0][0] + rows[0][1]:
        expected = rows[0][0]  # a packed record holding `start`
    for seq, span, raw in rows:
        if seq != expected:
            break
        events.append(raw)
        expected = seq + span
    if expected < count and len(events) < limit:
        # seq is unique, so a row that does not follow on means a gap.
        raise SessionCorruptError(
            f"session {session_id!r}: events {start}..{end - 1} were acknowledged "
            f"but the one at seq {expected} is not stored; the database was "
            "damaged or edited",
            session_id=session_id,
            offset=expected,
        )
    return events


def last_seq(conn: sqlite3.Connection, session_id: str) -> int:
    """The last durable seq, from the session row alone."""
    row = conn.execute(_TAIL_META, (session_id,)).fetchone()
    if row is None:
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    return int(row[2]) - 1


def intact(conn: sqlite3.Connection, session_id: str) -> IntactLog:
    """A session's events up to the first missing or unreadable row (salvage)."""
    try:
        row = conn.execute(_LOAD_META, (session_id,)).fetchone()
    except sqlite3.Error as exc:
        if is_corrupt(exc):
            raise SessionCorruptError(
                f"session {session_id!r}: its metadata cannot be read ({exc})",
                session_id=session_id,
            ) from exc
        raise
    if row is None:
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    meta = _meta(row[1:])
    if meta.header.format_version > FORMAT_VERSION:
        raise newer_format(session_id, meta.header.format_version)
    count = meta.summary.event_count
    events: list[bytes] = []
    why: str | None = None
    expected = 0  # the seq the next row must start at
    try:
        for seq, span, raw in conn.execute(
            "SELECT seq, span, raw FROM events WHERE session_key = ? AND seq < ? "
            "ORDER BY seq",
            (row[0], count),
        ):
            if seq != expected:
                why = f"acknowledged event {expected} is missing"
                break
            if not isinstance(raw, bytes):
                why = f"event {seq} is not stored as bytes"
                break
            events.append(raw)
            expected = seq + span
    except sqlite3.Error as exc:
        if not (is_corrupt(exc) or primary_code(exc) == _TOOBIG):
            raise
        why = f"event {expected} cannot be read ({exc})"
    if why is None and expected < count:
        why = f"acknowledged events from {expected} on are missing"
    if why is None:
        return IntactLog(meta=meta, events=events)
    kept = sum(len(e) for e in events)
    damage = Damage(
        first_seq=expected,
        last_seq=count - 1,
        lost_bytes=max(meta.summary.size - kept, 0),
        offset=expected,
        reason=f"{why}; the database was damaged or edited",
    )
    return IntactLog(meta=meta, events=events, damage=damage)


def list_page(
    conn: sqlite3.Connection,
    limit: int,
    cursor: str | None,
    where: ListFilter | None = None,
) -> SessionPage:
    """One page of stored sessions, newest first (ties by id), via an index.

    Without a status filter, one range of `sessions_recent`; with one, one
    range of `sessions_by_status` per status, merged (each read at most a
    page deep). Time bounds narrow the range (`updated_at` leads both).
    """
    after = None if cursor is None else decode_cursor(cursor)
    with _listing_room(conn):
        if where is None or where.is_empty:
            if after is None:
                found = conn.execute(_LIST_FIRST, (limit + 1,))
            else:
                found = conn.execute(_LIST_AFTER, (*after, limit + 1))
            listings: list[str] = list(chain.from_iterable(found))
        elif where.statuses is None:
            rows = _filtered(conn, None, where, after, limit + 1)
            listings = [row[2] for row in rows]
        else:
            ranges = [
                _filtered(conn, status, where, after, limit + 1)
                for status in sorted(where.statuses)
            ]
            merged = islice(heapq.merge(*ranges, key=_row_order), limit + 1)
            listings = [row[2] for row in merged]
        # Only the page is decoded: the row past it only says there is more.
        items = _listed(conn, listings[:limit])
    next_cursor = None
    if len(listings) > limit:
        last = items[-1]
        next_cursor = encode_cursor(last.summary.updated_at, last.id)
    return SessionPage(items=items, next_cursor=next_cursor)


_LISTING_ROOM: Final = 25
"""How many times a reader's value limit a `listing` may take.

A listing holds a session's text columns together (id, cwd, the parent's
id, title, first prompt), each JSON-escaped (up to 6 bytes a character):
under the limit one by one, they can exceed it together.
"""


@contextlib.contextmanager
def _listing_room(conn: sqlite3.Connection) -> Generator[None]:
    """Let values of up to `_LISTING_ROOM` times the reader's limit through."""
    limit = conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, -1)  # -1: only reads it
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit * _LISTING_ROOM)
    try:
        yield
    finally:
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)


def _listed(conn: sqlite3.Connection, listings: list[str]) -> list[SessionMeta]:
    """Decode `sessions.listing` values.

    Raises:
        SessionCorruptError: a row's values are not a session's metadata
            (the database was edited: the schema's checks let it through).
    """
    decode = _listing_decoder.decode
    metas: list[SessionMeta] = []
    add = metas.append
    for listing in listings:
        try:
            add(decode(listing))
        except msgspec.DecodeError as exc:
            # Not from the JSON: a damaged value need not be valid JSON
            # (SQLite writes an infinite REAL as `Inf`).
            row = conn.execute(
                "SELECT id FROM sessions WHERE listing = ?", (listing,)
            ).fetchone()
            session_id = "?" if row is None else str(row[0])
            raise SessionCorruptError(
                f"session {session_id!r}: its row in `sessions` holds values "
                f"that are not a session's metadata ({exc}); the database was "
                "damaged or edited",
                session_id=session_id,
            ) from exc
    return metas


def _filtered(
    conn: sqlite3.Connection,
    status: str | None,
    where: ListFilter,
    after: tuple[int, str] | None,
    count: int,
) -> list[tuple[Any, ...]]:
    """Rows of one status (or any) in `where`'s time window, after `after`."""
    return conn.execute(*filter_query(status, where, after, count)).fetchall()


def filter_query(
    status: str | None,
    where: ListFilter,
    after: tuple[int, str] | None,
    count: int,
) -> tuple[str, list[object]]:
    """The statement (and its parameters) of one filtered range."""
    sql = [_LIST_COLUMNS, "WHERE next_seq > 0"]
    params: list[object] = []
    if status is not None:
        sql.append("AND status = ?")
        params.append(status)
    sql.append("AND updated_at BETWEEN ? AND ?")
    params += [where.lower, where.upper]
    if after is not None:
        sql.append("AND (updated_at < ? OR (updated_at = ? AND id > ?))")
        params += [after[0], after[0], after[1]]
    sql.append("ORDER BY updated_at DESC, id LIMIT ?")
    params.append(count)
    return " ".join(sql), params


def _row_order(row: tuple[Any, ...]) -> tuple[int, str]:
    return (-row[0], row[1])  # (updated_at DESC, id), as the queries order


def encode_cursor(updated_at: int, session_id: str) -> str:
    """The opaque cursor that resumes a listing after this key."""
    return base64.urlsafe_b64encode(
        _cursor_encoder.encode((updated_at, session_id))
    ).decode("ascii")


def decode_cursor(cursor: str) -> tuple[int, str]:
    """Decode a cursor made by `encode_cursor`.

    Raises:
        InvalidCursorError: it was not.
    """
    if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR_CHARS:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidCursorError("invalid list cursor (not a cursor of this backend)")
    try:
        return _cursor_decoder.decode(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (ValueError, msgspec.DecodeError) as exc:
        raise InvalidCursorError(f"invalid list cursor {cursor[:64]!r}") from exc


def _meta(row: tuple[Any, ...]) -> SessionMeta:
    (
        session_id, format_version, created_at, cwd, parent_id, parent_seq,
        updated_at, title, first_prompt, status, next_seq, turns, size,
    ) = row  # fmt: skip
    return SessionMeta(
        header=SessionHeader(
            id=session_id,
            format_version=format_version,
            created_at=created_at,
            cwd=cwd,
            parent=None
            if parent_id is None
            else ForkPoint(session_id=parent_id, seq=parent_seq),
        ),
        summary=SessionSummary(
            updated_at=updated_at,
            title=title,
            first_prompt=first_prompt,
            status=status,
            event_count=next_seq,
            turns=turns,
            size=size,
        ),
    )


def _first_gap(conn: sqlite3.Connection, key: int, count: int) -> int:
    expected = 0
    for seq, span in conn.execute(
        "SELECT seq, span FROM events WHERE session_key = ? AND seq < ? ORDER BY seq",
        (key, count),
    ):
        if seq != expected:
            break
        expected += span
    return expected


def _spanned(conn: sqlite3.Connection, key: int, count: int) -> int:
    """How many seqs the rows below `count` stand for (packed records count more)."""
    row = conn.execute(
        "SELECT coalesce(sum(span), 0) FROM events WHERE session_key = ? AND seq < ?",
        (key, count),
    ).fetchone()
    return int(row[0])
