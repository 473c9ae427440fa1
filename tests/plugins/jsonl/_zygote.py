"""A fork server for the JSONL backend's multi-process tests.

Run as `python _zygote.py`: it imports everything once, then reads one JSON
command per line on stdin and answers one JSON line on stdout. Each command
forks fresh children (the zygote holds no thread and no open store, so a
child starts clean in a millisecond) and reports how they ended; the zygote
is their parent, so it is the one that waits for them, stops, continues and
kills them.

Children run a *role* (below) and exit with a code the tests read: 0 done,
3 `SessionLockedError`, 4 `SessionFencedError`, 7 `SessionExistsError`,
8 `FlushOutcomeUnknownError` (its seq range written to `<acks>.unknown`),
5 another turnkeep error, 6 anything else (traceback on stderr). They
acknowledge each durable flush by appending `ACK <n>` to an ack file (never
buffered), after `append` returned.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TESTS))

import msgspec  # noqa: E402

from plugins.jsonl.helpers import MIB, huge_turn, meta, seqs, turn  # noqa: E402
from support.faultyops import NoSyncFileOps  # noqa: E402
from turnkeep.errors import (  # noqa: E402
    FlushOutcomeUnknownError,
    SessionExistsError,
    SessionFencedError,
    SessionLockedError,
    SessionNotFoundError,
    TurnkeepError,
)
from turnkeep_jsonl import FileOps, JsonlPersistence, OsFileOps  # noqa: E402
from turnkeep_jsonl.names import LOCK_SUFFIX, LOCKS_DIR, session_name  # noqa: E402


class PausingFileOps(NoSyncFileOps):
    """Stops the whole process (SIGSTOP) right before or after call `at`."""

    def __init__(self, inner: FileOps, at: int, when: str) -> None:
        self.inner = inner
        self.at = at
        self.when = when
        self.calls = 0

    def _hook(self, phase: str) -> None:
        if phase == "before":
            self.calls += 1
        if self.calls == self.at and phase == self.when:
            os.kill(os.getpid(), signal.SIGSTOP)


def _pausing(name: str) -> Any:
    def call(self: PausingFileOps, *args: Any, **kwargs: Any) -> Any:
        self._hook("before")
        try:
            return getattr(self.inner, name)(*args, **kwargs)
        finally:
            self._hook("after")  # also after a call that failed (ENOENT, ...)

    return call


for _name in (
    "open close pread pwrite fsync fsync_dir ftruncate replace unlink mkdir "
    "fchmod fstat stat flock listdir seek_data".split()
):
    setattr(PausingFileOps, _name, _pausing(_name))


class TearingFileOps(NoSyncFileOps):
    """Dies (SIGKILL) in the middle of its `at`-th write of 1 MiB or more.

    Only the first `keep` bytes of that write reach the file (the pages a
    kernel had copied when the kill came); then the process is killed.
    """

    def __init__(self, at: int, keep: int) -> None:
        self.at = at
        self.keep = keep
        self.large = 0

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        """Write, unless this is the write to tear."""
        if len(data) >= MIB:
            self.large += 1
            if self.large == self.at:
                keep = min(self.keep, len(data) - 1)
                os.pwrite(fd, data[:keep], offset)
                os.kill(os.getpid(), signal.SIGKILL)
        return os.pwrite(fd, data, offset)


def ops_for(cmd: dict[str, Any]) -> FileOps:
    inner: FileOps = OsFileOps() if cmd.get("sync") else NoSyncFileOps()
    if cmd.get("pause_at"):
        return PausingFileOps(inner, cmd["pause_at"], cmd.get("pause_when", "before"))
    return inner


def ack(path: str, *numbers: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"ACK " + " ".join(map(str, numbers)).encode() + b"\n")
    finally:
        os.close(fd)


def note(path: str, text: str) -> None:
    Path(path).write_text(text, encoding="ascii")


def reap(pid: int) -> None:
    os.waitpid(pid, 0)


# -- roles (each runs in a forked child) -------------------------------------------


async def writer(cmd: dict[str, Any]) -> None:
    """Create (or claim) a session and write turns, acknowledging each flush.

    Options: `claim` (and `steal`) instead of creating, `fresh_seq` to go on
    from the stored log, `first` turn index, `alarm_us` to die at a random
    instant, `count_calls` to add the file-system call count to each ack,
    `stop_after_acks` to stop (SIGSTOP) after that many, `release`.
    """
    ops = ops_for(cmd)
    backend = JsonlPersistence(cmd["store"], ops=ops)
    session = cmd["session"]
    seq = cmd.get("seq0", 0)
    if cmd.get("claim"):
        await backend.claim(session, steal=cmd.get("steal", False))
        if cmd.get("fresh_seq"):
            seq = await backend.last_seq(session) + 1
    else:
        await backend.create(meta(session, title=cmd.get("title")))
    if cmd.get("alarm_us"):
        signal.setitimer(signal.ITIMER_REAL, cmd["alarm_us"] / 1e6)  # default: die
    for index in range(cmd.get("first", 0), cmd["turns"]):
        batch = turn(
            seq,
            index,
            seed=cmd["seed"],
            big=cmd.get("big", False),
            tag=cmd.get("tag", ""),
            streamed=cmd.get("streamed", False),
        )
        await backend.append(session, batch)
        seq += seqs(batch)
        if cmd.get("count_calls") and isinstance(ops, PausingFileOps):
            ack(cmd["acks"], index + 1, ops.calls)
        else:
            ack(cmd["acks"], index + 1)
        if cmd.get("stop_after_acks") == index + 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        if cmd.get("update_every") and index % cmd["update_every"] == 0:
            await backend.update(session, meta(session, title=f"t{index}").summary)
    if cmd.get("release", True):
        await backend.aclose()


async def huge_writer(cmd: dict[str, Any]) -> None:
    """Plan item 5: write `turns` turns with replies of 1-8 MiB, acking each.

    With `tear_at`/`keep`, the process kills itself in the middle of its
    `tear_at`-th large write (`TearingFileOps`); without, the test kills it.
    """
    ops: FileOps = NoSyncFileOps()
    if cmd.get("tear_at"):
        ops = TearingFileOps(cmd["tear_at"], cmd["keep"])
    backend = JsonlPersistence(cmd["store"], ops=ops)
    await backend.create(meta("s"))
    seq = 0
    for index in range(cmd["turns"]):
        batch = huge_turn(seq, index, seed=cmd["seed"])
        await backend.append("s", batch)
        seq += len(batch)
        ack(cmd["acks"], index + 1)
    await backend.aclose()


async def reader(cmd: dict[str, Any]) -> None:
    """Plan item 6: load session `s` in a loop while a writer appends to it.

    Each load must be whole flushes of the writer's workload and hold at
    least the flushes acknowledged before it began. Stops once it loaded
    the whole workload (`turns` flushes) and made at least `loads` loads;
    writes how many loads it made to `cmd["result"]`.
    """
    from plugins.jsonl.zygote_client import acks, flushes_in, workload

    backend = JsonlPersistence(cmd["store"], ops=NoSyncFileOps())
    batches = workload(cmd["turns"], seed=cmd["seed"])
    loads = 0
    while True:
        acked = len(acks(Path(cmd["acks"])))
        try:
            loaded = await backend.load("s")
        except SessionNotFoundError:
            if acked:
                raise
            continue  # not created yet
        count = flushes_in(loaded.events, batches)
        if count < acked:
            raise AssertionError(f"load held {count} flushes, {acked} were acked")
        loads += 1
        if count == cmd["turns"] and loads >= cmd.get("loads", 1):
            break
    note(cmd["result"], str(loads))
    await backend.aclose()


async def stealer(cmd: dict[str, Any]) -> None:
    """Take a session over (steal, or remove its lock file) and write turns."""
    if cmd.get("unlink_lock"):
        os.unlink(
            Path(cmd["store"])
            / LOCKS_DIR
            / (session_name(cmd["session"]) + LOCK_SUFFIX)
        )
    backend = JsonlPersistence(cmd["store"], ops=NoSyncFileOps())
    session = cmd["session"]
    await backend.claim(session, steal=not cmd.get("unlink_lock"))
    loaded = await backend.load(session)
    seq = len(loaded.events)
    for index in range(cmd["turns"]):
        batch = turn(seq, index, seed=cmd["seed"], tag="B")
        await backend.append(session, batch)
        seq += len(batch)
        ack(cmd["acks"], index + 1)
    note(cmd["acks"] + ".base", str(len(loaded.events)))
    await backend.aclose()


async def racer(cmd: dict[str, Any]) -> None:
    """Wait at the barrier, then try to become the session's writer.

    Every racer reports its attempt on the `tried` pipe; a winner then waits
    on the `hold` pipe (until every racer tried) before writing, so the
    others always meet a live owner.
    """
    backend = JsonlPersistence(cmd["store"], ops=NoSyncFileOps())
    os.read(cmd["barrier"], 1)
    started = time.monotonic()
    try:
        if cmd["mode"] == "create":
            await backend.create(meta(cmd["session"]))
        else:
            await backend.claim(cmd["session"])
    except (SessionLockedError, SessionExistsError):
        note(cmd["result"], f"{time.monotonic() - started:.6f}")
        os.write(cmd["tried"], b"x")
        raise
    os.write(cmd["tried"], b"x")
    os.read(cmd["hold"], 1)
    seq = (
        0
        if cmd["mode"] == "create"
        else len((await backend.load(cmd["session"])).events)
    )
    await backend.append(cmd["session"], turn(seq, 0, seed=1, tag=cmd["tag"]))
    await backend.aclose()


async def forker(cmd: dict[str, Any]) -> None:
    """Own a session, fork a child that tries to write through our handle.

    The child reports how that went (`ACK 3`: refused as locked), then blocks
    opening the FIFO `cmd["fifo"]` until the test opens it. We release the
    session meanwhile (`ACK 100`) and stop ourselves, so the test can check
    another process gets the session while our child still lives.
    """
    backend = JsonlPersistence(cmd["store"], ops=NoSyncFileOps())
    await backend.claim(cmd["session"])
    tried_read, tried_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 6
        try:
            asyncio.run(backend.append(cmd["session"], turn(0, 0, seed=1, tag="C")))
            code = 0
        except SessionLockedError:
            code = 3
        except BaseException:
            traceback.print_exc()
        ack(cmd["acks"], code)
        os.write(tried_write, b"x")
        fd = os.open(cmd["fifo"], os.O_RDONLY)  # blocks until the test opens it
        os.read(fd, 1)
        os._exit(0)
    os.read(tried_read, 1)  # the child tried while we still held the session
    await backend.aclose()  # must free the session although the child lives on
    ack(cmd["acks"], 100)
    os.kill(os.getpid(), signal.SIGSTOP)
    reap(pid)


async def protocol(cmd: dict[str, Any]) -> None:
    """Plan item 4's workload, every file-system call a pause point.

    Claims `s` (cutting its torn tail and opening an owner epoch), makes two
    flushes each followed by a summary update (sidecar replacement), creates
    session `n` with one flush, releases everything. Acks: 1 and 2 for the
    flushes of `s`, 10 for the flush of `n`. Writes the number of calls made
    to `cmd["calls"]` when it gets to the end (the dry run's count).
    """
    ops = ops_for(cmd)
    backend = JsonlPersistence(cmd["store"], ops=ops)
    await backend.claim("s")
    seq = cmd["seq0"]
    for index in range(2):
        batch = turn(seq, 100 + index, seed=cmd["seed"])
        await backend.append("s", batch)
        seq += len(batch)
        ack(cmd["acks"], index + 1)
        await backend.update("s", meta("s", title=f"new{index}").summary)
    await backend.create(meta("n", title="n0"))
    await backend.append("n", turn(0, 0, seed=cmd["seed"], tag="n"))
    ack(cmd["acks"], 10)
    await backend.aclose()
    if isinstance(ops, PausingFileOps):
        note(cmd["calls"], str(ops.calls))


ROLES = {
    "writer": writer,
    "huge_writer": huge_writer,
    "reader": reader,
    "stealer": stealer,
    "racer": racer,
    "forker": forker,
    "protocol": protocol,
}


def child(cmd: dict[str, Any]) -> None:
    code = 0
    try:
        asyncio.run(ROLES[cmd["role"]](cmd))
    except SessionLockedError:
        code = 3
    except FlushOutcomeUnknownError as exc:
        if cmd.get("acks"):
            Path(cmd["acks"] + ".unknown").write_text(f"{exc.first_seq} {exc.last_seq}")
        code = 8
    except SessionFencedError:
        code = 4
    except SessionExistsError:
        code = 7
    except TurnkeepError:
        traceback.print_exc()
        code = 5
    except BaseException:
        traceback.print_exc()
        code = 6
    sys.stderr.flush()
    os._exit(code)


# -- the server ---------------------------------------------------------------------


def spawn(cmd: dict[str, Any]) -> int:
    pid = os.fork()
    if pid == 0:
        child(cmd)
    return pid


def status(pid: int) -> dict[str, Any]:
    _, raw = os.waitpid(pid, os.WUNTRACED)
    if os.WIFSTOPPED(raw):
        return {"pid": pid, "state": "stopped"}
    if os.WIFSIGNALED(raw):
        return {"pid": pid, "state": "signaled", "signal": os.WTERMSIG(raw)}
    return {"pid": pid, "state": "exited", "code": os.WEXITSTATUS(raw)}


def handle(cmd: dict[str, Any]) -> Any:
    op = cmd["op"]
    if op == "run":  # fork, wait until it exits or stops
        return status(spawn(cmd))
    if op == "start":  # fork, do not wait
        return {"pid": spawn(cmd)}
    if op == "wait":
        return status(cmd["pid"])
    if op == "signal":
        os.kill(cmd["pid"], cmd["signal"])
        if cmd["signal"] == signal.SIGCONT:
            return status(cmd["pid"])
        if cmd["signal"] == signal.SIGKILL:
            return status(cmd["pid"])
        return {}
    if op == "race":
        barrier, tried, hold = os.pipe(), os.pipe(), os.pipe()
        ends = {"barrier": barrier[0], "tried": tried[1], "hold": hold[0]}
        pids = [spawn({**each, **ends}) for each in cmd["racers"]]
        os.write(barrier[1], b"g" * len(pids))
        for _ in pids:
            os.read(tried[0], 1)
        os.write(hold[1], b"h" * len(pids))
        for fd in (*barrier, *tried, *hold):
            os.close(fd)
        return [status(pid) for pid in pids]
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    decoder = msgspec.json.Decoder()
    encoder = msgspec.json.Encoder()
    for line in sys.stdin.buffer:
        cmd = decoder.decode(line)
        if cmd["op"] == "exit":
            break
        try:
            reply = {"ok": handle(cmd)}
        except Exception as exc:
            reply = {"error": repr(exc)}
        sys.stdout.buffer.write(encoder.encode(reply) + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
