"""Fixtures of the turnkeep-jsonl tests (helpers: `helpers.py`).

Soak sizes run with `make soak` (see the root conftest).
Randomised tests print their seed; `TURNKEEP_SEED=<n>` replays one.

The shared test utilities live in `tests/support`; this file puts `tests/`
on `sys.path` so they import as `support.*` (and this directory's helpers as
`plugins.jsonl.helpers`).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

TESTS = Path(__file__).resolve().parents[2]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from plugins.jsonl.helpers import seeded  # noqa: E402
from plugins.jsonl.zygote_client import Zygote  # noqa: E402
from turnkeep.errors import TurnkeepError  # noqa: E402
from turnkeep_jsonl import FileOps, JsonlPersistence, OsFileOps  # noqa: E402


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """A seeded random generator; the seed is printed for reproduction."""
    return seeded(request)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """A fork server for this test module's processes (see `_zygote.py`)."""
    server = Zygote()
    yield server
    server.close()


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory for many short-lived files: on tmpfs when there is one.

    Crash-state sweeps write and remove thousands of small trees; on a
    journaling disk file system each `rmdir` alone costs about a millisecond.
    """
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="turnkeep-jsonl-", dir="/dev/shm"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store directory that does not exist yet."""
    return tmp_path / "store"


@pytest_asyncio.fixture
async def open_backend(
    store: Path,
) -> AsyncIterator[Callable[..., JsonlPersistence]]:
    """Open backends over `store` (all closed at the end of the test)."""
    opened: list[JsonlPersistence] = []

    def open_one(ops: FileOps | None = None) -> JsonlPersistence:
        backend = JsonlPersistence(store, ops=ops if ops is not None else OsFileOps())
        opened.append(backend)
        return backend

    yield open_one
    for backend in reversed(opened):
        # A test that broke the store on purpose cannot close it cleanly.
        with contextlib.suppress(TurnkeepError):
            await backend.aclose()
