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
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol, TypeAlias

from turnkeep.agent.messages import INTERRUPTED_TOOL_OUTPUT
from turnkeep.agent.recovery import RecoveryReport, Settled
from turnkeep.effects import Done, NotDone, Verdict
from turnkeep.errors import EffectReconcileError, EventRejectedError, TurnkeepError
from turnkeep.events import (
    EffectResolvedData,
    SessionEvent,
    ToolCall,
    ToolResultStatus,
)
from turnkeep.host import Host
from turnkeep.session import Session

__all__ = [
    "NOT_DONE_OUTPUT",
    "RECONCILED_BY",
    "Reconciler",
    "recover_or_let_go",
    "settle_unknown",
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
    return Settled(
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
