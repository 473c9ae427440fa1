"""Which stored events end a turn: the `turn_end` column and what fills it.

Since schema 3 every append of this code stores `turn_end` beside each
event's bytes (core's `EventRecord.is_turn_end`), so counting turns in SQL
never looks into the bytes. Rows without the flag (`NULL`: written before
migration 3, or by a worker of schema 1 or 2 still running since) are
classified here, from their stored bytes, by core's backend kit
(`turnkeep.backendkit`), which owns the codec's layout: usually from their
first bytes alone, otherwise from the whole event. Used by migration 3's
backfill, by reads that count rows past `counted_seq`, and by the append that
brings `counted_seq` up to `next_seq` again (the catch-up, see `writes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from psycopg import AsyncConnection

from turnkeep.backendkit import (
    TURN_END_HEAD_BYTES,
    stored_turn_end,
    stored_turn_end_by_head,
)
from turnkeep_postgres.statements import Queries

__all__ = ["BACKFILL_PAGE", "backfill", "classify", "record", "unrecorded"]

BACKFILL_PAGE: Final = 10_000
"""Rows the backfill reads and flags per round trip."""

Flag = tuple[str, int, bool]
"""`(session_id, seq, turn_end)` of one stored event."""


async def classify(
    conn: AsyncConnection[Any],
    queries: Queries,
    heads: Sequence[tuple[str, int, bytes]],
) -> list[Flag]:
    """The flags of stored events, from their first bytes (`heads`).

    The few events whose first bytes do not decide are read whole.
    """
    flags: list[Flag] = []
    undecided: list[tuple[str, int]] = []
    for session_id, seq, head in heads:
        decided = stored_turn_end_by_head(bytes(head))
        if decided is None:
            undecided.append((session_id, seq))
        else:
            flags.append((session_id, seq, decided))
    if undecided:
        cur = await conn.execute(
            queries.raws_at,
            {"ids": [k[0] for k in undecided], "seqs": [k[1] for k in undecided]},
        )
        for session_id, seq, raw in await cur.fetchall():
            flags.append((session_id, seq, stored_turn_end(bytes(raw))))
    return flags


async def unrecorded(
    conn: AsyncConnection[Any],
    queries: Queries,
    spans: Sequence[tuple[str, int, int]],
) -> list[Flag]:
    """The flags of the unflagged events in `spans` (`(session_id, from, to)`)."""
    cur = await conn.execute(
        queries.unrecorded_heads,
        {
            "ids": [s[0] for s in spans],
            "los": [s[1] for s in spans],
            "his": [s[2] for s in spans],
            "head": TURN_END_HEAD_BYTES,
        },
    )
    return await classify(conn, queries, await cur.fetchall())


async def record(
    conn: AsyncConnection[Any], queries: Queries, flags: Sequence[Flag]
) -> None:
    """Store `flags` in rows that have none yet.

    A flag is a fact about stored bytes, true whoever owns the session, so
    writing it needs no ownership check, and a later refusal of the
    operation that wrote it needs no undo.
    """
    if not flags:
        return
    await conn.execute(
        queries.record_turn_ends,
        {
            "ids": [f[0] for f in flags],
            "seqs": [f[1] for f in flags],
            "flags": [f[2] for f in flags],
        },
    )


async def backfill(
    conn: AsyncConnection[Any], queries: Queries, *, page: int = BACKFILL_PAGE
) -> int:
    """Flag every stored event that has no flag yet; return how many.

    Walks the events in key order, `page` rows per round trip. Idempotent:
    flagged rows are skipped.
    """
    after: tuple[str, int] = ("", -1)
    done = 0
    while True:
        cur = await conn.execute(
            queries.unrecorded_page,
            {
                "after_id": after[0],
                "after_seq": after[1],
                "limit": page,
                "head": TURN_END_HEAD_BYTES,
            },
        )
        heads: list[tuple[str, int, bytes]] = await cur.fetchall()
        if not heads:
            return done
        await record(conn, queries, await classify(conn, queries, heads))
        done += len(heads)
        after = (heads[-1][0], heads[-1][1])
