"""One worker process of `bench_pgfleet`: takes turns as the orchestrator says.

`python -m benchmarks.fleet_worker MODE SCHEMA` reads one JSON request per
line on stdin and answers one JSON line per request on stdout:

- `{"op": "fill", "sessions": [...], "turns": k}`: run `k` more turns of
  `benchmarks/streamed.py` on each session (all at once), then let them go;
- `{"op": "turn", "session": id}`: one turn, answered with the seconds it
  took (`{"s": ...}`) as `MODE` takes it:
  - `open`: no affinity: `AgentLoop.open` + `run_turn` + `close`, the
    session let go after each turn (any worker may take the next one);
  - `pinned`: the session's loop stays open in this worker (opened on
    `{"op": "hold"}`, untimed), `run_turn` only;
  - `raw`: raw psycopg on one connection: a transaction that reads the
    session's next seq and inserts the turn's events as rows (the events
    a streamed turn appends, encoded with msgspec inside the span);
- `{"op": "quit"}`: close everything and exit.

The host (or the raw connection) lives as long as the process, as a web
backend's does; only sessions come and go.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from benchmarks import streamed
from turnkeep import AgentLoop, Host

FILL_AT_ONCE = 2
"""Sessions a worker fills at once (its backend's pool holds 4 connections)."""


def raw_turn_rows(
    session_id: str, seq0: int, turn: int
) -> list[tuple[str, int, bytes]]:
    """The rows of a streamed turn, as a raw writer would store them."""
    encode = msgspec.json.encode
    text = streamed.reply(session_id, turn)
    t0 = time.time_ns() // 1_000_000
    data: list[tuple[str, dict[str, Any]]] = [
        ("turn/start", {"turn": turn}),
        ("user/message", {"text": streamed.prompt(session_id, turn)}),
        ("tool/call", {"call_id": f"c{turn}", "name": "fetch", "arguments": {}}),
        (
            "tool/result",
            {"call_id": f"c{turn}", "output": streamed.tool_output(session_id, turn)},
        ),
    ]
    d = streamed.DELTA_CHARS
    data += [
        ("assistant/chunk", {"text": text[i : i + d]}) for i in range(0, len(text), d)
    ]
    data += [("assistant/message", {"text": text}), ("turn/end", {"turn": turn})]
    return [
        (
            session_id,
            seq0 + i,
            encode({"type": k, "seq": seq0 + i, "time": t0, "data": v}),
        )
        for i, (k, v) in enumerate(data)
    ]


class Worker:
    def __init__(self, mode: str, schema: str) -> None:
        self.mode = mode
        self.schema = schema
        self.clock = streamed.FakeClock()
        self.host: Host | None = None
        self.held: dict[str, AgentLoop] = {}
        self.raw: Any = None
        self.turns: dict[str, int] = {}

    async def start(self) -> None:
        if self.mode == "raw":
            import psycopg

            self.raw = await psycopg.AsyncConnection.connect(
                streamed.DSN, autocommit=True
            )
            return
        config = streamed.store_config("postgres", Path(), schema=self.schema)
        self.host = await Host(config, clock=self.clock).start()

    async def _open(self, session_id: str) -> AgentLoop:
        assert self.host is not None
        return await AgentLoop.open(
            "bench",
            session_id,
            host=self.host,
            model=streamed.StreamedModel(self.clock),
            tools=[streamed.fetch],
        )

    async def fill(self, sessions: list[str], turns: int) -> None:
        # A few at a time: 64 sessions (and 8) loading and flushing at once
        # waited out the pool's connection timeout on a busy machine.
        gate = asyncio.Semaphore(FILL_AT_ONCE)

        async def one(session_id: str) -> None:
            async with gate:
                agent = await self._open(session_id)
                for _ in range(turns):
                    await agent.run_turn(streamed.prompt(session_id, 1))
                await agent.close()

        await asyncio.gather(*(one(s) for s in sessions))

    async def turn(self, session_id: str) -> float:
        start = time.perf_counter()
        if self.mode == "raw":
            await self._raw_turn(session_id)
        elif self.mode == "pinned":
            await self.held[session_id].run_turn(streamed.prompt(session_id, 2))
        else:
            agent = await self._open(session_id)
            await agent.run_turn(streamed.prompt(session_id, 2))
            await agent.close()
        return time.perf_counter() - start

    async def _raw_turn(self, session_id: str) -> None:
        from psycopg import sql

        table = sql.Identifier(self.schema, "raw_events")
        n = self.turns[session_id] = self.turns.get(session_id, 0) + 1
        async with self.raw.transaction(), self.raw.cursor() as cur:
            await cur.execute(
                sql.SQL(
                    "SELECT coalesce(max(seq) + 1, 0) FROM {} WHERE session_id = %s"
                ).format(table),
                (session_id,),
            )
            row = await cur.fetchone()
            rows = raw_turn_rows(session_id, int(row[0]), n)
            await cur.executemany(
                sql.SQL(
                    "INSERT INTO {} (session_id, seq, raw) VALUES (%s, %s, %b)"
                ).format(table),
                rows,
            )

    async def hold(self, sessions: list[str]) -> None:
        for session_id in sessions:
            self.held[session_id] = await self._open(session_id)

    async def close(self) -> None:
        for agent in self.held.values():
            await agent.close()
        if self.host is not None:
            await self.host.aclose()
        if self.raw is not None:
            await self.raw.close()


async def serve(mode: str, schema: str) -> None:
    worker = Worker(mode, schema)
    await worker.start()
    out = sys.stdout
    out.write('{"ready": true}\n')
    out.flush()
    while True:
        # Read off the loop's thread: the host's own tasks (lease renewals)
        # keep running while the worker waits for a request.
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            break
        request: dict[str, Any] = msgspec.json.decode(line)
        op = request["op"]
        answer: dict[str, Any] = {}
        if op == "quit":
            break
        if op == "fill":
            await worker.fill(request["sessions"], request["turns"])
        elif op == "hold":
            await worker.hold(request["sessions"])
        else:
            answer["s"] = await worker.turn(request["session"])
        out.write(msgspec.json.encode(answer).decode() + "\n")
        out.flush()
    await worker.close()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))
