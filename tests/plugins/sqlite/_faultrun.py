"""Fault-injection trials, run in a subprocess by `test_faults.py`.

`python _faultrun.py loop KIND ERRNO DIR [STRIDE]` runs, under the
`faultshim.so` preload, one 50-turn write per k = 1..K (K = the calls of KIND
such a run makes), failing the k-th call once and from then on. Each trial
checks: the failing flush raises `StorageError`, or `FlushOutcomeUnknownError`
with its seq range (nothing untyped, nothing silently acknowledged), and a
failed flush that the reload finds in the log was reported as of unknown
outcome, never as a plain `StorageError` (R17); the writer is poisoned (the
next append raises at once, with no further sync or write); a fresh instance
loads a valid log (the ACKed turns, plus at most the failed flush, whole);
the database passes `integrity_check`; and the reopened session takes a new
turn.

`python _faultrun.py read-eio DIR` fails a read during `load`.
`python _faultrun.py syncs DIR` counts the syncs of one turn on a held
session, and of claim + the same turn + release (a request's open and close).
`python _faultrun.py rlimit DIR TRIALS SEED` runs plan item 14: each trial
lowers `RLIMIT_FSIZE` to a random size and writes until the kernel refuses.

Each prints one JSON object: counts and a list of violations.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import random
import resource
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import msgspec

from turnkeep.errors import (
    FlushOutcomeUnknownError,
    SessionCorruptError,
    StorageError,
    TurnkeepError,
)
from turnkeep.meta import SessionHeader, SessionMeta
from turnkeep_sqlite import SqliteConfig, SqlitePersistence

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # for `tests.support`
from tests.support.workload import SQLITE_WORKLOAD

KINDS = {"sync": 0, "write": 1, "read": 2}
TURNS = 50
WORKLOAD = SQLITE_WORKLOAD.turns(TURNS + 1, seed=7)
BOUNDARIES = [0]
for _t in WORKLOAD:
    BOUNDARIES.append(BOUNDARIES[-1] + len(_t))
RAWS = [r.raw for t in WORKLOAD for r in t]


def meta() -> SessionMeta:
    return SessionMeta(header=SessionHeader(id="s", created_at=1))


class Shim:
    def __init__(self) -> None:
        lib = ctypes.CDLL(None)
        self.arm = lib.faultshim_arm
        self.arm.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int, ctypes.c_int]
        self.disarm = lib.faultshim_disarm
        self.fake_sync = lib.faultshim_fake_sync
        self.count = lib.faultshim_count
        self.count.restype = ctypes.c_long
        self.tripped = lib.faultshim_tripped


async def write_run(
    path: Path, *, before_writes: Any = None
) -> tuple[int, BaseException | None, SqlitePersistence]:
    backend = SqlitePersistence(SqliteConfig(path=path, busy_timeout_ms=2000))
    await backend.create(meta())
    if before_writes is not None:
        before_writes()
    acked = 0
    for records in WORKLOAD[:TURNS]:
        try:
            await backend.append("s", records)
        except Exception as exc:
            return acked, exc, backend
        acked += 1
    return acked, None, backend


FAILURES = (StorageError, FlushOutcomeUnknownError)


def outcome_problems(acked: int, exc: BaseException, landed: bool) -> list[str]:
    """What is wrong with how the failed flush (turn `acked`) was reported."""
    if isinstance(exc, FlushOutcomeUnknownError):
        flush = WORKLOAD[acked]
        if (exc.first_seq, exc.last_seq) != (flush[0].seq, flush[-1].seq):
            return [f"unknown outcome names seq {exc.first_seq}..{exc.last_seq}"]
        return []
    if landed:
        return [f"the failed flush landed but was reported as {exc!r}"]
    return []


async def verify(
    path: Path, acked: int, failed: bool, exc: BaseException | None = None
) -> list[str]:
    problems: list[str] = []
    backend = SqlitePersistence(SqliteConfig(path=path))
    try:
        events = (await backend.load("s")).events if await backend.has("s") else []
        if len(events) not in BOUNDARIES:
            problems.append(f"partial turn: {len(events)} events")
            return problems
        loaded = BOUNDARIES.index(len(events))
        if not acked <= loaded <= acked + (1 if failed else 0):
            problems.append(f"ACKed {acked} turns, loaded {loaded}")
        if exc is not None:
            problems.extend(outcome_problems(acked, exc, loaded > acked))
        if events != RAWS[: len(events)]:
            problems.append("loaded bytes differ from the written ones")
        if loaded < TURNS + 1 and events:
            await backend.append("s", WORKLOAD[loaded])
            again = (await backend.load("s")).events
            if again != RAWS[: BOUNDARIES[loaded + 1]]:
                problems.append("the reopened session did not take a new turn")
    except TurnkeepError as exc:
        problems.append(f"reopen failed: {exc!r}")
    finally:
        await backend.aclose()
    conn = sqlite3.connect(path)
    try:
        check = conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()
    if check != "ok":
        problems.append(f"integrity_check: {check}")
    return problems


async def loop(
    kind_name: str, errno_name: str, root: Path, stride: int
) -> dict[str, Any]:
    shim = Shim()
    shim.fake_sync(1)
    kind = KINDS[kind_name]
    err = getattr(errno, errno_name)
    acked, exc, backend = await write_run(
        root / "calibrate" / "s.sqlite3",
        before_writes=lambda: shim.arm(kind, 10**9, 0, err),
    )
    calls = shim.count(kind)
    await backend.aclose()
    assert exc is None, exc
    assert acked == TURNS
    violations: list[str] = []
    trials = 0
    for k in range(1, calls + 1, stride):
        for persistent in (0, 1):
            trials += 1
            path = root / f"k{k}-{persistent}" / "s.sqlite3"
            acked, exc, backend = await write_run(
                path, before_writes=lambda k=k, p=persistent: shim.arm(kind, k, p, err)
            )
            label = f"{kind_name}/{errno_name} k={k} persistent={persistent}"
            if exc is None:
                if shim.tripped():
                    violations.append(f"{label}: a failed call went unreported")
            elif not isinstance(exc, FAILURES):
                violations.append(f"{label}: untyped {exc!r}")
            else:
                syncs, writes = shim.count(0), shim.count(1)
                try:
                    await backend.append("s", WORKLOAD[acked])
                    violations.append(f"{label}: not poisoned, a later append worked")
                except StorageError:
                    pass
                if (shim.count(0), shim.count(1)) != (syncs, writes):
                    violations.append(f"{label}: the poisoned writer did I/O again")
            await backend.aclose()
            shim.disarm()
            violations.extend(
                f"{label}: {p}" for p in await verify(path, acked, exc is not None, exc)
            )
    return {"calls": calls, "trials": trials, "violations": violations}


async def read_eio(root: Path) -> dict[str, Any]:
    shim = Shim()
    path = root / "s.sqlite3"
    acked, exc, backend = await write_run(path)
    assert exc is None
    await backend.aclose()
    violations: list[str] = []
    reader = SqlitePersistence(SqliteConfig(path=path))
    try:
        await reader.has("s")  # open first; fail a read of the load itself
        shim.arm(KINDS["read"], 2, 1, errno.EIO)
        try:
            loaded = await reader.load("s")
            violations.append(f"load returned {len(loaded.events)} events despite EIO")
        except (StorageError, SessionCorruptError):
            pass  # SQLite reports some failed reads as a malformed page
        except Exception as exc:
            violations.append(f"untyped {exc!r}")
        shim.disarm()
    finally:
        await reader.aclose()
    violations.extend(await verify(path, acked, False))
    return {"trials": 1, "violations": violations}


async def rlimit(root: Path, trials: int, seed: int) -> dict[str, Any]:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    rnd = random.Random(seed)
    violations: list[str] = []
    refused = 0
    for trial in range(trials):
        path = root / f"t{trial}" / "s.sqlite3"
        limit = rnd.randint(8 * 1024, 256 * 1024)

        def lower(limit: int = limit) -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))

        try:
            acked, exc, backend = await write_run(path, before_writes=lower)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        if exc is not None:
            refused += 1
            if not isinstance(exc, FAILURES):
                violations.append(f"trial {trial} limit {limit}: untyped {exc!r}")
        await backend.aclose()
        violations.extend(
            f"trial {trial} limit {limit}: {p}"
            for p in await verify(path, acked, exc is not None, exc)
        )
    return {"trials": trials, "refused": refused, "violations": violations}


async def syncs(root: Path) -> dict[str, Any]:
    shim = Shim()
    path = root / "s.sqlite3"
    backend = SqlitePersistence(SqliteConfig(path=path))
    await backend.create(meta())
    await backend.append("s", WORKLOAD[0])
    before = shim.count(KINDS["sync"])
    await backend.append("s", WORKLOAD[1])
    turn = shim.count(KINDS["sync"]) - before
    await backend.release("s")
    before = shim.count(KINDS["sync"])
    await backend.claim("s")
    await backend.append("s", WORKLOAD[2])
    await backend.release("s")
    request = shim.count(KINDS["sync"]) - before
    await backend.aclose()
    violations = await verify(path, 3, False)
    return {"turn": turn, "request": request, "violations": violations}


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "syncs":
        result = asyncio.run(syncs(Path(argv[1])))
    elif mode == "loop":
        stride = int(argv[4]) if len(argv) > 4 else 1
        result = asyncio.run(loop(argv[1], argv[2], Path(argv[3]), stride))
    elif mode == "read-eio":
        result = asyncio.run(read_eio(Path(argv[1])))
    else:
        result = asyncio.run(rlimit(Path(argv[1]), int(argv[2]), int(argv[3])))
    sys.stdout.write(msgspec.json.encode(result).decode() + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
