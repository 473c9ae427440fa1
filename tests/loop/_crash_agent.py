"""Fork server for the unsafe-tool crash sweep (plan item 35).

Run as `python _crash_agent.py`: reads one batch of trials per line on
stdin (`{"trials": [...]}`) and answers one JSON line with their outcomes.
Each trial runs in a forked child (the server itself holds no event loop,
thread or open store, so children start clean and fast), the trials of a
batch side by side. The child drives a real agent loop over a real backend
until the requested sweep point, reports what it knows there (the target
call id, and what was fsynced so far: the power-loss frontier), and stops
the world; the server then kills it with SIGKILL at once, and reaps it.

Sweep points (see `crash_script.POINTS`) are reached through:
- a `session_event` hook: `before-intent` (the call is appended, not
  flushed) and `after-execution` (the result is appended, not flushed);
- the ledger tool's hooks: `intent-durable`, `during-execution`;
- a wrapper around the backend: `mid-stream` (right after the k-th append
  holding a chunk of the crash turn was acknowledged; `chunks` = k),
  `intent-written` (JSONL: inside the
  intent's flush, at its first fsync, after its writes; SQLite: at the start
  of the intent's append, before its transaction commits, which is the
  state a kill between write and fsync leaves) and `result-durable` (right
  after the append holding the result was acknowledged).

The frontier for the power-loss shim: JSONL, each regular file's size at
its last fsync (every `os.fsync` is observed); SQLite, the `-wal` file's
size after the last acknowledged append or summary update.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import selectors
import signal
import stat
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import attrs  # noqa: E402
import msgspec  # noqa: E402
from tests.loop import crash_script  # noqa: E402
from tests.loop.support import backend_options, inner_factory  # noqa: E402
from tests.support.delegating import Delegating  # noqa: E402

from turnkeep import (  # noqa: E402
    AgentLoop,
    Config,
    Host,
    Session,
    SessionEvent,
    ToolContext,
    hookimpl,
)
from turnkeep.agent.watchdog import Watch  # noqa: E402
from turnkeep.events import (  # noqa: E402
    AssistantChunk,
    ToolCall,
    ToolResult,
    TurnStart,
)
from turnkeep.meta import SessionSummary  # noqa: E402
from turnkeep.persistence import (  # noqa: E402
    EventRecord,
)

_real_fsync = os.fsync
_encoder = msgspec.json.Encoder()


@attrs.define(eq=False)
class Child:
    """The state of one crashing child."""

    cmd: dict[str, Any]
    report_fd: int
    frontier: dict[str, int] = attrs.field(factory=dict[str, int])
    target: str | None = None
    target_seq: int | None = None
    result_seq: int | None = None
    turn: int = 0
    seen: int = 0
    armed: bool = False
    chunk_seqs: set[int] = attrs.field(factory=set[int])
    chunk_flushes: int = 0

    @property
    def point(self) -> str:
        return str(self.cmd["point"])

    def report(self, message: dict[str, Any]) -> None:
        os.write(self.report_fd, _encoder.encode(message) + b"\n")

    def stop(self, where: str) -> NoReturn:
        """Report the sweep point, then wait for SIGKILL."""
        self.report({"at": where, "target": self.target, "frontier": self.frontier})
        read_end, _write_end = os.pipe()
        os.read(read_end, 1)  # nothing is ever written: blocks until killed
        raise AssertionError("unreachable")

    # -- fsync observation (JSONL frontier and the intent-written point) -----

    def fsync(self, fd: int) -> None:
        if self.armed:
            self.armed = False
            self.stop("intent-written")
        _real_fsync(fd)
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            self.frontier[os.readlink(f"/proc/self/fd/{fd}")] = info.st_size

    def note_wal(self) -> None:
        wal = Path(backend_options("sqlite", Path(self.cmd["root"]))["path"] + "-wal")
        with contextlib.suppress(FileNotFoundError):
            self.frontier[str(wal)] = wal.stat().st_size

    # -- session events --------------------------------------------------------

    @hookimpl
    def session_event(self, session: Session, event: SessionEvent) -> None:
        if isinstance(event, TurnStart):
            self.turn = event.data.turn
        elif isinstance(event, AssistantChunk) and self.turn == self.cmd["prior"] + 1:
            self.chunk_seqs.add(event.seq)
        elif (
            isinstance(event, ToolCall)
            and event.data.name == "ledger_write"
            and self.turn == self.cmd["prior"] + 1
        ):
            self.seen += 1
            if self.seen == self.cmd["target"]:
                self.target = event.data.call_id
                self.target_seq = event.seq
                if self.point == "before-intent":
                    self.stop("before-intent")
        elif isinstance(event, ToolResult) and event.data.call_id == self.target:
            self.result_seq = event.seq
            if self.point == "after-execution":
                self.stop("after-execution")

    # -- the ledger tool's hooks -------------------------------------------------

    def before_effect(self, context: ToolContext) -> None:
        if context.call_id == self.target and self.point == "intent-durable":
            self.stop("intent-durable")

    def after_effect(self, context: ToolContext) -> None:
        if context.call_id == self.target and self.point == "during-execution":
            self.stop("during-execution")


@attrs.define(eq=False)
class Traced(Delegating):
    """The real backend, observed at the intent's and the result's appends."""

    child: Child
    backend: str

    async def append(self, session_id: str, events: Sequence[EventRecord]) -> None:
        child = self.child
        seqs = {e.seq for e in events}
        if child.target_seq in seqs and child.point == "intent-written":
            if self.backend == "sqlite":
                child.stop("intent-written")
            child.armed = True
        await self.inner.append(session_id, events)
        child.armed = False
        if self.backend == "sqlite":
            child.note_wal()
        if child.result_seq in seqs and child.point == "result-durable":
            child.stop("result-durable")
        if child.point == crash_script.STREAM_POINT and seqs & child.chunk_seqs:
            child.chunk_flushes += 1
            if child.chunk_flushes == child.cmd["chunks"]:
                child.stop(crash_script.STREAM_POINT)

    async def update(self, session_id: str, summary: SessionSummary) -> None:
        await self.inner.update(session_id, summary)
        if self.backend == "sqlite":
            self.child.note_wal()


@attrs.define(eq=False)
class TracedPlugin:
    """Registers backend `traced`: the configured real backend, observed."""

    child: Child

    @hookimpl
    def register_persistence(self, register: Callable[..., None]) -> None:
        cmd = self.child.cmd
        build = inner_factory(cmd["backend"], Path(cmd["root"]))
        register("traced", lambda _config: Traced(build(), self.child, cmd["backend"]))


async def drive(child: Child) -> None:
    cmd = child.cmd
    seed = int(cmd["seed"])
    ledger = Path(cmd["ledger"])
    hooks = crash_script.Hooks(
        before_effect=child.before_effect, after_effect=child.after_effect
    )
    host = Host(
        Config(persistence="traced", plugins="none"),
        plugins=[TracedPlugin(child), child, crash_script.LedgerManifest(ledger)],
    )
    async with host:
        loop = AgentLoop.create(
            "sweep",
            host=host,
            model=crash_script.model(seed),
            tools=[crash_script.LedgerWrite(ledger, hooks), crash_script.Peek(ledger)],
            session_id=cmd["session"],
            instructions=crash_script.INSTRUCTIONS,
            max_steps=crash_script.MAX_STEPS,
            watch=Watch(stream_flush_seconds=crash_script.STREAM_FLUSH_SECONDS)
            if child.point == crash_script.STREAM_POINT
            else None,
        )
        for turn in range(1, cmd["prior"] + 2):
            await loop.run_turn(f"turn {turn}")
    child.report({"done": True, "target": child.target})


def run_child(cmd: dict[str, Any], report_fd: int) -> None:
    child = Child(cmd, report_fd)
    if cmd["backend"] == "jsonl":
        os.fsync = child.fsync
    try:
        asyncio.run(drive(child))
    except BaseException:
        child.report({"error": traceback.format_exc()})
        raise


def start(cmd: dict[str, Any]) -> tuple[int, int]:
    """Fork the child of one trial; return its pid and its report pipe."""
    read_fd, write_fd = os.pipe()
    log = os.open(cmd["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_fd)
            os.dup2(log, 1)
            os.dup2(log, 2)
            run_child(cmd, write_fd)
        except BaseException:  # the child must never return into the server
            code = 3
        finally:
            os._exit(code)
    os.close(write_fd)
    os.close(log)
    return pid, read_fd


def batch(cmds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run trials side by side: each child is killed as soon as it reports."""
    started = [start(cmd) for cmd in cmds]
    replies: list[dict[str, Any]] = [{} for _ in cmds]
    with selectors.DefaultSelector() as selector:
        for index, (_pid, fd) in enumerate(started):
            selector.register(fd, selectors.EVENT_READ, index)
        buffers = [b""] * len(cmds)
        waiting = len(cmds)
        while waiting:
            for key, _mask in selector.select():
                index = key.data
                pid, fd = started[index]
                chunk = os.read(fd, 65536)
                buffers[index] += chunk
                if chunk and b"\n" not in buffers[index]:
                    continue  # a report longer than one read
                line = buffers[index].split(b"\n", 1)[0]
                reply: dict[str, Any] = (
                    msgspec.json.decode(line) if line else {"error": "died"}
                )
                if "at" in reply:
                    os.kill(pid, signal.SIGKILL)  # the world is stopped at the point
                replies[index] = reply
                selector.unregister(fd)
                os.close(fd)
                waiting -= 1
    for (pid, _fd), reply in zip(started, replies, strict=True):
        _, status = os.waitpid(pid, 0)
        reply["status"] = status
    return replies


def main() -> None:
    # Import the backends once here, so each forked child starts with them.
    for backend in ("turnkeep_jsonl", "turnkeep_sqlite"):
        # Not installed: its trials skip in the test process.
        with contextlib.suppress(ImportError):
            importlib.import_module(backend)
    decoder = msgspec.json.Decoder()
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        cmd: dict[str, Any] = decoder.decode(line)
        if cmd.get("op") == "exit":
            break
        out.write(_encoder.encode(batch(cmd["trials"])) + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
