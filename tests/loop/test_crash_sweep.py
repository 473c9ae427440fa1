"""Plan item 35: the unsafe-tool crash sweep, on the JSONL and SQLite backends.

An unsafe tool (`ledger_write`) appends its call id to an external, fsynced
side-effect ledger. A child process (forked by `_crash_agent.py`) runs the
agent over a real backend and is killed with SIGKILL at one of six points
(`crash_script.POINTS`); with the power-loss shim, everything written but
not fsynced when it died is then truncated, zeroed or garbled (JSONL: each
file back to its size at its last fsync; SQLite: the WAL back to its size at
the last acknowledged commit, and the `-shm` index dropped, which is what a
power cut leaves). This process then loads the store (cold), resumes the
session through `AgentLoop.resume` with spy tools, and runs one more turn.
Must hold, in every trial:

- every loaded state pairs each result with exactly one earlier call, and
  only the open turn may have calls without results;
- the ledger holds each call id at most once, and only ids of durable calls
  (an effect never happens before its intent is durable);
- where the target call's intent is durable and its result is not, recovery
  reports it interrupted, and that answer is durable before the next turn;
- recovery never invokes an unsafe tool for a call that is already in the
  log (the spy), while a safe one may be run again;
- after the next turn the log has no open turn and no unanswered call;
- the commit manifest (`crash_script.LedgerManifest`: the ledger's hash):
  every durable `turn/end` (and `run/drift`) names the ledger as it was
  when it was appended; a resume whose ledger differs from the last
  committed manifest is refused (`ManifestDriftError`, the difference
  named, nothing appended), then resumed with `drift="record"` (one
  durable `run/drift` since that manifest); and after the resume the
  last committed manifest names the ledger as it is.

CI: 2 backends x 6 points x 2 crash kinds x `CI_TRIALS` (50) trials, half
the plan's 100 as `docs/reliability.md` allows for the CI tier (about 0.12 s per
trial on one core). Each trial has a seeded shape: 1-2
completed turns first, 1-6 calls per turn, which ledger call of the crash
turn is the target, and whether the cut-off turn is continued or closed.
Soak: `SOAK_TRIALS` per combination (`TURNKEEP_SOAK=1`).

The partial-reply sweep (`crash_script.STREAM_POINT`) kills the child right
after the k-th flush of the crash turn's streamed reply (a flush per chunk):
the chunks that were durable come back as one partial `assistant/message`
after the resume, the model's history shows it as cut off, warm and cold
alike, and the next turn keeps it byte for byte.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import attrs
import msgspec
import pytest
from tests.loop import crash_script
from tests.loop.crash_script import POINTS, read_ledger
from tests.loop.support import (
    BACKENDS,
    backend_host_config,
    backend_options,
    backend_ready_async,
)

from turnkeep import AgentLoop, Host, SessionEvent
from turnkeep.agent import encode_messages
from turnkeep.agent.history import history_of
from turnkeep.agent.messages import derive_messages, partial_content
from turnkeep.agent.recovery import open_turn, pairing_problems
from turnkeep.auditing import read_trail
from turnkeep.errors import ManifestDriftError
from turnkeep.events import (
    AssistantChunk,
    AssistantMessage,
    AssistantMessageData,
    ManifestDifference,
    RunContext,
    RunDrift,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
)
from turnkeep.manifests import last_manifest

CI_TRIALS = int(os.environ.get("TURNKEEP_SWEEP_TRIALS", "50"))
SOAK_TRIALS = 5000
BATCH = 12  # trials run side by side (their fsyncs overlap)
SESSION = "sweep"
SERVER = Path(__file__).with_name("_crash_agent.py")


class Server:
    """The fork server, driven by JSON lines."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def batch(self, trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run trials side by side; each answer says where its child died."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(msgspec.json.encode({"trials": trials}) + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server exited ({self.proc.wait()})")
        replies: list[dict[str, Any]] = msgspec.json.decode(line)
        return replies

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b'{"op": "exit"}\n')
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    started = Server()
    yield started
    started.stop()


def power_loss(
    backend: str, root: Path, frontier: dict[str, int], rng: random.Random
) -> str:
    """Undo what was written after the last fsync; return what was done."""
    done: list[str] = []
    for name, synced in sorted(frontier.items()):
        path = Path(name)
        if not path.exists():
            continue
        size = path.stat().st_size
        if size <= synced:
            continue
        fate = rng.choice(["truncate", "zero", "garbage"])
        with path.open("r+b") as handle:
            if fate == "truncate":
                handle.truncate(synced)
            else:
                handle.seek(synced)
                tail = size - synced
                handle.write(bytes(tail) if fate == "zero" else rng.randbytes(tail))
        done.append(f"{path.name}:{fate}:{size - synced}B")
    if backend == "sqlite":
        shm = Path(backend_options("sqlite", root)["path"] + "-shm")
        shm.unlink(missing_ok=True)
    return ",".join(done) or "nothing unsynced"


def calls_of(events: list[SessionEvent]) -> dict[str, ToolCall]:
    return {e.data.call_id: e for e in events if isinstance(e, ToolCall)}


def results_of(events: list[SessionEvent]) -> dict[str, ToolResult]:
    return {e.data.call_id: e for e in events if isinstance(e, ToolResult)}


async def load(host: Host, session_id: str) -> list[SessionEvent]:
    loaded = await host.require_persistence().load(session_id)
    return host.codec.decode_log(loaded.events, session_id=session_id)


def check_ledger(ledger: list[str], events: list[SessionEvent], where: str) -> None:
    counts = collections.Counter(ledger)
    doubled = {k: v for k, v in counts.items() if v > 1}
    assert not doubled, f"{where}: executed more than once: {doubled}"
    unlogged = set(ledger) - set(calls_of(events))
    assert not unlogged, f"{where}: effects without a durable intent: {unlogged}"


def check_context(events: list[SessionEvent], where: str) -> None:
    """No model output or tool call is durable without a run context before it."""
    seen = False
    for event in events:
        if isinstance(event, RunContext):
            seen = True
        elif isinstance(event, AssistantMessage | AssistantChunk | ToolCall):
            assert seen, f"{where}: seq {event.seq} is durable without its context"


def check_manifests(events: list[SessionEvent], ledger: list[str], where: str) -> None:
    """Each `turn/end` and `run/drift` names the ledger as it was then.

    The ledger grows in the log's call order, so what it held when an event
    was appended is its entries whose call came before that event.
    """
    seq_of = {e.data.call_id: e.seq for e in events if isinstance(e, ToolCall)}
    for event in events:
        if isinstance(event, TurnEnd):
            manifest = event.data.manifest
            assert isinstance(manifest, dict), f"{where}: seq {event.seq} names none"
        elif isinstance(event, RunDrift):
            manifest = event.data.manifest
        else:
            continue
        then = [c for c in ledger if seq_of[c] < event.seq]
        assert ledger[: len(then)] == then, where
        expected = crash_script.ledger_version(then)
        assert manifest == {"ledger": expected}, f"{where}: seq {event.seq}"


async def trail(host: Host, trial: Trial) -> list[tuple[str, int, str]]:
    """The session's audit records but quarantines: action, pid, `detail["why"]`.

    A JSONL log that a power cut left with a torn tail has it moved aside
    when this process claims the session: that quarantine is recorded too,
    by this process, and only then.
    """
    records = await read_trail(host.require_persistence(), SESSION)
    for record in records:
        if record.action == "quarantine":
            assert record.pid == os.getpid(), trial
            assert (trial.backend, trial.kind) == ("jsonl", "power"), trial
    return [
        (r.action, r.pid, str(r.detail.get("why", "")))
        for r in records
        if r.action != "quarantine"
    ]


@attrs.frozen
class Trial:
    """One seeded trial: where to crash and what the workload looks like."""

    backend: str
    point: str
    kind: str
    root: Path
    seed: int
    prior: int
    target: int
    continue_turn: bool
    rng: random.Random = attrs.field(eq=False)
    chunks: int = 0
    """For `STREAM_POINT`: after which flush of the streamed reply to die."""

    @classmethod
    def make(
        cls, backend: str, point: str, kind: str, root: Path, rng: random.Random
    ) -> Trial:
        seed = rng.randrange(2**31)
        prior = rng.randint(1, 2)
        target = rng.randint(1, crash_script.ledger_calls(seed, prior + 1))
        local = random.Random(rng.random())
        chunks = rng.randint(1, 3) if point == crash_script.STREAM_POINT else 0
        return cls(
            backend,
            point,
            kind,
            root,
            seed,
            prior,
            target,
            rng.random() < 0.5,
            local,
            chunks,
        )

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.txt"

    def command(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "root": str(self.root),
            "seed": self.seed,
            "point": self.point,
            "prior": self.prior,
            "target": self.target,
            "session": SESSION,
            "ledger": str(self.ledger),
            "log": str(self.root / "child.log"),
            "chunks": self.chunks,
        }

    def __str__(self) -> str:
        return (
            f"{self.backend}/{self.point}/{self.kind} seed={self.seed} "
            f"prior={self.prior} target={self.target} continue={self.continue_turn}"
            + (f" chunks={self.chunks}" if self.chunks else "")
        )


async def check_trial(trial: Trial, reply: dict[str, Any]) -> None:
    """Recover what the crash left and check every item-35 property."""
    backend, point, kind, root = trial.backend, trial.point, trial.kind, trial.root
    where = str(trial)
    ledger_path = trial.ledger
    session_id = SESSION
    continue_turn = trial.continue_turn
    assert reply.get("at") == point, f"{where}: child said {reply}"
    assert os.WIFSIGNALED(reply["status"]), where
    target_id: str = reply["target"]
    if kind == "power":
        where += " shim=" + power_loss(backend, root, reply["frontier"], trial.rng)

    async with Host(backend_host_config(backend, root)) as host:
        # The state the crash left, read-only (a cold load).
        before = await load(host, session_id)
        assert pairing_problems(before) == [], where
        ledger = read_ledger(ledger_path)
        check_ledger(ledger, before, where)
        intent = target_id in calls_of(before)
        answered = target_id in results_of(before)
        ran = ledger.count(target_id)
        expected_ran = {
            "before-intent": 0,
            "intent-written": 0,
            "intent-durable": 0,
            "during-execution": 1,
            "after-execution": 1,
            "result-durable": 1,
        }[point]
        assert ran == expected_ran, f"{where}: ledger {ledger}"
        if point == "before-intent":
            assert not intent, where
        if point in ("intent-durable", "during-execution", "after-execution"):
            assert intent, f"{where}: an fsynced intent was lost"
            assert not answered, where
        if point == "result-durable":
            assert answered, f"{where}: an acknowledged result was lost"
            assert results_of(before)[target_id].data.status == "ok"
        if point == "intent-written":
            assert not answered, where
            # Written but never fsynced: after a power cut it must be gone (a
            # kill -9 may leave it in the page cache, where it loads as durable
            # and is then reported interrupted, which is still truthful). The
            # SQLite child stops before the intent's transaction commits.
            if kind == "power" or backend == "sqlite":
                assert not intent, f"{where}: an intent never fsynced was loaded"

        # The crashed child took no action the trail records; a cold load
        # (read-only) records nothing either.
        assert await trail(host, trial) == [], where

        # The manifest: the ledger is the outside state the turns act on.
        world = crash_script.LedgerManifest(ledger_path)
        host.register(world)
        check_manifests(before, ledger, where)
        last = last_manifest(before)
        now = world.versions()
        drifted = last is not None and last[1] != now

        # Recovery, with spies in place of the tools.
        ledger_tool = crash_script.LedgerWrite(ledger_path)
        peek = crash_script.Peek(ledger_path)

        async def resume(drift: Literal["refuse", "record"]) -> AgentLoop:
            return await AgentLoop.resume(
                "sweep",
                session_id,
                host=host,
                model=crash_script.model(trial.seed),
                tools=[ledger_tool, peek],
                continue_turn=continue_turn,
                drift=drift,
            )

        if last is not None and drifted:
            with pytest.raises(ManifestDriftError) as refused:
                await resume("refuse")
            assert refused.value.differences == (
                ManifestDifference(
                    name="ledger", recorded=last[1]["ledger"], current=now["ledger"]
                ),
            ), where
            assert refused.value.since_seq == last[0], where
            assert await load(host, session_id) == before, f"{where}: refusal wrote"
            assert ledger_tool.invoked == peek.invoked == [], where
            refusals = [("refusal", os.getpid(), "manifest drift")]
        else:
            refusals = []
        assert await trail(host, trial) == refusals, where
        loop = await resume("record")
        report = loop.recovery
        assert report is not None
        # The run context was durable with the first durable part of a turn,
        # and was restored (the resume passed neither instructions nor budgets).
        check_context(before, where)
        if any(isinstance(e, RunContext) for e in before):
            assert loop.instructions == crash_script.INSTRUCTIONS, where
            assert loop.max_steps == crash_script.MAX_STEPS, where
        logged = calls_of(before)
        unsafe_logged = {i for i, c in logged.items() if c.data.replay == "unsafe"}
        assert not set(ledger_tool.invoked) & unsafe_logged, (
            f"{where}: recovery re-invoked an unsafe call"
        )
        assert set(peek.invoked) & set(logged) <= {
            i for i, c in logged.items() if c.data.replay == "safe"
        }
        if intent and not answered:
            assert target_id in report.interrupted, f"{where}: {report}"
        open_before = open_turn(before)
        assert report.recovered == (open_before is not None), where
        if open_before is not None:
            missing = {c.data.call_id for c in open_before.unanswered}
            assert set(report.interrupted) | set(report.rerun) == missing, where

        # Each interrupted answer is durable before the next turn begins.
        durable = await load(host, session_id)
        assert open_turn(durable) is None, where
        drifts = [e for e in durable[len(before) :] if isinstance(e, RunDrift)]
        if last is not None and drifted:
            [drift] = drifts
            assert drift.data.since_seq == last[0], where
            assert drift.data.manifest == now, where
        else:
            assert drifts == [], where
        if last is not None or report.recovered:
            # What the resume leaves committed names the world as it is (a
            # continued turn may have written to the ledger since `now`).
            committed = last_manifest(durable)
            assert committed is not None, where
            assert committed[1] == world.versions(), where
        check_manifests(durable, read_ledger(ledger_path), where)
        for call_id in report.interrupted:
            assert results_of(durable)[call_id].data.status == "interrupted", where
        # The resuming process recorded the recovery it made (after the
        # refusal, if any), and nothing for a resume that recovered nothing.
        recovered = [("recovery", os.getpid(), "")] if report.recovered else []
        assert await trail(host, trial) == refusals + recovered, where

        result = await loop.run_turn("after the crash")
        assert result.status == "completed", f"{where}: {result}"
        assert result.turn == (
            max(e.data.turn for e in durable if isinstance(e, TurnStart)) + 1
        )
        await loop.close()

    async with Host(backend_host_config(backend, root)) as host:
        final = await load(host, session_id)
    assert pairing_problems(final) == [], where
    assert open_turn(final) is None, where
    assert set(calls_of(final)) == set(results_of(final)), where
    check_context(final, where)
    # The context did not change, so it was recorded once.
    assert sum(isinstance(e, RunContext) for e in final) == 1, where
    check_ledger(read_ledger(ledger_path), final, where)
    check_manifests(final, read_ledger(ledger_path), where)
    assert final[: len(durable)] == durable, f"{where}: durable history rewritten"
    turns = [e.data.turn for e in final if isinstance(e, TurnStart)]
    assert turns == list(range(1, len(turns) + 1)), where


async def check_partial_trial(trial: Trial, reply: dict[str, Any]) -> None:
    """The durable chunks of a reply cut off by the crash stay, as a partial reply."""
    where = str(trial)
    assert reply.get("at") == crash_script.STREAM_POINT, f"{where}: child said {reply}"
    assert os.WIFSIGNALED(reply["status"]), where
    if trial.kind == "power":
        where += " shim=" + power_loss(
            trial.backend, trial.root, reply["frontier"], trial.rng
        )
    async with Host(backend_host_config(trial.backend, trial.root)) as host:
        before = await load(host, SESSION)
        assert pairing_problems(before) == [], where
        ledger = read_ledger(trial.ledger)
        check_ledger(ledger, before, where)
        check_context(before, where)
        # No effect ran in the crash turn before its first reply: no drift.
        world = crash_script.LedgerManifest(trial.ledger)
        host.register(world)
        check_manifests(before, ledger, where)
        last = last_manifest(before)
        assert last is not None, where
        assert last[1] == world.versions(), where
        # Acknowledged chunks survive a power cut: the log ends with them.
        last_start = max(i for i, e in enumerate(before) if isinstance(e, TurnStart))
        crash_turn = before[last_start:]
        tail = "".join(e.data.text for e in crash_turn if isinstance(e, AssistantChunk))
        assert tail, f"{where}: the acknowledged chunks were lost"
        assert isinstance(before[-1], AssistantChunk), where
        streamed = crash_script.first_reply(trial.prior + 1)
        assert streamed.startswith(tail), where

        loop = await AgentLoop.resume(
            "sweep",
            SESSION,
            host=host,
            model=crash_script.model(trial.seed),
            tools=[
                crash_script.LedgerWrite(trial.ledger),
                crash_script.Peek(trial.ledger),
            ],
            continue_turn=trial.continue_turn,
        )
        assert await trail(host, trial) == [("recovery", os.getpid(), "")], where
        session = host.sessions.get(SESSION)
        cut = [
            e.data
            for e in session.events[len(before) :]
            if isinstance(e, AssistantMessage)
        ]
        assert cut[:1] == [AssistantMessageData(text=tail, partial=True)], where
        # The model is told it was cut off, the same warm and cold.
        partial = [m for m in history_of(session) if m.partial]
        assert [m.content for m in partial] == [partial_content(tail)], where
        durable = await load(host, SESSION)
        assert encode_messages(derive_messages(durable)) == encode_messages(
            history_of(session)
        ), where
        result = await loop.run_turn("after the crash")
        assert result.status == "completed", f"{where}: {result}"
        await loop.close()

    async with Host(backend_host_config(trial.backend, trial.root)) as host:
        final = await load(host, SESSION)
    assert final[: len(durable)] == durable, f"{where}: durable history rewritten"
    assert pairing_problems(final) == [], where
    assert open_turn(final) is None, where
    assert [m.content for m in derive_messages(final) if m.partial] == [
        partial_content(tail)
    ], where


async def sweep(
    server: Server,
    backend: str,
    point: str,
    kind: str,
    trials: int,
    rng: random.Random,
    tmp_path: Path,
) -> None:
    await backend_ready_async(backend, tmp_path)
    done = 0
    while done < trials:
        size = min(BATCH, trials - done)
        batch: list[Trial] = []
        for index in range(done, done + size):
            root = tmp_path / f"trial-{index}"
            root.mkdir()
            batch.append(Trial.make(backend, point, kind, root, rng))
        replies = server.batch([t.command() for t in batch])
        check = (
            check_partial_trial if point == crash_script.STREAM_POINT else check_trial
        )
        await asyncio.gather(
            *(check(t, r) for t, r in zip(batch, replies, strict=True))
        )
        done += size


@pytest.mark.crash
@pytest.mark.parametrize("kind", ["kill", "power"])
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_item_35_unsafe_tool_crash_sweep(
    server: Server,
    backend: str,
    point: str,
    kind: str,
    rng: random.Random,
    tmp_path: Path,
) -> None:
    await sweep(server, backend, point, kind, CI_TRIALS, rng, tmp_path)


@pytest.mark.crash
@pytest.mark.parametrize("kind", ["kill", "power"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_partial_reply_crash_sweep(
    server: Server, backend: str, kind: str, rng: random.Random, tmp_path: Path
) -> None:
    await sweep(
        server, backend, crash_script.STREAM_POINT, kind, CI_TRIALS, rng, tmp_path
    )


@pytest.mark.crash
@pytest.mark.soak
@pytest.mark.parametrize("kind", ["kill", "power"])
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_item_35_unsafe_tool_crash_sweep_soak(
    server: Server,
    backend: str,
    point: str,
    kind: str,
    rng: random.Random,
    tmp_path: Path,
) -> None:
    await sweep(server, backend, point, kind, SOAK_TRIALS, rng, tmp_path)
