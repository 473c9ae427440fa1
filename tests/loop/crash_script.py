"""The workload of the unsafe-tool crash sweep (plan item 35), shared by the
crashing child process (`_crash_agent.py`) and the test that recovers.

- `ledger_write` (unsafe) appends its call id to an external side-effect
  ledger file and fsyncs it: the ledger counts real executions.
- `peek` (safe) reads how many entries the ledger has.
- The model is scripted from a seed as a function of the history: turn *t*
  (the number of user messages) follows `plan(seed, t)`, step *s* (assistant
  messages since the user's) asks for that step's calls. So a new process
  continues the plan exactly where the durable log ends.
- `Hooks` lets the child stop the world at a sweep point; in the recovering
  process nothing is hooked, and the tools record every invocation (the spy).
- `LedgerManifest` names the ledger's version (a hash of its entries) in
  every `turn/end`: the ledger is the outside state the turns act on.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from turnkeep import ModelRequest, ToolContext, hookimpl
from turnkeep.events import ReplayPolicy
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel

POINTS: Final = (
    "before-intent",  # the tool/call is appended in memory; no flush yet
    "intent-written",  # the intent's flush wrote, but did not fsync/commit
    "intent-durable",  # the intent is durable; the tool has not started
    "during-execution",  # the tool did its effect (ledger fsynced); not returned
    "after-execution",  # the tool returned; its result is appended in memory only
    "result-durable",  # the flush holding the tool's result returned
)
"""The six crash points of plan item 35, in order."""

STREAM_POINT: Final = "mid-stream"
"""A seventh point, of the partial-reply sweep: the crash turn's first reply
streams with a flush per chunk, and the child dies right after the flush of
one of its chunks was acknowledged (the log ends with durable chunks)."""

STREAM_FLUSH_SECONDS: Final = 1e-9
"""The stream flush interval of `STREAM_POINT` trials: every chunk after the
first is flushed as it arrives."""


def first_reply(turn: int) -> str:
    """The text the first model call of `turn` streams (see `model`: step 0).

    Long enough that the loop releases some of its chunks while it streams
    (redaction holds each back until the text after it decides any secret
    it could be part of), so the partial-reply sweep finds flushes of
    chunks before the reply ends.
    """
    plan_words = " ".join(f"then write entry {i} of the ledger" for i in range(8))
    return f"turn {turn} step 0: first {plan_words}."


INSTRUCTIONS: Final = "Write to the ledger as planned; never write twice."
"""The child's standing instructions (recorded in its run context)."""

MAX_STEPS: Final = 6
"""The child's step budget (recorded in its run context; a plan has at most 4)."""

_real_fsync: Final = os.fsync


def plan(seed: int, turn: int) -> list[list[str]]:
    """The tool calls of each model step of `turn` (the last step says done)."""
    rnd = random.Random(f"{seed}:{turn}")
    steps: list[list[str]] = []
    for _ in range(rnd.randint(1, 3)):
        calls = [rnd.choice(["peek", "ledger_write"]) for _ in range(rnd.randint(1, 2))]
        steps.append(calls)
    if not any("ledger_write" in step for step in steps):
        steps[0].append("ledger_write")
    return steps


def ledger_calls(seed: int, turn: int) -> int:
    """How many `ledger_write` calls turn `turn` of the plan makes."""
    return sum(step.count("ledger_write") for step in plan(seed, turn))


def model(seed: int) -> ScriptedModel:
    """The scripted model that follows `plan`."""

    def pick(request: ModelRequest) -> Reply:
        turn = sum(1 for m in request.messages if m.role == "user")
        step = 0
        for message in reversed(request.messages):
            if message.role == "user":
                break
            step += message.role == "assistant"
        steps = plan(seed, turn)
        if step >= len(steps):
            return Reply(f"turn {turn} done")
        calls = tuple(
            ScriptedCall(name, {"turn": turn, "step": step, "i": i})
            for i, name in enumerate(steps[step])
        )
        text = first_reply(turn) if step == 0 else f"turn {turn} step {step}"
        return Reply(text, calls)

    return ScriptedModel(pick)


@attrs.define(eq=False)
class Hooks:
    """Where the ledger tool lets a crash happen (no-ops unless set)."""

    before_effect: Callable[[ToolContext], None] = lambda _c: None  # pyright: ignore[reportUnknownLambdaType]
    after_effect: Callable[[ToolContext], None] = lambda _c: None  # pyright: ignore[reportUnknownLambdaType]


@attrs.define(eq=False)
class LedgerWrite:
    """Unsafe: append the call id to the ledger, fsynced (one real effect)."""

    ledger: Path
    hooks: Hooks = attrs.Factory(Hooks)
    invoked: list[str] = attrs.field(factory=list[str])
    name: str = "ledger_write"
    description: str = "Record one effect in the ledger."
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )
    replay: ReplayPolicy = "unsafe"

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        self.invoked.append(context.call_id)
        self.hooks.before_effect(context)
        fd = os.open(self.ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, f"{context.call_id}\n".encode())
            _real_fsync(fd)
        finally:
            os.close(fd)
        self.hooks.after_effect(context)
        return f"recorded {context.call_id}"


@attrs.define(eq=False)
class Peek:
    """Safe: report how many effects the ledger holds."""

    ledger: Path
    invoked: list[str] = attrs.field(factory=list[str])
    name: str = "peek"
    description: str = "Count the ledger's entries."
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )
    replay: ReplayPolicy = "safe"

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        self.invoked.append(context.call_id)
        return f"{len(read_ledger(self.ledger))} entries"


def read_ledger(path: Path) -> list[str]:
    """The call ids in the ledger, in order of execution."""
    try:
        return path.read_text().split()
    except FileNotFoundError:
        return []


def ledger_version(entries: Sequence[str]) -> str:
    """The manifest's version of a ledger holding `entries` (in order)."""
    text = "".join(f"{entry}\n" for entry in entries)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@attrs.define(eq=False)
class LedgerManifest:
    """A `turn_manifest` plugin: the ledger's version, as its file holds it."""

    ledger: Path

    def versions(self) -> dict[str, str]:
        return {"ledger": ledger_version(read_ledger(self.ledger))}

    @hookimpl
    def turn_manifest(self) -> dict[str, str]:
        return self.versions()
