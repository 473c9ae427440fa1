"""Plan item 16 for PostgreSQL: the environment fails; the caller sees a typed error.

Every case must end in `StorageError` (never a raw `psycopg` error, never a
silent success), with nothing partial stored: after it, `load` returns
whole flushes only, and the failed flush lands when retried. The one
exception is a lone append whose connection is lost while its statement
runs: that statement is its commit, so from the client's side it may have
landed, and it is a `FlushOutcomeUnknownError` (R17, also when an idle
connection the server dropped is used next; see `test_outcome_unknown.py`).
Cases:

- the server is unreachable, the database or the role does not exist (the
  message names the server, never the password);
- a connection is killed (`pg_terminate_backend`) while its transaction
  waits inside `append`, `create`, `claim`, `update` or `load`, and while a
  group commit waits after writing part of its group;
- a statement runs past `statement_timeout_ms` (append, load, list), a row
  lock is held past `lock_timeout_ms` (claim, append);
- the server drops every idle connection of the pool;
- the role lacks privileges on the schema.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, LiteralString

import psycopg
import pytest
from psycopg import sql
from tests.support.waiting import eventually

from turnkeep.errors import FlushOutcomeUnknownError, StorageError
from turnkeep.meta import SessionSummary
from turnkeep_postgres import PostgresPersistence

from .conftest import DSN
from .test_backend import meta, turn

pytestmark = pytest.mark.postgres

OpenStore = Callable[..., PostgresPersistence]
Connect = Callable[[], psycopg.Connection[Any]]


@pytest.mark.parametrize(
    ("dsn", "says"),
    [
        ("postgresql://postgres:s3cret@127.0.0.1:1/test", "127.0.0.1:1"),
        (DSN.rsplit("/", 1)[0] + "/tk_no_such_database", "tk_no_such_database"),
        (DSN.replace("postgres@", "tk_no_such_role:s3cret@"), "tk_no_such_role"),
    ],
    ids=["unreachable", "unknown-database", "unknown-role"],
)
@pytest.mark.asyncio
async def test_a_server_that_cannot_be_reached_is_a_storage_error(
    open_store: OpenStore, dsn: str, says: str
) -> None:
    store = open_store(dsn=dsn, connect_timeout_ms=2000)
    for call in (
        lambda: store.has("x"),
        lambda: store.create(meta("x")),
        lambda: store.list(),
    ):
        with pytest.raises(StorageError) as info:
            await call()
        assert says in str(info.value)
        assert "s3cret" not in str(info.value)


async def _stored(store: PostgresPersistence, sid: str) -> None:
    await store.create(meta(sid))
    await store.append(sid, turn(0, "first"))


def _waiting_pid(observer: psycopg.Connection[Any], app: str) -> int | None:
    row = observer.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
        "AND wait_event_type = 'Lock'",
        (app,),
    ).fetchone()
    return None if row is None else int(row[0])


async def _kill_while_waiting(
    store: PostgresPersistence,
    connect: Connect,
    lock: LiteralString,
    call: Callable[[], Coroutine[Any, Any, object]],
) -> BaseException | None:
    """Run `call` while `lock` is held; terminate its connection once it waits."""
    holder, observer = connect(), connect()
    holder.execute("BEGIN")
    holder.execute(lock)
    task = asyncio.create_task(call())
    await eventually(
        lambda: _waiting_pid(observer, store.application_name) is not None,
        what="the backend to wait on the lock",
        within=10.0,
    )
    pid = _waiting_pid(observer, store.application_name)
    observer.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    holder.execute("ROLLBACK")
    try:
        await task
    except BaseException as exc:
        return exc
    return None


ROW_LOCK: LiteralString = "SELECT 1 FROM sessions WHERE id = 'k' FOR UPDATE"
TABLE_LOCK: LiteralString = "LOCK TABLE events IN ACCESS EXCLUSIVE MODE"


@pytest.mark.parametrize(
    ("operation", "lock"),
    [
        ("append", ROW_LOCK),
        ("claim", ROW_LOCK),
        ("update", ROW_LOCK),
        ("create", ROW_LOCK),
        ("load", TABLE_LOCK),
    ],
)
@pytest.mark.asyncio
async def test_a_connection_killed_mid_transaction_is_a_storage_error(
    open_store: OpenStore, raw_conn: Connect, operation: str, lock: LiteralString
) -> None:
    store, other = open_store(), open_store()
    await _stored(store, "k")
    if operation == "claim":
        await store.release("k")
        store = other
    elif operation == "create":
        # A leftover claim of a dead creator: creating takes it over.
        await store.delete("k")
        with raw_conn() as conn:
            conn.execute(
                "INSERT INTO sessions (id, format_version, header, summary,"
                " updated_at) VALUES ('k', 1, '{\"id\": \"k\"}', '{}', 0)"
            )
        store = other
    calls: dict[str, Callable[[], Coroutine[Any, Any, object]]] = {
        "append": lambda: store.append("k", turn(2, "second")),
        "claim": lambda: store.claim("k"),
        "update": lambda: store.update("k", SessionSummary(title="t")),
        "create": lambda: store.create(meta("k")),
        "load": lambda: store.load("k"),
    }
    error = await _kill_while_waiting(store, raw_conn, lock, calls[operation])
    if operation == "append":
        # Its one statement was its commit: the client cannot tell.
        assert isinstance(error, FlushOutcomeUnknownError), repr(error)
        assert (error.first_seq, error.last_seq) == (2, 3)
    else:
        assert isinstance(error, StorageError), repr(error)
    assert "57P01" in str(error) or "connection" in str(error)
    # Nothing partial, and the operation goes through when retried.
    await calls[operation]()
    if operation in ("append", "load"):
        loaded = await store.load("k")
        assert len(loaded.events) == (4 if operation == "append" else 2)
    if operation == "create":
        assert not await store.has("k")


@pytest.mark.asyncio
async def test_a_group_killed_after_writing_part_of_it_stores_none_of_it(
    open_store: OpenStore, raw_conn: Connect
) -> None:
    # The group's one transaction has written seven sessions' rows and waits
    # on the eighth's row lock when its connection is terminated: every
    # flush of the group fails, none of it is stored, each lands on retry.
    store = open_store()
    ids = [f"g-{n}" for n in range(8)]
    for sid in ids:
        await _stored(store, sid)
    holder, observer = raw_conn(), raw_conn()
    holder.execute("BEGIN")
    holder.execute("SELECT 1 FROM sessions WHERE id = 'g-7' FOR UPDATE")
    tasks = [asyncio.create_task(store.append(sid, turn(2, "second"))) for sid in ids]
    await eventually(
        lambda: _waiting_pid(observer, store.application_name) is not None,
        what="the group to wait on the held row",
        within=10.0,
    )
    pid = _waiting_pid(observer, store.application_name)
    wrote = observer.execute(
        "SELECT backend_xid IS NOT NULL FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    assert wrote == (True,), "the group's transaction had written nothing yet"
    observer.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    holder.execute("ROLLBACK")
    errors = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(e, StorageError) for e in errors), errors
    stored = observer.execute("SELECT count(*) FROM events WHERE seq >= 2").fetchone()
    assert stored == (0,), "part of a killed transaction was stored"
    for sid in ids:
        assert len((await store.load(sid)).events) == 2
        await store.append(sid, turn(2, "second"))
        assert len((await store.load(sid)).events) == 4


@pytest.mark.asyncio
async def test_statement_timeouts_are_storage_errors_and_write_nothing(
    open_store: OpenStore, raw_conn: Connect
) -> None:
    store = open_store(statement_timeout_ms=300, lock_timeout_ms=60_000)
    await _stored(store, "k")
    holder = raw_conn()
    holder.execute("BEGIN")
    holder.execute(ROW_LOCK)
    with pytest.raises(StorageError, match="statement_timeout"):
        await store.append("k", turn(2, "second"))
    holder.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
    with pytest.raises(StorageError, match="57014"):
        await store.load("k")
    holder.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
    with pytest.raises(StorageError, match="57014"):
        await store.list()
    holder.execute("ROLLBACK")
    assert len((await store.load("k")).events) == 2
    await store.append("k", turn(2, "second"))
    assert len((await store.load("k")).events) == 4


@pytest.mark.asyncio
async def test_lock_timeouts_are_storage_errors(
    open_store: OpenStore, raw_conn: Connect
) -> None:
    store = open_store(lock_timeout_ms=200)
    other = open_store(lock_timeout_ms=200)
    await _stored(store, "k")
    holder = raw_conn()
    holder.execute("BEGIN")
    holder.execute(ROW_LOCK)
    with pytest.raises(StorageError, match="lock_timeout_ms"):
        await other.claim("k", steal=True)
    with pytest.raises(StorageError, match="55P03"):
        await store.append("k", turn(2, "second"))
    holder.execute("ROLLBACK")
    await store.append("k", turn(2, "second"))
    assert len((await store.load("k")).events) == 4


@pytest.mark.asyncio
async def test_dropped_pool_connections_cost_at_most_one_failed_flush(
    open_store: OpenStore, raw_conn: Connect
) -> None:
    store = open_store(pool_min_size=3, pool_max_size=3)
    await _stored(store, "k")
    observer = raw_conn()
    observer.execute(
        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
        "WHERE application_name = %s",
        (store.application_name,),
    )
    failures = 0
    seq = 2
    for n in range(4):
        try:
            await store.append("k", turn(seq, f"after {n}"))
        except FlushOutcomeUnknownError:
            # A lone append's statement is its commit: sent on a connection
            # the server had dropped, it did not land, but the client cannot
            # tell; the retry below settles it.
            failures += 1
            continue
        seq += 2
    assert failures <= 1
    assert len((await store.load("k")).events) == seq


@pytest.mark.asyncio
async def test_missing_privileges_are_storage_errors(
    open_store: OpenStore, schema: str, raw_conn: Connect
) -> None:
    owner = open_store()
    await _stored(owner, "k")
    role = f"tk_reader_{schema}"[:63]
    admin = raw_conn()
    admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        admin.execute(
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                sql.Identifier(schema), sql.Identifier(role)
            )
        )
        admin.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(
                sql.Identifier(schema), sql.Identifier(role)
            )
        )
        reader = open_store(dsn=DSN.replace("postgres@", f"{role}@"))
        assert len((await reader.load("k")).events) == 2  # reading is allowed
        with pytest.raises(StorageError, match="42501"):
            await reader.create(meta("new"))
        await reader.aclose()
    finally:
        admin.execute(
            sql.SQL("DROP OWNED BY {}; DROP ROLE {}").format(
                sql.Identifier(role), sql.Identifier(role)
            )
        )
    assert len((await owner.load("k")).events) == 2
