"""A test process for the SQLite backend's multi-process tests.

Run as `python _worker.py serve`: reads one JSON command per line on stdin,
answers one JSON line on stdout. It keeps one event loop and (after `open`)
one backend, so a test can drive several real processes over one database.
`fork_writer` turns it into a fork server for kill tests: the zygote holds no
thread and no connection, so its children start clean and fast.

The turn generator here is deterministic, so the test process regenerates
the exact bytes every worker wrote.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from turnkeep.codec import EventCodec, EventRecord
from turnkeep.errors import TurnkeepError
from turnkeep.events import (
    AssistantMessage,
    AssistantMessageData,
    SessionEvent,
    TurnEnd,
    TurnEndData,
    UserMessage,
    UserMessageData,
)
from turnkeep.meta import SessionHeader, SessionMeta
from turnkeep_sqlite import SqliteConfig, SqlitePersistence

CODEC = EventCodec()
_T0 = 1_700_000_000_000


def turn(
    seq0: int, index: int, *, seed: int, tag: str = "", big: bool = False
) -> list[EventRecord]:
    """Turn `index` of a seeded workload: 3-8 events (sizes 0 B-64 KiB if `big`)."""
    rnd = random.Random(f"{seed}:{index}:{tag}")
    count = rnd.randint(3, 8)
    sizes = [
        (int(2 ** rnd.uniform(0, 16)) - 1) if big else rnd.randint(0, 200)
        for _ in range(count)
    ]
    text = f"{tag}#{index}|"
    events: list[SessionEvent] = []
    for i, size in enumerate(sizes):
        seq = seq0 + i
        body = text + "ab\u00e9\u2603"[i % 4] * size
        if i == 0:
            events.append(
                UserMessage(seq=seq, time=_T0 + seq, data=UserMessageData(text=body))
            )
        elif i == count - 1:
            events.append(
                TurnEnd(
                    seq=seq,
                    time=_T0 + seq,
                    data=TurnEndData(turn=index, status="completed"),
                )
            )
        else:
            events.append(
                AssistantMessage(
                    seq=seq, time=_T0 + seq, data=AssistantMessageData(text=body)
                )
            )
    return [CODEC.record(e) for e in events]


def turns(
    count: int,
    *,
    seed: int,
    tag: str = "",
    big: bool = False,
    start: int = 0,
    seq0: int = 0,
) -> list[list[EventRecord]]:
    """`count` consecutive turns starting at turn `start` and seq `seq0`."""
    out: list[list[EventRecord]] = []
    for index in range(start, start + count):
        records = turn(seq0, index, seed=seed, tag=tag, big=big)
        seq0 += len(records)
        out.append(records)
    return out


def meta(session_id: str) -> SessionMeta:
    return SessionMeta(header=SessionHeader(id=session_id, created_at=_T0))


class Server:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.backend: SqlitePersistence | None = None

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        op = cmd["op"]
        if op == "fork_writer":
            return {"pid": fork_writer(cmd)}
        if op == "reap":
            _, status = os.waitpid(cmd["pid"], 0)
            return {"status": status}
        if op == "open":
            self.backend = SqlitePersistence(
                SqliteConfig(path=Path(cmd["path"]), **cmd.get("options", {}))
            )
            return {}
        backend = self.backend
        assert backend is not None
        started = time.monotonic()
        try:
            result = self.run(self.call(backend, op, cmd))
        except TurnkeepError as exc:
            return {
                "error": type(exc).__name__,
                "message": str(exc),
                "elapsed": time.monotonic() - started,
            }
        return {"result": result, "elapsed": time.monotonic() - started}

    async def call(
        self, backend: SqlitePersistence, op: str, cmd: dict[str, Any]
    ) -> Any:
        sid = cmd.get("id", "")
        if op == "create":
            await backend.create(meta(sid))
        elif op == "claim":
            await backend.claim(sid, steal=cmd.get("steal", False))
        elif op == "append":
            records = turn(
                cmd["seq0"], cmd["turn"], seed=cmd["seed"], tag=cmd.get("tag", "")
            )
            await backend.append(sid, records)
            return len(records)
        elif op == "append_many":
            return await append_many(backend, cmd)
        elif op == "load":
            return len((await backend.load(sid)).events)
        elif op == "has":
            return await backend.has(sid)
        elif op == "release":
            await backend.release(sid)
        elif op == "close":
            await backend.aclose()
        elif op == "contend":
            return await contend(backend, cmd)
        else:
            raise ValueError(f"unknown op {op!r}")
        return None


async def contend(backend: SqlitePersistence, cmd: dict[str, Any]) -> dict[str, Any]:
    """Item 24's per-process load: flush turns until the deadline.

    A `solo` process owns its own session. A `rival` steals the shared session,
    reloads it, appends, and when fenced steals it back. Every acknowledged
    flush is reported as (first seq, tag, turn index); every error that is not
    a fence is reported too.
    """
    sid, tag, seed = cmd["id"], cmd["tag"], cmd["seed"]
    deadline = time.monotonic() + cmd["seconds"]
    latencies: list[float] = []
    acked: list[tuple[int, int]] = []
    errors: list[str] = []
    rival = cmd["role"] == "rival"
    index = 0
    next_seq = 0
    if not rival:
        await backend.create(meta(sid))
    owned = not rival
    while time.monotonic() < deadline:
        try:
            if not owned:
                await backend.claim(sid, steal=True)
                next_seq = len((await backend.load(sid)).events)
                owned = True
            records = turn(next_seq, index, seed=seed, tag=tag)
            started = time.monotonic()
            await backend.append(sid, records)
            latencies.append(time.monotonic() - started)
            acked.append((next_seq, index))
            next_seq += len(records)
            index += 1
            if rival and index % 7 == 0:
                await asyncio.sleep(0.002)  # let the other rival take over now and then
        except TurnkeepError as exc:
            if rival and type(exc).__name__ in ("SessionFencedError", "SequenceError"):
                owned = False
                continue
            errors.append(f"{type(exc).__name__}: {exc}")
            owned = False
    return {"latencies": latencies, "acked": acked, "errors": errors}


async def append_many(
    backend: SqlitePersistence, cmd: dict[str, Any]
) -> dict[str, Any]:
    """Append `count` turns in a row; stop at the first refusal and say which."""
    seq, acked, error = cmd["seq0"], 0, None
    for index in range(cmd["start"], cmd["start"] + cmd["count"]):
        records = turn(seq, index, seed=cmd["seed"], tag=cmd["tag"])
        try:
            await backend.append(cmd["id"], records)
        except TurnkeepError as exc:
            error = type(exc).__name__
            break
        seq += len(records)
        acked += 1
    return {"acked": acked, "seq": seq, "error": error}


def fork_writer(cmd: dict[str, Any]) -> int:
    """Fork a child that writes `turns` turns, recording each ACK in a file."""
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        asyncio.run(_write_turns(cmd))
    except BaseException:  # the child must never return into the server loop
        code = 3
    finally:
        os._exit(code)


async def _write_turns(cmd: dict[str, Any]) -> None:
    backend = SqlitePersistence(SqliteConfig(path=Path(cmd["path"])))
    ack = os.open(cmd["ack"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    await backend.create(meta(cmd["id"]))
    os.write(ack, b"ready\n")
    for index, records in enumerate(turns(cmd["turns"], seed=cmd["seed"], big=True)):
        await backend.append(cmd["id"], records)
        os.write(ack, f"{index + 1}\n".encode())
    await backend.aclose()


def try_read(path: Path) -> dict[str, Any]:
    """Try to read `path` (or list it, for a directory)."""
    try:
        if path.is_dir():
            os.listdir(path)
        else:
            with open(path, "rb") as file:
                file.read(1)
    except OSError as exc:
        return {"outcome": type(exc).__name__, "message": str(exc)}
    return {"outcome": "ok", "message": ""}


async def once(path: Path) -> dict[str, Any]:
    """Open the database at `path` and append one turn to session "s"."""
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        if not await backend.has("s"):
            await backend.create(meta("s"))
            seq0 = 0
        else:
            await backend.claim("s")
            seq0 = len((await backend.load("s")).events)
        await backend.append("s", turn(seq0, 0, seed=1, tag="once"))
    except TurnkeepError as exc:
        return {"outcome": type(exc).__name__, "message": str(exc)}
    except Exception as exc:
        return {"outcome": f"untyped {type(exc).__name__}", "message": str(exc)}
    finally:
        await backend.aclose()
    return {"outcome": "ok", "message": ""}


def main() -> None:
    if sys.argv[1] in ("once", "read"):
        if len(sys.argv) > 3:
            # Drop to another user after the imports: that user need not be
            # able to reach this interpreter or its packages.
            uid = int(sys.argv[3])
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        path = Path(sys.argv[2])
        result = asyncio.run(once(path)) if sys.argv[1] == "once" else try_read(path)
        sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
        return
    server = Server()
    encoder = msgspec.json.Encoder()
    decoder = msgspec.json.Decoder()
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        cmd = decoder.decode(line)
        if cmd.get("op") == "exit":
            break
        out.write(encoder.encode(server.handle(cmd)) + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
