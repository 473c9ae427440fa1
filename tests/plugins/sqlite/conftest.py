"""Fixtures and helpers of the turnkeep-sqlite tests (soak: see the root conftest)."""

from __future__ import annotations

import random
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from tests.support import needs
from tests.support.worker_client import SpawnWorker, spawned_workers
from tests.support.workload import seeded_rng

from turnkeep.codec import EventCodec, EventRecord
from turnkeep.events import (
    AssistantMessage,
    AssistantMessageData,
    SessionEvent,
    TurnEnd,
    TurnEndData,
    UserMessage,
    UserMessageData,
)
from turnkeep.meta import SessionHeader, SessionMeta
from turnkeep_sqlite import SqliteConfig, SqlitePersistence

CODEC = EventCodec()


def turn_records(
    seq0: int, turn: int, *, sizes: list[int] | None = None
) -> list[EventRecord]:
    """One turn of encoded events from `seq0` (user, assistant..., end)."""
    sizes = sizes if sizes is not None else [5, 7]
    events: list[SessionEvent] = [
        UserMessage(
            seq=seq0,
            time=1_700_000_000_000 + seq0,
            data=UserMessageData(text=f"u{turn}:" + "x" * sizes[0]),
        )
    ]
    for i, size in enumerate(sizes[1:]):
        seq = seq0 + 1 + i
        events.append(
            AssistantMessage(
                seq=seq,
                time=1_700_000_000_000 + seq,
                data=AssistantMessageData(text=f"a{turn}.{i}:" + "y" * size),
            )
        )
    end = seq0 + len(events)
    events.append(
        TurnEnd(
            seq=end,
            time=1_700_000_000_000 + end,
            data=TurnEndData(turn=turn, status="completed"),
        )
    )
    return [CODEC.record(e) for e in events]


def meta(session_id: str, *, title: str | None = None) -> SessionMeta:
    """Metadata of a new session."""
    from turnkeep.meta import SessionSummary

    return SessionMeta(
        header=SessionHeader(id=session_id, created_at=1_700_000_000_000, cwd="/w"),
        summary=SessionSummary(title=title),
    )


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A database path inside a not-yet-existing private directory."""
    return tmp_path / "store" / "sessions.sqlite3"


@pytest_asyncio.fixture
async def open_store(db_path: Path) -> AsyncIterator[Callable[..., SqlitePersistence]]:
    """Open backends over `db_path` (closed at the end of the test)."""
    opened: list[SqlitePersistence] = []

    def open_one(**options: object) -> SqlitePersistence:
        backend = SqlitePersistence(SqliteConfig(path=db_path, **options))  # type: ignore[arg-type]
        opened.append(backend)
        return backend

    yield open_one
    for backend in reversed(opened):
        await backend.aclose()


@pytest_asyncio.fixture
async def store(open_store: Callable[..., SqlitePersistence]) -> SqlitePersistence:
    """The test's first backend."""
    return open_store()


@pytest.fixture
def raw_db(db_path: Path) -> Iterator[Callable[[], sqlite3.Connection]]:
    """Open plain sqlite3 connections to the test database (closed afterwards)."""
    conns: list[sqlite3.Connection] = []

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(db_path, isolation_level=None, timeout=10)
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
    """Start SQLite worker processes (stopped at the end of the test)."""
    with spawned_workers("sqlite") as spawn:
        yield spawn


@pytest.fixture(scope="session")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`faultshim.c` built as a preload library (fault injection in SQLite's I/O)."""
    compiler = needs.c_compiler()  # to build the fault-injection shim
    out = tmp_path_factory.mktemp("shim") / "faultshim.so"
    subprocess.run(
        [
            compiler,
            "-shared",
            "-fPIC",
            "-O2",
            "-o",
            str(out),
            str(Path(__file__).parent / "faultshim.c"),
            "-ldl",
        ],
        check=True,
    )
    return out
