"""Fixtures of the turnkeep-postgres tests: the server, schemas, seeds.

The server comes from `TURNKEEP_TEST_POSTGRES_DSN` (default: the machine's,
`postgresql://postgres@127.0.0.1:5432/test`; see `tests/support/pgserver.py`).
Where it is down, every test here fails, saying how to start it; only where
no PostgreSQL server is installed at all do they skip. Each test gets its
own schema, dropped afterwards, so runs (and xdist workers) never see each
other's rows. No test stops this server: the server-crash tests crash a
throwaway cluster of their own.

Soak sizes (`@pytest.mark.soak`) run only with `--soak` or `TURNKEEP_SOAK=1`
(the root conftest skips them otherwise).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import psycopg
import pytest
import pytest_asyncio
from psycopg import sql
from tests.support import pgserver
from tests.support.pgserver import DSN
from tests.support.worker_client import SpawnWorker, spawned_workers
from tests.support.workload import seeded_rng

from turnkeep_postgres import PostgresConfig, PostgresPersistence

_up: list[bool] = []
_schemas = itertools.count()


@pytest.fixture(autouse=True)
def postgres_server() -> None:
    """Fail (or skip, where no server is installed) unless the server is up."""
    if not _up:
        pgserver.require_server()
        _up.append(True)


def schema_shape(conn: psycopg.Connection[Any], schema: str) -> list[tuple[Any, ...]]:
    """The tables, columns and index definitions of `schema`, in a stable order."""
    shape = conn.execute(
        "SELECT c.relname, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod)"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0"
        " AND NOT a.attisdropped WHERE n.nspname = %s ORDER BY 1, 3",
        (schema,),
    ).fetchall()
    indexes = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = %s ORDER BY 1", (schema,)
    ).fetchall()
    return [*shape, *indexes]


@pytest.fixture
def schema(postgres_server: None) -> Iterator[str]:
    """A fresh schema name for this test (dropped afterwards)."""
    del postgres_server
    name = f"tk_test_{os.getpid()}_{next(_schemas)}"
    pgserver.drop_schema(name)
    yield name
    with contextlib.suppress(psycopg.Error):
        pgserver.drop_schema(name)


@pytest.fixture
def pg_config(schema: str) -> Callable[..., PostgresConfig]:
    """Build configurations for this test's schema (options override)."""

    def build(**options: Any) -> PostgresConfig:
        values: dict[str, Any] = {"dsn": DSN, "schema": schema}
        values.update(options)
        return PostgresConfig(**values)

    return build


@pytest_asyncio.fixture
async def open_store(
    pg_config: Callable[..., PostgresConfig],
) -> AsyncIterator[Callable[..., PostgresPersistence]]:
    """Open backends over this test's schema (closed at the end of the test)."""
    opened: list[PostgresPersistence] = []

    def open_one(**options: Any) -> PostgresPersistence:
        backend = PostgresPersistence(pg_config(**options))
        opened.append(backend)
        return backend

    yield open_one
    # Not suppressed: `aclose` never raises (a server that went away is
    # logged and its leases run out), so an error here is a close bug and
    # fails the test that met it. Every backend is closed all the same.
    failures: list[BaseException] = []
    for backend in reversed(opened):
        try:
            await backend.aclose()
        except Exception as exc:
            failures.append(exc)
    if failures:
        raise failures[0]


@pytest_asyncio.fixture
async def store(open_store: Callable[..., PostgresPersistence]) -> PostgresPersistence:
    """The test's first backend."""
    return open_store()


@pytest.fixture
def raw_conn(schema: str) -> Iterator[Callable[[], psycopg.Connection[Any]]]:
    """Open plain autocommit connections (search_path = the test schema)."""
    conns: list[psycopg.Connection[Any]] = []

    def connect() -> psycopg.Connection[Any]:
        conn = psycopg.connect(DSN, autocommit=True)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conns.append(conn)
        return conn

    yield connect
    for conn in conns:
        conn.close()


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """A seeded random generator; the seed is printed for reproduction."""
    return seeded_rng(request)


@pytest.fixture
def spawn_worker() -> Iterator[SpawnWorker]:
    """Start PostgreSQL worker processes (stopped at the end of the test)."""
    with spawned_workers("postgres") as spawn:
        yield spawn
