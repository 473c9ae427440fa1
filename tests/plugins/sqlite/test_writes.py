"""The write operations keep their rule: a refused operation wrote nothing.

The writer (`turnkeep_sqlite.writer`) relies on it: a refusal that changed
no row costs nothing, while one that did makes it roll the whole group back
and run the other operations again. Each case here runs one operation in a
transaction of its own and compares `total_changes` before and after.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import pytest

from turnkeep.codec import EventRecord
from turnkeep.errors import EventTooLargeError, SequenceError, SessionCorruptError
from turnkeep_sqlite import SqlitePersistence
from turnkeep_sqlite.writer import Tx
from turnkeep_sqlite.writes import WriterState, append

from .conftest import meta, turn_records


async def _stored_and_released(store: SqlitePersistence) -> None:
    """Session "s": one flush (seq 0-2), then let go of."""
    await store.create(meta("s"))
    await store.append("s", turn_records(0, 0))
    await store.aclose()


def _another_instance(limit: int = 1 << 20) -> WriterState:
    return WriterState(token="f" * 32, identity=b"{}", max_event_bytes=limit)


def _appending(
    state: WriterState, records: list[EventRecord]
) -> Callable[[Tx], object]:
    """The operation `append` of `records` to session "s" by `state`."""
    return lambda tx: append(tx, state, "s", records)


def _refused(
    conn: sqlite3.Connection,
    operation: Callable[[Tx], object],
    error: type[Exception],
) -> int:
    """Run `operation` in a transaction; the rows it changed before refusing."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        before = conn.total_changes
        with pytest.raises(error):
            operation(Tx(conn))
        return conn.total_changes - before
    finally:
        conn.execute("ROLLBACK")


@pytest.mark.asyncio
async def test_a_refused_append_by_an_instance_not_holding_the_session_writes_nothing(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    await _stored_and_released(store)
    conn = raw_db()
    state = _another_instance(limit=200)
    # A gap after the stored events, a batch starting too early, an event
    # over the size limit: each is refused before the takeover would write.
    cases = [
        (turn_records(5, 1), SequenceError),
        (turn_records(1, 1), SequenceError),
        (turn_records(3, 1, sizes=[300, 7]), EventTooLargeError),
    ]
    for records, error in cases:
        assert _refused(conn, _appending(state, records), error) == 0
    assert state.held == {}
    generation = conn.execute("SELECT generation FROM sessions").fetchone()[0]
    assert generation == 1


@pytest.mark.asyncio
async def test_an_append_after_a_missing_last_event_is_refused_before_the_takeover(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    await _stored_and_released(store)
    conn = raw_db()
    conn.execute("DELETE FROM events WHERE seq = 2")
    state = _another_instance()
    operation = _appending(state, turn_records(3, 1))
    assert _refused(conn, operation, SessionCorruptError) == 0
    assert state.held == {}


@pytest.mark.asyncio
async def test_an_accepted_append_takes_the_session_over_in_its_transaction(
    store: SqlitePersistence, raw_db: Callable[[], sqlite3.Connection]
) -> None:
    await _stored_and_released(store)
    conn = raw_db()
    state = _another_instance()
    conn.execute("BEGIN IMMEDIATE")
    append(Tx(conn), state, "s", turn_records(3, 1))
    conn.execute("COMMIT")
    row = conn.execute(
        "SELECT generation, owner_token, next_seq FROM sessions"
    ).fetchone()
    assert row == (2, "f" * 32, 6)
    assert state.held == {"s": 2}
