"""Recovery's unsafe calls: ask the reconcilers, then record what they settled.

A crash leaves the open turn's unsafe calls without a result. Before
recovery answers them, `settle_unknown` asks the host's `reconcile_effect`
implementations about every one of them (all first, so a failing plugin
leaves the log untouched: `EffectReconcileError`), then appends, per call:

- `done(result)`: `effect/resolved` (outcome `done`, by the plugin) and a
  `tool/result` with status `ok` and that result;
- `not_done()`: `effect/resolved` (outcome `not_done`) and a `tool/result`
  with status `error` telling the model the call did not happen and may be
  made again;
- `unknown` (or no answer): the `interrupted` result, as without plugins.

The precedence among several plugins is `turnkeep.effects.decide`'s.

A call whose outcome stays unknown and whose `tool/call` says `on_unknown:
block` (`turnkeep.agent.tools.unknown_policy`) blocks the session: recovery
does not continue its turn, and every new turn is refused with
`EffectBlockedError` before anything is appended, until `resolve_effect`
(`AgentLoop.resolve`, `turnkeep resolve`) records an `effect/resolved`
saying whether it took effect, who says so and why. `unknown_calls` finds
the calls still unknown; it reads each session's log once, then only what
was appended since.
"""

from __future__ import annotations

import contextlib
import getpass
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol, TypeAlias

import attrs

from turnkeep.agent.auditnotes import note_by
from turnkeep.agent.messages import INTERRUPTED_TOOL_OUTPUT
from turnkeep.agent.recovery import RecoveryReport, Settled
from turnkeep.effects import Done, NotDone, Verdict
from turnkeep.errors import (
    CallNotFoundError,
    EffectBlockedError,
    EffectNotUnknownError,
    EffectReconcileError,
    EventRejectedError,
    TurnInProgressError,
    TurnkeepError,
)
from turnkeep.events import (
    AssistantChunk,
    EffectResolved,
    EffectResolvedData,
    SessionEvent,
    ToolCall,
    ToolResult,
    ToolResultStatus,
)
from turnkeep.host import Host
from turnkeep.owners import current_identity
from turnkeep.session import Session

__all__ = [
    "NOT_DONE_OUTPUT",
    "RECONCILED_BY",
    "Reconciler",
    "UnknownCall",
    "blocking_calls",
    "recover_or_let_go",
    "refuse_if_blocked",
    "resolve_effect",
    "resolve_in_loop",
    "settle_unknown",
    "unknown_calls",
]

NOT_DONE_OUTPUT: Final = (
    "[not done] This tool call was started but the session stopped before its "
    "result was recorded; a check after the restart found that it did not take "
    "effect. It may be called again."
)
"""The result of a call a reconciler found had not happened."""

RECONCILED_BY: Final = "reconcile_effect:"
"""Prefix of `effect/resolved.by` when recovery's reconcilers settled it."""

Reconciler: TypeAlias = Callable[[Session, ToolCall], Awaitable[Verdict]]
"""Asks every reconciler about one call (`Host.reconcile_effect`)."""


async def settle_unknown(
    session: Session,
    calls: Sequence[ToolCall],
    reconcile: Reconciler,
    emit: Callable[[object], SessionEvent],
    result: Callable[[str, str, ToolResultStatus], None],
) -> Settled:
    """Reconcile `calls`, then answer each (see the module docstring).

    Raises:
        EffectReconcileError: a reconciler failed; nothing was appended.
    """
    # Every answer first: a failing plugin must leave nothing half-written.
    verdicts = [(call, await reconcile(session, call)) for call in calls]
    interrupted: list[str] = []
    done: list[str] = []
    not_done: list[str] = []
    by: dict[str, str] = {}
    notes: dict[str, str] = {}
    for call, verdict in verdicts:
        call_id, outcome = call.data.call_id, verdict.outcome
        if isinstance(outcome, Done | NotDone) and verdict.by is not None:
            kind = "done" if isinstance(outcome, Done) else "not_done"
            text = outcome.result if isinstance(outcome, Done) else None
            try:
                emit(
                    EffectResolvedData(
                        call_id=call_id,
                        outcome=kind,
                        result=text,
                        by=RECONCILED_BY + verdict.by,
                        reason="checked during recovery after a crash",
                    )
                )
            except EventRejectedError as exc:
                notes[call_id] = f"its settlement could not be recorded: {exc}"
            else:
                if text is not None:
                    result(call_id, text, "ok")
                    done.append(call_id)
                else:
                    result(call_id, NOT_DONE_OUTPUT, "error")
                    not_done.append(call_id)
                by[call_id] = verdict.by
                continue
        elif verdict.note:
            notes[call_id] = verdict.note
        result(call_id, INTERRUPTED_TOOL_OUTPUT, "interrupted")
        interrupted.append(call_id)
    blocked = tuple(c.call_id for c in unknown_calls(session) if c.blocks)
    return Settled(
        blocked=blocked,
        interrupted=tuple(interrupted),
        done=tuple(done),
        not_done=tuple(not_done),
        by=by,
        notes=notes,
    )


class _Recoverable(Protocol):
    """What `recover_or_let_go` needs of an `AgentLoop`."""

    host: Host
    session_id: str

    async def recover(
        self, session_id: str | None = None, *, continue_turn: bool = False
    ) -> RecoveryReport: ...


async def recover_or_let_go(loop: _Recoverable, continue_turn: bool) -> RecoveryReport:
    """Recover `loop`'s session; if a reconciler fails, close it and re-raise.

    Used by `AgentLoop.resume` and `open`: their caller gets no loop to
    close, so the session they took must not stay held. Nothing was
    appended, so closing stores nothing new.
    """
    try:
        return await loop.recover(continue_turn=continue_turn)
    except EffectReconcileError:
        # The reconciler's error is the one to report, not a failed release.
        with contextlib.suppress(TurnkeepError):
            await loop.host.sessions.close(loop.session_id)
        raise


@attrs.frozen
class UnknownCall:
    """A call whose recorded result says its outcome is unknown, not yet resolved.

    Attributes:
        call_id: the call.
        name: its tool.
        blocks: its `tool/call` says `on_unknown: block`.
    """

    call_id: str
    name: str
    blocks: bool


@attrs.define(eq=False)
class _Scan:
    """What one session's log says about unknown calls, read up to `read`."""

    read: int = 0
    calls: dict[str, ToolCall] = attrs.field(factory=dict[str, ToolCall])
    answered: set[str] = attrs.field(factory=set[str])
    unknown: dict[str, UnknownCall] = attrs.field(factory=dict[str, UnknownCall])
    last: SessionEvent | None = None

    def extend(self, log: Sequence[SessionEvent]) -> None:
        for event in log[self.read :]:
            if type(event) is AssistantChunk:
                continue  # half of a turn's events; the checks below cost more
            if isinstance(event, ToolCall):
                self.calls[event.data.call_id] = event
            elif isinstance(event, ToolResult):
                call_id = event.data.call_id
                call = self.calls.get(call_id)
                if call is None or call_id in self.answered:
                    continue  # a result without a call, or a second one
                self.answered.add(call_id)
                if event.data.status == "interrupted" and call.data.replay != "safe":
                    blocks = call.data.on_unknown == "block"
                    self.unknown[call_id] = UnknownCall(call_id, call.data.name, blocks)
            elif isinstance(event, EffectResolved):
                self.unknown.pop(event.data.call_id, None)
        self.read = len(log)
        self.last = log[-1] if log else None


_scans: Final = weakref.WeakKeyDictionary[Session, _Scan]()


def unknown_calls(session: Session) -> list[UnknownCall]:
    """The session's calls whose outcome is unknown and unresolved, in log order."""
    log = session.events
    scan = _scans.get(session)
    if (
        scan is None
        or len(log) < scan.read
        or (scan.read and log[scan.read - 1] is not scan.last)
    ):
        scan = _scans[session] = _Scan()  # another log than the one read
    scan.extend(log)
    return list(scan.unknown.values())


def blocking_calls(events: Sequence[SessionEvent]) -> list[UnknownCall]:
    """The calls that block a session's next turn, read from its log alone.

    Those recorded as interrupted and not resolved, then those a crash left
    without a result (the open turn's), which recovery will record as
    interrupted unless a `reconcile_effect` hook settles them. For readers
    of a stored log (`turnkeep show`, the service) that hold no `Session`.
    """
    scan = _Scan()
    scan.extend(events)
    pending = [
        UnknownCall(call_id, call.data.name, blocks=True)
        for call_id, call in scan.calls.items()
        if call_id not in scan.answered
        and call.data.replay != "safe"
        and call.data.on_unknown == "block"
    ]
    return [c for c in scan.unknown.values() if c.blocks] + pending


def refuse_if_blocked(session: Session) -> None:
    """Raise `EffectBlockedError` if an unknown call of `session` blocks turns."""
    blocking = [(c.call_id, c.name) for c in unknown_calls(session) if c.blocks]
    if blocking:
        raise EffectBlockedError(session.id, blocking)


async def resolve_effect(
    session: Session,
    call_id: str,
    *,
    done: bool,
    result: str | None = None,
    by: str | None = None,
    reason: str = "",
) -> EffectResolved:
    """Record that call `call_id`, of unknown outcome, did or did not take effect.

    Appends `effect/resolved` and flushes it: durable when this returns. With
    `done`, `result` is what the model is told the call returned (default: a
    sentence saying it took effect); the model's history gains a note at this
    point of the log. `by` defaults to this user, host and process.

    Raises:
        CallNotFoundError: the session has no call `call_id`.
        EffectNotUnknownError: the call's outcome is not unknown (it has a
            result, was resolved already, or its turn was never recovered).
        FlushError: the resolution could not be made durable (it stays in
            memory; the next flush retries).
    """
    unknown = {c.call_id: c for c in unknown_calls(session)}
    if call_id not in unknown:
        if not any(
            isinstance(e, ToolCall) and e.data.call_id == call_id
            for e in session.events
        ):
            raise CallNotFoundError(
                f"session {session.id!r} has no tool call {call_id!r}; "
                "nothing was changed"
            )
        raise EffectNotUnknownError(
            f"call {call_id} of session {session.id!r} is not of unknown outcome "
            "(it has a result, was resolved already, or its turn awaits "
            "recovery); nothing was changed"
        )
    if result is not None and not done:
        raise EffectNotUnknownError("a result is given only for a call that was done")
    text = result if result is not None else (DONE_OUTPUT if done else None)
    event = session.append(
        EffectResolvedData(
            call_id=call_id,
            outcome="done" if done else "not_done",
            result=text,
            by=by if by is not None else _who(),
            reason=reason,
        )
    )
    await session.flush()
    assert isinstance(event, EffectResolved)  # noqa: S101 - its payload's event
    return event


DONE_OUTPUT: Final = "It took effect (confirmed after the interruption)."
"""The result recorded for a call resolved as done without a result text."""


def _who() -> str:
    identity = current_identity()
    return f"{getpass.getuser()}@{identity.host} pid {identity.pid}"


async def resolve_in_loop(
    loop: _Recoverable,
    call_id: str,
    *,
    done: bool,
    result: str | None = None,
    by: str | None = None,
    reason: str = "",
) -> EffectResolved:
    """`AgentLoop.resolve`: settle a call of unknown outcome in the loop's session.

    `done=True` says the call took effect (`result`: what the model is told
    it returned), `done=False` that it did not (the model may call it
    again). Recorded as a durable `effect/resolved` event naming `by` (who:
    default this user, host and pid) and `reason` (why); a session blocked
    by this call accepts turns again once no blocking call is left.

    Raises:
        TurnInProgressError: a turn is running on the session.
        CallNotFoundError, EffectNotUnknownError, FlushError: as
            `resolve_effect`.
    """
    session = loop.host.sessions.get(loop.session_id)
    if session.turn_holder is not None:
        raise TurnInProgressError(
            f"session {session.id!r} is running a turn; resolve calls between "
            "turns (nothing was changed)"
        )
    event = await resolve_effect(
        session, call_id, done=done, result=result, by=by, reason=reason
    )
    await note_by(  # recorded by whoever resolved
        loop.host,
        "resolution",
        session.id,
        reason or f"call {call_id} resolved as {event.data.outcome}",
        {"call": call_id, "outcome": event.data.outcome},
    )
    return event
