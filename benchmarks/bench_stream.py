"""A real model's stream on the user's path: time, CPU per delta, disk per turn.

`benchmarks/streamed.py`'s turns (a tool call, a 4 KB tool output, a reply
streamed as 300 deltas of 5 characters on a fake clock), each figure next
to its baseline measured in the same run:

1. **`run_turn` against a raw durable write of the same text**, behind the
   same thread hop (`asyncio.to_thread`): the turn's text (prompt, tool
   arguments and output, reply) written with one `os.write` + `fsync`
   (JSONL), one transaction in WAL with `synchronous=FULL` (SQLite), one
   psycopg transaction (PostgreSQL). Streamed turns, turns with one delta
   per reply and the raw write go turn by turn in lockstep (goal: streamed
   <= 5x raw).
2. **The loop's per-delta cost**: on the memory backend (no I/O), the CPU
   time of a streamed turn minus that of the same turn with one delta per
   reply, over the 299 extra deltas, against the CPU time of a bare
   `Session.append` of a 5-character chunk with secret redaction off
   (goal <= 2x).
3. **Disk per streamed turn**, the stores closed, growth after the first
   turn: against the same turns with one delta per reply (goal, JSONL:
   <= 1.3x) and against the turns' text (goal, SQLite and PostgreSQL:
   <= 2.5x).

Sizes: `BENCH_STREAM_TURNS` (30; 5 with `BENCH_QUICK=1`, 200 with
`BENCH_FULL=1`). PostgreSQL is left to `make bench-all` in the quick run,
and skipped with a message when no server answers.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Generator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

from benchmarks import streamed
from benchmarks.peers import disk_bytes
from benchmarks.streamed import verdict
from turnkeep import AgentLoop, Config, Host
from turnkeep.events import AssistantChunkData

FULL = os.environ.get("BENCH_FULL", "") == "1"
QUICK = os.environ.get("BENCH_QUICK") == "1" and not FULL
TURNS = int(
    os.environ.get("BENCH_STREAM_TURNS", "200" if FULL else "5" if QUICK else "30")
)
SHAPES = {"streamed": False, "one_delta": True}
GOALS = {
    "run_turn_over_raw": 5.0,
    "delta_over_append": 2.0,
    "jsonl_disk_over_one_delta": 1.3,
    "disk_over_text": 2.5,
}


@contextmanager
def scratch() -> Generator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- raw durable writes of a turn's text ------------------------------------------


class RawFile:
    def __init__(self, root: Path) -> None:
        self.fd = os.open(root / "raw.txt", os.O_WRONLY | os.O_CREAT, 0o600)

    def write(self, text: bytes) -> None:
        os.write(self.fd, text)
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


class RawSqlite:
    def __init__(self, root: Path) -> None:
        self.conn = sqlite3.connect(
            root / "raw.db", isolation_level=None, check_same_thread=False
        )
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute("CREATE TABLE turns (n INTEGER PRIMARY KEY, text BLOB)")

    def write(self, text: bytes) -> None:
        self.conn.execute("BEGIN")
        self.conn.execute("INSERT INTO turns (text) VALUES (?)", (text,))
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class RawPostgres:
    def __init__(self, schema: str) -> None:
        import psycopg
        from psycopg import sql

        self.conn = psycopg.connect(streamed.DSN, autocommit=True)
        ident = sql.Identifier(schema)
        self.conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        self.conn.execute(
            sql.SQL(
                "CREATE TABLE {}.turns (n bigserial PRIMARY KEY, text bytea)"
            ).format(ident)
        )
        self.insert = sql.SQL("INSERT INTO {}.turns (text) VALUES (%b)").format(ident)

    def write(self, text: bytes) -> None:
        with self.conn.transaction():
            self.conn.execute(self.insert, (text,))

    def close(self) -> None:
        self.conn.close()


def raw_writer(
    backend: str, root: Path, schema: str
) -> RawFile | RawSqlite | RawPostgres:
    if backend == "postgres":
        return RawPostgres(f"{schema}_raw")
    return RawFile(root) if backend == "jsonl" else RawSqlite(root)


def turn_text(session_id: str, turn: int) -> bytes:
    """The text a turn carries, as one write (what `turn_text_bytes` counts)."""
    import msgspec

    return b"".join(
        (
            streamed.prompt(session_id, turn).encode(),
            msgspec.json.encode({"session": session_id, "turn": turn}),
            streamed.tool_output(session_id, turn).encode(),
            streamed.reply(session_id, turn).encode(),
        )
    )


# -- 1 and 3: run_turn and disk, per backend --------------------------------------


def _config(backend: str, root: Path, schema: str, shape: str) -> Config:
    return streamed.store_config(backend, root / shape, schema=f"{schema}_{shape}")


def _size(backend: str, root: Path, schema: str, shape: str) -> int:
    if backend == "postgres":
        return streamed.schema_bytes(f"{schema}_{shape}")
    return disk_bytes(root / shape)


async def _open_loops(
    stack: AsyncExitStack, backend: str, root: Path, schema: str, *, create: bool
) -> dict[str, AgentLoop]:
    loops: dict[str, AgentLoop] = {}
    for shape, one_delta in SHAPES.items():
        clock = streamed.FakeClock()
        host = await stack.enter_async_context(
            Host(_config(backend, root, schema, shape), clock=clock)
        )
        model = streamed.StreamedModel(clock, one_delta=one_delta, conversation="c")
        if create:
            loops[shape] = AgentLoop.create(
                "bench",
                host=host,
                model=model,
                tools=[streamed.fetch],
                session_id=shape,
            )
        else:
            loops[shape] = await AgentLoop.open(
                "bench", shape, host=host, model=model, tools=[streamed.fetch]
            )
    return loops


async def backend_run(backend: str, root: Path, schema: str) -> dict[str, Any]:
    """Per-turn seconds of each shape and of raw; disk growth of each shape."""
    for shape in SHAPES:
        (root / shape).mkdir(parents=True)
    # Turn 1 creates the stores; disk is measured from there, every store closed.
    async with AsyncExitStack() as stack:
        created = await _open_loops(stack, backend, root, schema, create=True)
        for agent in created.values():
            await agent.run_turn(streamed.prompt("c", 1))
            await agent.close()
    first = {shape: _size(backend, root, schema, shape) for shape in SHAPES}
    times: dict[str, list[float]] = {"streamed": [], "one_delta": [], "raw": []}
    text = 0
    raw = raw_writer(backend, root, schema)
    perf = time.perf_counter
    async with AsyncExitStack() as stack:
        loops = await _open_loops(stack, backend, root, schema, create=False)
        for turn in range(2, TURNS + 1):
            steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
                (shape, lambda a=agent, t=turn: a.run_turn(streamed.prompt("c", t)))
                for shape, agent in loops.items()
            ]
            written = turn_text("c", turn)
            text += streamed.turn_text_bytes("c", turn)
            steps.append(("raw", lambda w=written: asyncio.to_thread(raw.write, w)))
            shift = turn % len(steps)
            for key, step in steps[shift:] + steps[:shift]:
                t = perf()
                await step()
                times[key].append(perf() - t)
        for agent in loops.values():
            await agent.close()
    raw.close()
    grown = {
        shape: _size(backend, root, schema, shape) - first[shape] for shape in SHAPES
    }
    return {"times": times, "disk_growth": grown, "text_bytes": text}


def backend_figures(backend: str, root: Path, schema: str) -> dict[str, Any]:
    try:
        run = asyncio.run(backend_run(backend, root, schema))
    finally:
        if backend == "postgres":
            for part in (*SHAPES, "raw"):
                streamed.drop_schema(f"{schema}_{part}")
    t = run["times"]
    us = {key: statistics.median(values) * 1e6 for key, values in t.items()}
    paired = statistics.median(
        s / r for s, r in zip(t["streamed"], t["raw"], strict=True)
    )
    turns = TURNS - 1
    disk = {shape: grown / turns for shape, grown in run["disk_growth"].items()}
    text = run["text_bytes"] / turns
    ratios = {
        "run_turn_over_raw": paired,
        "one_delta_over_raw": statistics.median(
            o / r for o, r in zip(t["one_delta"], t["raw"], strict=True)
        ),
        "disk_over_one_delta": disk["streamed"] / disk["one_delta"],
        "disk_over_text": disk["streamed"] / text,
        "one_delta_disk_over_text": disk["one_delta"] / text,
    }
    print(f"  {backend}:")
    print(
        f"    streamed run_turn {us['streamed']:8.0f} us, {paired:5.2f}x the raw "
        f"durable write of its text ({us['raw']:.0f} us) "
        f"{verdict(paired, GOALS['run_turn_over_raw'])}; one delta per reply "
        f"{us['one_delta']:.0f} us, {ratios['one_delta_over_raw']:.2f}x"
    )
    disk_goal = (
        verdict(ratios["disk_over_one_delta"], GOALS["jsonl_disk_over_one_delta"])
        if backend == "jsonl"
        else verdict(ratios["disk_over_text"], GOALS["disk_over_text"])
    )
    print(
        f"    disk per turn: streamed {disk['streamed'] / 1e3:6.1f} KB, one delta per "
        f"reply {disk['one_delta'] / 1e3:6.1f} KB, text {text / 1e3:5.1f} KB: streamed "
        f"{ratios['disk_over_one_delta']:.2f}x one delta, "
        f"{ratios['disk_over_text']:.2f}x "
        f"the text {disk_goal}"
    )
    return {
        "us_per_turn": us,
        "disk_per_turn": disk,
        "text_per_turn": text,
        "ratios": ratios,
    }


# -- 2: the loop's CPU per delta --------------------------------------------------


async def per_delta(turns: int) -> dict[str, float]:
    """Microseconds per extra delta in the loop, and per bare chunk append."""
    clocks = {shape: streamed.FakeClock() for shape in SHAPES}
    # CPU time of this thread (the memory backend never leaves it): on a
    # shared machine a 3 ms turn is preempted far more often than a 0.4 ms
    # run of bare appends, and wall time would charge that to the loop.
    perf = time.thread_time
    times: dict[str, list[float]] = {"streamed": [], "one_delta": [], "append": []}
    pieces = [streamed.reply("bare", 1)[i : i + 5] for i in range(0, 1500, 5)]
    async with AsyncExitStack() as stack:
        loops: dict[str, AgentLoop] = {}
        for shape, one_delta in SHAPES.items():
            host = await stack.enter_async_context(
                Host(Config(persistence="memory"), clock=clocks[shape])
            )
            loops[shape] = AgentLoop.create(
                "bench",
                host=host,
                model=streamed.StreamedModel(
                    clocks[shape], one_delta=one_delta, conversation="c"
                ),
                tools=[streamed.fetch],
                session_id=shape,
            )
        bare_host = await stack.enter_async_context(
            Host(Config(persistence="memory", redact_secrets=False))
        )
        bare = bare_host.sessions.create("bare")
        for turn in range(1, turns + 1):
            for shape, agent in loops.items():
                t = perf()
                await agent.run_turn(streamed.prompt("c", turn))
                times[shape].append(perf() - t)
            t = perf()
            for piece in pieces:
                bare.append(AssistantChunkData(text=piece))
            times["append"].append((perf() - t) / len(pieces))
            await bare.flush()
        for agent in loops.values():
            await agent.close()
    extra = streamed.DELTAS - 1
    delta = statistics.median(
        (s - o) / extra
        for s, o in zip(times["streamed"], times["one_delta"], strict=True)
    )
    append = statistics.median(times["append"])
    ratio = delta / append
    print(
        "  the loop's CPU per delta (memory backend, defaults) "
        f"{delta * 1e6:5.2f} us, "
        f"{ratio:.2f}x a bare chunk Session.append with redaction off "
        f"({append * 1e6:.2f} us) {verdict(ratio, GOALS['delta_over_append'])}"
    )
    return {"delta_us": delta * 1e6, "append_us": append * 1e6, "ratio": ratio}


def main() -> dict[str, Any]:
    import logging

    logging.getLogger("turnkeep_sqlite").setLevel(logging.ERROR)
    print(
        f"{TURNS} turns per store ({streamed.DELTAS} deltas x {streamed.DELTA_CHARS} "
        f"characters per reply, {streamed.TOOL_BYTES // 1024} KB tool output), "
        "in lockstep; medians"
    )
    schema = f"tk_bench_stream_{os.getpid()}"
    results: dict[str, Any] = {"turns": TURNS, "goals": GOALS, "backends": {}}
    with scratch() as root:
        for backend in streamed.BACKENDS:
            if backend == "postgres" and QUICK:
                print("  postgres: left to `make bench-all` (quick run)")
                continue
            if backend == "postgres" and not streamed.postgres_up():
                continue
            here = root / backend
            results["backends"][backend] = backend_figures(backend, here, schema)
    # On the memory backend a turn is milliseconds: enough of them that the
    # difference of two medians is not one scheduler hiccup.
    results["per_delta"] = asyncio.run(per_delta(max(40, TURNS)))
    return results


if __name__ == "__main__":
    main()
