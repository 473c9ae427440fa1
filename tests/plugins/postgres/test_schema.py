"""Schema versions, migrations and server guards (plan items 25, 32, 33).

25. A server whose `synchronous_commit` is `off` is refused at connect, before
    anything is created; `allow_non_durable` opts in, with a warning logged.
32. A newer migration row makes `load`, `append`, `has` and `list` raise
    `UnsupportedFormatError`, and every row of the schema stays identical.
33. The golden v1 fixture loads to its expected events, migrated to the
    current version with `turns` and `size` counted from its events;
    `migrate` is idempotent, works inside a caller's transaction (and rolls
    back with it) and outside one; 100 races of three connections migrating
    one fresh schema together, and races over the v1 fixture, each record
    exactly one migration per version. A worker of schema 1 that keeps
    appending after the migration does not make `turns` or `size` wrong.
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
from turnkeep_postgres import SCHEMA_VERSION, PostgresConfig, PostgresPersistence
from turnkeep_postgres.schema import migrate, read_version

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


def load_golden_v1(schema: str) -> dict[str, list[bytes]]:
    """Create `schema` holding the golden v1 fixture; its expected events."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute((FIXTURES / "schema_v1.sql").read_bytes())
    expected: dict[str, list[str]] = msgspec.json.decode(
        (FIXTURES / "schema_v1.expected.json").read_bytes()
    )
    return {sid: [r.encode() for r in raws] for sid, raws in expected.items()}


def numbers(raws: list[bytes]) -> tuple[int, int, int]:
    """`(event_count, turns, size)` of stored events (decoded for their type)."""
    types = [msgspec.json.decode(r, type=dict[str, Any])["type"] for r in raws]
    return (len(raws), types.count("turn/end"), sum(map(len, raws)))


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
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        # Version 1's append statement: next_seq moves, turns and size do not.
        conn.execute(
            "WITH landed AS (UPDATE sessions SET next_seq = next_seq + %s,"
            " updated_at = GREATEST(updated_at, %s) WHERE id = %s AND next_seq = %s"
            " RETURNING id) INSERT INTO events (session_id, seq, raw)"
            " SELECT landed.id, %s + e.n - 1, e.raw"
            " FROM landed, unnest(%s::bytea[]) WITH ORDINALITY AS e(raw, n)",
            (len(raws), 1_800_000_000_000, "golden-fork", 2, 2, raws),
        )
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


@pytest.mark.asyncio
async def test_workers_migrating_the_v1_fixture_together_migrate_it_once(
    schema: str,
) -> None:
    conns = [
        await psycopg.AsyncConnection.connect(DSN, autocommit=True) for _ in range(3)
    ]
    try:
        for race in range(10):
            name = f"{schema}_v{race}"
            expected = load_golden_v1(name)
            barrier = asyncio.Barrier(len(conns))

            async def one(
                conn: psycopg.AsyncConnection[Any], name: str, barrier: asyncio.Barrier
            ) -> int | None:
                await barrier.wait()
                return await migrate(conn, name)

            found = await asyncio.gather(*(one(c, name, barrier) for c in conns))
            assert sorted(v or 0 for v in found) == [1, *[SCHEMA_VERSION] * 2], found
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
