"""A test process for the PostgreSQL backend's multi-process tests.

Run as `python _worker.py serve`: reads one JSON command per line on stdin,
answers one JSON line on stdout. After `open` it keeps one event loop and
one backend, so a test drives real processes against one schema. Commands:

- `open`, `create`, `claim`, `append`, `append_many`, `load`, `release`,
  `close`: the backend's methods (errors come back by class name);
- `fork_writer`: fork a child that writes `turns` turns to a new session,
  appending each acknowledged turn's number to an ACK file, and stops at the
  first error. The server process holds no loop and no connection, so its
  children start clean and fast (a fork server for kill tests);
- `reap`: wait for a forked child.

`python _worker.py pool ...` is a worker of the worker-pool test (see
`pool_worker`). The turn generator is deterministic, so the test process
regenerates the exact bytes every worker wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import time
from typing import Any

import msgspec

from turnkeep.codec import EventCodec, EventRecord
from turnkeep.config import Config
from turnkeep.errors import SessionLockedError, TurnkeepError
from turnkeep.events import (
    AssistantMessage,
    AssistantMessageData,
    SessionEvent,
    TurnEnd,
    TurnEndData,
    UserMessage,
    UserMessageData,
)
from turnkeep.host import Host
from turnkeep.meta import SessionHeader, SessionMeta
from turnkeep_postgres import PostgresConfig, PostgresPersistence

CODEC = EventCodec()
T0 = 1_700_000_000_000


def turn(
    seq0: int, index: int, *, seed: int, tag: str = "", big: bool = False
) -> list[EventRecord]:
    """Turn `index` of a seeded workload: 3-8 events (0 B-64 KiB each if `big`)."""
    rnd = random.Random(f"{seed}/{tag}/{index}")
    count = rnd.randint(3, 8)
    events: list[SessionEvent] = []
    for i in range(count):
        size = int(2 ** rnd.uniform(0, 16)) - 1 if big else rnd.randint(0, 120)
        seq = seq0 + i
        text = f"{tag}:{index}:{i}|" + "xé☃"[i % 3] * size
        if i == 0:
            events.append(
                UserMessage(seq=seq, time=T0 + seq, data=UserMessageData(text=text))
            )
        elif i == count - 1:
            events.append(
                TurnEnd(
                    seq=seq,
                    time=T0 + seq,
                    data=TurnEndData(turn=index, status="completed"),
                )
            )
        else:
            events.append(
                AssistantMessage(
                    seq=seq, time=T0 + seq, data=AssistantMessageData(text=text)
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
    """`count` consecutive turns from turn `start` at seq `seq0`."""
    out: list[list[EventRecord]] = []
    for index in range(start, start + count):
        records = turn(seq0, index, seed=seed, tag=tag, big=big)
        seq0 += len(records)
        out.append(records)
    return out


def meta(session_id: str) -> SessionMeta:
    return SessionMeta(header=SessionHeader(id=session_id, created_at=T0))


def config(cmd: dict[str, Any]) -> PostgresConfig:
    return PostgresConfig(
        dsn=cmd["dsn"], schema=cmd["schema"], **cmd.get("options", {})
    )


# -- serve -------------------------------------------------------------------------


class Server:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.backend: PostgresPersistence | None = None

    def shutdown(self) -> None:
        if self.backend is not None:
            # The server may be gone; the leases then run out on their own.
            with contextlib.suppress(TurnkeepError):
                self.loop.run_until_complete(self.backend.aclose())
        self.loop.close()

    def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        op = cmd["op"]
        if op == "fork_writer":
            return {"pid": fork_writer(cmd)}
        if op == "reap":
            _, status = os.waitpid(cmd["pid"], 0)
            return {"status": status}
        if op == "open":
            if self.backend is not None:
                with contextlib.suppress(TurnkeepError):
                    self.loop.run_until_complete(self.backend.aclose())
            self.backend = PostgresPersistence(config(cmd))
            return {"app": self.backend.application_name}
        backend = self.backend
        assert backend is not None
        started = time.monotonic()
        try:
            result = self.loop.run_until_complete(call(backend, op, cmd))
        except TurnkeepError as exc:
            return {
                "error": type(exc).__name__,
                "message": str(exc),
                "elapsed": time.monotonic() - started,
            }
        return {"result": result, "elapsed": time.monotonic() - started}


async def call(backend: PostgresPersistence, op: str, cmd: dict[str, Any]) -> Any:
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
    elif op == "release":
        await backend.release(sid)
    elif op == "close":
        await backend.aclose()
    else:
        raise ValueError(f"unknown op {op!r}")
    return None


async def append_many(
    backend: PostgresPersistence, cmd: dict[str, Any]
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
    """Fork a child writing `turns` turns; each ACK goes to the `ack` file."""
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        asyncio.run(_write_turns(cmd))
    except BaseException:  # the child must never return into the server loop
        code = 3
    finally:
        os._exit(code)


async def _write_turns(cmd: dict[str, Any]) -> None:
    backend = PostgresPersistence(config(cmd))
    ack = os.open(cmd["ack"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        await backend.create(meta(cmd["id"]))
        os.write(ack, b"ready\n")
        for index, records in enumerate(
            turns(cmd["turns"], seed=cmd["seed"], big=cmd["big"])
        ):
            await backend.append(cmd["id"], records)
            os.write(ack, f"{index + 1}\n".encode())  # after the flush returned
    except TurnkeepError:
        # The server went away: this writer gives up at once, as a worker
        # that dies would (no goodbye to a server that is not there).
        os._exit(3)
    await backend.aclose()


# -- pool --------------------------------------------------------------------------


def pool_turn(session: Any, worker: int, number: int) -> None:
    """The events of one worker-pool turn: who drove it and which turn it is."""
    text = f"{session.id}|turn {number}|worker {worker}"
    session.append(UserMessageData(text=text))
    for part in range(3):
        session.append(AssistantMessageData(text=f"{text}|part {part}"))
    session.append(TurnEndData(turn=number, status="completed"))


async def pool_worker(cmd: dict[str, Any]) -> None:
    """Drive turns of any session that needs one until every session has enough.

    Prints `claimed <id>` once it holds a session, and `ack <id> <turn>
    <start> <end>` (monotonic seconds: claim held .. flush returned) after a
    turn's flush returned, before releasing the session.
    """
    worker, target = cmd["worker"], cmd["turns"]
    per_turn = 5
    rnd = random.Random(cmd["seed"] * 1000 + worker)
    options = {"dsn": cmd["dsn"], "schema": cmd["schema"], **cmd.get("options", {})}
    host_config = Config(
        persistence="postgres", plugins=("postgres",), backends={"postgres": options}
    )
    out = sys.stdout
    async with Host(host_config) as host:
        backend = host.require_persistence()
        while True:
            page = await backend.list(limit=1000)
            todo = [
                m.id for m in page.items if m.summary.event_count < target * per_turn
            ]
            if not todo:
                break
            sid = rnd.choice(todo)
            try:
                session = await host.sessions.resume(sid)
            except SessionLockedError:
                await asyncio.sleep(0.005)  # back off: another worker drives it
                continue
            held_at = time.monotonic()
            out.write(f"claimed {sid}\n")
            out.flush()
            number = len(session.events) // per_turn
            if number < target:
                pool_turn(session, worker, number)
                await session.flush()
                out.write(f"ack {sid} {number} {held_at} {time.monotonic()}\n")
                out.flush()
            await host.sessions.close(sid)


def main() -> None:
    if sys.argv[1] == "pool":
        asyncio.run(pool_worker(msgspec.json.decode(sys.argv[2])))
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
    server.shutdown()


if __name__ == "__main__":
    main()
