"""Plan item 24: many processes on one database file.

8 processes each flush turns into their own session while 2 more fight over
one shared session (each steals it, reloads, appends, and is fenced by the
other), all on one file. Must hold: no error other than the expected fences
reaches any caller (in particular no "database is locked": busy waits are
the backend's business, `busy_timeout_ms` 10 s), no lost or duplicated seq,
every acknowledged flush is stored exactly once at its seq, and
`integrity_check` is ok. Flush latency p50/p99 is printed. CI runs 15 s
(the plan's 3 minutes are the soak size); soak runs 3 minutes.

The plan's speed goal (p99 flush <= 100 ms) is measured by
`benchmarks/bench_contention.py`, beside raw SQLite in the same run, not
asserted here: on a shared two-core machine the tail follows whatever else
runs. What is asserted of latency is that no writer starves: p99 stays far
below the 10 s busy timeout.
"""

from __future__ import annotations

import sqlite3
import statistics
from pathlib import Path
from typing import Any

import pytest
from tests.support.worker_client import SpawnWorker
from tests.support.workload import SQLITE_WORKLOAD

from turnkeep_sqlite import SqliteConfig, SqlitePersistence

from .conftest import meta

SEED = 24
STARVED = 1.0
"""A p99 flush this slow (a tenth of the busy timeout) means writers are
starved of the lock, not queued behind the nine others."""


async def _contend(
    seconds: float, tmp_path: Path, spawn_worker: SpawnWorker
) -> list[float]:
    path = tmp_path / "db" / "s.sqlite3"
    setup = SqlitePersistence(SqliteConfig(path=path))
    seed_turn = SQLITE_WORKLOAD.turn(0, 0, seed=SEED, tag="seed")
    await setup.create(meta("shared"))
    await setup.append("shared", seed_turn)
    await setup.release("shared")
    roles = [("solo", f"solo-{n}") for n in range(8)] + [("rival", "shared")] * 2
    workers = [spawn_worker() for _ in roles]
    for w in workers:
        w.call(op="open", path=str(path))
    for n, (w, (role, sid)) in enumerate(zip(workers, roles, strict=True)):
        w.send(op="contend", id=sid, role=role, tag=f"p{n}", seed=SEED, seconds=seconds)
    replies: list[dict[str, Any]] = [w.recv()["result"] for w in workers]
    try:
        errors = [e for r in replies for e in r["errors"]]
        assert errors == [], errors[:5]
        shared: list[tuple[int, str, int]] = []
        for n, ((role, sid), reply) in enumerate(zip(roles, replies, strict=True)):
            tag = f"p{n}"
            if role == "solo":
                expected = [
                    r.raw
                    for records in SQLITE_WORKLOAD.turns(
                        len(reply["acked"]), seed=SEED, tag=tag
                    )
                    for r in records
                ]
                assert (await setup.load(sid)).events == expected, sid
            else:
                shared.extend((seq0, tag, index) for seq0, index in reply["acked"])
        shared.sort()
        expected_shared = [r.raw for r in seed_turn]
        for seq0, tag, index in shared:
            assert seq0 == len(expected_shared), "a lost, duplicated or stale flush"
            expected_shared.extend(
                r.raw for r in SQLITE_WORKLOAD.turn(seq0, index, seed=SEED, tag=tag)
            )
        assert (await setup.load("shared")).events == expected_shared
        assert len({tag for _, tag, _ in shared}) == 2, "both rivals must have written"
    finally:
        await setup.aclose()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    latencies = sorted(x for r in replies for x in r["latencies"])
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99)]
    print(
        f"\n{len(latencies)} flushes by 10 processes in {seconds:.0f} s: "
        f"p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"
    )
    return latencies


@pytest.mark.slow
@pytest.mark.asyncio
async def test_ten_processes_on_one_file(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    latencies = await _contend(15, tmp_path, spawn_worker)
    assert latencies[int(len(latencies) * 0.99)] < STARVED


@pytest.mark.soak
@pytest.mark.asyncio
async def test_ten_processes_on_one_file_soak(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    latencies = await _contend(180, tmp_path, spawn_worker)
    assert latencies[int(len(latencies) * 0.99)] < STARVED
