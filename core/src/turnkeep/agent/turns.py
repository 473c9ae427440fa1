"""The records of a turn: its result, its running state, its event stream.

Shared by `turnkeep.agent.loop` (admission, cancellation) and `turnkeep.agent.steps`
(what happens inside a turn): `TurnResult` (how a turn ended), `Running`
(the loop's record of a turn in progress), the stable ids of tool calls,
and the texts the loop records for tool calls that did not run to the end.
A running turn's event stream is `turnkeep.agent.streams`.

Call ids are derived from the session id and the call's seq: unique, stable
across crashes, and identical for the same log wherever it is continued, so
a tool can hand them to the outside world as idempotency keys.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Any, Final, Literal, TypeAlias

import attrs
import msgspec

from turnkeep.agent.recovery import RecoveryReport
from turnkeep.errors import ModelError
from turnkeep.events import (
    Manifest,
    SessionEvent,
    TurnEndData,
    TurnFailure,
    TurnStatus,
    TurnUsage,
)
from turnkeep.meta import SessionStatus
from turnkeep.redaction import SecretRedactor
from turnkeep.session import Session

__all__ = [
    "CANCELLED_SAFE_OUTPUT",
    "CANCELLED_UNSAFE_OUTPUT",
    "NOT_DURABLE_OUTPUT",
    "NOT_RUN_CANCELLED_OUTPUT",
    "SUMMARY_STATUS",
    "NewTurn",
    "NotDurable",
    "Outcome",
    "Phase",
    "RecoverTurn",
    "Running",
    "StepCancelled",
    "TurnResult",
    "call_id_for",
    "end_data",
    "failure_of",
    "name_session",
    "request_cancel",
    "uncancel",
    "wait_outcome",
]

Phase: TypeAlias = Literal["admit", "model", "tool", "flush", "between", "end"]
"""Where a running turn is; `cancel` interrupts only `model` and `tool`."""

NOT_DURABLE_OUTPUT: Final = (
    "[not run] The session could not be saved before this tool, which has "
    "outside effects, so it was not executed."
)
NOT_RUN_CANCELLED_OUTPUT: Final = (
    "[not run] The turn was cancelled before this tool started."
)
CANCELLED_UNSAFE_OUTPUT: Final = (
    "[interrupted] The turn was cancelled while this tool ran. Its outcome is "
    "unknown: inspect before repeating it."
)
CANCELLED_SAFE_OUTPUT: Final = (
    "[interrupted] The turn was cancelled while this tool ran. It has no "
    "outside effects and may be run again."
)


SUMMARY_STATUS: Final[dict[TurnStatus, SessionStatus]] = {
    "completed": "idle",
    "cancelled": "idle",
    "failed": "failed",
    "interrupted": "interrupted",
    "budget_exhausted": "idle",
    "timed_out": "idle",
}
"""The session's summary status after a turn that ended with each status."""


def name_session(session: Session, said: str) -> None:
    """Title a session after its first accepted (and redacted) message.

    Taken from the event as appended, so redaction has already run, and cut
    only afterwards, so a cut cannot split a secret past recognition.
    """
    if session.summary.first_prompt is not None:
        return
    first_line = said.strip().splitlines()[0] if said.strip() else ""
    session.set_summary(title=first_line[:80] or None, first_prompt=said[:500])


def call_id_for(session_id: str, seq: int) -> str:
    """The stable id of the tool call at `seq` of session `session_id`."""
    digest = hashlib.blake2b(
        f"{session_id}\x00{seq}".encode(), digest_size=10
    ).hexdigest()
    return f"call_{digest}"


@attrs.frozen
class TurnResult:
    """How a turn ended.

    Attributes:
        session_id: the session.
        turn: the turn number.
        status: `completed`, `failed`, `cancelled` or `interrupted`.
        text: the last assistant message of the turn (may be empty).
        error: why, when `status` is not `completed`.
        start_seq: the seq of the turn's `turn/start`.
        end_seq: the seq of its `turn/end`.
        failure: why a `failed` turn failed, as data (the error's code; for
            a model server's failure its HTTP status, its error code and
            whether a retry may help); `None` for other turns. The same
            record is in the turn's `turn/end`.
    """

    session_id: str
    turn: int
    status: TurnStatus
    text: str = ""
    error: str | None = None
    start_seq: int = 0
    end_seq: int = 0
    failure: TurnFailure | None = None


class StepCancelled(Exception):
    """The turn saw a cancel request at a step boundary."""


class NotDurable(Exception):
    """A durability point before an unsafe tool failed."""

    code = "not-durable"


def end_data(
    turn: int,
    status: TurnStatus,
    error: str | None,
    usage: TurnUsage,
    manifest: Manifest | None,
    failure: TurnFailure | None,
) -> TurnEndData:
    """The payload of a turn's `turn/end` (manifest and failure only when set)."""
    data = TurnEndData(turn=turn, status=status, error=error, usage=usage)
    if manifest:
        data = msgspec.structs.replace(data, manifest=manifest)
    if failure is not None:
        data = msgspec.structs.replace(data, failure=failure)
    return data


def failure_of(exc: BaseException, code: str | None = None) -> TurnFailure:
    """The `TurnFailure` recorded for a turn that `exc` failed.

    Args:
        exc: the error.
        code: the code to record instead of the error's own (for errors
            that are not `turnkeep.errors` classes).
    """
    if isinstance(exc, ModelError):
        return TurnFailure(
            code=code or exc.code,
            status_code=exc.status_code,
            server_code=exc.server_code,
            retryable=exc.retryable,
            attempts=exc.attempts,
        )
    return TurnFailure(code=code or str(getattr(exc, "code", "internal")))


@attrs.define(eq=False)
class Running:
    """The loop's record of a turn in progress on one session.

    Attributes:
        session: the session.
        task: the task running the turn.
        sinks: called with every event the turn appends (streaming).
        flush_watchers: called after every flush the turn makes, whether
            it succeeded or not (committed streams release events then).
        phase: where the turn is.
        cancel_requested: `cancel` was called; the turn stops at the next
            step boundary (or now, if a model call or tool is in flight).
        redactor: the host's builtin redactor, for which the turn holds
            streamed deltas back (`None`: redaction is off).
    """

    session: Session
    task: asyncio.Task[Any] | None = None
    sinks: list[Callable[[SessionEvent], None]] = attrs.field(
        factory=list[Callable[[SessionEvent], None]]
    )
    flush_watchers: list[Callable[[], None]] = attrs.field(
        factory=list[Callable[[], None]]
    )
    phase: Phase = "admit"
    cancel_requested: bool = False
    redactor: SecretRedactor | None = None

    def flushed(self) -> None:
        """Tell the flush watchers that a flush of the turn has ended."""
        for watcher in self.flush_watchers:
            watcher()


@attrs.frozen
class NewTurn:
    """A job for a turn's task: run a new turn with the user's `text`."""

    text: str


@attrs.frozen
class RecoverTurn:
    """A job for a turn's task: recover the open turn (and maybe continue it)."""

    continue_turn: bool


@attrs.frozen
class Outcome:
    """What the task of a turn (or recovery) returns to the loop."""

    result: TurnResult | None = None
    report: RecoveryReport | None = None


def uncancel() -> None:
    """Take back the cancellation the current task received (it was handled)."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def request_cancel(running: Running) -> None:
    """Ask a running turn to stop; interrupt it only where that is safe."""
    if running.cancel_requested or running.task is None:
        return  # one request is enough; a second task.cancel() would linger
    running.cancel_requested = True
    # A model call or a tool is interrupted now; a flush is let finish (the
    # turn stops at the next step boundary), so no durability point is torn.
    if running.phase in ("model", "tool"):
        running.task.cancel()


async def wait_outcome(running: Running) -> Outcome:
    """Wait for a turn's task; if the waiter is cancelled, cancel the turn first."""
    task = running.task
    assert task is not None  # noqa: S101 - set when the turn starts
    try:
        outcome: Outcome = await asyncio.shield(task)
    except asyncio.CancelledError:
        # Our caller was cancelled: end the turn cleanly, then pass it on.
        if not task.done():
            request_cancel(running)
            await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # seen: our caller gets the cancellation
        raise
    return outcome
