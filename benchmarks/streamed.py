"""The workload users have: a real model's stream, through the public API.

A turn, as an agent over a streaming provider makes it: the user's message
(200-2,000 characters), a model call that asks for one tool, the tool's
output of `TOOL_BYTES` (4 KB), then a model call that streams the reply as
`DELTAS` (300) deltas of `DELTA_CHARS` (5) characters, each advancing the
host's clock by 10-40 ms as a real stream's timestamps do (a fake clock: the
run never sleeps). About 306 events per turn, ~5.8 KB of text.

`one_delta=True` gives the same conversation with each reply in one delta:
the same text, the same clock, so the two differ only in how the reply was
streamed. Texts come from `(conversation, turn)` (the conversation is the
session id unless given), so a fresh process that opens a session continues
it with the text any other process would have produced.

Sessions are written with `AgentLoop.run_turn` on a host of the backend
asked for (`store_config`): whatever the store does with a streamed reply,
these sessions are what users' sessions look like on it.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import AsyncIterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.workload import Workload
from turnkeep import AgentLoop, Config, Host, function_tool
from turnkeep.agent import ModelOutput, ModelRequest, ModelToolCall, TextDelta
from turnkeep.events import ModelInfo

DELTAS = 300
DELTA_CHARS = 5
TOOL_BYTES = 4096
STEP_MS = (10, 40)
"""Milliseconds the fake clock advances per delta (uniform)."""
DSN = os.environ.get(
    "TURNKEEP_BENCH_POSTGRES_DSN",
    os.environ.get(
        "TURNKEEP_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
    ),
)
BACKENDS = ("jsonl", "sqlite", "postgres")


class FakeClock:
    """Epoch milliseconds that move only when the model streams."""

    def __init__(self, start: int | None = None) -> None:
        self.ms = time.time_ns() // 1_000_000 if start is None else start

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


@cache
def corpus() -> str:
    """The words every text is cut from (some of them not ASCII)."""
    return Workload(seed=34).corpus


def cut(rnd: random.Random, n: int) -> str:
    """`n` characters of the corpus from a random place."""
    words = corpus()
    start = rnd.randrange(0, len(words) - n - 1)
    return words[start : start + n]


def turn_rng(session_id: str, turn: int, part: str) -> random.Random:
    return random.Random(f"{session_id}/{turn}/{part}")


def prompt(session_id: str, turn: int) -> str:
    """What the user says at `turn` of `session_id`."""
    rnd = turn_rng(session_id, turn, "user")
    return cut(rnd, rnd.randint(200, 2000))


def reply(session_id: str, turn: int) -> str:
    """The reply the model streams at `turn` (`DELTAS` x `DELTA_CHARS`)."""
    return cut(turn_rng(session_id, turn, "reply"), DELTAS * DELTA_CHARS)


def tool_output(session_id: str, turn: int) -> str:
    return cut(turn_rng(session_id, turn, "tool"), TOOL_BYTES)


def turn_text_bytes(session_id: str, turn: int) -> int:
    """UTF-8 bytes of a turn's text: prompt, tool arguments and output, reply."""
    texts = (prompt(session_id, turn), tool_output(session_id, turn))
    arguments = msgspec.json.encode(_arguments(session_id, turn))
    return (
        sum(len(t.encode()) for t in texts)
        + len(arguments)
        + _reply_bytes(session_id, turn)
    )


def _reply_bytes(session_id: str, turn: int) -> int:
    return len(reply(session_id, turn).encode())


def _arguments(session_id: str, turn: int) -> dict[str, Any]:
    return {"session": session_id, "turn": turn}


class StreamedModel:
    """First call of a turn: one tool call; second: the reply, streamed.

    Which call it is comes from the history (a tool result last: reply), so
    a loop resumed in another process continues as this one would have.
    `first_call` is the `perf_counter` of the first `stream` call.
    """

    def __init__(
        self, clock: FakeClock, *, one_delta: bool = False, conversation: str = ""
    ) -> None:
        self.clock = clock
        self.one_delta = one_delta
        self.conversation = conversation
        self.first_call: float | None = None
        self.first_request: ModelRequest | None = None

    def describe(self) -> ModelInfo:
        """The same description streamed or not: one conversation, two shapes."""
        return ModelInfo(name="StreamedModel", provider="test")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        if self.first_call is None:
            self.first_call = time.perf_counter()
            self.first_request = request
        sid, turn = self.conversation or request.session_id, request.turn
        last = request.messages[-1] if request.messages else None
        if last is None or last.role != "tool":
            yield ModelToolCall("fetch", _arguments(sid, turn))
            return
        text = reply(sid, turn)
        rnd = turn_rng(sid, turn, "clock")
        steps = [rnd.randint(*STEP_MS) for _ in range(DELTAS)]
        if self.one_delta:
            self.clock.advance(sum(steps))
            yield TextDelta(text)
            return
        for i, step in enumerate(steps):
            self.clock.advance(step)
            yield TextDelta(text[i * DELTA_CHARS : (i + 1) * DELTA_CHARS])


@function_tool(replay="safe")
async def fetch(arguments: Mapping[str, Any], context: object) -> str:
    """Fetch a document (4 KB of prepared text)."""
    return tool_output(str(arguments["session"]), int(arguments["turn"]))


def store_config(
    backend: str, root: Path, *, schema: str = "", redact: bool = True
) -> Config:
    """A host's configuration for `backend` under `root` (or `schema`)."""
    if backend == "postgres":
        options: dict[str, Any] = {"dsn": DSN, "schema": schema}
    else:
        options = {"path": str(root / ("store" if backend == "jsonl" else "s.db"))}
    return Config(
        persistence=backend,
        plugins=(backend,),
        backends={backend: options},
        redact_secrets=redact,
    )


def store_spec(backend: str, root: Path, *, schema: str = "") -> str:
    """The same store as `store_config`, as a store spec (`sqlite:PATH`)."""
    if backend == "postgres":
        return f"postgres:{DSN}{'&' if '?' in DSN else '?'}schema={schema}"
    return f"{backend}:{root / ('store' if backend == 'jsonl' else 's.db')}"


async def fill(
    host: Host,
    clock: FakeClock,
    session_id: str,
    turns: int,
    *,
    one_delta: bool,
    conversation: str = "",
) -> int:
    """Run `turns` turns on a new session; the UTF-8 bytes of their text."""
    conversation = conversation or session_id
    agent = AgentLoop.create(
        "bench",
        host=host,
        model=StreamedModel(clock, one_delta=one_delta, conversation=conversation),
        tools=[fetch],
        session_id=session_id,
    )
    text = 0
    for turn in range(1, turns + 1):
        await agent.run_turn(prompt(conversation, turn))
        text += turn_text_bytes(conversation, turn)
    await agent.close()
    return text


def postgres_up() -> bool:
    """Whether a PostgreSQL server answers at `DSN` (said when not)."""
    try:
        import psycopg

        psycopg.connect(DSN, connect_timeout=3).close()
    except Exception as exc:  # noqa: BLE001 - any failure: no server to measure
        print(f"  PostgreSQL skipped: no server answers at {DSN} ({exc})")
        return False
    return True


def drop_schema(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


def schema_bytes(schema: str) -> int:
    """Bytes of every table of `schema` (indexes and TOAST included)."""
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def rss_bytes() -> int:
    """This process's resident set now (Linux `/proc/self/statm`)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def verdict(value: float, goal: float, *, at_least: bool = False) -> str:
    """`(goal <= 1.2: met)` and the like, for every printed figure."""
    met = value >= goal if at_least else value <= goal
    return (
        f"(goal {'>=' if at_least else '<='} {goal:g}: {'met' if met else 'NOT met'})"
    )
