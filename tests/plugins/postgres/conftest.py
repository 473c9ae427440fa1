"""Fixtures of the turnkeep-postgres tests: the server, schemas, locks, seeds.

The server comes from `TURNKEEP_TEST_POSTGRES_DSN` (default: the machine's,
`postgresql://postgres@127.0.0.1:5432/test`). Without one every test here
skips, saying how to start it. Each test gets its own schema, dropped
afterwards, so runs (and xdist workers) never see each other's rows.

Server-crash tests stop the shared server. Every test of this directory
holds a shared lock on a lock file while it runs; a crash test takes it
exclusively, so it runs alone and the others wait (under xdist too), and it
restarts the server before it lets go, also when it fails.

Soak sizes (`@pytest.mark.soak`) run only with `--soak` or `TURNKEEP_SOAK=1`
(the root conftest skips them otherwise).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import random
import tempfile
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_asyncio
from psycopg import sql
from tests.support.worker_client import SpawnWorker, spawned_workers
from tests.support.workload import seeded_rng

from turnkeep_postgres import PostgresConfig, PostgresPersistence

DSN = os.environ.get(
    "TURNKEEP_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)
LOCK_FILE = Path(tempfile.gettempdir()) / "turnkeep-postgres-tests.lock"
GATE_FILE = Path(tempfile.gettempdir()) / "turnkeep-postgres-tests.gate"
START_HINT = (
    "no PostgreSQL server at TURNKEEP_TEST_POSTGRES_DSN "
    f"({DSN.split('@')[-1]}); start the machine's server with "
    "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` "
    "or point TURNKEEP_TEST_POSTGRES_DSN at one"
)

_reachable: list[bool] = []
_schemas = itertools.count()


def server_up(timeout: int = 3) -> bool:
    """Whether the test server accepts a connection now."""
    try:
        with psycopg.connect(DSN, connect_timeout=timeout, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


@contextlib.contextmanager
def suite_lock(*, exclusive: bool) -> Generator[None]:
    """Hold the lock file shared (normal tests) or exclusive (server crashes).

    A gate lock gives the exclusive taker precedence: it holds the gate while
    it waits, and shared takers pass the gate before they take their share,
    so a stream of shared holders cannot starve it.
    """
    gate = os.open(GATE_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        if exclusive:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            fcntl.flock(fd, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        os.close(fd)  # closing releases the locks
        os.close(gate)


@pytest.fixture(autouse=True)
def postgres_server(request: pytest.FixtureRequest) -> Iterator[None]:
    """Skip without a server; hold the suite lock (shared unless `crash_server`)."""
    exclusive = "crash_server" in request.fixturenames
    with suite_lock(exclusive=exclusive):
        if not _reachable:
            _reachable.append(server_up())
        if not _reachable[0] and not server_up():
            pytest.skip(START_HINT)
        _reachable[0] = True
        yield


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


def _drop(schema: str) -> None:
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


@pytest.fixture
def schema(postgres_server: None) -> Iterator[str]:
    """A fresh schema name for this test (dropped afterwards)."""
    del postgres_server
    name = f"tk_test_{os.getpid()}_{next(_schemas)}"
    _drop(name)
    yield name
    with contextlib.suppress(psycopg.Error):
        _drop(name)


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
    for backend in reversed(opened):
        with contextlib.suppress(Exception):
            await backend.aclose()


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
