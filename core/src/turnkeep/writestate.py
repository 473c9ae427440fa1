"""What the write-behind knows of one live session: `WriteState`.

Owned here so that the write-behind (`turnkeep.writebehind`) keeps to the
flow of a flush: the per-session cursor and buffer, how an acknowledged
append moves them, and the state a session starts with.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import attrs

from turnkeep.meta import SessionSummary

if TYPE_CHECKING:
    from turnkeep.session import Session

__all__ = ["WriteState", "acknowledge", "initial_state", "same_fields"]


@attrs.define(eq=False)
class WriteState:
    """What the write-behind knows of one live session.

    Invariant: `persisted + len(pending)` events of the session have been
    snapshotted; `persisted` of them are durable.

    Attributes:
        pending: snapshots (encoded bytes) of the events from seq `persisted`
            on, not yet acknowledged by the backend, in seq order.
        persisted: how many events are durable (the write cursor).
        created: the session is in storage (loaded from it, or a flush of it
            landed), so any instance of the backend can take its appends.
        stored_summary: the summary last handed to the backend (by `create`,
            `update` or an `append` that carried it); the session's summary
            is stored again when it is another object (summaries are
            immutable and replaced on change).
        registered_with: the write-behind whose backend instance registered
            the session while nothing of it was durable yet (backends create
            lazily, per instance).
        maybe_landed: an append failed in a way that may still have stored it
            (a lost acknowledgement).
        in_doubt: the first and last seq of a flush whose outcome the
            backend reported unknown, until an append settles it.
        fenced: another process took the session over: nothing this one
            buffers can be stored any more (it may be resumed afresh).
        init: the registration started at `session_created`; a flush awaits
            it first.
        init_owner: the write-behind that started `init`.
        lock: serialises flushes of this session.
    """

    pending: list[bytes] = attrs.field(factory=list[bytes])
    persisted: int = 0
    created: bool = False
    stored_summary: SessionSummary | None = attrs.field(default=None, repr=False)
    registered_with: object | None = attrs.field(default=None, repr=False)
    maybe_landed: bool = False
    in_doubt: tuple[int, int] | None = None
    fenced: bool = False
    init: asyncio.Future[None] | None = None
    init_owner: object | None = attrs.field(default=None, repr=False)
    lock: asyncio.Lock = attrs.Factory(asyncio.Lock)

    @property
    def snapshotted(self) -> int:
        """How many events have been snapshotted (durable or pending)."""
        return self.persisted + len(self.pending)

    def discard_from(self, seq: int) -> None:
        """Drop the snapshots of seq `seq` on (events no longer in the log)."""
        keep = seq - self.persisted
        if 0 <= keep < len(self.pending):
            del self.pending[keep:]


def same_fields(summary: SessionSummary, stored: SessionSummary) -> bool:
    """Whether the fields a caller sets are what the backend already holds."""
    return (
        summary.status == stored.status
        and summary.title == stored.title
        and summary.first_prompt == stored.first_prompt
    )


def acknowledge(writes: WriteState, count: int) -> None:
    """Mark the first `count` pending events durable (an append landed)."""
    del writes.pending[:count]
    writes.persisted += count
    writes.created = True
    writes.maybe_landed = False
    if writes.in_doubt is not None and writes.in_doubt[0] < writes.persisted:
        writes.in_doubt = None  # settled: its events are stored now


def initial_state(session: Session) -> WriteState:
    """The state a session starts with when the write-behind first sees it."""
    if session.origin == "resumed":
        # Its loaded events and summary are what the backend holds.
        return WriteState(
            persisted=session.stored, created=True, stored_summary=session.summary
        )
    # Registration (`create`) stores the summary the session has by then.
    return WriteState(stored_summary=session.summary)
