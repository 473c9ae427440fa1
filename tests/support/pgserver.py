"""The PostgreSQL test server: where it is, whether it is up, whether it must be.

- The shared server comes from `TURNKEEP_TEST_POSTGRES_DSN` (default: the
  machine's, `postgresql://postgres@127.0.0.1:5432/test`). `require_server`
  skips a test only where no server is installed at all; where one is
  installed (or `TURNKEEP_REQUIRE_POSTGRES=1`, or the DSN is given
  explicitly) an unreachable server fails the test.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

DSN = os.environ.get(
    "TURNKEEP_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)
START_HINT = (
    "no PostgreSQL server at TURNKEEP_TEST_POSTGRES_DSN "
    f"({DSN.split('@')[-1]}); start the machine's server with "
    "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` "
    "or point TURNKEEP_TEST_POSTGRES_DSN at one"
)
ETC = Path("/etc/postgresql")
REQUIRE_ENV = "TURNKEEP_REQUIRE_POSTGRES"


def server_up(dsn: str | None = None, timeout: int = 3) -> bool:
    """Whether the server at `dsn` (default: the test server) accepts connections."""
    try:
        with psycopg.connect(
            dsn or DSN, connect_timeout=timeout, autocommit=True
        ) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def drop_schema(schema: str, dsn: str | None = None) -> None:
    """Drop `schema` and everything in it, if it exists (default: test server)."""
    with psycopg.connect(dsn or DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


def installed() -> bool:
    """Whether this machine has a PostgreSQL server installed."""
    return ETC.is_dir() or shutil.which("pg_ctlcluster") is not None


def required() -> bool:
    """Whether the PostgreSQL tests must run (fail, not skip, without a server).

    They must wherever a server is installed, where CI says so
    (`TURNKEEP_REQUIRE_POSTGRES=1`), and where the DSN is given explicitly.
    """
    return (
        os.environ.get(REQUIRE_ENV) == "1"
        or "TURNKEEP_TEST_POSTGRES_DSN" in os.environ
        or installed()
    )


def require_server() -> None:
    """Pass if the test server is up; else fail, or skip where none is installed."""
    if server_up():
        return
    if required():
        pytest.fail(
            f"PostgreSQL is installed (or required) but the test server is down: "
            f"{START_HINT}",
            pytrace=False,
        )
    pytest.skip(START_HINT)
