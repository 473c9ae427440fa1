"""The commit manifest in the agent loop: the world checked on resume, by policy.

Each `turn/end` names the versions of outside state the turn leaves behind
(the `turn_manifest` hook, `turnkeep.manifests`; `TurnRunner` asks for them
when it ends a turn, recovery's included). Used by `AgentLoop.resume` and
`open`, which call `check_and_recover` before recovery runs, so that no
event of this process (recovery's `turn/end` names the world as it is) can
hide a change made while the session was not running:

- the plugins name the world's current versions (`strict`: a failing one
  refuses the resume, as the world cannot be checked);
- they are compared with the manifest the log last committed;
- on a difference, `drift="refuse"` (the default) raises
  `ManifestDriftError` with each difference, appends nothing and lets the
  session go; `drift="record"` appends a `run/drift` event naming the
  differences and the world's versions, flushes it, and goes on.

A log that names no manifest, or a process in which no plugin names
anything, is not checked. A crash inside a turn is checked like any other
resume: the cut-off turn's own calls may be what changed the world, and
only a person (or `record`) can say that is fine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol, TypeAlias

from turnkeep.agent.auditnotes import refuse_resume
from turnkeep.agent.effects import recover_or_let_go
from turnkeep.agent.recovery import RecoveryReport
from turnkeep.errors import (
    ConfigurationError,
    ManifestDriftError,
    ManifestHookError,
)
from turnkeep.events import RunDriftData, SessionEvent
from turnkeep.host import Host
from turnkeep.manifests import differences, last_manifest
from turnkeep.session import Session

__all__ = ["DriftPolicy", "check_and_recover", "check_drift"]

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

    Returns:
        The recorded drift (`record`), or `None` when nothing differs or
        nothing can be compared.

    Raises:
        ConfigurationError: `policy` is neither `refuse` nor `record`.
        ManifestHookError: a `turn_manifest` implementation failed.
        ManifestDriftError: the world differs and `policy` is `refuse`.
        FlushError: the recorded drift could not be made durable (it stays
            in memory; the next flush retries it).
    """
    if policy not in ("refuse", "record"):
        raise ConfigurationError(f"drift must be 'refuse' or 'record', got {policy!r}")
    last = last_manifest(session.events)
    if last is None:
        return None
    current = await host.turn_manifest(session, strict=True)
    if current is None:
        return None
    since, recorded = last
    found = differences(recorded, current)
    if not found:
        return None
    if policy == "refuse":
        raise ManifestDriftError(session.id, found, since)
    data = RunDriftData(since_seq=since, differences=found, manifest=current)
    event = session.append(data)
    if on_event is not None:
        on_event(event)
    await session.flush()
    return data


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
