"""Live sessions and the store that owns them.

A `Session` is an id, an immutable header, a mutable summary and an
append-only list of events. `Session.append` is the hot path of the whole
library: it numbers the event, adds it to the log and emits `session_event`
through the host, which is where a persistence plugin snapshots it. A
`SessionStore` (`turnkeep.store`) creates, forks, resumes and closes them.

What is durable and what is not is the write-behind plugin's to know
(`turnkeep.writebehind`); a session asks its host (`Session.unsaved`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, Protocol, TypeAlias, TypeVar, cast, overload

import attrs
import msgspec

from turnkeep._deprecated import REMOVED_IN, renamed
from turnkeep.clock import Clock
from turnkeep.codec import EventCodec
from turnkeep.errors import (
    EventRejectedError,
    EventTypeError,
    InvalidSummaryError,
    SessionClosedError,
)
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessage,
    AssistantMessageData,
    SessionEvent,
    ToolCall,
    ToolCallData,
    ToolResult,
    ToolResultData,
    TurnCheckpoint,
    TurnCheckpointData,
    TurnEnd,
    TurnEndData,
    TurnStart,
    TurnStartData,
    UserMessage,
    UserMessageData,
)
from turnkeep.lossless import Check
from turnkeep.meta import (
    SessionHeader,
    SessionMeta,
    SessionStatus,
    SessionSummary,
)
from turnkeep.persistence import SessionPersistence

__all__ = ["Session", "SessionHooks", "SessionOrigin"]

E = TypeVar("E", bound=SessionEvent)

_NO_DATA: Final = object()
"""`append`'s second argument when only a payload is given."""

SessionOrigin: TypeAlias = Literal["new", "seeded", "forked", "resumed"]
"""How a live session came to be: its events since seq 0 are new; were given
as a seed; were inherited from a parent; or were loaded from the backend."""


class SessionHooks(Protocol):
    """What sessions need from their host (implemented by `turnkeep.Host`)."""

    @property
    def codec(self) -> EventCodec:
        """The host's event codec."""
        ...

    def emit_session_created(self, session: Session) -> None:
        """Emit `session_created`."""
        ...

    @property
    def session_event_hook(self) -> Callable[..., list[object]]:
        """The `session_event` hook caller (called on the hot path)."""
        ...

    def check_session_event_results(self, results: list[object]) -> None:
        """Refuse awaitables returned by `session_event` implementations."""
        ...

    def event_rejected(self, session: Session, seq: int) -> None:
        """Drop what plugins buffered of an event refused at its source."""
        ...

    def unsaved(self, session: Session) -> int:
        """How many of the session's events are not durable yet."""
        ...

    def is_fenced(self, session: Session) -> bool:
        """Whether another process took the session over from this one."""
        ...

    async def register_session(self, session: Session) -> None:
        """Await the backend's registration of a new session."""
        ...

    @property
    def redactors(self) -> Sequence[object]:
        """The live list of `redact_event` implementations (empty: no cost)."""
        ...

    def redact_event(self, session: Session, event: E, skip: object = None) -> E:
        """Run `redact_event` (but `skip`'s) and return the event to append."""
        ...

    def redact_text(self, text: str) -> str:
        """Run `redact_text` and return the text to keep."""
        ...

    async def flush_session(self, session: Session) -> None:
        """Emit `session_flush` and await every implementation."""
        ...

    async def emit_session_closed(self, session: Session) -> None:
        """Emit `session_closed` and await every implementation."""
        ...

    def require_persistence(self) -> SessionPersistence:
        """Return the active backend or raise `PersistenceNotConfiguredError`."""
        ...


@attrs.define(eq=False)
class Session:
    """One live conversation: an append-only log plus metadata.

    Create sessions through `SessionStore` (usually `host.sessions`). The id
    and the header are fixed for the session's life: neither can be
    reassigned (`AttributeError`), so `session.meta.id == session.id` always.
    """

    _header: SessionHeader = attrs.field(alias="header")
    summary: SessionSummary
    origin: SessionOrigin
    _events: list[SessionEvent] = attrs.field(alias="events", repr=False)
    _hooks: SessionHooks = attrs.field(alias="hooks", repr=False)
    _clock: Clock = attrs.field(alias="clock", repr=False)
    stored: int = 0
    """How many of its events were loaded from storage (0 unless resumed)."""
    closed: bool = attrs.field(default=False, init=False)
    """Set by the store when the session is closed; it then takes no events."""
    turn_holder: object | None = attrs.field(default=None, init=False, repr=False)
    """Set by the agent loop while a turn (or recovery) runs on the session."""
    _emit: Callable[..., list[object]] = attrs.field(init=False, repr=False)

    _redactors: Sequence[object] = attrs.field(init=False, repr=False)
    _kinds: dict[type, type[SessionEvent]] = attrs.field(init=False, repr=False)
    _checks: dict[type, Check] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._emit = self._hooks.session_event_hook
        self._redactors = self._hooks.redactors
        codec = self._hooks.codec
        self._kinds = codec.kinds
        self._checks = codec.checks

    @property
    def id(self) -> str:
        """The session's id (its header's; read-only)."""
        return self._header.id

    @property
    def header(self) -> SessionHeader:
        """The immutable header (read-only: the summary is what changes)."""
        return self._header

    @property
    def events(self) -> Sequence[SessionEvent]:
        """The log, oldest first (read-only view; do not mutate)."""
        return self._events

    @property
    def next_seq(self) -> int:
        """The seq the next appended event will get."""
        return len(self._events)

    @property
    def meta(self) -> SessionMeta:
        """The header and current summary."""
        return SessionMeta(header=self.header, summary=self.summary)

    @property
    def unsaved(self) -> int:
        """How many of its events are not durable yet (the host's answer)."""
        return self._hooks.unsaved(self)

    @property
    def settled(self) -> bool:
        """Whether every event of the log is durable (nothing unsaved)."""
        return self._hooks.unsaved(self) == 0

    @overload
    def append(self, data: TurnStartData, /) -> TurnStart: ...

    @overload
    def append(self, data: UserMessageData, /) -> UserMessage: ...

    @overload
    def append(self, data: AssistantChunkData, /) -> AssistantChunk: ...

    @overload
    def append(self, data: AssistantMessageData, /) -> AssistantMessage: ...

    @overload
    def append(self, data: ToolCallData, /) -> ToolCall: ...

    @overload
    def append(self, data: ToolResultData, /) -> ToolResult: ...

    @overload
    def append(self, data: TurnCheckpointData, /) -> TurnCheckpoint: ...

    @overload
    def append(self, data: TurnEndData, /) -> TurnEnd: ...

    @overload
    def append(self, data: Any, /) -> SessionEvent: ...

    @overload
    def append(self, kind: type[E], data: object, /) -> E: ...

    def append(self, first: object, data: object = _NO_DATA, /) -> SessionEvent:
        """Append an event with payload `data` and emit it.

        `session.append(UserMessageData(text="hi"))`: the event type is the
        one whose payload class `data` is, found in the codec's map. An event
        type whose payload is not a class of its own (`define_event_type`
        with `Any`, or a payload shared by several types) is named:
        `session.append(MyEvent, data)`. Naming a type the payload already
        identifies is deprecated.

        Returns:
            The appended event, numbered and timestamped.

        Raises:
            EventTypeError: the payload's class belongs to no registered
                event type (or to several), and no type was named.
            SessionClosedError: the session was closed.
            EventRejectedError: the event was refused at its source (a
                redaction hook failed, or a persistence plugin found it not
                serialisable or too large); it was not appended and nothing
                buffered it.
            LossyPayloadError: a value where the payload's schema says `Any`
                would be stored as something else (a set, tuple, datetime,
                bytes, NaN, a non-text key); the message names its path.
        """
        if data is _NO_DATA:
            data = first
            try:
                kind = self._kinds[type(data)]
            except KeyError:
                raise EventTypeError(_unknown_payload(data)) from None
        else:
            kind = cast("type[SessionEvent]", first)
            if self._kinds.get(type(data)) is kind:
                warnings.warn(
                    f"session.append({kind.__name__}, data) is deprecated and "
                    f"goes in turnkeep {REMOVED_IN}: the payload names its "
                    f"type, so write session.append(data)",
                    DeprecationWarning,
                    stacklevel=2,
                )
        if self.closed:
            raise SessionClosedError(f"session {self.id!r} is closed")
        events = self._events
        event = kind(seq=len(events), time=self._clock(), data=data)
        check = self._checks.get(kind)
        if check is not None:
            check(event)  # only types with `Any`-typed parts have one
        if self._redactors:
            event = self._hooks.redact_event(self, event)
        events.append(event)
        try:
            results = self._emit(self, event)
        except EventRejectedError:
            # Rejected at its source: take it out of the log, and out of
            # whatever a persistence plugin snapshotted before the rejecting
            # plugin ran.
            events.pop()
            self._hooks.event_rejected(self, event.seq)
            raise
        if results:
            self._hooks.check_session_event_results(results)
        return event

    def append_redacted(self, data: object, by: object, /) -> SessionEvent:
        """Append a payload that `by`, a `redact_event` plugin, redacted already.

        For text redacted in a wider context than one event: a streamed
        reply held back by `turnkeep.heldstream`, each piece redacted
        knowing what follows it. `by`'s own `redact_event` is not run on it
        again (it would scan the piece without that context); every other
        implementation is. Otherwise as `append(data)`.

        Raises:
            EventTypeError, SessionClosedError, EventRejectedError,
            LossyPayloadError: as `append`.
        """
        try:
            kind = self._kinds[type(data)]
        except KeyError:
            raise EventTypeError(_unknown_payload(data)) from None
        if self.closed:
            raise SessionClosedError(f"session {self.id!r} is closed")
        events = self._events
        event = kind(seq=len(events), time=self._clock(), data=data)
        check = self._checks.get(kind)
        if check is not None:
            check(event)
        redactors = self._redactors
        # Mostly `by` is the only one: then no call at all.
        if redactors and (
            len(redactors) > 1 or getattr(redactors[0], "plugin", None) is not by
        ):
            event = self._hooks.redact_event(self, event, by)
        # The rest is `append`'s, kept inline: this runs for every delta.
        events.append(event)
        try:
            results = self._emit(self, event)
        except EventRejectedError:
            events.pop()
            self._hooks.event_rejected(self, event.seq)
            raise
        if results:
            self._hooks.check_session_event_results(results)
        return event

    def set_summary(
        self,
        *,
        title: str | None = None,
        first_prompt: str | None = None,
        status: SessionStatus | None = None,
    ) -> None:
        """Change summary fields; they are stored with the next flush.

        Raises:
            InvalidSummaryError: a text is not valid Unicode; nothing changed.
            RedactionError: a `redact_text` hook failed; nothing changed.
        """
        if title is not None:
            title = self._hooks.redact_text(_storable(title, "title"))
        if first_prompt is not None:
            first_prompt = self._hooks.redact_text(
                _storable(first_prompt, "first_prompt")
            )
        changes: dict[str, object] = {}
        if title is not None and title != self.summary.title:
            changes["title"] = title
        if first_prompt is not None and first_prompt != self.summary.first_prompt:
            changes["first_prompt"] = first_prompt
        if status is not None and status != self.summary.status:
            changes["status"] = status
        if not changes:
            return
        # A new object: the write-behind stores a summary that is not the one
        # it stored last.
        self.summary = _replace_summary(
            self.summary, updated_at=self._clock(), **changes
        )

    async def flush(self) -> None:
        """Make everything appended so far durable (a durability point).

        Raises:
            FlushError: the events could not be stored; they stay buffered
                and the next flush retries them.
        """
        await self._hooks.flush_session(self)


def _unknown_payload(data: object) -> str:
    name = type(data).__qualname__
    return (
        f"a {name} payload names no event type (no registered type has it as "
        "its own payload class); name the type: session.append(EventType, data)"
    )


def _storable(text: str, field: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidSummaryError(
            f"summary {field} is not valid Unicode text (lone surrogates); "
            "nothing was changed"
        ) from exc
    return text


def _replace_summary(summary: SessionSummary, **changes: object) -> SessionSummary:
    return msgspec.structs.replace(summary, **changes)


__getattr__ = renamed(__name__, {"SessionStore": "turnkeep.store:SessionStore"})
