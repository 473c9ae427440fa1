"""The SQLite writer thread's hand-off: straight to the thread, grouped, closed.

Operations go to the writer thread as they are submitted (no extra event-loop
iteration); those queued while it commits share the next commit; after
`close` the queued ones have finished and new ones are refused.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from turnkeep.errors import PersistenceError
from turnkeep_sqlite.writer import Tx, Writer


def _writer(path: Path) -> Writer:
    return Writer(
        path=path,
        opener=lambda: sqlite3.connect(
            ":memory:", isolation_level=None, check_same_thread=False
        ),
        closer=lambda conn: conn.close(),
        verify=lambda: None,
        busy_timeout_s=5.0,
        max_group=64,
    )


@pytest.mark.asyncio
async def test_operations_queued_during_a_commit_share_the_next_one(
    tmp_path: Path,
) -> None:
    writer = _writer(tmp_path / "db")
    entered, gate = threading.Event(), threading.Event()

    def slow(tx: Tx) -> str:
        entered.set()
        gate.wait(10)
        return "first"

    try:
        first = writer.submit(slow)
        # It reaches the thread at once, without another event-loop iteration.
        assert entered.wait(5)
        rest = [writer.submit(lambda tx, n=n: n) for n in range(20)]
        gate.set()
        assert await first == "first"
        assert await asyncio.gather(*rest) == list(range(20))
    finally:
        await asyncio.to_thread(writer.close)
    assert writer.stats.groups == 2
    assert writer.stats.largest_group == 20


@pytest.mark.asyncio
async def test_max_group_bounds_a_group(tmp_path: Path) -> None:
    writer = _writer(tmp_path / "db")
    writer.max_group = 8
    entered, gate = threading.Event(), threading.Event()

    def slow(tx: Tx) -> None:
        entered.set()
        gate.wait(10)

    try:
        first = writer.submit(slow)
        await asyncio.to_thread(entered.wait, 10)
        rest = [writer.submit(lambda tx, n=n: n) for n in range(20)]
        gate.set()
        await first
        assert await asyncio.gather(*rest) == list(range(20))
    finally:
        await asyncio.to_thread(writer.close)
    assert writer.stats.largest_group == 8
    assert writer.stats.operations == 21


@pytest.mark.asyncio
async def test_close_finishes_queued_operations_then_refuses(tmp_path: Path) -> None:
    writer = _writer(tmp_path / "db")
    queued = [writer.submit(lambda tx, n=n: n) for n in range(5)]
    await asyncio.to_thread(writer.close)
    assert await asyncio.gather(*queued) == list(range(5))
    with pytest.raises(PersistenceError, match="closed"):
        await writer.submit(lambda tx: None)
    writer.close()  # idempotent
