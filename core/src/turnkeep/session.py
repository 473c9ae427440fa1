"""Live sessions and the store that owns them.

A `Session` is an id, an immutable header, a mutable summary and an
append-only list of events. `Session.append` is the hot path of the whole
library: it numbers the event, adds it to the log and emits `session_event`
through the host, which is where a persistence plugin snapshots it. A
`SessionStore` creates, forks, resumes and closes sessions.

Each session also carries its `WriteState`: the write-behind plugin's
per-session buffer and cursor. It lives on the session, not in the plugin,
so a hot reload of the persistence plugin hands it over untouched: no event
lost, none written twice.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Literal, Protocol, TypeAlias, TypeVar

import attrs
import msgspec

from turnkeep.clock import Clock, now_ms
from turnkeep.codec import EventCodec
from turnkeep.errors import (
    EventRejectedError,
    InvalidForkPointError,
    InvalidSeedError,
    InvalidSummaryError,
    SessionClosedError,
    SessionExistsError,
    SessionNotFoundError,
    UnsupportedFormatError,
)
from turnkeep.events import SessionEvent
from turnkeep.ids import new_session_id, validate_session_id
from turnkeep.meta import (
    FORMAT_VERSION,
    ForkPoint,
    SessionHeader,
    SessionMeta,
    SessionStatus,
    SessionSummary,
)
from turnkeep.persistence import SessionPersistence

__all__ = ["Session", "SessionHooks", "SessionOrigin", "SessionStore", "WriteState"]

E = TypeVar("E", bound=SessionEvent)

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

    @property
    def redactors(self) -> Sequence[object]:
        """The live list of `redact_event` implementations (empty: no cost)."""
        ...

    def redact_event(self, session: Session, event: E) -> E:
        """Run `redact_event` and return the event to append."""
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
class WriteState:
    """The write-behind plugin's per-session state.

    Invariant: `persisted + len(pending)` events of the session have been
    snapshotted; `persisted` of them are durable.

    Attributes:
        pending: snapshots (encoded bytes) of the events from seq `persisted`
            on, not yet acknowledged by the backend, in seq order.
        persisted: how many events are durable (the write cursor).
        created: the session is in storage (loaded from it, or a flush of it
            landed), so any instance of the backend can take its appends.
        registered_with: the write-behind whose backend instance registered
            the session while nothing of it was durable yet (backends create
            lazily, per instance).
        maybe_landed: an append failed in a way that may still have stored it
            (a lost acknowledgement).
        summary_dirty: the summary changed since it was last stored.
        init: the registration started at `session_created`; a flush awaits
            it first.
        init_owner: the write-behind that started `init`.
        lock: serialises flushes of this session.
    """

    pending: list[bytes] = attrs.field(factory=list[bytes])
    persisted: int = 0
    created: bool = False
    registered_with: object | None = attrs.field(default=None, repr=False)
    maybe_landed: bool = False
    summary_dirty: bool = False
    init: asyncio.Future[None] | None = None
    init_owner: object | None = attrs.field(default=None, repr=False)
    lock: asyncio.Lock = attrs.Factory(asyncio.Lock)

    @property
    def snapshotted(self) -> int:
        """How many events have been snapshotted (durable or pending)."""
        return self.persisted + len(self.pending)


@attrs.define(eq=False)
class Session:
    """One live conversation: an append-only log plus metadata.

    Create sessions through `SessionStore` (usually `host.sessions`).
    """

    id: str
    header: SessionHeader
    summary: SessionSummary
    origin: SessionOrigin
    writes: WriteState
    _events: list[SessionEvent] = attrs.field(alias="events", repr=False)
    _hooks: SessionHooks = attrs.field(alias="hooks", repr=False)
    _clock: Clock = attrs.field(alias="clock", repr=False)
    closed: bool = attrs.field(default=False, init=False)
    """Set by the store when the session is closed; it then takes no events."""
    turn_holder: object | None = attrs.field(default=None, init=False, repr=False)
    """Set by the agent loop while a turn (or recovery) runs on the session."""
    _emit: Callable[..., list[object]] = attrs.field(init=False, repr=False)

    _redactors: Sequence[object] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._emit = self._hooks.session_event_hook
        self._redactors = self._hooks.redactors

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
    def settled(self) -> bool:
        """Whether every event of the log is durable (nothing pending)."""
        return self.writes.persisted == len(self._events) and not self.writes.pending

    def append(self, kind: type[E], data: object) -> E:
        """Append an event of type `kind` with payload `data` and emit it.

        Args:
            kind: the event class, e.g. `UserMessage`.
            data: its payload, e.g. `UserMessageData(text="hi")`.

        Returns:
            The appended event, numbered and timestamped.

        Raises:
            SessionClosedError: the session was closed.
            EventRejectedError: the event was refused at its source (a
                redaction hook failed, or a persistence plugin found it not
                serialisable or too large); it was not appended and nothing
                buffered it.
        """
        if self.closed:
            raise SessionClosedError(f"session {self.id!r} is closed")
        events = self._events
        event = kind(seq=len(events), time=self._clock(), data=data)
        if self._redactors:
            event = self._hooks.redact_event(self, event)
        events.append(event)
        try:
            results = self._emit(self, event)
        except EventRejectedError:
            # Rejected at its source: take it out of the log, and out of the
            # write buffer in case a persistence plugin snapshotted it before
            # the rejecting plugin ran.
            events.pop()
            writes = self.writes
            keep = len(events) - writes.persisted
            if 0 <= keep < len(writes.pending):
                del writes.pending[keep:]
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
        self.summary = _replace_summary(
            self.summary, updated_at=self._clock(), **changes
        )
        self.writes.summary_dirty = True

    async def flush(self) -> None:
        """Make everything appended so far durable (a durability point).

        Raises:
            FlushError: the events could not be stored; they stay buffered
                and the next flush retries them.
        """
        await self._hooks.flush_session(self)


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


@attrs.define(eq=False)
class SessionStore:
    """Creates, forks, resumes and closes the live sessions of one host."""

    _hooks: SessionHooks = attrs.field(alias="hooks")
    clock: Clock = now_ms
    _live: dict[str, Session] = attrs.field(init=False, factory=dict[str, Session])
    _resuming: dict[str, asyncio.Future[Session]] = attrs.field(
        init=False, factory=dict[str, "asyncio.Future[Session]"]
    )

    def create(
        self,
        id: str | None = None,
        *,
        seed: Iterable[SessionEvent] | None = None,
        meta: SessionMeta | None = None,
    ) -> Session:
        """Start a new live session.

        Args:
            id: the session id (generated when omitted). Untrusted: validated.
            seed: events to start from (contiguous from seq 0). They are
                installed without emitting `session_event`; a persistence
                plugin stores them once, with the first flush.
            meta: header and summary to start from (its id must match).

        Raises:
            InvalidSessionIdError: the id is not storable.
            SessionExistsError: a live session already has this id.
            InvalidSeedError: the seed is not contiguous from 0.
        """
        if meta is not None and id is not None and meta.id != id:
            raise SessionExistsError(
                f"create(id={id!r}) was given metadata of session {meta.id!r}"
            )
        session_id = validate_session_id(
            id if id is not None else meta.id if meta is not None else new_session_id()
        )
        events = list(seed) if seed is not None else []
        _check_seed(events)
        if meta is None:
            header = SessionHeader(id=session_id, created_at=self.clock(), cwd=_cwd())
            summary = SessionSummary(updated_at=header.created_at)
        else:
            header, summary = meta.header, meta.summary
        return self._install(
            header, summary, events, origin="seeded" if events else "new"
        )

    def get(self, session_id: str) -> Session:
        """Return the live session `session_id`.

        Raises:
            SessionNotFoundError: no live session has this id.
        """
        try:
            return self._live[session_id]
        except KeyError:
            raise SessionNotFoundError(
                f"no live session {session_id!r}; resume it to load it from storage"
            ) from None

    def list(self) -> list[Session]:
        """Return the live sessions, in creation order."""
        return list(self._live.values())

    def fork(self, source_id: str, at_seq: int, new_id: str | None = None) -> Session:
        """Start a new session from the first `at_seq` events of a live one.

        Raises:
            SessionNotFoundError: `source_id` is not live.
            InvalidForkPointError: `at_seq` is outside `0 .. len(log)`.
        """
        source = self.get(source_id)
        if not 0 <= at_seq <= len(source.events):
            raise InvalidForkPointError(
                f"cannot fork {source_id!r} at seq {at_seq}: its log has "
                f"{len(source.events)} events"
            )
        session_id = validate_session_id(
            new_id if new_id is not None else new_session_id()
        )
        header = SessionHeader(
            id=session_id,
            created_at=self.clock(),
            cwd=source.header.cwd,
            parent=ForkPoint(session_id=source_id, seq=at_seq),
        )
        summary = SessionSummary(
            updated_at=header.created_at,
            title=source.summary.title,
            first_prompt=source.summary.first_prompt,
        )
        return self._install(
            header, summary, list(source.events[:at_seq]), origin="forked"
        )

    async def resume(self, session_id: str, *, steal: bool = False) -> Session:
        """Load a stored session, take its writer role, and make it live.

        Returns the live session if it already is live.

        Raises:
            PersistenceNotConfiguredError: no backend is active.
            SessionNotFoundError: nothing is stored under this id.
            SessionLockedError: another process drives it (and not `steal`).
            SessionCorruptError, UnsupportedFormatError: see `load`.
        """
        session_id = validate_session_id(session_id)
        if session_id in self._live:
            return self._live[session_id]
        pending = self._resuming.get(session_id)
        if pending is not None:
            return await asyncio.shield(pending)  # a resume of it is under way
        future: asyncio.Future[Session] = asyncio.get_running_loop().create_future()
        self._resuming[session_id] = future
        try:
            session = await self._resume(session_id, steal=steal)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # waiters re-raise it; no "never retrieved" noise
            raise
        else:
            future.set_result(session)
            return session
        finally:
            del self._resuming[session_id]

    async def _resume(self, session_id: str, *, steal: bool) -> Session:
        backend = self._hooks.require_persistence()
        # Claim first, so nobody appends between our load and our first write.
        await backend.claim(session_id, steal=steal)
        try:
            loaded = await backend.load(session_id)
            header = loaded.meta.header
            if header.format_version > FORMAT_VERSION:
                raise UnsupportedFormatError(
                    f"session {session_id!r} has format version "
                    f"{header.format_version}; this turnkeep reads up to "
                    f"{FORMAT_VERSION}. Upgrade turnkeep to open it."
                )
            events = self._hooks.codec.decode_log(loaded.events, session_id=session_id)
        except BaseException:
            await backend.release(session_id)
            raise
        writes = WriteState(persisted=len(events), created=True)
        return self._install(
            header, loaded.meta.summary, events, origin="resumed", writes=writes
        )

    async def close(self, session_id: str) -> None:
        """Flush a live session, release its writer role and drop it.

        Raises:
            SessionNotFoundError: no live session has this id.
            FlushError: its events could not be stored; the session stays
                live so nothing is lost.
        """
        session = self.get(session_id)
        # Closed before the flush, so nothing appended meanwhile is left out.
        session.closed = True
        try:
            await session.flush()
        except BaseException:
            session.closed = False
            raise
        del self._live[session_id]
        await self._hooks.emit_session_closed(session)

    def _install(
        self,
        header: SessionHeader,
        summary: SessionSummary,
        events: list[SessionEvent],
        *,
        origin: SessionOrigin,
        writes: WriteState | None = None,
    ) -> Session:
        if header.id in self._live:
            raise SessionExistsError(f"session {header.id!r} is already live")
        session = Session(
            id=header.id,
            header=header,
            summary=summary,
            origin=origin,
            writes=writes if writes is not None else WriteState(),
            events=events,
            hooks=self._hooks,
            clock=self.clock,
        )
        self._live[header.id] = session
        self._hooks.emit_session_created(session)
        return session


def _check_seed(events: Sequence[SessionEvent]) -> None:
    for index, event in enumerate(events):
        if event.seq != index:
            raise InvalidSeedError(
                f"seed event #{index} ({event.type!r}) carries seq {event.seq}; "
                "seed events must be numbered 0, 1, 2, ..."
            )


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:
        return None
