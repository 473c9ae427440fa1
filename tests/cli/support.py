"""Helpers of the `turnkeep` command tests.

- `Store`: one backend's store in a temporary directory (`jsonl`: a
  directory, `sqlite`: a database file, `postgres`: a schema), its `--store`
  spec, a host over it, and a digest of what it holds (to prove a command
  changed nothing).
- `converse` writes sessions through the real agent loop (a scripted model,
  a tool); `crash_in_turn` leaves a log as a crash inside a turn does (a
  durable unsafe call without a result).
- `damage`, `age`, `tear`: backend-specific storage manipulation.
- `cli`: the command through click's `CliRunner`; `script` the installed
  console script (`.venv/bin/turnkeep`) for subprocess tests.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import msgspec
from click.testing import CliRunner, Result

from turnkeep import AgentLoop, Config, Host, ToolContext, function_tool
from turnkeep.cli.app import cli as turnkeep_cli
from turnkeep.events import (
    ToolCallData,
    TurnCheckpointData,
    TurnStartData,
    UserMessageData,
)
from turnkeep.meta import FORMAT_VERSION
from turnkeep.packs import expand_all
from turnkeep.persistence import LoadedSession
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel

BACKENDS = ("jsonl", "sqlite")
SCRIPT = Path(sys.executable).parent / "turnkeep"


@attrs.frozen
class Store:
    """A store of one backend for one test."""

    name: str
    path: Path
    dsn: str | None = None
    schema: str | None = None

    @property
    def spec(self) -> str:
        """The `--store` argument selecting this store."""
        if self.name == "postgres":
            assert self.dsn is not None
            return f"postgres:{self.dsn}?schema={self.schema}"
        return f"{self.name}:{self.path}"

    def options(self) -> dict[str, Any]:
        if self.name == "postgres":
            return {"dsn": self.dsn, "schema": self.schema}
        return {"path": str(self.path)}

    def config(self, **extra: Any) -> Config:
        return Config(
            persistence=self.name,
            plugins=(self.name,),
            backends={self.name: self.options()},
            **extra,
        )

    @asynccontextmanager
    async def host(self, **extra: Any) -> AsyncGenerator[Host]:
        async with Host(self.config(**extra)) as started:
            yield started

    async def load(self, session_id: str) -> LoadedSession:
        """The stored session, one entry per event (packed records expanded,
        as every reader of the log sees them)."""
        async with self.host() as host:
            loaded = await host.require_persistence().load(session_id)
        return msgspec.structs.replace(loaded, events=expand_all(loaded.events))

    async def records(self, session_id: str) -> list[bytes]:
        """The stored records themselves (a packed record stands for several)."""
        async with self.host() as host:
            return (await host.require_persistence().load(session_id)).events

    async def ids(self) -> list[str]:
        async with self.host() as host:
            page = await host.require_persistence().list(limit=1000)
            return [m.id for m in page.items]

    def digest(self) -> str:
        """What the store holds (files; for SQLite, the rows that matter)."""
        if self.name == "jsonl":
            return tree_digest(self.path)
        if self.name == "sqlite":
            return sqlite_digest(self.path)
        raise NotImplementedError(self.name)


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.parent.name != "locks":
            h.update(os.fsencode(path.relative_to(root)) + b"\0" + path.read_bytes())
    return h.hexdigest()


def sqlite_digest(path: Path) -> str:
    """Rows of sessions (owner columns aside) and events, in a stable order."""
    h = hashlib.sha256()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for row in conn.execute(
            "SELECT id, format_version, created_at, cwd, parent_id, parent_seq, "
            "updated_at, title, first_prompt, status, next_seq FROM sessions "
            "ORDER BY id"
        ):
            h.update(repr(row).encode())
        for row in conn.execute(
            "SELECT s.id, e.seq, e.raw FROM events e JOIN sessions s "
            "ON s.key = e.session_key ORDER BY s.id, e.seq"
        ):
            h.update(repr(row).encode())
    finally:
        conn.close()
    return h.hexdigest()


# -- running the command -------------------------------------------------------


def cli(*args: str, store: Store | None = None, input: str | None = None) -> Result:
    """Run `turnkeep [--store SPEC] ARGS` in this process."""
    argv = (["--store", store.spec] if store is not None else []) + list(args)
    return CliRunner().invoke(turnkeep_cli, argv, input=input, catch_exceptions=False)


def one_line_error(result: Result) -> str:
    """The single error line of a failed command (and that it is single)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("turnkeep: "), lines[0]
    return lines[0]


# -- writing sessions ----------------------------------------------------------


@function_tool(replay="unsafe")
async def lookup(arguments: Mapping[str, Any], context: ToolContext) -> str:
    """Look something up."""
    del context
    return f"found {arguments.get('q', '')}"


async def converse(
    store: Store,
    session_id: str,
    prompts: Sequence[str] = ("hello", "look it up", "thanks"),
    *,
    session_format: int | None = None,
) -> None:
    """A conversation through the agent loop: one turn per prompt.

    The second turn's reply calls the `lookup` tool. `session_format=2`
    stores one record per event (no packed records): for tests that damage
    the row or line of a given seq.
    """
    extra = {} if session_format is None else {"session_format": session_format}
    replies = [Reply(f"reply {i}") for i in range(len(prompts) + 2)]
    if len(prompts) > 1:
        replies[1] = Reply("checking", calls=(ScriptedCall("lookup", {"q": "x"}),))
    async with store.host(**extra) as host:
        loop = AgentLoop.create(
            "test-agent",
            host=host,
            model=ScriptedModel(replies),
            tools=[lookup],
            session_id=session_id,
        )
        for prompt in prompts:
            await loop.run_turn(prompt)
        await loop.close()


async def crash_in_turn(store: Store, session_id: str) -> None:
    """A log as a crash leaves it: a durable unsafe call and a safe one, no results."""
    async with store.host() as host:
        session = host.sessions.create(session_id)
        session.append(TurnStartData(turn=1))
        session.append(UserMessageData(text="deploy to prod"))
        session.append(
            ToolCallData(call_id="c-deploy", name="deploy", arguments={"env": "prod"}),
        )
        session.append(
            ToolCallData(call_id="c-ls", name="ls", arguments={}, replay="safe"),
        )
        session.append(TurnCheckpointData(turn=1, reason="unsafe-tool"))
        await session.flush()
        # No turn/end: the host closes as the process would have died here.


# -- damaging stores -----------------------------------------------------------


def log_file(store: Store, session_id: str) -> Path:
    from turnkeep_jsonl.names import LOG_SUFFIX, session_name

    (found,) = store.path.glob(f"g-*/{session_name(session_id)}{LOG_SUFFIX}")
    return found


def damage(store: Store, session_id: str) -> None:
    """Corrupt acknowledged data (later flushes stay intact)."""
    if store.name == "jsonl":
        path = log_file(store, session_id)
        data = bytearray(path.read_bytes())
        first_event = data.index(b'{"type"')
        data[first_event + 20] ^= 0x01
        path.write_bytes(bytes(data))
        return
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        conn.execute(
            "DELETE FROM events WHERE seq = 5 AND session_key = "
            "(SELECT key FROM sessions WHERE id = ?)",
            (session_id,),
        )
    finally:
        conn.close()


def age(store: Store, session_id: str) -> None:
    """Make the stored session claim a newer format version."""
    if store.name == "jsonl":
        from turnkeep_jsonl.format import decode_header, encode_header

        path = log_file(store, session_id)
        data = path.read_bytes()
        end = data.index(b"\n")
        header = decode_header(data[:end])
        assert header is not None
        newer = msgspec.structs.replace(header, format_version=FORMAT_VERSION + 1)
        path.write_bytes(encode_header(newer) + data[end + 1 :])
        return
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        conn.execute(
            "UPDATE sessions SET format_version = ? WHERE id = ?",
            (FORMAT_VERSION + 1, session_id),
        )
    finally:
        conn.close()


TORN = b'{"type":"user/message","seq":99,"time":1,"data":{"te'


def tear(store: Store, session_id: str) -> int:
    """Leave an unfinished flush after a JSONL log; returns where it starts."""
    path = log_file(store, session_id)
    size = path.stat().st_size
    with path.open("ab") as f:
        f.write(TORN)
    return size


def store_dir(store: Store) -> Path:
    """The directory the store's files live in."""
    return store.path if store.name == "jsonl" else store.path.parent
