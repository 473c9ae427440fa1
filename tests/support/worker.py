"""The worker process of the SQLite and PostgreSQL multi-process tests.

Run as `python worker.py BACKEND MODE ...`, BACKEND being `sqlite` or
`postgres` (imported at start, so forked children and workers that drop
privileges have it already). Modes:

- `serve`: reads one JSON command per line on stdin, answers one JSON line
  on stdout. After `open` it keeps one event loop and one backend, so a test
  drives several real processes over one database. Commands:
  - `open`: open the backend, closing the one opened before. SQLite takes
    `path`, PostgreSQL `dsn` and `schema`; both take `options` (more config
    fields). PostgreSQL answers `app`, its connections' `application_name`;
  - `create`, `claim` (`steal`), `append` (turn `turn` of the workload
    seeded `seed`, tagged `tag`, from seq `seq0`; answers its event count),
    `append_many`, `load` (answers the event count), `has`, `release`,
    `close`: the backend's methods. Errors come back by class name, with
    the message; every answer has the call's `elapsed` seconds;
  - `contend`: item 24's per-process load (see `contend`);
  - `fork_writer`: fork a child that writes `turns` turns to a new session,
    appending each acknowledged turn's number to the `ack` file, and stops
    at the first error. The server holds no loop thread and no connection,
    so its children start clean and fast (a fork server for kill tests);
  - `reap`: wait for a forked child, answering its wait status;
  - `exit`: close the backend and stop.
- `pool JSON`: a worker of the worker-pool test (see `pool_worker`).
- `once PATH [UID]`, `read PATH [UID]` (SQLite only): append one turn to the
  database at PATH, or try to read PATH, as user UID if given; print the
  outcome as one JSON line.

Turns come from the backend's workload in `workload.py`, so the test
process regenerates the exact bytes every worker wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Run as a script: make the repository root importable for `tests.support`.
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402
from tests.support.workload import WORKLOADS, Workload, meta, pool_turn  # noqa: E402

from turnkeep.errors import SessionLockedError, TurnkeepError  # noqa: E402
from turnkeep.persistence import SessionPersistence  # noqa: E402

Opened = tuple[SessionPersistence, dict[str, Any]]
"""A backend just opened, and what the `open` command answers about it."""
Opener = Callable[[dict[str, Any]], Opened]
"""Opens a backend from a command naming its store (see `config_fields`)."""

LOCATION = {"sqlite": ("path",), "postgres": ("dsn", "schema")}
"""The command fields that say where each backend's store is."""


def config_fields(backend: str, cmd: dict[str, Any]) -> dict[str, Any]:
    """The backend configuration a command names: its location and `options`."""
    fields = {name: cmd[name] for name in LOCATION[backend]}
    fields.update(cmd.get("options", {}))
    return fields


def opener(backend: str) -> Opener:
    """Import `backend`'s plugin; a function opening it from a command."""
    if backend == "sqlite":
        from turnkeep_sqlite import SqliteConfig, SqlitePersistence

        def open_sqlite(cmd: dict[str, Any]) -> Opened:
            fields = config_fields(backend, cmd)
            fields["path"] = Path(fields["path"])
            return SqlitePersistence(SqliteConfig(**fields)), {}

        return open_sqlite
    if backend == "postgres":
        from turnkeep_postgres import PostgresConfig, PostgresPersistence

        def open_postgres(cmd: dict[str, Any]) -> Opened:
            opened = PostgresPersistence(PostgresConfig(**config_fields(backend, cmd)))
            return opened, {"app": opened.application_name}

        return open_postgres
    raise SystemExit(f"unknown backend {backend!r}: sqlite or postgres")


# -- serve -------------------------------------------------------------------------


class Server:
    """The `serve` loop's state: one event loop, at most one open backend."""

    def __init__(self, open_backend: Opener, workload: Workload) -> None:
        self.open = open_backend
        self.workload = workload
        self.loop = asyncio.new_event_loop()
        self.backend: SessionPersistence | None = None

    def close_backend(self) -> None:
        if self.backend is not None:
            # A PostgreSQL server may be gone; the leases then run out on
            # their own.
            with contextlib.suppress(TurnkeepError):
                self.loop.run_until_complete(self.backend.aclose())

    def shutdown(self) -> None:
        self.close_backend()
        self.loop.close()

    def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        op = cmd["op"]
        if op == "fork_writer":
            return {"pid": fork_writer(self.open, self.workload, cmd)}
        if op == "reap":
            _, status = os.waitpid(cmd["pid"], 0)
            return {"status": status}
        if op == "open":
            self.close_backend()
            self.backend, answer = self.open(cmd)
            return answer
        backend = self.backend
        assert backend is not None, f"{op!r} before `open`"
        started = time.monotonic()
        try:
            result = self.loop.run_until_complete(call(backend, self.workload, op, cmd))
        except TurnkeepError as exc:
            return {
                "error": type(exc).__name__,
                "message": str(exc),
                "elapsed": time.monotonic() - started,
            }
        return {"result": result, "elapsed": time.monotonic() - started}


async def call(
    backend: SessionPersistence, workload: Workload, op: str, cmd: dict[str, Any]
) -> Any:
    """Run one backend command; its answer's `result`."""
    sid = cmd.get("id", "")
    if op == "create":
        await backend.create(meta(sid))
    elif op == "claim":
        await backend.claim(sid, steal=cmd.get("steal", False))
    elif op == "append":
        records = workload.turn(
            cmd["seq0"], cmd["turn"], seed=cmd["seed"], tag=cmd.get("tag", "")
        )
        await backend.append(sid, records)
        return len(records)
    elif op == "append_many":
        return await append_many(backend, workload, cmd)
    elif op == "load":
        return len((await backend.load(sid)).events)
    elif op == "has":
        return await backend.has(sid)
    elif op == "release":
        await backend.release(sid)
    elif op == "close":
        await backend.aclose()
    elif op == "contend":
        return await contend(backend, workload, cmd)
    else:
        raise ValueError(f"unknown op {op!r}")
    return None


async def contend(
    backend: SessionPersistence, workload: Workload, cmd: dict[str, Any]
) -> dict[str, Any]:
    """Item 24's per-process load: flush turns until the deadline.

    A `solo` process owns its own session. A `rival` steals the shared session,
    reloads it, appends, and when fenced steals it back. Every acknowledged
    flush is reported as (first seq, turn index); every error that is not a
    fence is reported too.
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
            records = workload.turn(next_seq, index, seed=seed, tag=tag)
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
    backend: SessionPersistence, workload: Workload, cmd: dict[str, Any]
) -> dict[str, Any]:
    """Append `count` turns in a row; stop at the first refusal and say which."""
    seq, acked, error = cmd["seq0"], 0, None
    for index in range(cmd["start"], cmd["start"] + cmd["count"]):
        records = workload.turn(seq, index, seed=cmd["seed"], tag=cmd["tag"])
        try:
            await backend.append(cmd["id"], records)
        except TurnkeepError as exc:
            error = type(exc).__name__
            break
        seq += len(records)
        acked += 1
    return {"acked": acked, "seq": seq, "error": error}


def fork_writer(
    open_backend: Opener,
    workload: Workload,
    cmd: dict[str, Any],
) -> int:
    """Fork a child writing `turns` turns; each ACK goes to the `ack` file."""
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        asyncio.run(_write_turns(open_backend, workload, cmd))
    except BaseException:  # the child must never return into the server loop
        code = 3
    finally:
        os._exit(code)


async def _write_turns(
    open_backend: Opener,
    workload: Workload,
    cmd: dict[str, Any],
) -> None:
    backend, _ = open_backend(cmd)
    ack = os.open(cmd["ack"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        await backend.create(meta(cmd["id"]))
        os.write(ack, b"ready\n")
        for index, records in enumerate(
            workload.turns(cmd["turns"], seed=cmd["seed"], big=cmd["big"])
        ):
            await backend.append(cmd["id"], records)
            os.write(ack, f"{index + 1}\n".encode())  # after the flush returned
    except TurnkeepError:
        # A write failed (a PostgreSQL server went away): this writer gives
        # up at once, as a writer that dies would (no goodbye to a server
        # that is not there).
        os._exit(3)
    await backend.aclose()


# -- pool --------------------------------------------------------------------------


async def pool_worker(backend: str, cmd: dict[str, Any]) -> None:
    """Drive turns of any session that needs one until every session has enough.

    The worker runs a real `Host` on `backend` (`cmd` names the store as
    `open` does). Prints `claimed <id>` once it holds a session, and `ack
    <id> <turn> <start> <end>` (monotonic seconds: claim held .. flush
    returned) after a turn's flush returned, before releasing the session.
    """
    from turnkeep.config import Config
    from turnkeep.host import Host

    worker, target = cmd["worker"], cmd["turns"]
    per_turn = 5
    rnd = random.Random(cmd["seed"] * 1000 + worker)
    host_config = Config(
        persistence=backend,
        plugins=(backend,),
        backends={backend: config_fields(backend, cmd)},
    )
    out = sys.stdout
    async with Host(host_config) as host:
        store = host.require_persistence()
        while True:
            page = await store.list(limit=1000)
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


# -- once, read (SQLite) -----------------------------------------------------------


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


async def once(open_backend: Opener, workload: Workload, path: Path) -> dict[str, Any]:
    """Open the database at `path` and append one turn to session "s"."""
    backend, _ = open_backend({"path": str(path)})
    try:
        if not await backend.has("s"):
            await backend.create(meta("s"))
            seq0 = 0
        else:
            await backend.claim("s")
            seq0 = len((await backend.load("s")).events)
        await backend.append("s", workload.turn(seq0, 0, seed=1, tag="once"))
    except TurnkeepError as exc:
        return {"outcome": type(exc).__name__, "message": str(exc)}
    except Exception as exc:
        return {"outcome": f"untyped {type(exc).__name__}", "message": str(exc)}
    finally:
        await backend.aclose()
    return {"outcome": "ok", "message": ""}


def main(argv: list[str]) -> None:
    backend, mode, *args = argv
    open_backend = opener(backend)
    workload = WORKLOADS[backend]
    if mode == "pool":
        asyncio.run(pool_worker(backend, msgspec.json.decode(args[0])))
        return
    if mode in ("once", "read"):
        if backend != "sqlite":
            raise SystemExit(f"{mode!r} is a SQLite mode, not one of {backend!r}")
        if len(args) > 1:
            # Drop to another user after the imports: that user need not be
            # able to reach this interpreter or its packages.
            uid = int(args[1])
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        path = Path(args[0])
        result = (
            asyncio.run(once(open_backend, workload, path))
            if mode == "once"
            else try_read(path)
        )
        sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
        return
    if mode != "serve":
        raise SystemExit(f"unknown mode {mode!r}: serve, pool, once or read")
    server = Server(open_backend, workload)
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
    main(sys.argv[1:])
