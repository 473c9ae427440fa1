"""The Agents SDK session: `TurnkeepSession` next to the SDK's own sessions.

`uv run --no-sync python -m benchmarks openai_agents` measures, in one run,
each contestant on the same items (a turn = a user message, a function
call, its output and the assistant's reply: 4 items, ~1 KB):

1. **add**: the latency of one durable `add_items` call (one turn), the
   median over `BENCH_OAI_TURNS` (200) calls into a fresh session;
2. **get**: `get_items(limit=20)` and `get_items()` on a session of
   `BENCH_OAI_ITEMS` (10,000) items, from the process that wrote it and
   from a fresh reader (the writer closed: turnkeep reads storage with the
   tail read);
3. **bytes on disk** of the store holding both sessions, once every
   session and host is closed.

The baseline is the SDK's `SQLiteSession` on a file (WAL), measured in the
same run; its `AsyncSQLiteSession` (aiosqlite) is measured too when
importable. turnkeep runs on SQLite, JSONL and PostgreSQL (the server of
`TURNKEEP_BENCH_POSTGRES_DSN`, else `TURNKEEP_TEST_POSTGRES_DSN`, else
`postgres@127.0.0.1/test`; skipped with a message when it does not answer).
The SDK's `SQLAlchemySession` runs beside them on SQLite (aiosqlite) and on
the same PostgreSQL server (psycopg's async driver), each with one engine
for all its sessions, as the SDK's docs advise.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Generator
from pathlib import Path
from typing import Any

import agents
from agents.memory import Session, SQLiteSession

from turnkeep_openai_agents import TurnkeepSession, shutdown

TURNS = int(os.environ.get("BENCH_OAI_TURNS", "200"))
ITEMS = int(os.environ.get("BENCH_OAI_ITEMS", "10000"))
GETS = int(os.environ.get("BENCH_OAI_GETS", "50"))
DSN = os.environ.get(
    "TURNKEEP_BENCH_POSTGRES_DSN",
    os.environ.get(
        "TURNKEEP_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
    ),
)
SCHEMA = f"tk_bench_oai_{os.getpid()}"
SDK_SCHEMA = f"{SCHEMA}_sdk"
BASELINE = "SQLiteSession (SDK)"

agents.set_tracing_disabled(True)


def turn(n: int) -> list[Any]:
    """The items of one turn (~1 KB), as the SDK stores them."""
    text = f"turn {n}: " + "lorem ipsum dolor sit amet " * 8
    return [
        {"role": "user", "content": text},
        {
            "id": f"fc_{n}",
            "type": "function_call",
            "call_id": f"call_{n}",
            "name": "lookup",
            "arguments": '{"topic": "trains", "days": 3}',
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": f"call_{n}", "output": text},
        {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        },
    ]


Opener = Callable[[str], Session]


def _pg_up() -> bool:
    try:
        import psycopg

        with psycopg.connect(DSN, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception:  # noqa: BLE001 - any failure means: no server to measure
        return False
    return True


def _pg_bytes(schema: str = SCHEMA) -> int:
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def _pg_drop(*, create: bool = False) -> None:
    """Drop the run's schemas (turnkeep's, the SDK's); `create`: make them anew."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(DSN, autocommit=True) as conn:
        for schema in (SCHEMA, SDK_SCHEMA):
            name = sql.Identifier(schema)
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(name))
            if create and schema == SDK_SCHEMA:  # turnkeep makes its own
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(name))


def _dir_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def contestants(root: Path) -> dict[str, tuple[Opener, Callable[[], int]]]:
    """Each contestant: how to open a session, and the bytes its store holds."""
    sdk = root / "sdk" / "sdk.db"
    sdk.parent.mkdir()
    found: dict[str, tuple[Opener, Callable[[], int]]] = {
        BASELINE: (lambda i: SQLiteSession(i, sdk), lambda: _dir_bytes(sdk.parent)),
    }
    if importlib.util.find_spec("aiosqlite") is not None:
        from agents.extensions.memory.async_sqlite_session import AsyncSQLiteSession

        aio = root / "aio" / "aio.db"
        aio.parent.mkdir()
        found["AsyncSQLiteSession (SDK)"] = (
            lambda i: AsyncSQLiteSession(i, aio),
            lambda: _dir_bytes(aio.parent),
        )
    else:
        print("  (AsyncSQLiteSession skipped: aiosqlite is not installed)")
    db = root / "tk-sqlite" / "s.db"
    db.parent.mkdir()
    found["TurnkeepSession sqlite"] = (
        lambda i: TurnkeepSession(i, f"sqlite:{db}"),
        lambda: _dir_bytes(db.parent),
    )
    store = root / "tk-jsonl"
    found["TurnkeepSession jsonl"] = (
        lambda i: TurnkeepSession(i, f"jsonl:{store}"),
        lambda: _dir_bytes(store),
    )
    alchemy = root / "alchemy" / "alchemy.db"
    alchemy.parent.mkdir()
    found["SQLAlchemySession sqlite (SDK)"] = (
        _alchemy(f"sqlite+aiosqlite:///{alchemy}"),
        lambda: _dir_bytes(alchemy.parent),
    )
    if _pg_up():
        _pg_drop(create=True)
        spec = f"postgres:{DSN}?schema={SCHEMA}"
        found["TurnkeepSession postgres"] = (
            lambda i: TurnkeepSession(i, spec),
            _pg_bytes,
        )
        url = DSN.replace("postgresql://", "postgresql+psycopg://", 1)
        found["SQLAlchemySession postgres (SDK)"] = (
            _alchemy(url, schema=SDK_SCHEMA),
            lambda: _pg_bytes(SDK_SCHEMA),
        )
    else:
        print(
            f"  (TurnkeepSession postgres skipped: no server at {DSN.split('@')[-1]})"
        )
    return found


def _alchemy(url: str, *, schema: str | None = None) -> Opener:
    """Sessions of the SDK's `SQLAlchemySession` sharing one engine.

    The engine is made at the first session, inside the run's event loop
    (an async engine belongs to its loop); closing a session disposes of the
    engine's pooled connections (the engine makes new ones when used again).
    """
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
    from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

    engines: list[AsyncEngine] = []

    class Closing(SQLAlchemySession):
        async def close(self) -> None:
            await engines[0].dispose()

    def open_session(session_id: str) -> Session:
        if not engines:
            options: dict[str, Any] = {}
            if schema is not None:  # its tables in the schema the run drops
                options["connect_args"] = {"options": f"-c search_path={schema}"}
            engines.append(create_async_engine(url, **options))
        return Closing(session_id, engine=engines[0], create_tables=True)

    return open_session


async def close(session: Session) -> None:
    closer = getattr(session, "close", None)
    if callable(closer):
        result = closer()
        if asyncio.iscoroutine(result):
            await result


async def _timed(call: Callable[[], Awaitable[Any]], times: int) -> list[float]:
    spent: list[float] = []
    for _ in range(times):
        start = time.perf_counter()
        await call()
        spent.append(time.perf_counter() - start)
    return spent


async def _measure(open_session: Opener, bytes_of: Callable[[], int]) -> dict[str, Any]:
    adds = open_session("adds")
    add_times: list[float] = []
    for n in range(TURNS):
        items = turn(n)
        start = time.perf_counter()
        await adds.add_items(items)
        add_times.append(time.perf_counter() - start)
    big = open_session("big")
    for n in range(0, ITEMS // 4):
        await big.add_items(turn(n))
    live_20 = await _timed(lambda: big.get_items(limit=20), GETS)
    live_all = await _timed(lambda: big.get_items(), max(3, GETS // 10))
    assert len(await big.get_items()) == ITEMS // 4 * 4
    for session in (adds, big):
        await close(session)
    reader = open_session("big")
    cold_20 = await _timed(lambda: reader.get_items(limit=20), GETS)
    cold_all = await _timed(lambda: reader.get_items(), max(3, GETS // 10))
    await close(reader)
    us = 1e6
    shutdown()  # the bytes of a closed store (turnkeep's SQLite WAL checkpointed)
    return {
        "add_us": statistics.median(add_times) * us,
        "get20_live_us": statistics.median(live_20) * us,
        "getall_live_us": statistics.median(live_all) * us,
        "get20_reader_us": statistics.median(cold_20) * us,
        "getall_reader_us": statistics.median(cold_all) * us,
        "bytes": bytes_of(),
    }


@contextlib.contextmanager
def _tempdir() -> Generator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bench-oai-"))
    try:
        yield path
    finally:
        shutdown()
        shutil.rmtree(path, ignore_errors=True)


COLUMNS = (
    ("add_us", "add µs"),
    ("get20_live_us", "get 20"),
    ("getall_live_us", "get all"),
    ("get20_reader_us", "get 20 (reader)"),
    ("getall_reader_us", "get all (reader)"),
)


def main() -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    with _tempdir() as root:
        try:
            for name, (opener, bytes_of) in contestants(root).items():
                results[name] = asyncio.run(_measure(opener, bytes_of))
        finally:
            shutdown()
            if any(n.endswith("postgres") for n in results) or _pg_up():
                with contextlib.suppress(Exception):
                    _pg_drop()
    base = results[BASELINE]
    print(
        f"one add_items = one turn of 4 items (median of {TURNS}); gets on a "
        f"{ITEMS}-item session (median of {GETS}); µs, and x the SDK's SQLiteSession"
    )
    header = f"  {'':28}" + "".join(f"{label:>22}" for _, label in COLUMNS)
    print(header + f"{'bytes on disk':>22}")
    ratios: dict[str, dict[str, float]] = {}
    for name, got in results.items():
        cells = ""
        ratios[name] = {}
        for key, _ in COLUMNS:
            ratio = got[key] / base[key]
            ratios[name][key] = round(ratio, 3)
            cells += f"{got[key]:>12.0f} (x{ratio:5.2f})"
        size = got["bytes"] / base["bytes"] if base["bytes"] else 0.0
        ratios[name]["bytes"] = round(size, 3)
        print(f"  {name:28}{cells}{got['bytes']:>12} (x{size:5.2f})")
    return {
        "turns": TURNS,
        "items": ITEMS,
        "baseline": BASELINE,
        "contestants": results,
        "ratios": ratios,
    }


if __name__ == "__main__":
    main()
