"""The write operations: what the writer runs inside a group commit.

Each function builds one `Op` (`create`, `append`, `claim`, ...). Checks that
need no database come first; then one statement does the write and its
compare-and-set together, and only when it changes nothing does a second
statement read the row to say why (not found, newer format, fenced, locked,
wrong seq). So a refusal never follows a write, and every refusal is a typed
turnkeep error. (One miss is no refusal: an append that finds events of a
schema-1 worker past `counted_seq` counts them first, writing only facts
about stored bytes, then lands; see `_after_miss`.)

`OwnerState` is the backend instance's view of what it owns. Only the writer
task touches it, and every change registers an undo with the transaction, so
a rolled-back operation leaves it as it was.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

import attrs
import msgspec

from turnkeep.backendkit import check_batch, newer_format
from turnkeep.codec import EventRecord
from turnkeep.errors import (
    SequenceError,
    SessionDeletedError,
    SessionExistsError,
    SessionFencedError,
    SessionHeldError,
    SessionLockedError,
    SessionNotFoundError,
    StorageError,
)
from turnkeep.meta import FORMAT_VERSION, SessionMeta, SessionSummary
from turnkeep_postgres import turnends
from turnkeep_postgres.writer import Batched, Op, Tx

__all__ = [
    "OwnerState",
    "append",
    "claim",
    "create",
    "delete",
    "release",
    "release_all",
    "renew",
    "update",
]

_encode: Final = msgspec.json.Encoder().encode


@attrs.define(eq=False)
class OwnerState:
    """What one backend instance owns (touched by its writer task only).

    Attributes:
        token: this instance's owner token (random, never reused).
        info: host and pid, recorded beside the token for operators.
        lease_s: the lease length in seconds.
        max_event_bytes: the largest event `append` accepts.
        held: the generation held, per session id.
        pending: sessions created here and not flushed yet.
    """

    token: uuid.UUID
    info: str
    lease_s: float
    max_event_bytes: int
    held: dict[str, int] = attrs.field(factory=dict[str, int])
    pending: set[str] = attrs.field(factory=set[str])

    def hold(self, tx: Tx, session_id: str, generation: int | None) -> None:
        """Record (or with `None`, forget) the generation held, undoably."""
        tx.undo.put(self.held, session_id, generation)

    def stage(self, tx: Tx, session_id: str, pending: bool) -> None:
        """Mark (or unmark) a session as created here and not flushed, undoably."""
        tx.undo.mark(self.pending, session_id, pending)


class _Row(NamedTuple):
    next_seq: int
    generation: int
    owner: uuid.UUID | None
    format_version: int
    counted_seq: int


async def _row(tx: Tx, session_id: str) -> _Row | None:
    cur = await tx.conn.execute(tx.queries.select_row, {"id": session_id})
    found = await cur.fetchone()
    return None if found is None else _Row(*found)


def _not_found(session_id: str) -> SessionNotFoundError:
    return SessionNotFoundError(f"no stored session {session_id!r}")


def _fenced(session_id: str) -> SessionFencedError:
    return SessionFencedError(
        f"session {session_id!r} was taken over by another worker; this instance "
        "may no longer write it (nothing was written). Load it again to continue "
        "from what the new owner wrote."
    )


def _locked(session_id: str, doing: str) -> SessionLockedError:
    return SessionLockedError(
        f"session {session_id!r} is being {doing} by another live worker (its lease "
        "has not run out); take it over explicitly (claim with steal=True) if that "
        "worker should stop"
    )


# -- create ------------------------------------------------------------------


def create(state: OwnerState, meta: SessionMeta) -> Op[None]:
    """Place an invisible claim row for a new session and hold it."""
    session_id = meta.id

    async def run(tx: Tx) -> None:
        if session_id in state.pending:
            raise SessionExistsError(f"session {session_id!r} already exists")
        summary = msgspec.structs.replace(meta.summary, event_count=0, turns=0, size=0)
        cur = await tx.conn.execute(
            tx.queries.create,
            {
                "id": session_id,
                "format": meta.header.format_version,
                "header": _encode(meta.header).decode(),
                "summary": _encode(summary).decode(),
                "updated_at": meta.summary.updated_at,
                "owner": state.token,
                "info": state.info,
                "lease": state.lease_s,
            },
        )
        row = await cur.fetchone()
        if row is None:
            stored = await _row(tx, session_id)
            if stored is not None and stored.next_seq > 0:
                raise SessionExistsError(f"session {session_id!r} already exists")
            raise _locked(session_id, "created")
        state.hold(tx, session_id, int(row[0]))
        state.stage(tx, session_id, True)

    return Op(run, session_id, clean=True, doing=f"creating session {session_id!r}")


# -- append ------------------------------------------------------------------


def append(
    state: OwnerState,
    session_id: str,
    records: Sequence[EventRecord],
    summary: SessionSummary | None = None,
) -> Op[None]:
    """Append one flush: a compare-and-set on owner, generation and next seq.

    A `summary` is written by a second statement in the same transaction,
    once the append landed (one commit). Such a flush runs outside the
    multi-session statement of a group commit (it is rare: a title or a
    status that changed within the flush).
    """
    # The first seq is compared with the stored one by the append statement.
    check_batch(
        session_id, records, next_seq=None, max_event_bytes=state.max_event_bytes
    )
    raws = [bytes(r.raw) for r in records]
    ends = [r.is_turn_end for r in records]
    spans = [r.span for r in records]  # packed records stand for several seqs
    turns = sum(ends)

    def params(generation: int) -> dict[str, Any]:
        return {
            "id": session_id,
            "owner": state.token,
            "generation": generation,
            "first": records[0].seq,
            "count": sum(spans),
            "turns": turns,
            "size": sum(map(len, raws)),
            "time": records[-1].time,
            "format": FORMAT_VERSION,
            "lease": state.lease_s,
            "raws": raws,
            "ends": ends,
            "seqs": [r.seq for r in records],
            "spans": spans,
        }

    async def run(tx: Tx) -> None:
        generation = state.held.get(session_id)
        if generation is None:
            generation = await _take(tx, state, session_id, steal=False)
        if not raws:
            await _explain_append(tx, state, session_id, generation, None)
            return
        values = params(generation)
        cur = await tx.conn.execute(tx.queries.append, values)
        if cur.rowcount != len(raws):
            await _after_miss(tx, state, values)
        if summary is not None:
            stored = msgspec.structs.replace(summary, event_count=0, turns=0, size=0)
            await tx.conn.execute(
                tx.queries.append_summary,
                {
                    "id": session_id,
                    "summary": _encode(stored).decode(),
                    "updated_at": summary.updated_at,
                },
            )
        if session_id in state.pending:
            state.stage(tx, session_id, False)

    def batch() -> Batched | None:
        generation = state.held.get(session_id)
        if generation is None or not raws or summary is not None:
            return None  # taking the role first, or a summary: on its own

        def landed(tx: Tx) -> None:
            if session_id in state.pending:
                state.stage(tx, session_id, False)

        return Batched(
            session_id=session_id,
            generation=generation,
            first=records[0].seq,
            time=records[-1].time,
            raws=raws,
            ends=ends,
            spans=spans,
            turns=turns,
            owner=state.token,
            lease_s=state.lease_s,
            landed=landed,
            missed=lambda tx: _after_miss(tx, state, params(generation)),
        )

    def held() -> bool:
        # Held when it runs: the append statement is its only write (but for
        # a catch-up's, see `_after_miss`), and a refusal comes before it.
        # Not held: taking the role writes first, which needs a savepoint in
        # a shared group and a transaction alone.
        return session_id in state.held

    def one_statement() -> bool:
        # A summary is a second statement: then the flush needs a
        # transaction around both even alone, or the events could commit
        # without their summary.
        return summary is None and held()

    return Op(
        run,
        session_id,
        clean=held,
        doing=f"appending to {session_id!r}",
        batch=batch,
        atomic=one_statement,
    )


async def _after_miss(tx: Tx, state: OwnerState, params: dict[str, Any]) -> None:
    """The append statement `params` did not land: raise why, or land it after all.

    The one miss that is no refusal: a worker of schema 1 appended since the
    stored numbers were counted. Then the events past `counted_seq` get their
    flags (classified from their bytes by core's kit), the numbers are
    counted up to `next_seq` (both facts, true whoever owns the session, so
    they need no undo), and the statement runs again.
    """
    session_id: str = params["id"]
    generation: int = params["generation"]
    first: int = params["first"]
    row = await _explain_append(tx, state, session_id, generation, first)
    if row.counted_seq != row.next_seq:
        span = (session_id, row.counted_seq, row.next_seq)
        flags = await turnends.unrecorded(tx.conn, tx.queries, [span])
        await turnends.record(tx.conn, tx.queries, flags)
        await tx.conn.execute(
            tx.queries.catch_up,
            {
                "id": session_id,
                "owner": state.token,
                "generation": generation,
                "counted": row.counted_seq,
                "next": row.next_seq,
            },
        )
        cur = await tx.conn.execute(tx.queries.append, params)
        if cur.rowcount == len(params["raws"]):
            return
        await _explain_append(tx, state, session_id, generation, first)
    raise StorageError(  # pragma: no cover - every refusal is explained above
        f"session {session_id!r}: the append did not land for no known reason; retry"
    )


async def _explain_append(
    tx: Tx, state: OwnerState, session_id: str, generation: int, first: int | None
) -> _Row:
    """Raise why an append cannot land; return the row if no refusal applies.

    An empty append (`first` is `None`) only needs the session and its
    ownership; any other also needs the stored next seq to be `first`.
    """
    row = await _row(tx, session_id)
    if row is None or (row.next_seq == 0 and session_id not in state.pending):
        if session_id in state.held and session_id not in state.pending:
            raise SessionDeletedError(session_id)
        raise SessionNotFoundError(f"no session {session_id!r} to append to")
    if row.format_version > FORMAT_VERSION:
        raise newer_format(session_id, row.format_version)
    if row.owner != state.token or row.generation != generation:
        raise _fenced(session_id)
    if first is not None and row.next_seq != first:
        raise SequenceError(
            f"session {session_id!r}: the append starts at seq {first} but the "
            f"stored log continues at {row.next_seq}; nothing was written",
            session_id=session_id,
            expected=row.next_seq,
            got=first,
        )
    return row


# -- ownership -----------------------------------------------------------------


async def _take(tx: Tx, state: OwnerState, session_id: str, *, steal: bool) -> int:
    cur = await tx.conn.execute(
        tx.queries.claim,
        {
            "id": session_id,
            "owner": state.token,
            "info": state.info,
            "lease": state.lease_s,
            "format": FORMAT_VERSION,
            "steal": steal,
        },
    )
    row = await cur.fetchone()
    if row is None:
        stored = await _row(tx, session_id)
        if stored is None or stored.next_seq == 0:
            raise _not_found(session_id)
        if stored.format_version > FORMAT_VERSION:
            raise newer_format(session_id, stored.format_version)
        raise _locked(session_id, "written")
    generation = int(row[0])
    state.hold(tx, session_id, generation)
    return generation


def claim(state: OwnerState, session_id: str, *, steal: bool) -> Op[None]:
    """Take the writer role (bumping the generation unless already ours)."""

    async def run(tx: Tx) -> None:
        await _take(tx, state, session_id, steal=steal)

    return Op(run, session_id, clean=True, doing=f"claiming {session_id!r}", light=True)


def release(state: OwnerState, session_id: str) -> Op[None]:
    """Give up the writer role; a never-flushed session leaves no row behind."""

    async def run(tx: Tx) -> None:
        params = {"id": session_id, "owner": state.token}
        if session_id in state.pending:
            await tx.conn.execute(tx.queries.drop_claim, params)
        else:
            await tx.conn.execute(tx.queries.release, params)
        state.hold(tx, session_id, None)
        state.stage(tx, session_id, False)

    return Op(
        run, session_id, clean=True, doing=f"releasing {session_id!r}", light=True
    )


def release_all(state: OwnerState) -> Op[None]:
    """Release every session this instance holds; drop its unflushed claims."""

    async def run(tx: Tx) -> None:
        params = {"owner": state.token}
        await tx.conn.execute(tx.queries.drop_all_claims, params)
        await tx.conn.execute(tx.queries.release_all, params)
        for session_id in list(state.held):
            state.hold(tx, session_id, None)
        for session_id in list(state.pending):
            state.stage(tx, session_id, False)

    return Op(run, None, clean=True, doing="releasing every session", light=True)


def renew(state: OwnerState) -> Op[set[str]]:
    """Extend the lease of every session this instance owns; return their ids."""

    async def run(tx: Tx) -> set[str]:
        cur = await tx.conn.execute(
            tx.queries.renew, {"owner": state.token, "lease": state.lease_s}
        )
        return {str(row[0]) for row in await cur.fetchall()}

    return Op(run, None, clean=True, doing="renewing leases")


# -- metadata ------------------------------------------------------------------


def update(state: OwnerState, session_id: str, summary: SessionSummary) -> Op[None]:
    """Replace the summary; an owner that was taken over is fenced."""
    stored = msgspec.structs.replace(summary, event_count=0, turns=0, size=0)

    async def run(tx: Tx) -> None:
        generation = state.held.get(session_id)
        params: dict[str, Any] = {
            "id": session_id,
            "summary": _encode(stored).decode(),
            "updated_at": summary.updated_at,
            "owner": state.token,
            "pending": session_id in state.pending,
            "held": generation is not None,
            "generation": generation if generation is not None else 0,
        }
        cur = await tx.conn.execute(tx.queries.update, params)
        if await cur.fetchone() is None:
            row = await _row(tx, session_id)
            if row is None or (row.next_seq == 0 and session_id not in state.pending):
                if generation is not None and session_id not in state.pending:
                    raise SessionDeletedError(session_id)
                raise _not_found(session_id)
            raise _fenced(session_id)

    return Op(run, session_id, clean=True, doing=f"updating {session_id!r}")


def delete(state: OwnerState, session_id: str, *, force: bool) -> Op[None]:
    """Remove a stored session; its events go with it (`ON DELETE CASCADE`).

    Another worker's live lease is refused unless `force`; that worker's
    next write then finds no row and is told the session was deleted.
    """

    async def run(tx: Tx) -> None:
        cur = await tx.conn.execute(
            tx.queries.delete, {"id": session_id, "owner": state.token, "force": force}
        )
        if await cur.fetchone() is None:
            row = await _row(tx, session_id)
            if row is None or row.next_seq == 0:
                raise _not_found(session_id)
            raise SessionHeldError(session_id, "another live worker (its lease)")
        state.hold(tx, session_id, None)

    return Op(run, session_id, clean=True, doing=f"deleting {session_id!r}")
