"""Fixtures of the turnkeep-langgraph tests: a fresh store of each backend.

`store` is a store spec for a store nobody else uses: a memory host (one
per test: the spec carries nothing else, so the test closes its savers
and the host goes with them), a JSONL directory or SQLite file under the
test's temporary directory, or a PostgreSQL schema of its own (dropped
afterwards; the test fails, never skips, where a server is installed but
down).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from tests.support import pgserver

BACKENDS = [
    "memory",
    "jsonl",
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
]

_schemas = itertools.count()


def spec_for(backend: str, tmp_path: Path) -> Iterator[str]:
    """Yield a fresh store spec of `backend`; clean up afterwards."""
    if backend == "memory":
        yield "memory"
    elif backend == "jsonl":
        yield f"jsonl:{tmp_path / 'threads'}"
    elif backend == "sqlite":
        yield f"sqlite:{tmp_path / 'threads.db'}"
    else:
        pgserver.require_server()
        schema = f"tk_lg_{os.getpid()}_{next(_schemas)}"
        pgserver.drop_schema(schema)
        sep = "&" if "?" in pgserver.DSN else "?"
        yield f"postgres:{pgserver.DSN}{sep}schema={schema}"
        with contextlib.suppress(psycopg.Error):
            pgserver.drop_schema(schema)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store spec of each backend."""
    yield from spec_for(request.param, tmp_path)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    """A fresh SQLite store spec."""
    return f"sqlite:{tmp_path / 'threads.db'}"
