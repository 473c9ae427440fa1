"""What the agent layer records in the audit trail, through its host.

Owns the two ways a loop records (`turnkeep.auditing` does the writing):
`note_by` records an action when the host stores anything at all (a host
without persistence has nothing to audit), and `refuse_resume` lets go of
a session whose resume was refused before anything was appended, recording
the refusal when it is one (`why` says which: a changed run context, a
drifted world).
"""

from __future__ import annotations

import contextlib

from turnkeep.audit import AuditAction
from turnkeep.auditing import note
from turnkeep.errors import TurnkeepError
from turnkeep.host import Host

__all__ = ["note_by", "refuse_resume"]


async def note_by(
    host: Host,
    action: AuditAction,
    session_id: str,
    reason: str,
    detail: dict[str, str | int],
) -> None:
    """Record `action` if the host stores sessions (see `turnkeep.auditing.note`)."""
    if host.persistence_name is None:
        return  # nothing stored, nothing to audit
    await note(host.require_persistence(), action, session_id, reason, detail=detail)


async def refuse_resume(
    host: Host, session_id: str, error: TurnkeepError, why: str | None
) -> None:
    """Let the session go as it was loaded; record `error` as a refusal if `why`."""
    if why is not None:
        await note_by(host, "refusal", session_id, str(error), {"why": why})
    # The refusal is the error to report, not a failed release.
    with contextlib.suppress(TurnkeepError):
        await host.sessions.close(session_id)
