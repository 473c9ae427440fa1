"""Checking and repairing stored sessions: the optional maintenance seam.

`verify_session` checks one stored session through the persistence protocol
(the backend's own integrity checks run inside `load`), then what only core
can check: the header names the session asked for, every event decodes,
`seq` is contiguous, and tool calls and results pair up. It never modifies
anything.

`SessionMaintenance` is an optional protocol for backends whose storage can
hold a torn, unacknowledged tail (files): `inspect_tail` says what the next
append would cut, `repair` cuts it now (quarantining the bytes first). A
backend without it (a database, where a flush is one transaction) has no
tail to repair. Implemented by `turnkeep-jsonl`; consumed by the
`turnkeep verify` and `turnkeep repair` commands.

Retention (`prune`, `run_retention`, `PruneReport`) lives in
`turnkeep.retention` and is importable from here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, TypeAlias, cast, runtime_checkable

import msgspec

from turnkeep.codec import EventCodec
from turnkeep.errors import (
    EventDecodeError,
    SessionCorruptError,
    SessionNotFoundError,
    TurnkeepError,
    UnsupportedFormatError,
)
from turnkeep.events import ToolCall, ToolResult
from turnkeep.persistence import SessionPersistence
from turnkeep.retention import PruneReport, prune, run_retention

__all__ = [
    "Problem",
    "ProblemKind",
    "PruneReport",
    "SessionMaintenance",
    "StoreCheck",
    "TailReport",
    "VerifyReport",
    "prune",
    "run_retention",
    "supports_maintenance",
    "verify_session",
]

ProblemKind: TypeAlias = Literal[
    "missing",
    "corrupt",
    "unsupported-format",
    "undecodable",
    "header-mismatch",
    "orphan-result",
    "duplicate-result",
    "unanswered-call",
    "torn-tail",
    "storage",
]


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    """One thing wrong with a stored session.

    Attributes:
        session_id: the session.
        kind: what kind of problem.
        message: what it means, for a person.
        offset: where (a byte offset or an event index, as the backend
            reports it), when known.
        fatal: the session cannot be loaded because of it.
    """

    session_id: str
    kind: ProblemKind
    message: str
    offset: int | None = None
    fatal: bool = False


class TailReport(msgspec.Struct, frozen=True, kw_only=True):
    """An unacknowledged tail left by a crash.

    Attributes:
        session_id: the session.
        offset: where the tail starts (bytes into the session's log).
        length: how many bytes it holds.
        reason: why it is not part of the acknowledged log.
        quarantine: where the cut bytes were kept (after `repair`).
    """

    session_id: str
    offset: int
    length: int
    reason: str
    quarantine: str | None = None


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of `verify_session`.

    Attributes:
        session_id: the session.
        events: how many events loaded (0 when the session is unloadable).
        problems: what is wrong, first problem first.
        tail: an unacknowledged tail the next append would cut (not a
            problem of acknowledged data).
    """

    session_id: str
    events: int
    problems: list[Problem]
    tail: TailReport | None = None

    @property
    def ok(self) -> bool:
        """Whether nothing is wrong (a torn tail alone is not a problem)."""
        return not self.problems


@runtime_checkable
class SessionMaintenance(Protocol):
    """Optional backend methods for sessions that can hold a torn tail."""

    async def inspect_tail(self, session_id: str) -> TailReport | None:
        """Report the unacknowledged tail the next append would cut. Read-only.

        Raises:
            SessionNotFoundError: nothing is stored under this id.
        """
        ...

    async def repair(self, session_id: str) -> TailReport | None:
        """Quarantine and cut the tail now, under the writer role.

        Never touches acknowledged data. Returns what was cut (with the
        quarantine's location), or `None` when there was nothing to cut.

        Raises:
            SessionLockedError: another process owns the session.
            SessionCorruptError: acknowledged data is damaged (nothing cut).
        """
        ...


def supports_maintenance(backend: object) -> bool:
    """Whether `backend` implements `SessionMaintenance`."""
    return isinstance(backend, SessionMaintenance)


@runtime_checkable
class StoreCheck(Protocol):
    """Optional backend method: what is wrong with the store, not one session."""

    async def store_problems(self) -> list[str]:
        """Describe each problem of the store as a whole (none: `[]`). Read-only.

        `turnkeep verify` reports them beside the sessions' problems: for
        SQLite, schema objects turnkeep did not create (a planted trigger
        runs on every write; a planted table can keep what `delete` removed).
        """
        ...


async def verify_session(
    backend: SessionPersistence, session_id: str, *, codec: EventCodec | None = None
) -> VerifyReport:
    """Check one stored session without changing anything."""
    codec = codec if codec is not None else EventCodec()
    problems: list[Problem] = []
    tail: TailReport | None = None
    try:
        loaded = await backend.load(session_id)
    except SessionNotFoundError as exc:
        problem = Problem(
            session_id=session_id, kind="missing", message=str(exc), fatal=True
        )
        return VerifyReport(session_id=session_id, events=0, problems=[problem])
    except SessionCorruptError as exc:
        problem = Problem(
            session_id=session_id,
            kind="corrupt",
            message=str(exc),
            offset=exc.offset,
            fatal=True,
        )
        return VerifyReport(session_id=session_id, events=0, problems=[problem])
    except UnsupportedFormatError as exc:
        problem = Problem(
            session_id=session_id,
            kind="unsupported-format",
            message=str(exc),
            fatal=True,
        )
        return VerifyReport(session_id=session_id, events=0, problems=[problem])
    except TurnkeepError as exc:
        problem = Problem(
            session_id=session_id, kind="storage", message=str(exc), fatal=True
        )
        return VerifyReport(session_id=session_id, events=0, problems=[problem])
    if loaded.meta.id != session_id:
        problems.append(
            Problem(
                session_id=session_id,
                kind="header-mismatch",
                message=f"the stored header names session {loaded.meta.id!r}",
                fatal=True,
            )
        )
    try:
        events = codec.decode_log(loaded.events, session_id=session_id)
    except (SessionCorruptError, EventDecodeError) as exc:
        offset = exc.offset if isinstance(exc, SessionCorruptError) else None
        problems.append(
            Problem(
                session_id=session_id,
                kind="undecodable",
                message=str(exc),
                offset=offset,
                fatal=True,
            )
        )
        events = []
    problems.extend(_pairing(session_id, events))
    if supports_maintenance(backend):
        tail = await cast("SessionMaintenance", backend).inspect_tail(session_id)
    return VerifyReport(
        session_id=session_id, events=len(loaded.events), problems=problems, tail=tail
    )


def _pairing(session_id: str, events: Sequence[object]) -> list[Problem]:
    problems: list[Problem] = []
    calls: dict[str, int] = {}
    answered: set[str] = set()
    for index, event in enumerate(events):
        if isinstance(event, ToolCall):
            calls.setdefault(event.data.call_id, index)
        elif isinstance(event, ToolResult):
            call_id = event.data.call_id
            if call_id not in calls:
                problems.append(
                    Problem(
                        session_id=session_id,
                        kind="orphan-result",
                        message=f"tool result for {call_id!r} answers no earlier call",
                        offset=index,
                    )
                )
            elif call_id in answered:
                problems.append(
                    Problem(
                        session_id=session_id,
                        kind="duplicate-result",
                        message=f"tool call {call_id!r} has a second result",
                        offset=index,
                    )
                )
            answered.add(call_id)
    last_end = max(
        (i for i, e in enumerate(events) if getattr(e, "type", "") == "turn/end"),
        default=-1,
    )
    for call_id, index in calls.items():
        if call_id not in answered and index < last_end:
            problems.append(
                Problem(
                    session_id=session_id,
                    kind="unanswered-call",
                    message=f"tool call {call_id!r} has no result although its turn "
                    "ended",
                    offset=index,
                )
            )
    return problems
