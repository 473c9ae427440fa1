"""Deleting on a full disk: SQLite says how much room the delete needs.

SQLite writes every page a delete changes to its write-ahead log before any
space is freed (with `secure_delete`, every page the rows held), so on a
full disk `rm` cannot free what it holds. The delete fails, nothing is
deleted, and the error says so and how much to free. The full disk is the
fault shim of `test_faults.py` in a writer process, failing every write to
the WAL with `ENOSPC` once the writer is open (SQLite reports it as
`SQLITE_FULL`).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from turnkeep_sqlite import SqlitePersistence

from .conftest import meta, turn_records

DATA = 1_000_000

WRITER = """
import asyncio, ctypes, errno, sys
from pathlib import Path
from turnkeep.errors import StorageError
from turnkeep.meta import SessionSummary
from turnkeep_sqlite import SqliteConfig, SqlitePersistence

async def main() -> None:
    backend = SqlitePersistence(SqliteConfig(path=Path(sys.argv[1])))
    await backend.update("small", SessionSummary(title="writer open"))
    # From now on every write to the WAL finds the disk full.
    ctypes.CDLL(None).faultshim_arm(1, 1, 1, errno.ENOSPC)
    try:
        await backend.delete("big")
    except StorageError as exc:
        print("ERROR", exc)
    else:
        print("DELETED")
    try:
        await backend.aclose()
    except StorageError:
        pass

asyncio.run(main())
"""


async def _stored(open_store: Callable[..., SqlitePersistence]) -> None:
    store = open_store()
    await store.create(meta("big"))
    await store.append("big", turn_records(0, 0, sizes=[DATA // 2, DATA // 2]))
    await store.create(meta("small"))
    await store.append("small", turn_records(0, 0))
    await store.aclose()


def test_a_delete_the_full_disk_refuses_says_how_much_to_free(
    open_store: Callable[..., SqlitePersistence], db_path: Path, shim: Path
) -> None:
    asyncio.run(_stored(open_store))
    env = dict(os.environ, LD_PRELOAD=str(shim), FAULTSHIM_MATCH=f"{db_path}-wal")
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(db_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.startswith("ERROR"), done.stdout + done.stderr
    message = done.stdout
    assert "the disk is full, and nothing was deleted" in message
    assert "write-ahead log" in message
    found = re.search(r"about ([\d,]+) bytes", message)
    assert found is not None, message
    assert DATA < int(found[1].replace(",", "")) < 2 * DATA

    async def after() -> None:
        store = open_store()
        assert len((await store.load("big")).events) == 3  # nothing was deleted
        await store.delete("big")  # with room again
        assert not await store.has("big")

    asyncio.run(after())
