"""The live sessions of one host: create, fork, resume and close.

A `SessionStore` (`host.sessions`) makes `Session`s live and keeps them by
id. A new or seeded session writes nothing until its first flush; a fork
starts from a prefix of a live session; `resume` claims a stored session's
writer role, loads and decodes its log, and makes it live with its loaded
events durable; `close` flushes, drops it and releases the writer role.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Sequence

import attrs

from turnkeep.backendkit import newer_format
from turnkeep.clock import Clock, now_ms
from turnkeep.errors import (
    InvalidForkPointError,
    InvalidSeedError,
    SessionExistsError,
    SessionNotFoundError,
)
from turnkeep.events import SessionEvent
from turnkeep.ids import new_session_id, validate_session_id
from turnkeep.meta import (
    FORMAT_VERSION,
    ForkPoint,
    SessionHeader,
    SessionMeta,
    SessionSummary,
)
from turnkeep.session import Session, SessionHooks, SessionOrigin

__all__ = ["SessionStore"]


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
                raise newer_format(session_id, header.format_version)
            events = self._hooks.codec.decode_log(loaded.events, session_id=session_id)
        except BaseException:
            await backend.release(session_id)
            raise
        return self._install(
            header, loaded.meta.summary, events, origin="resumed", stored=len(events)
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
        stored: int = 0,
    ) -> Session:
        if header.id in self._live:
            raise SessionExistsError(f"session {header.id!r} is already live")
        session = Session(
            id=header.id,
            header=header,
            summary=summary,
            origin=origin,
            events=events,
            hooks=self._hooks,
            clock=self.clock,
            stored=stored,
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
