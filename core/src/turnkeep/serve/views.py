"""What the JSON endpoints return (msgspec Structs, encoded by msgspec).

A session's numbers come from its summary (`usage`: durable events, turns,
stored bytes); the detail view adds what only its log can say: tool calls
by outcome, messages by role, the turn a crash left open and its
unanswered calls. Events travel as their exact stored JSON.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from turnkeep.agent.recovery import open_turn
from turnkeep.events import (
    AssistantMessage,
    SessionEvent,
    ToolCall,
    ToolResult,
    UserMessage,
)
from turnkeep.meta import SessionMeta

__all__ = [
    "CancelView",
    "EventsView",
    "LogView",
    "ParentView",
    "RecoverView",
    "SessionPageView",
    "SessionView",
    "ToolUsage",
    "Usage",
    "log_view",
    "session_view",
]


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """A session's size: durable events, ended turns, stored bytes."""

    events: int
    turns: int
    bytes: int


class ParentView(msgspec.Struct, frozen=True, kw_only=True):
    """Where a fork came from."""

    session_id: str
    seq: int


class SessionView(msgspec.Struct, frozen=True, kw_only=True):
    """One session as listings show it."""

    id: str
    title: str | None
    first_prompt: str | None
    status: str
    created_at: int
    updated_at: int
    cwd: str | None
    parent: ParentView | None
    usage: Usage


class SessionPageView(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /sessions`: one page.

    A page may hold fewer than `limit` sessions (a title search, or a
    status filter whose sessions a liveness probe moved) while
    `next_cursor` says more follow.
    """

    items: list[SessionView]
    next_cursor: str | None


class ToolUsage(msgspec.Struct, frozen=True, kw_only=True):
    """Tool calls by outcome (`unanswered`: no result in the log)."""

    calls: int = 0
    ok: int = 0
    error: int = 0
    interrupted: int = 0
    unanswered: int = 0


class LogView(msgspec.Struct, frozen=True, kw_only=True):
    """What a session's log says beyond its summary."""

    last_seq: int
    user_messages: int
    assistant_messages: int
    tools: ToolUsage
    open_turn: int | None
    interrupted_calls: list[str]


class SessionDetail(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /sessions/{id}`."""

    session: SessionView
    log: LogView


class EventsView(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /sessions/{id}/events`: committed events after a seq.

    `next_after` is the `after` of the next request; `last_seq` the last
    durable seq when this was read.
    """

    events: list[msgspec.Raw]
    next_after: int
    last_seq: int


class RecoveredView(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the sweep did with one session."""

    session_id: str
    action: str
    detail: str | None = None
    error: str | None = None


class CancelView(msgspec.Struct, frozen=True, kw_only=True):
    """`POST /sessions/{id}/cancel`: the request recorded for the session's owner."""

    session_id: str
    request: int
    requested_at: int


class RecoverView(msgspec.Struct, frozen=True, kw_only=True):
    """`POST /recover`."""

    results: list[RecoveredView]


def session_view(meta: SessionMeta) -> SessionView:
    """The listing view of `meta`."""
    header, summary = meta.header, meta.summary
    parent = (
        ParentView(session_id=header.parent.session_id, seq=header.parent.seq)
        if header.parent is not None
        else None
    )
    return SessionView(
        id=header.id,
        title=summary.title,
        first_prompt=summary.first_prompt,
        status=summary.status,
        created_at=header.created_at,
        updated_at=summary.updated_at,
        cwd=header.cwd,
        parent=parent,
        usage=Usage(
            events=summary.event_count, turns=summary.turns, bytes=summary.size
        ),
    )


def log_view(events: Sequence[SessionEvent]) -> LogView:
    """Count what `events` hold (one pass)."""
    users = assistants = calls = 0
    outcomes = {"ok": 0, "error": 0, "interrupted": 0}
    called: set[str] = set()
    answered: set[str] = set()
    for event in events:
        if isinstance(event, UserMessage):
            users += 1
        elif isinstance(event, AssistantMessage):
            assistants += 1
        elif isinstance(event, ToolCall):
            calls += 1
            called.add(event.data.call_id)
        elif isinstance(event, ToolResult) and event.data.call_id not in answered:
            answered.add(event.data.call_id)
            status = event.data.status
            outcomes[status] = outcomes.get(status, 0) + 1
    cut = open_turn(events)
    return LogView(
        last_seq=len(events) - 1,
        user_messages=users,
        assistant_messages=assistants,
        tools=ToolUsage(
            calls=calls,
            ok=outcomes["ok"],
            error=outcomes["error"],
            interrupted=outcomes["interrupted"],
            unanswered=len(called - answered),
        ),
        open_turn=cut.turn if cut is not None else None,
        interrupted_calls=[c.data.call_id for c in cut.unanswered]
        if cut is not None
        else [],
    )
