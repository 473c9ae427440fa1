"""Schema objects turnkeep did not create: triggers refused, all reported.

A trigger planted in the database ran on every write (here: copying each
event to a table of its own, which `rm` never empties). The writer now
refuses a database holding a trigger it did not create, unless
`allow_foreign_triggers` is set, and `turnkeep verify` reports every
table, index, view or trigger that is not turnkeep's.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.cli.support import Store, cli

from turnkeep.errors import StorageError
from turnkeep.maintenance import StoreCheck
from turnkeep_sqlite import SqlitePersistence
from turnkeep_sqlite.objects import KNOWN

from .conftest import meta, turn_records

PLANT = (
    "CREATE TABLE kept (session_key, seq, data)",
    "CREATE TRIGGER keep_events AFTER INSERT ON events BEGIN "
    "INSERT INTO kept VALUES (new.session_key, new.seq, new.raw); END",
)


async def _stored(open_store: Callable[..., SqlitePersistence]) -> None:
    store = open_store()
    await store.create(meta("s"))
    await store.append("s", turn_records(0, 0))
    await store.aclose()


def _plant(raw: sqlite3.Connection, *statements: str) -> None:
    for statement in statements:
        raw.execute(statement)


@pytest.mark.asyncio
async def test_a_new_database_holds_only_what_turnkeep_knows(
    open_store: Callable[..., SqlitePersistence],
    raw_db: Callable[[], sqlite3.Connection],
) -> None:
    await _stored(open_store)
    rows = raw_db().execute(
        "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
    )
    assert set(rows.fetchall()) == KNOWN
    store = open_store()
    assert isinstance(store, StoreCheck)
    assert await store.store_problems() == []


@pytest.mark.asyncio
async def test_a_planted_trigger_refuses_every_write(
    open_store: Callable[..., SqlitePersistence],
    raw_db: Callable[[], sqlite3.Connection],
) -> None:
    await _stored(open_store)
    raw = raw_db()
    _plant(raw, *PLANT)
    store = open_store()
    with pytest.raises(StorageError, match="trigger 'keep_events' on 'events'"):
        await store.append("s", turn_records(3, 1))
    with pytest.raises(StorageError, match="allow_foreign_triggers"):
        await store.create(meta("t"))
    assert raw.execute("SELECT count(*) FROM kept").fetchone() == (0,)
    assert raw.execute("SELECT count(*) FROM events").fetchone() == (3,)
    assert len((await store.load("s")).events) == 3  # reads fire no trigger


@pytest.mark.asyncio
async def test_a_trigger_allowed_by_configuration_runs(
    open_store: Callable[..., SqlitePersistence],
    raw_db: Callable[[], sqlite3.Connection],
) -> None:
    await _stored(open_store)
    raw = raw_db()
    _plant(raw, *PLANT)
    store = open_store(allow_foreign_triggers=True)
    await store.append("s", turn_records(3, 1))
    assert raw.execute("SELECT count(*) FROM kept").fetchone() == (3,)


@pytest.mark.asyncio
async def test_verify_reports_every_object_turnkeep_did_not_create(
    open_store: Callable[..., SqlitePersistence],
    raw_db: Callable[[], sqlite3.Connection],
    db_path: Path,
) -> None:
    await _stored(open_store)
    _plant(
        raw_db(),
        *PLANT,
        "CREATE VIEW everything AS SELECT * FROM events",
        "CREATE INDEX by_seq ON events (seq)",
    )
    problems = await open_store().store_problems()
    assert [p.split(" in ")[0] for p in problems] == [
        "index 'by_seq' on 'events'",
        "table 'kept'",
        "trigger 'keep_events' on 'events'",
        "view 'everything'",
    ]
    result = await asyncio.to_thread(
        cli, "verify", "--all", store=Store("sqlite", db_path)
    )
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert "ok       s  (3 events)" in lines
    assert sum(line.startswith("PROBLEM  (store)  ") for line in lines) == 4
    assert lines[-1].endswith("the store has 4 problem(s)")
