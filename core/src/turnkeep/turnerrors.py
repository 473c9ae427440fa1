"""The errors of turns, re-exported by `turnkeep.errors` (import them from there).

A turn refused at admission (`TurnInProgressError`, `TurnNotDurableError`),
a resume refused because the caller's run context differs from the recorded
one (`ContextMismatchError`) or because outside state changed since the
last committed manifest (`ManifestDriftError`), a model or tool that failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from turnkeep.errorbase import TurnkeepError

if TYPE_CHECKING:
    from turnkeep.manifestdata import ManifestDifference

__all__ = [
    "CallNotFoundError",
    "ContextMismatchError",
    "EffectBlockedError",
    "EffectNotUnknownError",
    "EffectReconcileError",
    "ManifestDriftError",
    "ManifestHookError",
    "ModelError",
    "ToolError",
    "TurnError",
    "TurnInProgressError",
    "TurnNotDurableError",
]


class TurnError(TurnkeepError):
    """A turn could not be admitted or completed."""

    code = "turn"


class TurnInProgressError(TurnError, RuntimeError):
    """A turn is already running on this session; nothing was changed."""

    code = "turn-in-progress"


class TurnNotDurableError(TurnError):
    """The previous turn is not durable, so the next one may not start.

    Its events stay in memory, in order; a later flush may still land them.
    """

    code = "turn-not-durable"


class ModelError(TurnError):
    """The model could not produce a reply (a provider error, a finished script).

    The loop ends the turn with status `failed`, this error's message, and
    its fields as the turn's `TurnFailure`.

    Attributes:
        status_code: the HTTP status the model server answered, if any.
        server_code: the server's own error code, if it sent one.
        retryable: trying again may succeed (a rate limit, a server error,
            a broken connection, a timeout).
        attempts: the requests made, retries included (`None`: unknown).
        retry_after: seconds the server asked to wait before trying again.
    """

    code = "model"

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        server_code: str | None = None,
        retryable: bool = False,
        attempts: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.server_code = server_code
        self.retryable = retryable
        self.attempts = attempts
        self.retry_after = retry_after


class ToolError(TurnkeepError):
    """A tool refused its input or failed in a way the loop reports."""

    code = "tool"


class ContextMismatchError(TurnError):
    """A resume was given another run context than the session recorded.

    Nothing was appended and the session was let go. Resume with the
    recorded context, or with `context="override"` to run with the new one
    (the change is recorded before the next model call).

    Attributes:
        session_id: the session.
        differences: one line per difference (`what: recorded ..., given ...`).
    """

    code = "context-mismatch"

    def __init__(self, session_id: str, differences: Sequence[str]) -> None:
        self.session_id = session_id
        self.differences = tuple(differences)
        lines = "\n".join(f"  - {d}" for d in self.differences)
        super().__init__(
            f"session {session_id!r} was run with another context than the one "
            f"given; nothing was changed. Differences:\n{lines}\n"
            'Pass the recorded context, or context="override" to accept the new one.'
        )


class ManifestDriftError(TurnError):
    """Outside state changed since the session's last committed manifest.

    Raised by `AgentLoop.resume` and `open` with `drift="refuse"` (the
    default) before recovery, so nothing was appended and the session was
    let go. Look at what changed; resume with `drift="record"` to go on
    from the world as it is (a `run/drift` event records the change).

    Attributes:
        session_id: the session.
        differences: each name whose version differs (`name`, `recorded`,
            `current`, and `explained_by` where the session's own unfinished
            turn left it so), by name.
        since_seq: seq of the event holding the manifest compared with (the
            ready commit: the last completed turn's `turn/end`, or a later
            `run/drift`).
    """

    code = "manifest-drift"

    def __init__(
        self,
        session_id: str,
        differences: Sequence[ManifestDifference],
        since_seq: int,
    ) -> None:
        self.session_id, self.since_seq = session_id, since_seq
        self.differences = tuple(differences)
        lines = "\n".join(f"  - {d.describe()}" for d in self.differences)
        super().__init__(
            f"session {session_id!r}: outside state changed since the manifest "
            f"committed at seq {since_seq}; nothing was changed. Differences:\n"
            f'{lines}\nResume with drift="record" to go on and record the change.'
        )


class ManifestHookError(TurnError):
    """A `turn_manifest` implementation failed or answered something unusable.

    On resume, nothing was appended and the session was let go (the world
    cannot be checked). At a turn's end it is logged instead, and the
    `turn/end` names only what the other implementations gave.

    Attributes:
        session_id: the session.
        plugin: the implementation's plugin name.
    """

    code = "manifest-hook"

    def __init__(self, session_id: str, plugin: str, why: str) -> None:
        self.session_id, self.plugin = session_id, plugin
        super().__init__(
            f"session {session_id!r}: plugin {plugin!r} could not say the "
            f"versions of outside state (turn_manifest): {why}"
        )


class EffectReconcileError(TurnError):
    """A `reconcile_effect` implementation failed while recovery asked it.

    Nothing was appended: the cut-off turn stays open and its calls
    unanswered, so a later recovery (with the plugin fixed or removed) asks
    again. A loop being resumed lets its session go.

    Attributes:
        session_id: the session.
        call_id: the call it was asked about.
        plugin: the implementation's plugin name.
    """

    code = "effect-reconcile"

    def __init__(self, session_id: str, call_id: str, plugin: str, why: str) -> None:
        self.session_id, self.call_id, self.plugin = session_id, call_id, plugin
        super().__init__(
            f"session {session_id!r}: plugin {plugin!r} failed to reconcile call "
            f"{call_id}: {why}; nothing was changed, recovery can be retried"
        )


class EffectBlockedError(TurnError):
    """A call's outcome is unknown and its tool blocks turns until it is resolved.

    Nothing was appended and no model was asked. Resolve each call with
    `AgentLoop.resolve` or `turnkeep resolve ID CALL --done/--not-done`.

    Attributes:
        session_id: the session.
        call_ids: the unresolved calls, in log order.
    """

    code = "effect-blocked"

    def __init__(self, session_id: str, calls: Sequence[tuple[str, str]]) -> None:
        self.session_id = session_id
        self.call_ids = tuple(c for c, _ in calls)
        named = ", ".join(f"{c} ({name})" for c, name in calls)
        super().__init__(
            f"session {session_id!r} is blocked: the outcome of {named} is "
            "unknown; find out whether it took effect, then resolve it "
            f"(turnkeep resolve {session_id} CALL --done or --not-done)"
        )


class CallNotFoundError(TurnError, LookupError):
    """No `tool/call` of the session has this call id; nothing was changed."""

    code = "call-not-found"


class EffectNotUnknownError(TurnError, ValueError):
    """The call's outcome is not unknown (it has a result, or was resolved)."""

    code = "effect-not-unknown"
