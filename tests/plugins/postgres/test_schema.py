"""Schema versions, migrations and server guards (plan items 25, 32, 33).

25. A server whose `synchronous_commit` is `off` is refused at connect, before
    anything is created; `allow_non_durable` opts in, with a warning logged.
32. A newer migration row makes `load`, `append`, `has` and `list` raise
    `UnsupportedFormatError`, and every row of the schema stays identical.
33. The golden v1 and v2 fixtures load to their expected events, migrated to
    the current version with `turns` and `size` counted from their events and
    every event's `turn_end` flag stored (migration 3, also for events whose
    bytes do not start with their type); `migrate` is idempotent (also when
    migration 3 runs again over flagged events), works inside a caller's
    transaction (and rolls back with it) and outside one; 100 races of three
    connections migrating one fresh schema together, and races over each
    fixture, record exactly one migration per version. Workers of schema 1
    and 2 that keep appending after the migration do not make `turns` or
    `size` wrong: a schema-2 worker leaves `turn_end` empty and counts its
    own turns; what a schema-1 worker adds is counted by reads from the
    bytes, and flagged and counted by the next append (alone or in a group).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest
from psycopg import sql

from turnkeep.errors import ConfigurationError, UnsupportedFormatError
from turnkeep.meta import SessionSummary
from turnkeep_postgres import (
    SCHEMA_VERSION,
    PostgresConfig,
    PostgresPersistence,
    turnends,
)
from turnkeep_postgres.schema import migrate, read_version
from turnkeep_postgres.statements import Queries

from .conftest import DSN, schema_shape
from .test_backend import meta, turn
from .test_conformance import schema_digest

pytestmark = pytest.mark.postgres

FIXTURES = Path(__file__).parent / "fixtures"
OpenStore = Callable[..., PostgresPersistence]


def schema_exists(name: str) -> bool:
    with psycopg.connect(DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (name,)
        ).fetchone()
    return row == (1,)


# -- 25: configuration guards ------------------------------------------------------


@pytest.mark.asyncio
async def test_a_non_durable_server_is_refused_before_anything_is_written(
    open_store: OpenStore, schema: str
) -> None:
    store = open_store(dsn=f"{DSN}?options=-c%20synchronous_commit%3Doff")
    with pytest.raises(ConfigurationError, match="synchronous_commit = off"):
        await store.has("x")
    with pytest.raises(ConfigurationError):
        await store.append("x", turn(0, "nothing"))
    assert not schema_exists(schema)


@pytest.mark.asyncio
async def test_non_durable_commit_is_accepted_only_by_explicit_opt_in(
    open_store: OpenStore, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = f"{DSN}?options=-c%20synchronous_commit%3Doff"
    store = open_store(dsn=dsn, allow_non_durable=True)
    with caplog.at_level(logging.WARNING, logger="turnkeep_postgres"):
        await store.create(meta("opt-in"))
        await store.append("opt-in", turn(0, "x"))
    assert any("synchronous_commit = off" in r.getMessage() for r in caplog.records)
    assert len((await store.load("opt-in")).events) == 2


@pytest.mark.asyncio
async def test_every_guarded_setting_is_checked() -> None:
    # fsync and the encoding are server-wide: a stand-in connection reports
    # them, rather than turning the shared server's fsync off.
    from turnkeep_postgres.schema import check_server

    class FakeCursor:
        def __init__(self, row: tuple[str, ...]) -> None:
            self.row = row

        async def fetchone(self) -> tuple[str, ...]:
            return self.row

    class FakeConn:
        def __init__(self, row: tuple[str, ...]) -> None:
            self.row = row

        async def execute(self, *_args: Any) -> FakeCursor:
            return FakeCursor(self.row)

    cases = {
        ("off", "on", "UTF8"): "synchronous_commit = off",
        ("on", "off", "UTF8"): "fsync = off",
        ("on", "on", "LATIN1"): "encoding LATIN1",
    }
    for row, message in cases.items():
        with pytest.raises(ConfigurationError, match=message):
            await check_server(FakeConn(row), allow_non_durable=False, where="x")  # type: ignore[arg-type]
    for durable in ("on", "local", "remote_write", "remote_apply"):
        await check_server(
            FakeConn((durable, "on", "UTF8")),  # type: ignore[arg-type]
            allow_non_durable=False,
            where="x",
        )


def test_schema_names_that_postgres_would_truncate_are_refused() -> None:
    with pytest.raises(ValueError, match="schema"):
        PostgresConfig(schema="x" * 64)
    PostgresConfig(schema='odd "name"; DROP TABLE x; --')  # quoted, so harmless


@pytest.mark.asyncio
async def test_a_hostile_schema_name_is_quoted_not_spliced(schema: str) -> None:
    hostile = f'{schema}"; DROP TABLE pg_class; --'
    store = PostgresPersistence(PostgresConfig(dsn=DSN, schema=hostile))
    try:
        await store.create(meta("q"))
        await store.append("q", turn(0, "quoted"))
        assert len((await store.load("q")).events) == 2
    finally:
        await store.aclose()
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(hostile)
                )
            )


# -- 32: a newer schema is refused without changes ---------------------------------


@pytest.mark.asyncio
async def test_a_newer_schema_is_refused_and_left_byte_identical(
    open_store: OpenStore, schema: str
) -> None:
    writer = open_store()
    await writer.create(meta("s"))
    await writer.append("s", turn(0, "before the upgrade"))
    await writer.aclose()
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.schema_migrations (version, description) "
                "VALUES (%s, 'from the future')"
            ).format(sql.Identifier(schema)),
            (SCHEMA_VERSION + 1,),
        )
    before = schema_digest(schema)
    older = open_store()
    with pytest.raises(UnsupportedFormatError, match="newer"):
        await older.load("s")
    with pytest.raises(UnsupportedFormatError):
        await older.append("s", turn(2, "after"))
    with pytest.raises(UnsupportedFormatError):
        await older.list()
    with pytest.raises(UnsupportedFormatError):
        await older.has("s")
    assert schema_digest(schema) == before


# -- 33: older formats load; migrations are idempotent and locked ------------------


def load_golden(schema: str, version: int) -> dict[str, list[bytes]]:
    """Create `schema` holding the golden fixture of `version`; its events."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute((FIXTURES / f"schema_v{version}.sql").read_bytes())
    expected: dict[str, list[str]] = msgspec.json.decode(
        (FIXTURES / f"schema_v{version}.expected.json").read_bytes()
    )
    return {sid: [r.encode() for r in raws] for sid, raws in expected.items()}


def load_golden_v1(schema: str) -> dict[str, list[bytes]]:
    """Create `schema` holding the golden v1 fixture; its expected events."""
    return load_golden(schema, 1)


def ends_turn(raw: bytes) -> bool:
    """Whether stored event bytes end a turn (decoded for their type)."""
    return msgspec.json.decode(raw, type=dict[str, Any])["type"] == "turn/end"


def numbers(raws: list[bytes]) -> tuple[int, int, int]:
    """`(event_count, turns, size)` of stored events (decoded for their type)."""
    return (len(raws), sum(map(ends_turn, raws)), sum(map(len, raws)))


def stored_flags(schema: str) -> dict[str, list[bool | None]]:
    """Every session's `turn_end` flags, in seq order."""
    flags: dict[str, list[bool | None]] = {}
    with psycopg.connect(DSN, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT session_id, turn_end FROM {}.events ORDER BY session_id, seq"
            ).format(sql.Identifier(schema))
        ).fetchall()
    for session_id, flag in rows:
        flags.setdefault(session_id, []).append(flag)
    return flags


def session_generation(schema: str, session_id: str) -> int:
    """The stored generation of a session."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL("SELECT generation FROM {}.sessions WHERE id = %s").format(
                sql.Identifier(schema)
            ),
            (session_id,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def session_numbers(schema: str) -> dict[str, tuple[int, int, int, int]]:
    """`(next_seq, turns, size, counted_seq)` of every session row."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT id, next_seq, turns, size, counted_seq FROM {}.sessions"
            ).format(sql.Identifier(schema))
        ).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def numbers_of(summary: SessionSummary) -> tuple[int, int, int]:
    return (summary.event_count, summary.turns, summary.size)


def migration_rows(schema: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(DSN, autocommit=True) as conn:
        return conn.execute(
            sql.SQL(
                "SELECT version, count(*) FROM {}.schema_migrations"
                " GROUP BY 1 ORDER BY 1"
            ).format(sql.Identifier(schema))
        ).fetchall()


@pytest.mark.asyncio
async def test_the_golden_v1_fixture_loads_to_its_expected_events(
    open_store: OpenStore, schema: str
) -> None:
    expected = load_golden_v1(schema)
    assert numbers(expected["golden/parent é"])[1] == 1
    store = open_store()
    listed = {m.id: numbers_of(m.summary) for m in (await store.list()).items}
    assert listed == {sid: numbers(raws) for sid, raws in expected.items()}
    assert migration_rows(schema) == [(v, 1) for v in range(1, SCHEMA_VERSION + 1)]
    for session_id, raws in expected.items():
        loaded = await store.load(session_id)
        assert loaded.events == raws
        assert numbers_of(loaded.meta.summary) == numbers(raws)
    parent = await store.load("golden/parent é")
    assert parent.meta.summary.title == "Golden ☃"
    assert parent.meta.header.cwd == "/srv/app"
    fork = await store.load("golden-fork")
    assert fork.meta.header.parent is not None
    assert fork.meta.header.parent.seq == 2
    # ...and it continues: a v1 session takes new flushes.
    await store.claim("golden-fork")
    await store.append("golden-fork", turn(2, "after the fixture"))
    fork = await store.load("golden-fork")
    assert len(fork.events) == 4
    assert numbers_of(fork.meta.summary) == numbers(fork.events)
    (item,) = [m for m in (await store.list()).items if m.id == "golden-fork"]
    assert numbers_of(item.summary) == numbers(fork.events)


@pytest.mark.asyncio
async def test_a_schema_1_worker_appending_after_the_migration_is_recounted(
    open_store: OpenStore, schema: str
) -> None:
    expected = load_golden_v1(schema)
    store = open_store()
    await store.has("golden-fork")  # opens, so migrates
    raws = [r.raw for r in turn(2, "written by an old worker")]
    append_as_schema_1(schema, "golden-fork", 2, raws)
    events = [*expected["golden-fork"], *raws]
    loaded = await store.load("golden-fork")
    assert loaded.events == events
    assert numbers_of(loaded.meta.summary) == numbers(events)
    (item,) = [m for m in (await store.list()).items if m.id == "golden-fork"]
    assert numbers_of(item.summary) == numbers(events)
    # This version's next append stores the counted numbers again.
    await store.claim("golden-fork")
    more = turn(4, "written by a new worker")
    await store.append("golden-fork", more)
    events += [r.raw for r in more]
    assert numbers_of((await store.load("golden-fork")).meta.summary) == numbers(events)
    with psycopg.connect(DSN, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT next_seq, turns, size, counted_seq FROM {}.sessions"
                " WHERE id = 'golden-fork'"
            ).format(sql.Identifier(schema))
        ).fetchone()
    assert row is not None
    assert row == (len(events), *numbers(events)[1:], len(events))
    # ...and flags the old worker's events on the way.
    assert stored_flags(schema)["golden-fork"] == list(map(ends_turn, events))


def append_as_schema_1(
    schema: str, session_id: str, first: int, raws: list[bytes]
) -> None:
    """Version 1's append statement: `next_seq` moves, nothing else is counted."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute(
            "WITH landed AS (UPDATE sessions SET next_seq = next_seq + %s,"
            " updated_at = GREATEST(updated_at, %s) WHERE id = %s AND next_seq = %s"
            " RETURNING id) INSERT INTO events (session_id, seq, raw)"
            " SELECT landed.id, %s + e.n - 1, e.raw"
            " FROM landed, unnest(%s::bytea[]) WITH ORDINALITY AS e(raw, n)",
            (len(raws), 1_800_000_000_000, session_id, first, first, raws),
        )


# Version 2's append statement as it ran (ownership checks left out): it
# counts its own turn ends, recounts from the bytes after a schema-1 worker,
# and inserts no `turn_end`.
_V2_APPEND = (
    "WITH landed AS ("
    " UPDATE sessions AS s SET next_seq = s.next_seq + %(count)s,"
    " turns = CASE WHEN s.counted_seq = s.next_seq THEN s.turns ELSE"
    " (SELECT count(*) FILTER (WHERE substring(e.raw FROM 1 FOR %(n)s) = %(prefix)s)"
    " FROM events AS e WHERE e.session_id = s.id AND e.seq < s.next_seq)"
    " END + %(turns)s,"
    " size = CASE WHEN s.counted_seq = s.next_seq THEN s.size ELSE"
    " (SELECT COALESCE(sum(octet_length(e.raw)), 0)"
    " FROM events AS e WHERE e.session_id = s.id AND e.seq < s.next_seq)"
    " END + %(size)s,"
    " counted_seq = s.next_seq + %(count)s,"
    " updated_at = GREATEST(s.updated_at, %(time)s)"
    " WHERE s.id = %(id)s AND s.next_seq = %(first)s RETURNING s.id)"
    " INSERT INTO events (session_id, seq, raw)"
    " SELECT landed.id, %(first)s + e.n - 1, e.raw"
    " FROM landed, unnest(%(raws)s::bytea[]) WITH ORDINALITY AS e(raw, n)"
)


def append_as_schema_2(
    schema: str, session_id: str, first: int, raws: list[bytes]
) -> None:
    """Version 2's append statement (turns counted by the worker itself)."""
    prefix = b'{"type":"turn/end"'
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute(
            _V2_APPEND,
            {
                "count": len(raws),
                "turns": sum(map(ends_turn, raws)),
                "size": sum(map(len, raws)),
                "time": 1_800_000_000_000,
                "id": session_id,
                "first": first,
                "raws": raws,
                "n": len(prefix),
                "prefix": prefix,
            },
        )


@pytest.mark.asyncio
async def test_the_golden_v2_fixture_migrates_to_stored_turn_ends(
    open_store: OpenStore, schema: str
) -> None:
    expected = load_golden(schema, 2)
    # A turn end whose bytes do not start with its type, and a session a
    # schema-1 worker appended to: both need more than the stored numbers.
    assert numbers(expected["golden-odd"])[1] == 1
    assert numbers(expected["golden-gap"])[1] == 2
    store = open_store()
    listed = {m.id: numbers_of(m.summary) for m in (await store.list()).items}
    assert listed == {sid: numbers(raws) for sid, raws in expected.items()}
    assert migration_rows(schema) == [(v, 1) for v in range(1, SCHEMA_VERSION + 1)]
    assert stored_flags(schema) == {
        sid: list(map(ends_turn, raws)) for sid, raws in expected.items()
    }
    assert session_numbers(schema) == {
        sid: (len(raws), *numbers(raws)[1:], len(raws))
        for sid, raws in expected.items()
    }
    for session_id, raws in expected.items():
        loaded = await store.load(session_id)
        assert loaded.events == raws
        assert numbers_of(loaded.meta.summary) == numbers(raws)
    assert (await store.load("golden/v2 é")).meta.summary.title == "Two turns ☃"
    # ...and it continues: a v2 session takes new flushes, flagged.
    await store.claim("golden-odd")
    more = turn(3, "after the fixture")
    await store.append("golden-odd", more)
    events = [*expected["golden-odd"], *(r.raw for r in more)]
    assert numbers_of((await store.load("golden-odd")).meta.summary) == numbers(events)
    assert stored_flags(schema)["golden-odd"] == list(map(ends_turn, events))


@pytest.mark.asyncio
async def test_migration_3_run_again_changes_nothing(schema: str) -> None:
    load_golden(schema, 2)
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        assert await migrate(conn, schema) == 2
        flags, rows = stored_flags(schema), session_numbers(schema)
        # As if the version rows had been lost: every step from 3 on runs again.
        await conn.execute(
            sql.SQL("DELETE FROM {}.schema_migrations WHERE version >= 3").format(
                sql.Identifier(schema)
            )
        )
        assert await migrate(conn, schema) == 2
    assert stored_flags(schema) == flags
    assert session_numbers(schema) == rows
    assert migration_rows(schema) == [(v, 1) for v in range(1, SCHEMA_VERSION + 1)]


@pytest.mark.asyncio
async def test_every_append_stores_whether_its_events_end_a_turn(
    store: PostgresPersistence, schema: str
) -> None:
    await store.create(meta("flags"))
    first, second = turn(0, "one"), turn(2, "two")
    await store.append("flags", first)
    await store.append("flags", second)
    records = [*first, *second]
    assert stored_flags(schema)["flags"] == [r.is_turn_end for r in records]
    assert [r.is_turn_end for r in records] == [False, True, False, True]


@pytest.mark.asyncio
async def test_a_schema_2_worker_appending_after_the_migration_keeps_the_numbers(
    open_store: OpenStore, schema: str
) -> None:
    expected = load_golden(schema, 2)
    store = open_store()
    await store.has("golden/v2 é")  # opens, so migrates
    old = [r.raw for r in turn(8, "written by a schema-2 worker")]
    append_as_schema_2(schema, "golden/v2 é", 8, old)
    events = [*expected["golden/v2 é"], *old]
    loaded = await store.load("golden/v2 é")
    assert loaded.events == events
    assert numbers_of(loaded.meta.summary) == numbers(events)
    (item,) = [m for m in (await store.list()).items if m.id == "golden/v2 é"]
    assert numbers_of(item.summary) == numbers(events)
    # It leaves the flag empty, and its own count stands: nothing counts
    # those events again, so nothing flags them later.
    assert stored_flags(schema)["golden/v2 é"][-2:] == [None, None]
    await store.claim("golden/v2 é")
    more = turn(10, "written by a new worker")
    await store.append("golden/v2 é", more)
    events += [r.raw for r in more]
    assert numbers_of((await store.load("golden/v2 é")).meta.summary) == numbers(events)
    assert session_numbers(schema)["golden/v2 é"] == (
        len(events),
        *numbers(events)[1:],
        len(events),
    )
    assert stored_flags(schema)["golden/v2 é"][-4:] == [None, None, False, True]


@pytest.mark.asyncio
async def test_a_group_of_appends_catches_up_what_a_schema_1_worker_added(
    store: PostgresPersistence, schema: str
) -> None:
    for sid in ("a", "b"):
        await store.create(meta(sid))
        await store.append(sid, turn(0, "first"))
    old = [r.raw for r in turn(2, "written by an old worker")]
    append_as_schema_1(schema, "a", 2, old)
    batched = store.writer_stats.batched
    await asyncio.gather(
        store.append("a", turn(4, "after it")), store.append("b", turn(2, "second"))
    )
    # `b` landed through the group's shared statement; `a` missed it, was
    # counted up, and landed on its own in the same group.
    assert store.writer_stats.batched == batched + 1
    for sid, count in (("a", 6), ("b", 4)):
        loaded = await store.load(sid)
        assert len(loaded.events) == count
        assert numbers_of(loaded.meta.summary) == numbers(loaded.events)
        assert stored_flags(schema)[sid] == list(map(ends_turn, loaded.events))
        assert session_numbers(schema)[sid] == (
            count,
            *numbers(loaded.events)[1:],
            count,
        )


@pytest.mark.asyncio
async def test_the_backfill_flags_every_unflagged_event_page_by_page(
    schema: str,
) -> None:
    expected = load_golden(schema, 2)
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await migrate(conn, schema)
        await conn.execute(
            sql.SQL("UPDATE {}.events SET turn_end = NULL").format(
                sql.Identifier(schema)
            )
        )
        queries = await Queries.render(conn, schema)
        total = sum(map(len, expected.values()))
        assert await turnends.backfill(conn, queries, page=2) == total
        assert await turnends.backfill(conn, queries, page=2) == 0
    assert stored_flags(schema) == {
        sid: list(map(ends_turn, raws)) for sid, raws in expected.items()
    }


@pytest.mark.asyncio
async def test_counts_are_never_caught_up_over_unflagged_events(
    store: PostgresPersistence, schema: str
) -> None:
    await store.create(meta("c"))
    await store.append("c", turn(0, "first"))
    old = [r.raw for r in turn(2, "old")]
    append_as_schema_1(schema, "c", 2, old)
    events = [*(r.raw for r in turn(0, "first")), *old]
    generation = session_generation(schema, "c")
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        queries = await Queries.render(conn, schema)
        params = {
            "id": "c",
            "owner": store.owner_token,
            "generation": generation,
            "counted": 2,
            "next": 4,
        }
        cur = await conn.execute(queries.catch_up, params)
        assert cur.rowcount == 0  # events 2 and 3 have no flag yet
        flags = await turnends.unrecorded(conn, queries, [("c", 2, 4)])
        assert sorted(flags) == [("c", 2, False), ("c", 3, True)]
        await turnends.record(conn, queries, flags)
        cur = await conn.execute(queries.catch_up, params)
        assert cur.rowcount == 1
    assert session_numbers(schema)["c"] == (4, *numbers(events)[1:], 4)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.asyncio
async def test_workers_migrating_a_golden_fixture_together_migrate_it_once(
    schema: str, version: int
) -> None:
    conns = [
        await psycopg.AsyncConnection.connect(DSN, autocommit=True) for _ in range(3)
    ]
    try:
        for race in range(10):
            name = f"{schema}_v{race}"
            expected = load_golden(name, version)
            barrier = asyncio.Barrier(len(conns))

            async def one(
                conn: psycopg.AsyncConnection[Any], name: str, barrier: asyncio.Barrier
            ) -> int | None:
                await barrier.wait()
                return await migrate(conn, name)

            found = await asyncio.gather(*(one(c, name, barrier) for c in conns))
            assert sorted(v or 0 for v in found) == [version, *[SCHEMA_VERSION] * 2]
            assert migration_rows(name) == [
                (v, 1) for v in range(1, SCHEMA_VERSION + 1)
            ]
            cur = await conns[0].execute(
                sql.SQL(
                    "SELECT id, next_seq, turns, size, counted_seq FROM {}.sessions"
                ).format(sql.Identifier(name))
            )
            rows = {r[0]: r[1:] for r in await cur.fetchall()}
            assert rows == {
                sid: (*numbers(raws), len(raws)) for sid, raws in expected.items()
            }
            assert stored_flags(name) == {
                sid: list(map(ends_turn, raws)) for sid, raws in expected.items()
            }
            await conns[0].execute(
                sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name))
            )
    finally:
        for conn in conns:
            await conn.close()


def _catalog(conn: psycopg.Connection[Any], schema: str) -> list[tuple[Any, ...]]:
    """Tables, columns and index definitions of `schema` plus migration rows."""
    rows = conn.execute(
        sql.SQL("SELECT version, description FROM {}.schema_migrations").format(
            sql.Identifier(schema)
        )
    ).fetchall()
    return [*schema_shape(conn, schema), *rows]


@pytest.mark.asyncio
async def test_migrate_is_idempotent_inside_and_outside_a_transaction(
    schema: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(DSN) as conn:
        # Inside a caller's transaction: the caller's rollback undoes it.
        await conn.execute("SELECT 1")  # opens the caller's transaction
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert await migrate(conn, schema) is None
        assert await read_version(conn, schema) == SCHEMA_VERSION
        await conn.rollback()
        assert not schema_exists(schema)
        # ...and the caller's commit keeps it.
        await migrate(conn, schema)
        await conn.commit()
    assert schema_exists(schema)
    with psycopg.connect(DSN, autocommit=True) as sync_conn:
        first = _catalog(sync_conn, schema)
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        # Outside any transaction, twice: nothing changes the second time.
        assert await migrate(conn, schema) == SCHEMA_VERSION
        assert await migrate(conn, schema) == SCHEMA_VERSION
    with psycopg.connect(DSN, autocommit=True) as sync_conn:
        assert _catalog(sync_conn, schema) == first


@pytest.mark.asyncio
async def test_migrate_commits_on_a_connection_without_autocommit(schema: str) -> None:
    # A default psycopg connection, no transaction open: the migration must
    # not be left in a transaction the caller never opened (and lose it).
    async with await psycopg.AsyncConnection.connect(DSN) as conn:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert await migrate(conn, schema) is None
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert await migrate(conn, schema) == SCHEMA_VERSION
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        await conn.rollback()  # nothing of the caller's to undo
    assert schema_exists(schema)
    async with await psycopg.AsyncConnection.connect(DSN) as conn:
        assert await read_version(conn, schema) == SCHEMA_VERSION


async def _race(conns: list[psycopg.AsyncConnection[Any]], schema: str) -> None:
    barrier = asyncio.Barrier(len(conns))

    async def one(conn: psycopg.AsyncConnection[Any]) -> int | None:
        await barrier.wait()
        return await migrate(conn, schema)

    found = await asyncio.gather(*(one(c) for c in conns))
    # Exactly one connection found the schema empty and migrated it.
    assert sorted(found, key=lambda v: -1 if v is None else v) == [
        None,
        *[SCHEMA_VERSION] * (len(conns) - 1),
    ], found
    cur = await conns[0].execute(
        sql.SQL(
            "SELECT version, count(*) FROM {}.schema_migrations GROUP BY 1 ORDER BY 1"
        ).format(sql.Identifier(schema))
    )
    assert await cur.fetchall() == [(v, 1) for v in range(1, SCHEMA_VERSION + 1)]


@pytest.mark.asyncio
async def test_workers_migrating_together_migrate_exactly_once(schema: str) -> None:
    conns = [
        await psycopg.AsyncConnection.connect(DSN, autocommit=True) for _ in range(3)
    ]
    try:
        for race in range(100):
            name = f"{schema}_r{race}"
            await _race(conns, name)
            await conns[0].execute(
                sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name))
            )
    finally:
        for conn in conns:
            await conn.close()
