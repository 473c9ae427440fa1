"""Fixtures of the Agents SDK session tests.

`kind` runs a test against the SDK's own `SQLiteSession` (the reference)
and `TurnkeepSession` on the memory, JSONL, SQLite and PostgreSQL stores;
`sessions` opens session objects of that kind on one store. PostgreSQL
gets a fresh schema per test (failing where the server is down, skipping
only where none is installed: `tests/support/pgserver.py`). Every test
ends with `shutdown()`, so no host outlives its test, and runs with no
`TURNKEEP_*` configuration from the environment and the SDK's trace
export off.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import agents
import attrs
import psycopg
import pytest
from agents.memory import Session, SQLiteSession
from tests.support import pgserver
from tests.support.pgserver import DSN

from turnkeep_openai_agents import TurnkeepSession, shutdown

REFERENCE = "sdk-sqlite"
STORES = ("memory", "jsonl", "sqlite", "postgres")
KINDS = (REFERENCE, *STORES)
DURABLE = (REFERENCE, "jsonl", "sqlite", "postgres")
_schemas = itertools.count()
_KEEP = {"TURNKEEP_TEST_POSTGRES_DSN", "TURNKEEP_REQUIRE_POSTGRES", "TURNKEEP_SEED"}

agents.set_tracing_disabled(True)


@attrs.define
class Sessions:
    """Session objects of one kind on one store."""

    kind: str
    spec: str
    """The store: a turnkeep store spec, or the SDK's SQLite file."""
    opened: list[Any] = attrs.field(factory=list[Any])

    def __call__(self, session_id: str, **kwargs: Any) -> Session:
        session: Session
        if self.kind == REFERENCE:
            session = SQLiteSession(session_id, self.spec, **kwargs)
        else:
            session = TurnkeepSession(session_id, self.spec, **kwargs)
        self.opened.append(session)
        return session

    def close(self) -> None:
        for session in self.opened:
            session.close()


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh working directory and configuration; every host shut at the end."""
    for key in list(os.environ):
        if key.startswith("TURNKEEP_") and key not in _KEEP:
            monkeypatch.delenv(key)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    yield work
    shutdown()


def store_spec(kind: str, root: Path) -> Iterator[str]:
    """The store of `kind` under `root` (a PostgreSQL schema is dropped after)."""
    if kind == REFERENCE:
        yield str(root / "sdk.db")
    elif kind == "memory":
        yield "memory"
    elif kind == "jsonl":
        yield f"jsonl:{root / 'store'}"
    elif kind == "sqlite":
        yield f"sqlite:{root / 'sessions.db'}"
    else:
        pgserver.require_server()
        schema = f"tk_oai_{os.getpid()}_{next(_schemas)}"
        pgserver.drop_schema(schema)
        try:
            yield f"postgres:{DSN}?schema={schema}"
        finally:
            shutdown()  # the host holds connections into the schema
            with contextlib.suppress(psycopg.Error):
                pgserver.drop_schema(schema)


@pytest.fixture
def make_sessions(
    tmp_path: Path,
) -> Iterator[Callable[[str], Sessions]]:
    """`make_sessions(kind)`: session objects of `kind` on a fresh store."""
    made: list[Sessions] = []
    stack = contextlib.ExitStack()

    def make(kind: str) -> Sessions:
        root = tmp_path / f"{kind}-{len(made)}"
        root.mkdir()
        specs = store_spec(kind, root)
        spec = next(specs)
        stack.callback(lambda: next(specs, None))
        made.append(Sessions(kind, spec))
        return made[-1]

    with stack:
        yield make
        for sessions in made:
            sessions.close()


def kind_params(kinds: tuple[str, ...]) -> list[Any]:
    """The kinds as fixture params, PostgreSQL's marked `postgres`."""
    return [
        pytest.param(k, marks=pytest.mark.postgres) if k == "postgres" else k
        for k in kinds
    ]


@pytest.fixture(params=kind_params(KINDS))
def sessions(
    request: pytest.FixtureRequest, make_sessions: Callable[[str], Sessions]
) -> Sessions:
    """Session objects of each kind (the SDK's reference first)."""
    return make_sessions(request.param)


@pytest.fixture(params=kind_params(DURABLE))
def durable(
    request: pytest.FixtureRequest, make_sessions: Callable[[str], Sessions]
) -> Sessions:
    """Session objects of each kind that outlives its process."""
    return make_sessions(request.param)
