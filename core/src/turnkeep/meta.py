"""Session metadata: the immutable header and the mutable summary.

Metadata never enters the event log. `SessionHeader` is fixed when a session
is created (id, format version, creation time, working directory, and for a
fork its parent and fork point). `SessionSummary` changes over the session's
life (title, first prompt, status, last update, and the numbers backends keep:
events, turns, bytes) and is what listings show.
`SessionMeta` carries both. All three are msgspec Structs: they go on disk.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

import msgspec

__all__ = [
    "FORMAT_VERSION",
    "PACKS_FORMAT",
    "TURN_END_TYPE",
    "ForkPoint",
    "SessionHeader",
    "SessionMeta",
    "SessionStatus",
    "SessionSummary",
]

FORMAT_VERSION: Final = 3
"""The session format version this code writes and the newest it reads.

1: the first release. 2: the agent loop's `run/context`, `run/instructions`,
`effect/resolved` and `run/drift` events, the `budget_exhausted` and
`timed_out` turn statuses, the `turn/end` `manifest` and partial
`assistant/message`s (a reader of version 1 knows none of them but the
last, whose mark it ignores). 3: packed records (`turnkeep.packs`), one
record standing for a run of streamed chunks. Sessions of older versions
load unchanged; a session keeps the version it was created with, and gets
no packs unless it is of version 3 (so a reader of version 2 still reads
every session it could read before)."""

PACKS_FORMAT: Final = 3
"""The first format version whose sessions may hold packed records."""

TURN_END_TYPE: Final = "turn/end"
"""The event type `SessionSummary.turns` counts (the wire tag of `TurnEnd`)."""

SessionStatus: TypeAlias = Literal["active", "idle", "interrupted", "failed", "closed"]


class ForkPoint(msgspec.Struct, frozen=True, kw_only=True):
    """Where a forked session came from.

    Attributes:
        session_id: the parent session.
        seq: how many of the parent's events the fork inherited (its events
            `0 .. seq-1`).
    """

    session_id: str
    seq: int


class SessionHeader(msgspec.Struct, frozen=True, kw_only=True):
    """What never changes about a session.

    Attributes:
        id: the session id, exactly as the caller gave it.
        format_version: the format the session was written in.
        created_at: epoch milliseconds.
        cwd: the working directory the session belongs to (for grouping).
        parent: for a fork, the parent session and fork point.
    """

    id: str
    format_version: int = FORMAT_VERSION
    created_at: int = 0
    cwd: str | None = None
    parent: ForkPoint | None = None


class SessionSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What listings show, and what may change after creation.

    Attributes:
        updated_at: epoch milliseconds of the last append or update.
        title: a short human title.
        first_prompt: the first user message (truncated by whoever sets it).
        status: where the session stands.
        event_count: how many events are durable (maintained by backends;
            a value passed to `update` is ignored).
        turns: how many of the durable events are `turn/end` events
            (maintained by backends like `event_count`; ignored by `update`).
        size: the total length in bytes of the durable events' stored bytes
            (each `EventRecord.raw`; maintained by backends like
            `event_count`; ignored by `update`).

    `turns` and `size` were added after version 1 shipped; with their
    defaults, summaries stored before them still decode (backends recompute
    the numbers from their logs).
    """

    updated_at: int = 0
    title: str | None = None
    first_prompt: str | None = None
    status: SessionStatus = "active"
    event_count: int = 0
    turns: int = 0
    size: int = 0


class SessionMeta(msgspec.Struct, frozen=True, kw_only=True):
    """A session's header and summary together."""

    header: SessionHeader
    summary: SessionSummary = SessionSummary()

    @property
    def id(self) -> str:
        """The session id (from the header)."""
        return self.header.id
