"""The records of a turn: its result, its running state, its event stream.

Shared by `turnkeep.agent.loop` (admission, cancellation) and `turnkeep.agent.steps`
(what happens inside a turn): `TurnResult` (how a turn ended), `Running`
(the loop's record of a turn in progress), `TurnStream` (a running turn's
events as an async iterator), the stable ids of tool calls, and the texts
the loop records for tool calls that did not run to the end.

Call ids are derived from the session id and the call's seq: unique, stable
across crashes, and identical for the same log wherever it is continued, so
a tool can hand them to the outside world as idempotency keys.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, Literal, TypeAlias

import attrs

from turnkeep.agent.recovery import RecoveryReport
from turnkeep.events import SessionEvent, TurnStatus
from turnkeep.session import Session

__all__ = [
    "CANCELLED_SAFE_OUTPUT",
    "CANCELLED_UNSAFE_OUTPUT",
    "NOT_DURABLE_OUTPUT",
    "NOT_RUN_CANCELLED_OUTPUT",
    "Outcome",
    "Phase",
    "Running",
    "TurnResult",
    "TurnStream",
    "call_id_for",
    "end_stream",
    "request_cancel",
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
    """

    session_id: str
    turn: int
    status: TurnStatus
    text: str = ""
    error: str | None = None
    start_seq: int = 0
    end_seq: int = 0


@attrs.define(eq=False)
class Running:
    """The loop's record of a turn in progress on one session.

    Attributes:
        session: the session.
        task: the task running the turn.
        sinks: called with every event the turn appends (streaming).
        phase: where the turn is.
        cancel_requested: `cancel` was called; the turn stops at the next
            step boundary (or now, if a model call or tool is in flight).
    """

    session: Session
    task: asyncio.Task[Any] | None = None
    sinks: list[Callable[[SessionEvent], None]] = attrs.field(
        factory=list[Callable[[SessionEvent], None]]
    )
    phase: Phase = "admit"
    cancel_requested: bool = False


@attrs.frozen
class Outcome:
    """What the task of a turn (or recovery) returns to the loop."""

    result: TurnResult | None = None
    report: RecoveryReport | None = None


@attrs.define(eq=False)
class TurnStream:
    """The events of one running turn, as an async iterator.

    Made by `AgentLoop.stream_turn`.
    """

    _queue: asyncio.Queue[SessionEvent | None]
    _task: asyncio.Task[Outcome]
    _ended: bool = attrs.field(init=False, default=False)

    def __aiter__(self) -> AsyncIterator[SessionEvent]:
        return self

    async def __anext__(self) -> SessionEvent:
        if self._ended:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is None:
            self._ended = True
            self._task.result()  # raises the turn's error, if any
            raise StopAsyncIteration
        return item

    async def result(self) -> TurnResult:
        """Wait for the turn to end and return its result."""
        outcome = await asyncio.shield(self._task)
        assert outcome.result is not None  # noqa: S101 - a new turn always has one
        return outcome.result


def end_stream(
    queue: asyncio.Queue[SessionEvent | None],
) -> Callable[[asyncio.Task[Outcome]], None]:
    """A done-callback that ends a `TurnStream`'s queue when its turn ends."""

    def done(task: asyncio.Task[Outcome]) -> None:
        queue.put_nowait(None)
        if not task.cancelled():
            # Seen here, so a consumer that stopped iterating early does not
            # leave "Task exception was never retrieved" behind; `result()`
            # still raises it.
            task.exception()

    return done


def request_cancel(running: Running) -> None:
    """Ask a running turn to stop; interrupt it only where that is safe."""
    if running.cancel_requested or running.task is None:
        return  # one request is enough; a second task.cancel() would linger
    running.cancel_requested = True
    # A model call or a tool is interrupted now; a flush is let finish (the
    # turn stops at the next step boundary), so no durability point is torn.
    if running.phase in ("model", "tool"):
        running.task.cancel()
