"""The commit manifest in the agent loop: the world checked on resume, by policy.

Each `turn/end` names the versions of outside state the turn leaves behind
(the `turn_manifest` hook, `turnkeep.manifests`; `TurnRunner` asks for them
when it ends a turn, recovery's included). Used by `AgentLoop.resume` and
`open`, which call `check_and_recover` before recovery runs, so that no
event of this process (recovery's `turn/end` names the world as it is) can
hide a change made while the session was not running:

- the plugins name the world's current versions (`strict`: a failing one
  refuses the resume, as the world cannot be checked);
- they are compared with the ready commit: the manifest of the last
  completed turn (or a later `run/drift`); a failed, cancelled or
  interrupted turn never becomes it;
- a difference the session's own unfinished turn explains (that turn's
  `turn/end` names the world as it is now) is recorded as a `run/drift`
  naming that turn, and the resume goes on whatever the policy;
- on any other difference, `drift="refuse"` (the default) raises
  `ManifestDriftError` with each difference, appends nothing and lets the
  session go; `drift="record"` appends a `run/drift` event naming the
  differences and the world's versions, flushes it, and goes on.

A live loop whose last turn ended unfinished makes the same comparison
before its next turn (`reconcile_warm`) and records the same `run/drift`,
so warm and cold continuation reach the same ready commit.

A log that names no manifest, or a process in which no plugin names
anything, is not checked. A crash inside a turn is checked like any other
resume: the cut-off turn's own calls may be what changed the world, and
only a person (or `record`) can say that is fine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal, Protocol, TypeAlias

from turnkeep.agent.auditnotes import refuse_resume
from turnkeep.agent.effects import recover_or_let_go
from turnkeep.agent.recovery import RecoveryReport
from turnkeep.errors import (
    ConfigurationError,
    ManifestDriftError,
    ManifestHookError,
)
from turnkeep.events import Manifest, RunDrift, RunDriftData, SessionEvent
from turnkeep.host import Host
from turnkeep.manifests import drift_from, last_manifest, needs_reconciling
from turnkeep.session import Session

__all__ = [
    "DriftPolicy",
    "check_and_recover",
    "check_drift",
    "explained",
    "reconcile_warm",
]

DriftPolicy: TypeAlias = Literal["refuse", "record"]
"""What `resume` does when outside state changed since the last manifest:
refuse to resume (`ManifestDriftError`), or record a `run/drift` and go on."""


class _Resumed(Protocol):
    """What `check_and_recover` needs of an `AgentLoop`."""

    host: Host
    session_id: str
    on_event: Callable[[SessionEvent], None] | None

    async def recover(
        self, session_id: str | None = None, *, continue_turn: bool = False
    ) -> RecoveryReport: ...


async def check_drift(
    host: Host,
    session: Session,
    policy: DriftPolicy,
    on_event: Callable[[SessionEvent], None] | None = None,
) -> RunDriftData | None:
    """Compare the world with the session's last committed manifest.

    A difference the session's own unfinished turn explains (it left the
    world at that version: `ManifestDifference.explained_by`) is recorded
    whatever the policy: a cancel or a failure is this session's own act,
    and refusing it would leave the session unable to go on. If every
    difference is so explained, nothing is refused.

    Returns:
        The recorded drift, or `None` when nothing differs or nothing can
        be compared.

    Raises:
        ConfigurationError: `policy` is neither `refuse` nor `record`.
        ManifestHookError: a `turn_manifest` implementation failed.
        ManifestDriftError: the world differs and `policy` is `refuse`.
        FlushError: the recorded drift could not be made durable (it stays
            in memory; the next flush retries it).
    """
    if policy not in ("refuse", "record"):
        raise ConfigurationError(f"drift must be 'refuse' or 'record', got {policy!r}")
    if last_manifest(session.events) is None:
        return None
    current = await host.turn_manifest(session, strict=True)
    if current is None:
        return None
    data = drift_from(session.events, current)
    if data is None:
        return None
    if policy == "refuse" and not explained(data):
        raise ManifestDriftError(session.id, data.differences, data.since_seq)
    event = session.append(data)
    if on_event is not None:
        on_event(event)
    await session.flush()
    return data


def explained(drift: RunDriftData) -> bool:
    """Whether the session's own unfinished turn explains every difference."""
    return all(d.explained_by is not None for d in drift.differences)


async def reconcile_warm(
    session: Session,
    manifest: Callable[[Session], Awaitable[Manifest | None]],
    emit: Callable[[type[RunDrift], RunDriftData], object],
) -> None:
    """Before a live session's next turn, record what its unfinished turn left.

    Only when the last turn ended unfinished naming a manifest and nothing
    was recorded since (a cheap look back to that `turn/end`): the world is
    asked (`manifest`, not strict: a failing plugin is a named gap, as at a
    turn's end) and compared with the ready commit, and any difference is
    appended through `emit(RunDrift, data)` as the `run/drift` a cold resume
    would record.
    A live loop never refused a world between its turns, so a difference
    nothing explains is recorded too. It becomes durable with the turn's
    first flush.
    """
    if not needs_reconciling(session.events):
        return
    current = await manifest(session)
    if current is None:
        return
    drift = drift_from(session.events, current)
    if drift is not None:
        emit(RunDrift, drift)


async def check_and_recover(
    loop: _Resumed, continue_turn: bool, policy: DriftPolicy
) -> RecoveryReport:
    """Check `loop`'s session for drift, then recover it (`recover_or_let_go`).

    A refused or uncheckable resume lets the session go (nothing was
    appended) and re-raises: the caller gets no loop to close.
    """
    host = loop.host
    try:
        session = host.sessions.get(loop.session_id)
        await check_drift(host, session, policy, loop.on_event)
    except (ConfigurationError, ManifestDriftError, ManifestHookError) as exc:
        why = "manifest drift" if isinstance(exc, ManifestDriftError) else None
        await refuse_resume(host, loop.session_id, exc, why)
        raise
    return await recover_or_let_go(loop, continue_turn)
