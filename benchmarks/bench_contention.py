"""Ten processes on one SQLite file: flush latency under contention.

Reliability plan item 24 sets a speed goal beside its correctness checks:
p99 flush <= 100 ms with ten processes writing one database file. The
correctness half (no lock error reaches a caller, no lost or duplicated seq,
`integrity_check` ok) is `tests/plugins/sqlite/test_contention.py`; the speed
half is measured here, beside a raw baseline in the same run, never asserted
in the test suite.

Each side runs ten processes for `BENCH_CONTENTION_SECONDS` (10 s; 60 with
`BENCH_FULL=1`) on a fresh file, the sides taking turns for
`BENCH_CONTENTION_ROUNDS` (2) rounds; each side's flushes are pooled:

- **turnkeep**: the `sqlite` backend in each process. Eight append turns to
  sessions of their own; two fight over one shared session (each steals it,
  reloads it, appends, and is fenced by the other now and then).
- **raw**: `sqlite3` with WAL and `synchronous=FULL`, SQLite's own busy
  handler (10 s), one `BEGIN IMMEDIATE` transaction per turn: eight into
  sessions of their own, two into one shared session (its next seq read
  inside the transaction).

A turn is the benchmark conversation's 12 events (`benchmarks/workload.py`),
encoded before its timer starts. Printed: flushes per second over all ten
processes, flush p50, p99 and max, and turnkeep's over raw. After each
round, the rows stored are counted against the flushes acknowledged.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_sqlite import meta, raw_connect
from benchmarks.workload import K, Workload, records
from turnkeep.errors import SequenceError, SessionFencedError
from turnkeep.persistence import EventCodec, EventRecord
from turnkeep_sqlite import SqliteConfig, SqlitePersistence

FULL = os.environ.get("BENCH_FULL") == "1"
SECONDS = float(os.environ.get("BENCH_CONTENTION_SECONDS", "60" if FULL else "10"))
ROUNDS = int(os.environ.get("BENCH_CONTENTION_ROUNDS", "2"))
SOLOS = 8
RIVALS = 2
GOAL_P99_MS = 100.0
"""Reliability plan item 24: p99 flush on CI hardware."""
SHARED = "shared"
RIVAL_PAUSE_EVERY = 7
"""A rival pauses briefly every this many turns, so the other can take over."""


def _roles() -> list[tuple[str, str]]:
    return [("solo", f"solo-{n}") for n in range(SOLOS)] + [("rival", SHARED)] * RIVALS


def _turn(
    workload: Workload, codec: EventCodec, index: int, seq0: int
) -> list[EventRecord]:
    return records(workload.turn(index + 1, seq0), codec)


# -- turnkeep ------------------------------------------------------------------


async def _ours(
    path: str, role: str, sid: str, worker: int, start: Any, seconds: float
) -> dict[str, Any]:
    backend = SqlitePersistence(SqliteConfig(path=Path(path)))
    workload = Workload(seed=100 + worker)
    codec = EventCodec()
    latencies: list[float] = []
    rival = role == "rival"
    owned = not rival
    next_seq = index = 0
    if not rival:
        await backend.create(meta(sid))
    start.wait()  # every process set up: all begin at once
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if not owned:
                await backend.claim(sid, steal=True)
                next_seq = len((await backend.load(sid)).events)
                owned = True
            turn = _turn(workload, codec, index, next_seq)
            started = time.perf_counter()
            try:
                await backend.append(sid, turn)
            except (SessionFencedError, SequenceError):
                owned = False  # the other rival took it: steal it back
                continue
            latencies.append(time.perf_counter() - started)
            next_seq += len(turn)
            index += 1
            if rival and index % RIVAL_PAUSE_EVERY == 0:
                await asyncio.sleep(0.002)
    finally:
        await backend.aclose()
    return {"latencies": latencies, "events": len(latencies) * K}


def _ours_worker(
    path: str, role: str, sid: str, worker: int, start: Any, seconds: float, out: Any
) -> None:
    out.put(asyncio.run(_ours(path, role, sid, worker, start, seconds)))


# -- raw -----------------------------------------------------------------------


def _raw_worker(
    path: str, role: str, sid: str, worker: int, start: Any, seconds: float, out: Any
) -> None:
    conn = sqlite3.connect(path, timeout=10.0, isolation_level=None)
    conn.execute("PRAGMA synchronous = FULL")
    workload = Workload(seed=100 + worker)
    codec = EventCodec()
    latencies: list[float] = []
    rival = role == "rival"
    next_seq = index = 0
    start.wait()
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            turn = _turn(workload, codec, index, next_seq)
            started = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            if rival:  # the shared session's next seq, as the lock holder sees it
                (first,) = conn.execute(
                    "SELECT coalesce(max(seq) + 1, 0) FROM events WHERE session_id = ?",
                    (sid,),
                ).fetchone()
            else:
                first = next_seq
            conn.executemany(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                [(sid, first + i, r.type, r.time, r.raw) for i, r in enumerate(turn)],
            )
            conn.execute("COMMIT")
            latencies.append(time.perf_counter() - started)
            next_seq = first + len(turn)
            index += 1
            if rival and index % RIVAL_PAUSE_EVERY == 0:
                time.sleep(0.002)
    finally:
        conn.close()
    out.put({"latencies": latencies, "events": len(latencies) * K})


# -- the run -------------------------------------------------------------------


def _stored_rows(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        (count,) = conn.execute("SELECT count(*) FROM events").fetchone()
        return int(count)
    finally:
        conn.close()


async def _seed_shared(path: Path) -> int:
    """Create the rivals' session with one turn (a claim needs it stored)."""
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        await backend.create(meta(SHARED))
        seed = _turn(Workload(seed=99), EventCodec(), 0, 0)
        await backend.append(SHARED, seed)
        await backend.release(SHARED)
    finally:
        await backend.aclose()
    return len(seed)


def run_side(side: str, path: Path, seconds: float) -> list[float]:
    """One round of one side's ten processes on a fresh file: flush latencies.

    Raises:
        SystemExit: a worker failed, or fewer events are stored than the
            flushes acknowledged.
    """
    if side == "raw":
        raw_connect(path).close()  # WAL, and bench_sqlite's raw tables
        target, seeded = _raw_worker, 0
    else:
        target, seeded = _ours_worker, asyncio.run(_seed_shared(path))
    roles = _roles()
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(len(roles))
    out = ctx.Queue()
    workers = [
        ctx.Process(target=target, args=(str(path), role, sid, n, start, seconds, out))
        for n, (role, sid) in enumerate(roles)
    ]
    for worker in workers:
        worker.start()
    try:
        # A worker that fails never answers: give up a while after the end.
        replies: list[dict[str, Any]] = [
            out.get(timeout=seconds + 120) for _ in workers
        ]
    except queue.Empty:
        raise SystemExit(f"bench_contention: a {side} worker failed") from None
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
    acked = sum(r["events"] for r in replies)
    stored = _stored_rows(path) - seeded
    if stored != acked:
        raise SystemExit(
            f"bench_contention: {side} acknowledged {acked} events but stored {stored}"
        )
    return [x for r in replies for x in r["latencies"]]


def _figures(latencies: list[float], seconds: float) -> dict[str, Any]:
    flat = sorted(latencies)
    return {
        "flushes": len(flat),
        "flushes_per_s": len(flat) / seconds,
        "p50_ms": flat[len(flat) // 2] * 1e3,
        "p99_ms": flat[int(len(flat) * 0.99)] * 1e3,
        "max_ms": flat[-1] * 1e3,
    }


def main() -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="bench-contention-"))
    pooled: dict[str, list[float]] = {"raw": [], "turnkeep": []}
    try:
        # The sides alternate, so a disk whose sync time drifts over the
        # run weighs on both alike.
        for round_ in range(ROUNDS):
            for side in pooled:
                path = directory / f"{side}-{round_}.sqlite3"
                pooled[side] += run_side(side, path, SECONDS)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    raw = _figures(pooled["raw"], SECONDS * ROUNDS)
    ours = _figures(pooled["turnkeep"], SECONDS * ROUNDS)
    print(
        f"{SOLOS + RIVALS} processes on one SQLite file ({SOLOS} on sessions of "
        f"their own, {RIVALS} fighting over one), {ROUNDS} rounds of "
        f"{SECONDS:.0f} s per side, alternating"
    )
    for name, r in (("raw BEGIN IMMEDIATE txn", raw), ("turnkeep sqlite append", ours)):
        print(
            f"  {name:<24} {r['flushes_per_s']:8.0f} flushes/s   p50 "
            f"{r['p50_ms']:7.2f} ms   p99 {r['p99_ms']:7.2f} ms   "
            f"max {r['max_ms']:8.2f} ms"
        )
    print(
        f"  turnkeep / raw: p99 {ours['p99_ms'] / raw['p99_ms']:.2f}x, "
        f"throughput {ours['flushes_per_s'] / raw['flushes_per_s']:.2f}x; "
        f"turnkeep p99 {ours['p99_ms']:.1f} ms (goal <= {GOAL_P99_MS:.0f} ms)"
    )
    return {
        "seconds": SECONDS,
        "rounds": ROUNDS,
        "processes": SOLOS + RIVALS,
        "raw": raw,
        "turnkeep": ours,
        "goal_p99_ms": GOAL_P99_MS,
    }


if __name__ == "__main__":
    main()
