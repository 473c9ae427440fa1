"""A PostgreSQL fleet of worker processes taking turns on sessions at random.

`WORKERS` (4) processes (`benchmarks/fleet_worker.py`), each with one
long-lived host on one PostgreSQL schema, share `SESSIONS` (256) sessions of
`benchmarks/streamed.py` (streamed replies, 4 KB tool outputs). The
orchestrator keeps every worker busy: each request is one turn of a session
drawn at random among those no worker is running. Three fleets, one after
the other, at each history size of the curve:

- **no affinity** (`open`): any worker takes any session: `AgentLoop.open`
  + `run_turn` + `close` per request, as a web backend without sticky
  routing must;
- **pinned**: session `n` belongs to worker `n % WORKERS`, whose loop on it
  stays open (opened before the clock starts); requests go to the owner;
- **raw psycopg**: the same requests (no affinity) as one transaction each
  that reads the session's next seq and inserts the turn's ~306 events as
  rows, on a table holding the same number of rows per session.

Printed per history size: turns per second, p50 and p99 of a request, and
the ratios no affinity / pinned (goal at 100k-event sessions: >= 0.5x) and
each / raw. Sizes: `BENCH_PGFLEET_HISTORY` (events per session,
comma-separated; 1k,10k,100k with `BENCH_FULL=1`, which writes several GB;
1k,10k otherwise; 300 with `BENCH_QUICK=1`), `BENCH_PGFLEET_SESSIONS`,
`BENCH_PGFLEET_REQUESTS` (turns per fleet run). Skipped with a message when
no PostgreSQL server answers.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from benchmarks import streamed
from benchmarks.streamed import verdict

FULL = os.environ.get("BENCH_FULL", "") == "1"
QUICK = os.environ.get("BENCH_QUICK") == "1" and not FULL
HISTORY = tuple(
    int(n)
    for n in os.environ.get(
        "BENCH_PGFLEET_HISTORY",
        "1000,10000,100000" if FULL else "300" if QUICK else "1000,10000",
    ).split(",")
)
WORKERS = int(os.environ.get("BENCH_PGFLEET_WORKERS", "4"))
SESSIONS = int(os.environ.get("BENCH_PGFLEET_SESSIONS", "16" if QUICK else "256"))
REQUESTS = int(os.environ.get("BENCH_PGFLEET_REQUESTS", "24" if QUICK else "400"))
EVENTS_PER_TURN = 307
"""Events a streamed turn appends (measured: `bench_open` prints them)."""
MODES = ("open", "pinned", "raw")
GOAL = 0.5
ROOT = Path(__file__).resolve().parents[1]


class Proc:
    """A worker process and its request/answer pipe."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, mode: str, schema: str) -> Proc:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.fleet_worker",
            mode,
            schema,
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        worker = cls(proc)
        await worker.answer()  # ready
        return worker

    async def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"fleet worker exited with {await self.proc.wait()}")
        return msgspec.json.decode(line)

    async def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(msgspec.json.encode(request) + b"\n")
        await self.proc.stdin.drain()
        return await self.answer()

    async def quit(self) -> None:
        """Ask it to close and exit; a worker that already failed is killed."""
        if self.proc.returncode is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(b'{"op": "quit"}\n')
                await self.proc.stdin.drain()
                self.proc.stdin.close()
            except (BrokenPipeError, ConnectionResetError):
                self.proc.kill()
        await self.proc.wait()


async def quit_all(workers: list[Proc]) -> None:
    """Every worker gone before the schemas they write are dropped."""
    for worker in workers:
        await worker.quit()


def sessions() -> list[str]:
    return [f"fleet-{n:03d}" for n in range(SESSIONS)]


def owner(n: int) -> int:
    return n % WORKERS


async def grow(schema: str, turns: int) -> None:
    """`turns` more turns on every session, the workers filling their share."""
    workers = [await Proc.start("open", schema) for _ in range(WORKERS)]
    names = sessions()
    try:
        await asyncio.gather(
            *(
                w.ask({"op": "fill", "sessions": names[i::WORKERS], "turns": turns})
                for i, w in enumerate(workers)
            )
        )
    finally:
        await quit_all(workers)


def grow_raw(schema: str, rows: int, *, create: bool) -> None:
    """`rows` more rows per session, of a streamed turn's average event size."""
    import psycopg
    from psycopg import sql

    table = sql.Identifier(schema, "raw_events")
    with psycopg.connect(streamed.DSN, autocommit=True) as conn:
        if create:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE {} (session_id text, seq bigint, raw bytea, "
                    "PRIMARY KEY (session_id, seq))"
                ).format(table)
            )
        # Each session's next seq once (a subquery per inserted row took
        # over ten minutes for 2.3M rows), then the rows in one statement.
        conn.execute(
            sql.SQL(
                "WITH base AS MATERIALIZED (SELECT s, coalesce((SELECT max(seq) + 1 "
                "FROM {} WHERE session_id = s), 0) AS next "
                "FROM unnest(%s::text[]) s) "
                "INSERT INTO {} SELECT s, next + g, convert_to(repeat('x', 190), "
                "'UTF8') FROM base, generate_series(0, %s) g"
            ).format(table, table),
            (sessions(), rows - 1),
        )


async def fleet(mode: str, schema: str, rng: random.Random) -> dict[str, Any]:
    """`REQUESTS` turns by `WORKERS` processes in `mode`; latencies and rate."""
    workers = [await Proc.start(mode, schema) for _ in range(WORKERS)]
    names = sessions()
    if mode == "pinned":
        try:
            await asyncio.gather(
                *(
                    w.ask({"op": "hold", "sessions": names[i::WORKERS]})
                    for i, w in enumerate(workers)
                )
            )
        except BaseException:
            await quit_all(workers)
            raise
    busy: set[int] = set()
    latencies: list[float] = []
    left = REQUESTS

    async def drive(index: int, worker: Proc) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            if mode == "pinned":
                free = [n for n in range(index, SESSIONS, WORKERS) if n not in busy]
            else:
                free = [n for n in range(SESSIONS) if n not in busy]
            n = rng.choice(free)
            busy.add(n)
            answer = await worker.ask({"op": "turn", "session": names[n]})
            busy.discard(n)
            latencies.append(answer["s"])

    try:
        start = time.perf_counter()
        await asyncio.gather(*(drive(i, w) for i, w in enumerate(workers)))
        took = time.perf_counter() - start
    finally:
        await quit_all(workers)
    latencies.sort()
    return {
        "turns_per_s": len(latencies) / took,
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3,
    }


async def curve(schema: str) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    turns_done = 0
    rng = random.Random(34)
    for history in HISTORY:
        turns = max(1, -(-history // EVENTS_PER_TURN))
        if turns > turns_done:
            await grow(schema, turns - turns_done)
            turns_done = turns
        events = turns_done * EVENTS_PER_TURN
        raw_rows = events - (points[-1]["history_events"] if points else 0)
        if raw_rows > 0:
            grow_raw(f"{schema}_raw", raw_rows, create=not points)
        point: dict[str, Any] = {"history_events": events}
        for mode in MODES:
            point[mode] = await fleet(
                mode, f"{schema}_raw" if mode == "raw" else schema, rng
            )
        # The two fleets' turns made the sessions longer, by this much on average.
        turns_done += -(-2 * REQUESTS // SESSIONS)
        point["open_over_pinned"] = (
            point["open"]["turns_per_s"] / point["pinned"]["turns_per_s"]
        )
        point["pinned_over_raw"] = (
            point["pinned"]["turns_per_s"] / point["raw"]["turns_per_s"]
        )
        point["open_over_raw"] = (
            point["open"]["turns_per_s"] / point["raw"]["turns_per_s"]
        )
        report(point)
        points.append(point)
    return points


def report(point: dict[str, Any]) -> None:
    print(f"  ~{point['history_events']:,} events per session:")
    labels = {
        "open": "no affinity (open + turn + close)",
        "pinned": "pinned (run_turn)",
        "raw": "raw psycopg (next seq + insert)",
    }
    for mode, label in labels.items():
        m = point[mode]
        print(
            f"    {label:<36} {m['turns_per_s']:7.1f} turns/s  "
            f"p50 {m['p50_ms']:7.1f} ms  "
            f"p99 {m['p99_ms']:7.1f} ms"
        )
    ratio = point["open_over_pinned"]
    print(
        f"    no affinity / pinned {ratio:.2f}x {verdict(ratio, GOAL, at_least=True)}"
        f"{'' if point['history_events'] >= 100_000 else ' (set at 100k events)'}; "
        f"pinned / raw {point['pinned_over_raw']:.2f}x, no affinity / raw "
        f"{point['open_over_raw']:.2f}x"
    )


def main() -> dict[str, Any] | None:
    if not streamed.postgres_up():
        return None
    print(
        f"{WORKERS} worker processes, {SESSIONS} sessions, {REQUESTS} turns per fleet, "
        f"sessions picked at random"
    )
    schema = f"tk_bench_pgfleet_{os.getpid()}"
    try:
        points = asyncio.run(curve(schema))
    finally:
        streamed.drop_schema(schema)
        streamed.drop_schema(f"{schema}_raw")
    return {
        "workers": WORKERS,
        "sessions": SESSIONS,
        "requests": REQUESTS,
        "goal_open_over_pinned": GOAL,
        "curve": points,
    }


if __name__ == "__main__":
    main()
