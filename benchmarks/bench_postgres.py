"""Durable turns in PostgreSQL: turnkeep next to raw psycopg and LangGraph.

Measured in one run against one server (`TURNKEEP_BENCH_POSTGRES_DSN`, else
`TURNKEEP_TEST_POSTGRES_DSN`, else the machine's `postgres@127.0.0.1/test`),
on the conversation workload of `benchmarks/workload.py` (K = 12 events per
turn, 200-2000 characters of text):

1. **One session.** A durable turn = 12 `Session.append` calls and one
   `flush` through a `Host` with the `postgres` backend (entry point), vs
   the raw baseline: encode the 12 events, then one transaction with an
   `executemany` insert. Round-robin repetitions; median per turn.
   Goal: turnkeep <= 1.3x raw.
2. **4 workers x 64 sessions.** Four processes, each driving 64 sessions
   concurrently for `TURNKEEP_BENCH_TURNS` (200) turns: aggregate durable
   turns/s and p99 flush latency, for turnkeep (one backend per process,
   group commit) and raw psycopg at the same concurrency (each session's
   turn its own transaction on a 16-connection pool per process, so the
   server group-commits them).
3. **LangGraph.** The same workload through a one-node LangGraph graph with
   `AsyncPostgresSaver` (the turn's events added to a list channel, as
   message history is kept there), 4 workers x `TURNKEEP_BENCH_LG_SESSIONS`
   (64: the concurrency of 2.) sessions x 200 turns, next to turnkeep at that
   same concurrency (2.'s run when it is the same); the per-turn cost early
   (turns 1-20) and late (181-200) shows whether the cost stays flat in
   session length. Goal: >= 5x LangGraph at 200 turns, both in throughput
   over the run and in flush latency at turns 181-200. LangGraph writes the
   whole history at every checkpoint, so at 64 sessions this part takes
   about 15 minutes on 2 vCPUs; `TURNKEEP_BENCH_LG_SESSIONS=4` is a quick
   look. Skipped with a message when `langgraph` /
   `langgraph-checkpoint-postgres` are not importable (they are bench-only,
   never runtime dependencies).
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import operator
import os
import statistics
import time
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import msgspec
import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from benchmarks.workload import K, Workload
from turnkeep import Config, Host, SessionEvent
from turnkeep.persistence import EventCodec

DSN = os.environ.get(
    "TURNKEEP_BENCH_POSTGRES_DSN",
    os.environ.get(
        "TURNKEEP_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
    ),
)
SCHEMA = f"tk_bench_{os.getpid()}"
TURNS = int(os.environ.get("TURNKEEP_BENCH_TURNS", "200"))
SINGLE_TURNS = 200
REPS = 5
WORKERS = 4
SESSIONS = 64
LG_SESSIONS = int(os.environ.get("TURNKEEP_BENCH_LG_SESSIONS", str(SESSIONS)))
RAW_POOL = 16


def _turns(count: int) -> list[list[SessionEvent]]:
    return list(Workload(seed=42).session(count))


def _host(schema: str, **options: Any) -> Host:
    backend = {"dsn": DSN, "schema": schema, **options}
    return Host(
        Config(
            persistence="postgres",
            plugins=("postgres",),
            backends={"postgres": backend},
        )
    )


def _raw_setup(schema: str) -> None:
    ident = sql.Identifier(schema)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.raw_events (session_id text, seq bigint,"
                " raw bytea, PRIMARY KEY (session_id, seq))"
            ).format(ident)
        )


def _raw_insert(schema: str) -> bytes:
    with psycopg.connect(DSN) as conn:
        return (
            sql.SQL(
                "INSERT INTO {}.raw_events (session_id, seq, raw) VALUES (%s, %s, %b)"
            )
            .format(sql.Identifier(schema))
            .as_bytes(conn)
        )


# -- 1. one session ----------------------------------------------------------------


async def _single() -> dict[str, list[float]]:
    turns = _turns(SINGLE_TURNS)
    codec = EventCodec()
    schema = f"{SCHEMA}_single"
    _raw_setup(schema)
    insert = _raw_insert(schema)
    samples: dict[str, list[float]] = {"turnkeep": [], "raw": []}
    async with _host(schema) as host:
        conn = await psycopg.AsyncConnection.connect(DSN, autocommit=True)

        async def turnkeep_run(rep: int) -> float:
            session = host.sessions.create(f"single-{rep}")
            append, flush = session.append, session.flush
            started = time.perf_counter()
            for events in turns:
                for e in events:
                    append(type(e), e.data)
                await flush()
            took = time.perf_counter() - started
            await host.sessions.close(session.id)
            return took

        async def raw_run(rep: int) -> float:
            sid = f"single-{rep}"
            started = time.perf_counter()
            async with conn.cursor() as cur:
                for events in turns:
                    rows = [(sid, e.seq, codec.encode(e)) for e in events]
                    async with conn.transaction():
                        await cur.executemany(insert, rows)
            return time.perf_counter() - started

        await turnkeep_run(-1)  # warm-up: connections, prepared statements
        await raw_run(-1)
        for rep in range(REPS):
            samples["turnkeep"].append(await turnkeep_run(rep) / SINGLE_TURNS)
            samples["raw"].append(await raw_run(rep) / SINGLE_TURNS)
        await conn.close()
    return samples


# -- 2./3. many workers --------------------------------------------------------------


def _worker(
    mode: str, schema: str, worker: int, sessions: int, turns: int, barrier: Any
) -> dict[str, Any]:
    runner: Callable[..., Any] = {
        "turnkeep": _turnkeep_worker,
        "raw": _raw_worker,
        "langgraph": _langgraph_worker,
    }[mode]
    return asyncio.run(runner(schema, worker, sessions, turns, barrier))


async def _turnkeep_worker(
    schema: str, worker: int, sessions: int, turns: int, barrier: Any
) -> dict[str, Any]:
    script = _turns(turns)
    latencies: list[list[float]] = []
    async with _host(schema) as host:
        live = [host.sessions.create(f"w{worker}-s{n}") for n in range(sessions)]
        await asyncio.to_thread(barrier.wait)
        started = time.perf_counter()

        async def drive(session: Any) -> None:
            append, flush = session.append, session.flush
            mine: list[float] = []
            for events in script:
                for e in events:
                    append(type(e), e.data)
                t = time.perf_counter()
                await flush()
                mine.append(time.perf_counter() - t)
            latencies.append(mine)

        await asyncio.gather(*(drive(s) for s in live))
        elapsed = time.perf_counter() - started
    return {"elapsed": elapsed, "latencies": latencies}


async def _raw_worker(
    schema: str, worker: int, sessions: int, turns: int, barrier: Any
) -> dict[str, Any]:
    script = _turns(turns)
    codec = EventCodec()
    insert = _raw_insert(schema)
    latencies: list[list[float]] = []
    pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
        DSN,
        min_size=RAW_POOL,
        max_size=RAW_POOL,
        open=False,
        kwargs={"autocommit": True},
    )
    await pool.open(wait=True)
    await asyncio.to_thread(barrier.wait)
    started = time.perf_counter()

    async def drive(sid: str) -> None:
        mine: list[float] = []
        for events in script:
            rows = [(sid, e.seq, codec.encode(e)) for e in events]
            t = time.perf_counter()
            async with (
                pool.connection() as conn,
                conn.transaction(),
                conn.cursor() as cur,
            ):
                await cur.executemany(insert, rows)
            mine.append(time.perf_counter() - t)
        latencies.append(mine)

    await asyncio.gather(*(drive(f"w{worker}-s{n}") for n in range(sessions)))
    elapsed = time.perf_counter() - started
    await pool.close()
    return {"elapsed": elapsed, "latencies": latencies}


class _LangGraphState(TypedDict):
    """LangGraph's state: the turn's events, added to the history channel."""

    incoming: list[dict[str, Any]]
    events: Annotated[list[dict[str, Any]], operator.add]


async def _langgraph_worker(
    schema: str, worker: int, sessions: int, turns: int, barrier: Any
) -> dict[str, Any]:
    from psycopg.rows import dict_row

    # Bench-only, optional: imported by name so type checkers need not have it.
    lg_saver: Any = importlib.import_module("langgraph.checkpoint.postgres.aio")
    lg_graph: Any = importlib.import_module("langgraph.graph")

    def node(state: _LangGraphState) -> dict[str, Any]:
        return {"events": state["incoming"]}

    script = [[msgspec.to_builtins(e) for e in events] for events in _turns(turns)]
    options = f"-c search_path={schema}"
    pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
        DSN,
        min_size=RAW_POOL,
        max_size=RAW_POOL,
        open=False,
        kwargs={
            "autocommit": True,
            "prepare_threshold": 0,
            "row_factory": dict_row,
            "options": options,
        },
    )
    await pool.open(wait=True)
    saver = lg_saver.AsyncPostgresSaver(pool)
    if worker == 0:
        await saver.setup()
    builder = lg_graph.StateGraph(_LangGraphState)
    builder.add_node("turn", node)
    builder.add_edge(lg_graph.START, "turn")
    builder.add_edge("turn", lg_graph.END)
    graph = builder.compile(checkpointer=saver)
    await asyncio.to_thread(barrier.wait)  # worker 0 has set the tables up
    latencies: list[list[float]] = []
    started = time.perf_counter()

    async def drive(thread: str) -> None:
        mine: list[float] = []
        config = {"configurable": {"thread_id": thread}}
        for events in script:
            t = time.perf_counter()
            await graph.ainvoke({"incoming": events}, config)
            mine.append(time.perf_counter() - t)
        latencies.append(mine)

    await asyncio.gather(*(drive(f"w{worker}-s{n}") for n in range(sessions)))
    elapsed = time.perf_counter() - started
    await pool.close()
    return {"elapsed": elapsed, "latencies": latencies}


def _many(mode: str, schema: str, sessions: int, turns: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Manager().Barrier(WORKERS)
    with ctx.Pool(WORKERS) as pool:
        results = pool.starmap(
            _worker,
            [(mode, schema, w, sessions, turns, barrier) for w in range(WORKERS)],
        )
    flat = sorted(x for r in results for per in r["latencies"] for x in per)
    early = [x for r in results for per in r["latencies"] for x in per[:20]]
    late = [x for r in results for per in r["latencies"] for x in per[-20:]]
    wall = max(r["elapsed"] for r in results)
    return {
        "turns_per_s": len(flat) / wall,
        "p50_ms": flat[len(flat) // 2] * 1e3,
        "p99_ms": flat[int(len(flat) * 0.99)] * 1e3,
        "early_ms": statistics.median(early) * 1e3,
        "late_ms": statistics.median(late) * 1e3,
    }


def _langgraph_available() -> str | None:
    try:
        importlib.import_module("langgraph.checkpoint.postgres.aio")
        importlib.import_module("langgraph.graph")
    except ImportError as exc:
        return str(exc)
    return None


def _report(name: str, r: dict[str, Any]) -> None:
    print(
        f"  {name:<26} {r['turns_per_s']:9.0f} turns/s"
        f"   flush p50 {r['p50_ms']:7.2f} ms"
        f"   p99 {r['p99_ms']:7.2f} ms   turns 1-20 {r['early_ms']:7.2f} ms"
        f"   last 20 {r['late_ms']:7.2f} ms"
    )


def _drop(*schemas: str) -> None:
    with psycopg.connect(DSN, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(schema)
                )
            )


def main() -> None:
    schemas = [
        f"{SCHEMA}_single",
        f"{SCHEMA}_tk",
        f"{SCHEMA}_raw",
        f"{SCHEMA}_lg",
        f"{SCHEMA}_tk_small",
    ]
    try:
        single = asyncio.run(_single())
        tk_ms = statistics.median(single["turnkeep"]) * 1e3
        raw_ms = statistics.median(single["raw"]) * 1e3
        ratio = tk_ms / raw_ms
        print(f"1. one session, {SINGLE_TURNS} turns x {REPS} reps (K = {K}):")
        print(f"  turnkeep durable turn  {tk_ms:7.3f} ms (median)")
        print(f"  raw psycopg turn       {raw_ms:7.3f} ms (median)")
        verdict = "meets" if ratio <= 1.3 else "misses"
        print(f"  turnkeep / raw = {ratio:.2f} ({verdict} the 1.3x goal)")

        print(f"2. {WORKERS} workers x {SESSIONS} sessions x {TURNS} turns:")
        _raw_setup(f"{SCHEMA}_raw")
        tk = _many("turnkeep", f"{SCHEMA}_tk", SESSIONS, TURNS)
        raw = _many("raw", f"{SCHEMA}_raw", SESSIONS, TURNS)
        _report("turnkeep (group commit)", tk)
        _report("raw psycopg", raw)
        print(
            "  turnkeep / raw: throughput "
            f"x{tk['turns_per_s'] / raw['turns_per_s']:.2f}, "
            f"p99 flush x{tk['p99_ms'] / raw['p99_ms']:.2f}"
        )

        print(f"3. {WORKERS} workers x {LG_SESSIONS} sessions x {TURNS} turns:")
        missing = _langgraph_available()
        if missing is not None:
            print(
                f"  LangGraph skipped: {missing}. Install the bench-only packages "
                "langgraph and langgraph-checkpoint-postgres to compare."
            )
            return
        _drop(f"{SCHEMA}_lg")
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(f"{SCHEMA}_lg"))
            )
        small = (
            tk
            if LG_SESSIONS == SESSIONS
            else _many("turnkeep", f"{SCHEMA}_tk_small", LG_SESSIONS, TURNS)
        )
        lg = _many("langgraph", f"{SCHEMA}_lg", LG_SESSIONS, TURNS)
        _report("turnkeep", small)
        _report("LangGraph AsyncPostgresSaver", lg)
        speedup = small["turns_per_s"] / lg["turns_per_s"]
        late = lg["late_ms"] / small["late_ms"]
        verdict = "meets" if min(speedup, late) >= 5 else "misses"
        print(
            f"  turnkeep / LangGraph: throughput x{speedup:.1f}, flush latency at "
            f"turns {TURNS - 19}-{TURNS} x{late:.1f} ({verdict} the 5x goal)"
        )
        print(
            f"  per-turn growth, last 20 / first 20 turns: turnkeep "
            f"x{small['late_ms'] / small['early_ms']:.2f}, LangGraph "
            f"x{lg['late_ms'] / lg['early_ms']:.2f}"
        )
    finally:
        _drop(*schemas)


if __name__ == "__main__":
    main()
