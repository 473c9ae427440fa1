"""Many sessions at once on the user's path: `AgentLoop.run_turn`, next to raw.

`BENCH_FLEET_SESSIONS` (64) agent loops, one per session, on one host, each
running `BENCH_FLEET_TURNS` (20) turns with the lean model of `bench_loop`
(7 text deltas and one safe tool call, then "ok": ~15 events per turn), all
at once (`asyncio.gather`). Measured: durable turns per second over the run.

Baselines, at the same concurrency and storing the same events (the ones the
loops appended, encoded with msgspec inside the timed region):

- SQLite: raw one-transaction-per-turn, `executemany` in WAL mode with
  `synchronous=FULL`, one thread per session sharing one connection under a
  lock (as `bench_sqlite`'s concurrency baseline: no busy-handler sleeps);
- PostgreSQL (`TURNKEEP_BENCH_POSTGRES_DSN`, else the test DSN): raw psycopg,
  one task per session, each turn its own transaction on a pool of 16
  connections (as `bench_postgres`), so the server group-commits them.

Goal: turnkeep >= 4x raw for both. Beside them, the same fleet on the
memory backend (the loop with no I/O at all) shows the loop's own ceiling:
when it is below 4x raw, no backend can reach the goal on this path.
Repetitions (`BENCH_REPS`, 3) alternate turnkeep, raw and the memory run;
the ratio printed is the median of the paired runs. A PostgreSQL server
that does not answer is reported and skipped.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import random
import shutil
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.bench_loop import LeanModel, make_lookup
from benchmarks.workload import Workload
from turnkeep import AgentLoop, Config, Host, SessionEvent

SESSIONS = int(os.environ.get("BENCH_FLEET_SESSIONS", "64"))
TURNS = int(os.environ.get("BENCH_FLEET_TURNS", "20"))
REPS = int(os.environ.get("BENCH_REPS", "3"))
RAW_POOL = 16
DSN = os.environ.get(
    "TURNKEEP_BENCH_POSTGRES_DSN",
    os.environ.get(
        "TURNKEEP_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
    ),
)

Turns = dict[str, list[list[SessionEvent]]]
"""Session id -> the events of each of its turns, as the loop appended them."""


@contextmanager
def scratch() -> Generator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- turnkeep --------------------------------------------------------------------------


async def fleet(config: Config, prefix: str) -> tuple[float, Turns]:
    """Seconds for every session's turns, all at once, and what they appended."""
    prompts = Workload(seed=13)
    said = [prompts.text() for _ in range(TURNS)]
    stored: Turns = {}
    async with Host(config) as host:
        loops: list[AgentLoop] = []
        corpus = Workload(seed=100)
        for n in range(SESSIONS):
            # Each loop draws its own replies from one corpus (building a
            # corpus per session would dominate the setup).
            workload = copy.copy(corpus)
            workload.rnd = random.Random(100 + n)
            loops.append(
                AgentLoop.create(
                    "bench",
                    host=host,
                    model=LeanModel(workload),
                    tools=[make_lookup(workload)],
                    session_id=f"{prefix}-{n:03d}",
                )
            )

        async def drive(agent: AgentLoop) -> None:
            for text in said:
                await agent.run_turn(text)

        start = time.perf_counter()
        await asyncio.gather(*(drive(agent) for agent in loops))
        took = time.perf_counter() - start
        for agent in loops:
            events = list(host.sessions.get(agent.session_id).events)
            stored[agent.session_id] = _by_turn(events)
            await agent.close()
    return took, stored


def _by_turn(events: list[SessionEvent]) -> list[list[SessionEvent]]:
    """The events split after each `turn/end` (a turn's durable unit)."""
    turns: list[list[SessionEvent]] = [[]]
    for event in events:
        turns[-1].append(event)
        if event.type == "turn/end":
            turns.append([])
    return [t for t in turns if t]


# -- SQLite ----------------------------------------------------------------------------


def raw_sqlite(directory: Path, work: Turns) -> float:
    """Raw one-transaction-per-turn SQLite, a thread per session: seconds."""
    conn = sqlite3.connect(
        directory / "raw.db", isolation_level=None, check_same_thread=False
    )
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(
        "CREATE TABLE events (session_id TEXT, seq INTEGER, type TEXT, "
        "data BLOB, PRIMARY KEY (session_id, seq))"
    )
    lock = threading.Lock()
    encode = msgspec.json.Encoder().encode

    def session(sid: str) -> None:
        for events in work[sid]:
            rows = [(sid, e.seq, e.type, encode(e)) for e in events]
            with lock:
                conn.execute("BEGIN")
                conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?)", rows)
                conn.execute("COMMIT")

    threads = [threading.Thread(target=session, args=(sid,)) for sid in work]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - start
    conn.close()
    return took


def ceiling(rep: int) -> float:
    """Seconds for the same fleet on the memory backend: the loop, no I/O."""
    return asyncio.run(fleet(Config(persistence="memory"), f"m{rep}"))[0]


def sqlite() -> dict[str, Any]:
    ours: list[float] = []
    base: list[float] = []
    bare: list[float] = []
    turns = 0
    for rep in range(REPS):
        with scratch() as root:
            config = Config(
                persistence="sqlite",
                plugins=("sqlite",),
                backends={"sqlite": {"path": str(root / "store.db")}},
            )
            took, work = asyncio.run(fleet(config, f"r{rep}"))
            ours.append(took)
            turns = sum(len(t) for t in work.values())
            base.append(raw_sqlite(root, work))
            bare.append(ceiling(rep))
    return _report("SQLite", "raw one-txn-per-turn", ours, base, bare, turns)


# -- PostgreSQL ------------------------------------------------------------------------


async def raw_psycopg(schema: str, work: Turns) -> float:
    """Raw psycopg, a task per session, a transaction per turn: seconds."""
    import psycopg
    from psycopg import sql
    from psycopg_pool import AsyncConnectionPool

    encode = msgspec.json.Encoder().encode
    ident = sql.Identifier(schema)
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        await conn.execute(
            sql.SQL(
                "CREATE TABLE {}.raw_events (session_id text, seq bigint, "
                "raw bytea, PRIMARY KEY (session_id, seq))"
            ).format(ident)
        )
        insert = (
            sql.SQL(
                "INSERT INTO {}.raw_events (session_id, seq, raw) VALUES (%s, %s, %b)"
            )
            .format(ident)
            .as_bytes(conn)
        )
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        DSN,
        min_size=RAW_POOL,
        max_size=RAW_POOL,
        open=False,
        kwargs={"autocommit": True},
    )
    await pool.open(wait=True)

    async def drive(sid: str) -> None:
        for events in work[sid]:
            rows = [(sid, e.seq, encode(e)) for e in events]
            async with (
                pool.connection() as conn,
                conn.transaction(),
                conn.cursor() as cur,
            ):
                await cur.executemany(insert, rows)

    start = time.perf_counter()
    await asyncio.gather(*(drive(sid) for sid in work))
    took = time.perf_counter() - start
    await pool.close()
    return took


def _drop(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


def postgres() -> dict[str, Any] | None:
    try:
        import psycopg

        psycopg.connect(DSN, connect_timeout=3).close()
    except Exception as exc:  # noqa: BLE001 - any failure: no server to measure
        print(f"PostgreSQL skipped: no server answers at {DSN} ({exc})")
        return None
    ours: list[float] = []
    base: list[float] = []
    bare: list[float] = []
    turns = 0
    prefix = f"tk_fleet_{os.getpid()}"
    for rep in range(REPS):
        schema, raw_schema = f"{prefix}_{rep}", f"{prefix}_{rep}_raw"
        try:
            config = Config(
                persistence="postgres",
                plugins=("postgres",),
                backends={"postgres": {"dsn": DSN, "schema": schema}},
            )
            took, work = asyncio.run(fleet(config, f"r{rep}"))
            ours.append(took)
            turns = sum(len(t) for t in work.values())
            base.append(asyncio.run(raw_psycopg(raw_schema, work)))
            bare.append(ceiling(rep))
        finally:
            _drop(schema)
            _drop(raw_schema)
    return _report("PostgreSQL", "raw psycopg, txn per turn", ours, base, bare, turns)


# -- report ----------------------------------------------------------------------------


def _report(
    name: str,
    baseline: str,
    ours: list[float],
    base: list[float],
    bare: list[float],
    turns: int,
) -> dict[str, Any]:
    ratio = statistics.median(b / o for o, b in zip(ours, base, strict=True))
    tk, raw = turns / statistics.median(ours), turns / statistics.median(base)
    top = turns / statistics.median(bare)
    print(f"{name}: {SESSIONS} sessions x {TURNS} turns through AgentLoop.run_turn")
    print(f"  turnkeep                 {tk:8,.0f} turns/s")
    print(f"  {baseline:<24} {raw:8,.0f} turns/s")
    print(f"  memory backend (no I/O)  {top:8,.0f} turns/s: the loop's own ceiling")
    print(f"  turnkeep / raw: {ratio:.2f}x (median of paired runs; goal >= 4x)")
    print(f"  ceiling / raw:  {top / raw:.2f}x (what no backend can pass here)")
    return {
        "sessions": SESSIONS,
        "turns": turns,
        "turnkeep_turns_per_s": tk,
        "raw_turns_per_s": raw,
        "memory_turns_per_s": top,
        "ratio": ratio,
    }


def main() -> dict[str, Any]:
    logging.getLogger("turnkeep_sqlite").setLevel(logging.ERROR)
    print(f"median of {REPS} repetitions, load average {os.getloadavg()[0]:.2f}")
    results: dict[str, Any] = {"sqlite": sqlite()}
    measured = postgres()
    if measured is not None:
        results["postgres"] = measured
    return results


if __name__ == "__main__":
    main()
