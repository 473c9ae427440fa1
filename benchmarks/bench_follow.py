"""Following a session from another backend instance: cost per new event.

For each backend (JSONL, SQLite, PostgreSQL) and session size (1,000 and
100,000 events by default), a follower (its own backend instance, as another
process would have) waits with `wait_for_commit` while a writer appends
one event at a time; each wake fetches the new event with `load_after`.
Measured per commit:

- wake: from the writer's `append` returning to the follower's
  `wait_for_commit` returning (negative when the follower saw the commit
  before the writer heard its acknowledgement);
- follow: the wake plus the `load_after` of the new event, i.e. what a
  follower pays per event;

and, as the raw baseline of the same run, what following cost before:
reloading the session (`load`) at each poll. Following should cost the same
at 1,000 and 100,000 events, and `load` grow with the session.

Sizes: `BENCH_FOLLOW_SIZES` (comma-separated, default `1000,100000`);
commits per size: `BENCH_FOLLOW_COMMITS` (default 30). PostgreSQL at
`TURNKEEP_BENCH_POSTGRES_DSN` (else `TURNKEEP_TEST_POSTGRES_DSN`, else the
machine's `postgres@127.0.0.1/test`), in a schema of its own, dropped after.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from turnkeep.conformance import BackendHarness
from turnkeep.persistence import SessionPersistence
from turnkeep_jsonl import JsonlPersistence
from turnkeep_postgres import PostgresConfig, PostgresPersistence
from turnkeep_sqlite import SqliteConfig, SqlitePersistence

SIZES = [int(n) for n in os.environ.get("BENCH_FOLLOW_SIZES", "1000,100000").split(",")]
COMMITS = int(os.environ.get("BENCH_FOLLOW_COMMITS", "30"))
DSN = os.environ.get(
    "TURNKEEP_BENCH_POSTGRES_DSN",
    os.environ.get(
        "TURNKEEP_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
    ),
)
_BATCH = 1000

Open = Callable[[], SessionPersistence]


@asynccontextmanager
async def _jsonl() -> AsyncGenerator[Open, None]:
    root = Path(tempfile.mkdtemp(prefix="bench-follow-"))
    try:
        yield lambda: JsonlPersistence(root / "store")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@asynccontextmanager
async def _sqlite() -> AsyncGenerator[Open, None]:
    root = Path(tempfile.mkdtemp(prefix="bench-follow-"))
    try:
        yield lambda: SqlitePersistence(SqliteConfig(path=root / "s.sqlite3"))
    finally:
        shutil.rmtree(root, ignore_errors=True)


@asynccontextmanager
async def _postgres() -> AsyncGenerator[Open, None]:
    schema = f"bench_follow_{uuid.uuid4().hex[:8]}"
    try:
        yield lambda: PostgresPersistence(PostgresConfig(dsn=DSN, schema=schema))
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(schema)
                )
            )


async def _measure(open_backend: Open, size: int) -> dict[str, float]:
    writer, follower = open_backend(), open_backend()
    try:
        meta = BackendHarness.meta()
        await writer.create(meta)
        for start in range(0, size, _BATCH):
            await writer.append(
                meta.id, BackendHarness.records(start, min(_BATCH, size - start))
            )
        wakes: list[float] = []
        follows: list[float] = []
        loads: list[float] = []
        seq = size - 1
        reader: Any = follower  # every bundled backend has the optional methods
        for n in range(COMMITS):
            woke: list[float] = []

            async def follow(after: int, woke: list[float]) -> None:
                last = await reader.wait_for_commit(meta.id, after, 30.0)
                woke.append(time.perf_counter())
                new = await reader.load_after(meta.id, after, 100)
                woke.append(time.perf_counter())
                assert last == after + 1
                assert len(new) == 1

            task = asyncio.ensure_future(follow(seq, woke))
            await asyncio.sleep(0.02)  # the follower is waiting
            await writer.append(meta.id, BackendHarness.records(seq + 1, 1))
            committed = time.perf_counter()
            await task
            seq += 1
            wakes.append(woke[0] - committed)
            follows.append(woke[1] - committed)
            if n < 5:  # the baseline: one whole reload, as a poll used to do
                started = time.perf_counter()
                loaded = await follower.load(meta.id)
                loads.append(time.perf_counter() - started)
                assert len(loaded.events) == seq + 1
        return {
            "wake_ms": statistics.median(wakes) * 1e3,
            "wake_p90_ms": sorted(wakes)[int(len(wakes) * 0.9)] * 1e3,
            "follow_ms": statistics.median(follows) * 1e3,
            "load_ms": statistics.median(loads) * 1e3,
        }
    finally:
        await follower.aclose()
        await writer.aclose()


async def _run() -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, factory in (
        ("jsonl", _jsonl),
        ("sqlite", _sqlite),
        ("postgres", _postgres),
    ):
        for size in SIZES:
            async with factory() as open_backend:
                measured = await _measure(open_backend, size)
            results[f"{name}_{size}"] = measured
            print(
                f"  {name:8} {size:>7,} events: wake {measured['wake_ms']:7.2f} ms "
                f"(p90 {measured['wake_p90_ms']:7.2f}), wake + load_after "
                f"{measured['follow_ms']:7.2f} ms; baseline load "
                f"{measured['load_ms']:8.2f} ms, ratio "
                f"{measured['follow_ms'] / measured['load_ms']:6.3f}",
                flush=True,
            )
    return results


def main() -> dict[str, Any]:
    print(
        f"follow a session from another instance: {COMMITS} commits of one event "
        "each; medians (commit acknowledged -> follower awake)"
    )
    return asyncio.run(_run())


if __name__ == "__main__":
    main()
