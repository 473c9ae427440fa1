"""The user's path: `AgentLoop.run_turn` and `Session.append` + `flush`, in one run.

`make bench` measures what users call, next to raw baselines measured in the
same run, turn by turn in lockstep so every contestant sees the same machine:

- raw (JSONL): the turn's events encoded with msgspec, one `os.write` and one
  `os.fsync`, run behind the same thread hop turnkeep takes
  (`asyncio.to_thread`);
- raw (SQLite): one `executemany` transaction per turn in WAL mode with
  `synchronous=FULL`, behind the same hop;
- `Session.append` x 12 + `flush` (the benchmark workload's turn);
- `AgentLoop.run_turn` with a lean model that streams exactly what it is
  given (7 text deltas and one safe tool call, then "ok"): about 15 events
  per turn. The raw baselines write the events the loop's turn appended, so
  they store the same bytes.

Printed per backend: microseconds per turn, the ratio to raw behind the hop,
and `last10/first10` (a turn must not cost more as the session grows).
Sizes: `BENCH_LOOP_TURNS` (200; `make bench-full` runs 1,000), `BENCH_REPS`
(3).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Generator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.workload import CHUNKS, Workload
from turnkeep import AgentLoop, Host, SessionEvent, function_tool
from turnkeep.agent import ModelOutput, ModelRequest, ModelToolCall, TextDelta

TURNS = int(os.environ.get("BENCH_LOOP_TURNS", "200"))
REPS = int(os.environ.get("BENCH_REPS", "3"))

_encode_into = msgspec.json.Encoder().encode_into


@contextmanager
def scratch() -> Generator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bench-loop-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- raw baselines -------------------------------------------------------------


class RawJsonl:
    """msgspec lines, one os.write + os.fsync per turn."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.fd = os.open(directory / "s.jsonl", os.O_WRONLY | os.O_CREAT, 0o600)
        self.buf = bytearray()

    def turn(self, events: list[SessionEvent]) -> None:
        buf = self.buf
        buf.clear()
        for event in events:
            _encode_into(event, buf, -1)
            buf += b"\n"
        os.write(self.fd, buf)
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


class RawSqlite:
    """One executemany transaction per turn, WAL, synchronous=FULL."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.conn = sqlite3.connect(
            directory / "raw.db", isolation_level=None, check_same_thread=False
        )
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute(
            "CREATE TABLE events (session_id TEXT, seq INTEGER, type TEXT, "
            "data BLOB, PRIMARY KEY (session_id, seq))"
        )
        self.encode = msgspec.json.Encoder().encode

    def turn(self, events: list[SessionEvent]) -> None:
        encode = self.encode
        rows = [("s", e.seq, type(e).__name__, encode(e)) for e in events]
        self.conn.execute("BEGIN")
        self.conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?)", rows)
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


RAW: dict[str, Callable[[Path], RawJsonl | RawSqlite]] = {
    "jsonl": RawJsonl,
    "sqlite": RawSqlite,
}


# -- the lean model ---------------------------------------------------------------


class LeanModel:
    """Streams prepared replies: the first call of a turn gives the workload's
    7 chunks and a tool call, the second says "ok". Keeps nothing."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.calling = True

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        if self.calling:
            self.calling = False
            reply = self.workload.text()
            step = max(1, len(reply) // CHUNKS)
            for i in range(CHUNKS):
                end = len(reply) if i == CHUNKS - 1 else (i + 1) * step
                yield TextDelta(reply[i * step : end])
            yield ModelToolCall("lookup", {"query": reply[:40]})
        else:
            self.calling = True
            yield TextDelta("ok")


def make_lookup(workload: Workload) -> Any:
    @function_tool(replay="safe")
    async def lookup(arguments: Mapping[str, Any], context: object) -> str:
        """Look something up (returns prepared text)."""
        return workload.text()

    return lookup


# -- one run ---------------------------------------------------------------------


def _config(backend: str, root: Path) -> dict[str, Any]:
    path = root / ("store" if backend == "jsonl" else "store.db")
    return {
        "persistence": backend,
        "plugins": [backend],
        "backends": {backend: {"path": str(path)}},
    }


async def lockstep(backend: str, root: Path) -> dict[str, list[float]]:
    """Per-turn seconds of every contestant, alternating turn by turn."""
    workload = Workload(seed=11)
    append_turns = [list(t) for t in workload.session(TURNS)]
    raw_loop = RAW[backend](root / "raw-loop")
    raw_append = RAW[backend](root / "raw-append")
    times: dict[str, list[float]] = {
        "raw_loop": [],
        "run_turn": [],
        "raw_append": [],
        "append_flush": [],
        "events": [],
    }
    perf = time.perf_counter
    async with (
        Host(_config(backend, root / "loop")) as loop_host,
        Host(_config(backend, root / "append")) as append_host,
    ):
        agent = AgentLoop.create(
            "bench",
            host=loop_host,
            model=LeanModel(workload),
            tools=[make_lookup(workload)],
        )
        live = loop_host.sessions
        session = append_host.sessions.create("s")
        for turn in range(TURNS):
            said = workload.text()
            start = live.get(agent.session_id).next_seq if turn else 0
            t = perf()
            await agent.run_turn(said)
            times["run_turn"].append(perf() - t)
            produced = list(live.get(agent.session_id).events[start:])
            times["events"].append(len(produced))
            t = perf()
            await asyncio.to_thread(raw_loop.turn, produced)
            times["raw_loop"].append(perf() - t)

            events = append_turns[turn]
            t = perf()
            for event in events:
                session.append(event.data)
            await session.flush()
            times["append_flush"].append(perf() - t)
            stored = list(session.events[-len(events) :])
            t = perf()
            await asyncio.to_thread(raw_append.turn, stored)
            times["raw_append"].append(perf() - t)
        await agent.close()
        await append_host.sessions.close(session.id)
    raw_loop.close()
    raw_append.close()
    return times


def report(backend: str, runs: list[dict[str, list[float]]]) -> None:
    def total(name: str) -> float:
        return statistics.median(sum(run[name]) for run in runs)

    def mean(name: str, part: slice) -> float:
        return statistics.median(statistics.mean(run[name][part]) for run in runs)

    # Turn 0 creates the session everywhere: flatness compares turns 1-10
    # with the last 10.
    first, last = slice(1, 11), slice(-10, None)
    per_turn = statistics.mean(runs[0]["events"])
    print(
        f"{backend}: T={TURNS} turns ({per_turn:.1f} events per loop turn), "
        f"median of {len(runs)} runs"
    )
    for name, base, goal in (
        ("run_turn", "raw_loop", "1.6"),
        ("append_flush", "raw_append", "1.3"),
    ):
        ours, raw = total(name), total(base)
        growth = mean(name, last) / mean(name, first)
        raw_growth = mean(base, last) / mean(base, first)
        print(
            f"  {name:<13} {ours / TURNS * 1e6:8.0f} us/turn   raw+hop "
            f"{raw / TURNS * 1e6:6.0f} us   ratio {ours / raw:5.2f} (goal <= {goal})"
            f"   last10/first10 {growth:5.2f} (raw {raw_growth:4.2f}; goal <= 1.1)"
        )


def main() -> None:
    for backend in ("jsonl", "sqlite"):
        runs: list[dict[str, list[float]]] = []
        for _ in range(REPS):
            with scratch() as root:
                runs.append(asyncio.run(lockstep(backend, root)))
        report(backend, runs)


if __name__ == "__main__":
    main()
