"""A delete the server's full disk refuses says so, and how much to free.

PostgreSQL writes a delete to its write-ahead log before it frees any
space, so on a full disk `rm` fails whatever it would free; the error was a
plain "could not extend file". The server's full disk is a trigger in the
test schema that raises `disk_full` (SQLSTATE 53100) for each deleted
event, as the server does when it cannot write.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from turnkeep.codec import EventCodec
from turnkeep.errors import StorageError
from turnkeep.events import TurnEnd, TurnEndData, UserMessage, UserMessageData
from turnkeep.meta import SessionHeader, SessionMeta, SessionSummary
from turnkeep_postgres import PostgresPersistence

pytestmark = pytest.mark.postgres

CODEC = EventCodec()
T0 = 1_700_000_000_000
TEXT = 200_000

FULL = (
    "CREATE FUNCTION disk_is_full() RETURNS trigger LANGUAGE plpgsql AS $$"
    " BEGIN RAISE EXCEPTION 'could not extend file: No space left on device'"
    " USING ERRCODE = 'disk_full'; END $$",
    "CREATE TRIGGER disk_is_full BEFORE DELETE ON events"
    " FOR EACH ROW EXECUTE FUNCTION disk_is_full()",
)


def meta(session_id: str) -> SessionMeta:
    return SessionMeta(
        header=SessionHeader(id=session_id, created_at=T0),
        summary=SessionSummary(updated_at=T0),
    )


@pytest.mark.asyncio
async def test_a_delete_the_full_disk_refuses_says_how_much_to_free(
    open_store: Callable[..., PostgresPersistence],
    raw_conn: Callable[[], psycopg.Connection[Any]],
) -> None:
    store = open_store()
    await store.create(meta("big"))
    texts = [("x" * TEXT) + str(n) for n in range(5)]
    records = [
        CODEC.record(UserMessage(seq=n, time=T0, data=UserMessageData(text=t)))
        for n, t in enumerate(texts)
    ]
    records.append(
        CODEC.record(
            TurnEnd(seq=5, time=T0, data=TurnEndData(turn=1, status="completed"))
        )
    )
    await store.append("big", records)
    conn = raw_conn()
    for statement in FULL:
        conn.execute(statement.encode())
    with pytest.raises(StorageError) as caught:
        await store.delete("big")
    message = str(caught.value)
    assert "the server's disk is full, and nothing was deleted" in message
    assert "write-ahead log" in message
    found = re.search(r"about ([\d,]+) bytes", message)
    assert found is not None, message
    stored = conn.execute(
        "SELECT sum(pg_column_size(e.*)) FROM events e WHERE session_id = 'big'"
    ).fetchone()
    assert stored is not None
    assert int(stored[0]) <= int(found[1].replace(",", ""))
    assert await store.has("big")  # nothing was deleted
    conn.execute(b"DROP TRIGGER disk_is_full ON events")
    await store.delete("big")  # with room again
    assert not await store.has("big")
