"""Fixtures of the `turnkeep` command tests.

Every test runs in its own working directory with no `TURNKEEP_*`
configuration from the environment, so only what the test sets up selects
a backend. `store` is parametrised over the embedded backends; `pg_store`
gives a fresh PostgreSQL schema (failing where the server is down, skipping
only where none is installed: `tests/support/pgserver.py`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import msgspec
import psycopg
import pytest
from tests.cli.support import BACKENDS, Store
from tests.support import pgserver
from tests.support.pgserver import DSN

HOLDER = Path(__file__).parent / "_holder.py"
_KEEP = {
    "TURNKEEP_SOAK",
    "TURNKEEP_SEED",
    "TURNKEEP_TEST_POSTGRES_DSN",
    "TURNKEEP_REQUIRE_POSTGRES",
    "TURNKEEP_REQUIRE_CHROMIUM",
}
_schemas = itertools.count()


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory; no configuration from the environment."""
    for key in list(os.environ):
        if key.startswith("TURNKEEP_") and key not in _KEEP:
            monkeypatch.delenv(key)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def new_store(name: str, root: Path) -> Store:
    """A store not made yet (for the commands that make one: import, migrate)."""
    if name == "jsonl":
        return Store("jsonl", root / "store")
    return Store("sqlite", root / "db" / "sessions.sqlite3")


def make_store(name: str, root: Path) -> Store:
    """An empty store that exists: `--store` refuses a path that does not."""
    store = new_store(name, root)
    if name == "jsonl":
        store.path.mkdir(mode=0o700, parents=True)
        return store
    store.path.parent.mkdir(mode=0o700, parents=True)
    # SQLite reads an empty file as an empty database.
    store.path.touch(mode=0o600)
    return store


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """An empty store of each embedded backend."""
    return make_store(request.param, tmp_path)


@pytest.fixture
def jsonl_store(tmp_path: Path) -> Store:
    return make_store("jsonl", tmp_path)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Store:
    return make_store("sqlite", tmp_path)


@pytest.fixture
def pg_store(tmp_path: Path) -> Iterator[Store]:
    """A PostgreSQL store in a fresh schema (see `pgserver.require_server`)."""
    pgserver.require_server()
    schema = f"tk_cli_{os.getpid()}_{next(_schemas)}"
    pgserver.drop_schema(schema)
    try:
        yield Store("postgres", tmp_path / "pg", dsn=DSN, schema=schema)
    finally:
        with contextlib.suppress(psycopg.Error):
            pgserver.drop_schema(schema)


@pytest.fixture
def hold() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Make another process the writer of a session until the test ends.

    `hold(store, id, probe=True)`: when its stdin closes, the holder tries
    to store a summary and prints the outcome (see `_holder.py`).
    """
    procs: list[subprocess.Popen[bytes]] = []

    def start(
        store: Store, session_id: str, *, probe: bool = False
    ) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(HOLDER),
                store.name,
                msgspec.json.encode(store.options()).decode(),
                session_id,
                *(["probe"] if probe else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"held\n", "the holder did not start"
        return proc

    yield start
    for proc in procs:
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()


@contextlib.contextmanager
def chowned(path: Path, uid: int = 54321) -> Generator[None]:
    """`path` owned by another user for a while (needs root)."""
    st = path.stat()
    os.chown(path, uid, st.st_gid)
    try:
        yield
    finally:
        os.chown(path, st.st_uid, st.st_gid)
