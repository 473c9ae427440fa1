"""The write operations: SQL run by the writer thread inside a group commit.

Each function here is one operation (`create`, `append`, `claim`, ...) run
inside a group's transaction (see `turnkeep_sqlite.writer`). All checks come
before the first write, and every refusal is a typed turnkeep error, so a
refused operation has written nothing: the writer relies on it (and checks
it with `total_changes`). Ownership follows R9: the session row holds the
owner's token and a generation (the fencing token); `append` compares both
in the same transaction as its insert.

`WriterState` is the backend instance's view of what it owns. Only the
writer thread touches it, and every change registers an undo with the
transaction, so a rolled-back operation leaves it as it was.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final, NamedTuple

import attrs
import msgspec

from turnkeep.backendkit import check_batch, count_turn_ends, newer_format
from turnkeep.codec import EventRecord
from turnkeep.errors import (
    SessionCorruptError,
    SessionDeletedError,
    SessionExistsError,
    SessionFencedError,
    SessionHeldError,
    SessionLockedError,
    SessionNotFoundError,
)
from turnkeep.meta import FORMAT_VERSION, SessionMeta, SessionSummary
from turnkeep_sqlite.owner import ProcessIdentity, is_alive
from turnkeep_sqlite.writer import Tx

__all__ = [
    "WriterState",
    "append",
    "claim",
    "create",
    "delete",
    "release",
    "release_all",
    "update",
]

_identity_decoder: Final = msgspec.json.Decoder(ProcessIdentity)

_ROWS_PER_INSERT: Final = 199
"""Events one `INSERT` carries (5 parameters each: under the 999 variables
SQLite before 3.32 allows per statement)."""


def _insert_events(
    conn: sqlite3.Connection, key: int, records: Sequence[EventRecord]
) -> None:
    """Insert a flush's events, many rows per statement.

    Each statement step releases the GIL and takes it back, and while the
    event loop's thread runs Python the taking back can wait for a switch
    interval (5 ms by default): `executemany` steps once per row, so a
    15-event flush paid that up to 15 times in the writer thread.
    """
    for start in range(0, len(records), _ROWS_PER_INSERT):
        part = records[start : start + _ROWS_PER_INSERT]
        values = [v for r in part for v in (key, r.seq, r.type, r.time, r.raw, r.span)]
        conn.execute(_insert_sql(len(part)), values)


def _insert_sql(rows: int) -> str:
    return (
        "INSERT INTO events (session_key, seq, type, time, raw, span) VALUES "  # noqa: S608 - only "?" marks are joined in
        + ", ".join(["(?, ?, ?, ?, ?, ?)"] * rows)
    )


@attrs.define(eq=False)
class WriterState:
    """What one backend instance owns (touched by its writer thread only).

    Attributes:
        token: this instance's owner token.
        identity: this process's identity, encoded, as recorded in rows.
        max_event_bytes: the largest event `append` accepts.
        held: the generation held per session id.
        pending: created sessions not yet flushed (their metadata).
    """

    token: str
    identity: bytes
    max_event_bytes: int
    held: dict[str, int] = attrs.field(factory=dict[str, int])
    pending: dict[str, SessionMeta] = attrs.field(factory=dict[str, SessionMeta])

    def hold(self, tx: Tx, session_id: str, generation: int | None) -> None:
        """Record (or with `None`, forget) the generation held, undoably."""
        tx.undo.put(self.held, session_id, generation)

    def stage(self, tx: Tx, session_id: str, meta: SessionMeta | None) -> None:
        """Record (or with `None`, forget) a pending session's metadata, undoably."""
        tx.undo.put(self.pending, session_id, meta)


class _Row(NamedTuple):
    key: int
    format_version: int
    next_seq: int
    generation: int
    owner_token: str | None
    owner_info: bytes | None
    last_present: int | None  # 1 if the last row ends at next_seq - 1


_SELECT_ROW: Final = (
    "SELECT key, format_version, next_seq, generation, owner_token, owner_info, "
    "(SELECT seq + span = sessions.next_seq OR NULL FROM events "
    "WHERE session_key = sessions.key AND seq < sessions.next_seq "
    "ORDER BY seq DESC LIMIT 1) "
    "FROM sessions WHERE id = ?"
)


def create(tx: Tx, state: WriterState, meta: SessionMeta) -> None:
    """Register a new session: an invisible placeholder row holding the claim."""
    session_id = meta.id
    row = _row(tx.conn, session_id)
    if session_id in state.pending or (row is not None and row.next_seq > 0):
        raise SessionExistsError(f"session {session_id!r} already exists")
    header = meta.header
    parent_id = header.parent.session_id if header.parent else None
    parent_seq = header.parent.seq if header.parent else None
    if row is None:
        generation = 1
        tx.conn.execute(
            "INSERT INTO sessions (id, format_version, created_at, cwd, parent_id, "
            "parent_seq, generation, owner_token, owner_info) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                session_id,
                header.format_version,
                header.created_at,
                header.cwd,
                parent_id,
                parent_seq,
                generation,
                state.token,
                state.identity,
            ),
        )
    else:
        # A placeholder left by a creator that is gone (else: locked).
        _refuse_live_owner(state, session_id, row, creating=True)
        generation = row.generation + 1
        tx.conn.execute(
            "UPDATE sessions SET format_version = ?, created_at = ?, cwd = ?, "
            "parent_id = ?, parent_seq = ?, generation = ?, owner_token = ?, "
            "owner_info = ? WHERE key = ?",
            (
                header.format_version,
                header.created_at,
                header.cwd,
                parent_id,
                parent_seq,
                generation,
                state.token,
                state.identity,
                row.key,
            ),
        )
    state.hold(tx, session_id, generation)
    state.stage(tx, session_id, meta)


def append(
    tx: Tx,
    state: WriterState,
    session_id: str,
    records: Sequence[EventRecord],
    summary: SessionSummary | None = None,
) -> None:
    """Append one flush after the version, owner and seq checks.

    With `summary`, its caller-set fields are stored in the same statement
    that moves the session's numbers on, so in the flush's own transaction.
    """
    conn = tx.conn
    row = _row(conn, session_id)
    pending = state.pending.get(session_id)
    held = state.held.get(session_id)
    if row is None or (row.next_seq == 0 and pending is None):
        if held is not None and pending is None:
            raise SessionDeletedError(session_id)
        raise SessionNotFoundError(f"no session {session_id!r} to append to")
    if row.format_version > FORMAT_VERSION:
        raise newer_format(session_id, row.format_version)
    if held is not None:
        if row.owner_token != state.token or row.generation != held:
            raise SessionFencedError(
                f"session {session_id!r} was taken over by another owner; this "
                "instance may no longer write it (nothing was written). Load it "
                "again to continue from what the new owner wrote."
            )
    else:
        _refuse_live_owner(state, session_id, row, creating=False)
    next_seq = row.next_seq
    if records:
        check_batch(
            session_id,
            records,
            next_seq=next_seq,
            max_event_bytes=state.max_event_bytes,
        )
        if next_seq and row.last_present is None:
            raise SessionCorruptError(
                f"session {session_id!r}: its last acknowledged event (seq "
                f"{next_seq - 1}) is missing; the database was damaged or edited",
                session_id=session_id,
                offset=next_seq - 1,
            )
    if held is None:
        # The takeover writes, so it comes after every check (a live owner
        # was refused above).
        _take(tx, state, session_id, row, steal=True)
    if not records:
        return
    if pending is not None:
        staged = pending.summary
        conn.execute(
            "UPDATE sessions SET updated_at = ?, title = ?, first_prompt = ?, "
            "status = ? WHERE key = ?",
            (
                staged.updated_at,
                staged.title,
                staged.first_prompt,
                staged.status,
                row.key,
            ),
        )
        state.stage(tx, session_id, None)
    key = row.key
    _insert_events(conn, key, records)
    numbers = (
        records[-1].last + 1,
        records[-1].time,
        count_turn_ends(records),
        sum(len(r.raw) for r in records),
    )
    if summary is None:
        conn.execute(
            "UPDATE sessions SET next_seq = ?, updated_at = max(updated_at, ?), "
            "turns = turns + ?, size = size + ? WHERE key = ?",
            (*numbers, key),
        )
        return
    conn.execute(
        "UPDATE sessions SET next_seq = ?, updated_at = max(updated_at, ?, ?), "
        "turns = turns + ?, size = size + ?, title = ?, first_prompt = ?, "
        "status = ? WHERE key = ?",
        (
            numbers[0],
            numbers[1],
            summary.updated_at,
            numbers[2],
            numbers[3],
            summary.title,
            summary.first_prompt,
            summary.status,
            key,
        ),
    )


def claim(tx: Tx, state: WriterState, session_id: str, *, steal: bool) -> None:
    """Take the writer role of a stored session (bumping the generation)."""
    row = _row(tx.conn, session_id)
    if row is None or row.next_seq == 0:
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    _take(tx, state, session_id, row, steal=steal)


def release(tx: Tx, state: WriterState, session_id: str) -> None:
    """Give up the writer role; a never-flushed session leaves no row behind."""
    generation = state.held.get(session_id)
    pending = state.pending.get(session_id)
    state.hold(tx, session_id, None)
    state.stage(tx, session_id, None)
    if pending is not None:
        tx.conn.execute(
            "DELETE FROM sessions WHERE id = ? AND next_seq = 0 AND owner_token = ?",
            (session_id, state.token),
        )
    elif generation is not None:
        tx.conn.execute(
            "UPDATE sessions SET owner_token = NULL, owner_info = NULL "
            "WHERE id = ? AND owner_token = ? AND generation = ?",
            (session_id, state.token, generation),
        )


def release_all(tx: Tx, state: WriterState) -> None:
    """Release every session this instance holds or has pending."""
    for session_id in {*state.held, *state.pending}:
        release(tx, state, session_id)


def update(
    tx: Tx, state: WriterState, session_id: str, summary: SessionSummary
) -> None:
    """Replace the summary (a pending session keeps it until its first flush).

    `updated_at` only moves forward, to the given value (no clock is read:
    ordering follows the sessions' own clock).
    """
    pending = state.pending.get(session_id)
    if pending is not None:
        staged = msgspec.structs.replace(
            summary,
            event_count=0,
            turns=0,
            size=0,
            updated_at=max(summary.updated_at, pending.summary.updated_at),
        )
        state.stage(tx, session_id, msgspec.structs.replace(pending, summary=staged))
        return
    cursor = tx.conn.execute(
        "UPDATE sessions SET updated_at = max(updated_at, ?), title = ?, "
        "first_prompt = ?, status = ? WHERE id = ? AND next_seq > 0",
        (
            summary.updated_at,
            summary.title,
            summary.first_prompt,
            summary.status,
            session_id,
        ),
    )
    if cursor.rowcount == 0:
        if session_id in state.held:
            raise SessionDeletedError(session_id)
        raise SessionNotFoundError(f"no stored session {session_id!r}")


def delete(tx: Tx, state: WriterState, session_id: str, *, force: bool) -> None:
    """Remove a stored session; its events go with it (ON DELETE CASCADE).

    A live owner other than this instance is refused unless `force`; its
    next write then finds no row and is told the session was deleted.
    """
    row = _row(tx.conn, session_id)
    if row is None or row.next_seq == 0:
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    if not force and _owned_by_another_live(state, row):
        raise SessionHeldError(session_id, "another live process (or instance)")
    tx.conn.execute("DELETE FROM sessions WHERE key = ?", (row.key,))
    state.hold(tx, session_id, None)
    tx.after_commit.append(_truncate_wal)


def _truncate_wal(conn: sqlite3.Connection) -> None:
    """Checkpoint and empty the WAL, whose older frames hold the deleted rows.

    `secure_delete` zeroes the freed space in the pages the delete wrote;
    the WAL still holds earlier copies of those pages until it is reset.
    A reader in the middle of a snapshot keeps the checkpoint from
    finishing: then the frames go at a later checkpoint (R19).
    """
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


# -- internals -----------------------------------------------------------------


def _row(conn: sqlite3.Connection, session_id: str) -> _Row | None:
    found = conn.execute(_SELECT_ROW, (session_id,)).fetchone()
    return None if found is None else _Row(*found)


def _take(
    tx: Tx, state: WriterState, session_id: str, row: _Row, *, steal: bool
) -> None:
    if row.owner_token == state.token:
        state.hold(tx, session_id, row.generation)
        return
    if not steal:
        _refuse_live_owner(state, session_id, row, creating=False)
    generation = row.generation + 1
    tx.conn.execute(
        "UPDATE sessions SET generation = ?, owner_token = ?, owner_info = ? "
        "WHERE key = ?",
        (generation, state.token, state.identity, row.key),
    )
    state.hold(tx, session_id, generation)


def _owned_by_another_live(state: WriterState, row: _Row) -> bool:
    token = row.owner_token
    if token is None or token == state.token:
        return False
    try:
        owner = _identity_decoder.decode(row.owner_info or b"")
    except msgspec.DecodeError:
        return True  # unreadable owner record: never assume it is gone
    return is_alive(token, owner)


def _refuse_live_owner(
    state: WriterState, session_id: str, row: _Row, *, creating: bool
) -> None:
    if _owned_by_another_live(state, row):
        doing = "created" if creating else "written"
        raise SessionLockedError(
            f"session {session_id!r} is being {doing} by another live owner; "
            "take it over explicitly (claim with steal=True) if that owner "
            "should stop"
        )
