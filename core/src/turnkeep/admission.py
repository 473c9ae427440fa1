"""Event admission on a host that stores nothing: the encoding and size rule.

With a persistence plugin active, the write-behind plugin refuses an event
that cannot be encoded, or encodes larger than `max_event_bytes`, as it
snapshots it. A host without persistence registers `EventAdmission` in its
place, so `Session.append` refuses such an event by the same rule either
way: a log that lives in memory never holds an event no backend could store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from turnkeep.hookspecs import hookimpl

if TYPE_CHECKING:
    from turnkeep.codec import EventCodec
    from turnkeep.events import SessionEvent
    from turnkeep.session import Session

__all__ = ["ADMISSION_NAME", "EventAdmission"]

ADMISSION_NAME = "turnkeep.admission"


@attrs.define(eq=False)
class EventAdmission:
    """Refuses unstorable events at their source when nothing persists them."""

    codec: EventCodec

    @hookimpl(tryfirst=True)
    def session_event(self, session: Session, event: SessionEvent) -> None:
        """Encode `event` and drop the bytes: only the refusal matters here.

        Raises:
            EventNotSerializableError: its data cannot be encoded as JSON.
            EventTooLargeError: it encodes larger than `max_event_bytes`.
        """
        del session
        self.codec.snapshot(event)
