"""Running one job of a turn, with its audit records (see `turnkeep.audit`).

Owns what a turn records in the audit trail: a recovery that closed or
continued an interrupted turn, and a turn refused because an unknown effect
blocks it (a refused resume is recorded by `turnkeep.agent.auditnotes`, a
resolution by `turnkeep.agent.effects`). Each is recorded after it happened
(a recovery once its events are durable), by this process, through
`turnkeep.auditing.note`: a backend without the capability records nothing,
and a record that cannot be written never fails the turn.
"""

from __future__ import annotations

from turnkeep.agent.auditnotes import note_by
from turnkeep.agent.recovery import RecoveryReport, open_turn
from turnkeep.agent.steps import TurnRunner
from turnkeep.agent.turns import NewTurn, Outcome, RecoverTurn
from turnkeep.errors import EffectBlockedError
from turnkeep.host import Host
from turnkeep.session import Session

__all__ = ["run_job"]


async def run_job(
    host: Host, runner: TurnRunner, session: Session, job: NewTurn | RecoverTurn
) -> Outcome:
    """Recover, or start a new turn (recovering a cut-off one first).

    Raises:
        EffectBlockedError: an unknown effect blocks new turns (recorded).
        Anything the turn raises.
    """
    if isinstance(job, RecoverTurn):
        report, result = await runner.recover(continue_turn=job.continue_turn)
        await _note_recovery(host, report)
        return Outcome(result=result, report=report)
    if open_turn(session.events) is not None:
        report, _ = await runner.recover(continue_turn=False)
        await _note_recovery(host, report)
    try:
        return Outcome(result=await runner.new_turn(job.text))
    except EffectBlockedError as exc:
        await note_by(host, "refusal", session.id, str(exc), {"why": "effect blocked"})
        raise


async def _note_recovery(host: Host, report: RecoveryReport) -> None:
    if report.turn is None:
        return  # nothing was cut off: nothing was done
    detail: dict[str, str | int] = {
        "turn": report.turn,
        "interrupted": len(report.interrupted),
        "rerun": len(report.rerun),
        "continued": "yes" if report.continued else "no",
    }
    reason = f"turn {report.turn} was cut off; recovery closed it"
    if report.continued:
        reason = f"turn {report.turn} was cut off; recovery continued it"
    await note_by(host, "recovery", report.session_id, reason, detail)
