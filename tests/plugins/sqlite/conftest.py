"""Fixtures and helpers of the turnkeep-sqlite tests (soak: see the root conftest)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import pytest_asyncio

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
    seed = int(os.environ.get("TURNKEEP_SEED", random.randrange(2**32)))
    print(f"\n[{request.node.nodeid}] seed={seed} (TURNKEEP_SEED={seed} to reproduce)")
    return random.Random(seed)


# -- worker processes ----------------------------------------------------------

HERE = Path(__file__).parent
WORKER_SCRIPT = HERE / "_worker.py"


def load_helper(name: str) -> Any:
    """Import a helper script of this directory by file path."""
    module_name = f"turnkeep_sqlite_tests_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, HERE / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


class Worker:
    """A `_worker.py serve` process driven by JSON lines."""

    def __init__(self, **popen: Any) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", str(WORKER_SCRIPT), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            **popen,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(msgspec.json.encode(cmd) + b"\n")
        self.proc.stdin.flush()

    def recv(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.pid} exited ({self.proc.wait()})")
        reply: dict[str, Any] = msgspec.json.decode(line)
        return reply

    def call(self, **cmd: Any) -> dict[str, Any]:
        self.send(**cmd)
        return self.recv()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send(op="exit")
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def spawn_worker() -> Iterator[Callable[..., Worker]]:
    """Start worker processes (stopped at the end of the test)."""
    workers: list[Worker] = []

    def spawn(**popen: Any) -> Worker:
        worker = Worker(**popen)
        workers.append(worker)
        return worker

    yield spawn
    for worker in workers:
        if worker.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGCONT)  # a test may have stopped it
        worker.stop()
