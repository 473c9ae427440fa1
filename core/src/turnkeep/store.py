"""The live sessions of one host: create, open, fork, resume, close, abandon.

A `SessionStore` (`host.sessions`) makes `Session`s live and keeps them by
id. A new or seeded session writes nothing until its first flush; a fork
starts from a prefix of a live session; `resume` claims a stored session's
writer role, loads and decodes its log, and makes it live with its loaded
events durable; `open` resumes or creates. `close` flushes, drops the
session and releases the writer role; a session that can no longer be
stored (another process took it over) is closed all the same, and
`abandon` drops one without storing: both say in a `CloseReport` what
stayed unsaved, so no session is ever trapped in its process.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Sequence
from datetime import datetime

import attrs

from turnkeep.auditing import claim_recorded
from turnkeep.backendkit import newer_format
from turnkeep.clock import Clock, now_ms
from turnkeep.closereport import CloseOutcome, CloseReport
from turnkeep.errors import (
    FlushError,
    FlushOutcomeUnknownError,
    InvalidForkPointError,
    InvalidSeedError,
    SessionExistsError,
    SessionNotFoundError,
)
from turnkeep.events import SessionEvent
from turnkeep.ids import new_session_id, validate_session_id
from turnkeep.listfilter import list_filter
from turnkeep.listing import list_sessions, search_titles
from turnkeep.meta import (
    FORMAT_VERSION,
    ForkPoint,
    SessionHeader,
    SessionMeta,
    SessionStatus,
    SessionSummary,
)
from turnkeep.persistence import SessionPage
from turnkeep.session import Session, SessionHooks, SessionOrigin

__all__ = ["CloseOutcome", "CloseReport", "SessionStore"]


@attrs.define(eq=False)
class SessionStore:
    """Creates, forks, resumes and closes the live sessions of one host."""

    _hooks: SessionHooks = attrs.field(alias="hooks")
    clock: Clock = now_ms
    session_format: int = FORMAT_VERSION
    """The format version of the sessions it creates (`Config.session_format`)."""
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
            header = SessionHeader(
                id=session_id,
                created_at=self.clock(),
                cwd=_cwd(),
                format_version=self.session_format,
            )
            # No turn is running yet: the agent loop marks a turn "active"
            # while it runs, so a crash inside one lists as interrupted.
            summary = SessionSummary(updated_at=header.created_at, status="idle")
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

    async def stored(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        status: SessionStatus | Iterable[SessionStatus] | None = None,
        updated_after: datetime | int | None = None,
        updated_before: datetime | int | None = None,
    ) -> SessionPage:
        """Return one page of the stored sessions, newest first (summaries only).

        A session whose summary says a turn is running (`active`) but that
        no live owner holds (its process crashed mid-turn) is listed
        `interrupted`; only the page's `active` sessions are probed, in one
        batch. Pass `next_cursor` back as `cursor` (with the same filters)
        for the next page.

        Args:
            limit: sessions per page.
            cursor: where the previous page ended.
            status: keep sessions of this status (or these), as listed
                (`interrupted` included). The backend filters by stored
                status, so a page asking for `active` or `interrupted` may
                come back short while more follow.
            updated_after: keep sessions updated after this (exclusive; a
                datetime, naive ones local, or epoch milliseconds).
            updated_before: keep sessions updated before this (exclusive).

        Raises:
            PersistenceNotConfiguredError: no backend is active.
            InvalidCursorError: `cursor` is not one `stored` returned.
            InvalidListFilterError: an unknown status or a bad time.
        """
        where = list_filter(
            status=status, updated_after=updated_after, updated_before=updated_before
        )
        backend = self._hooks.require_persistence()
        return await list_sessions(backend, limit=limit, cursor=cursor, where=where)

    async def search(
        self,
        text: str,
        *,
        limit: int = 100,
        cursor: str | None = None,
        status: SessionStatus | Iterable[SessionStatus] | None = None,
    ) -> SessionPage:
        """The sessions of one `stored` page whose title holds `text`.

        Case is ignored; a session without a title is searched by its first
        prompt. Only one page's summaries are looked at (`limit` of them),
        so a result may be empty while `next_cursor` says more may follow.

        Raises:
            PersistenceNotConfiguredError: no backend is active.
            InvalidCursorError: `cursor` is not one `stored` returned.
            InvalidListFilterError: an unknown status.
        """
        where = list_filter(status=status)
        backend = self._hooks.require_persistence()
        return await search_titles(
            backend, text, limit=limit, cursor=cursor, where=where
        )

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
            format_version=self.session_format,
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

        Returns the live session if it already is live, unless another
        process took that one over: then it is abandoned (what it held is
        reported in `abandoned`) and the session is loaded afresh, with what
        the new owner wrote.

        Raises:
            PersistenceNotConfiguredError: no backend is active.
            SessionNotFoundError: nothing is stored under this id.
            SessionLockedError: another process drives it (and not `steal`).
            SessionCorruptError, UnsupportedFormatError: see `load`.
        """
        session_id = validate_session_id(session_id)
        live = self._live.get(session_id)
        if live is not None:
            if not self._hooks.is_fenced(live):
                return live
            await self.abandon(session_id, reason="taken over by another process")
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
        record_takeover = await claim_recorded(backend, session_id, steal=steal)
        try:
            loaded = await backend.load(session_id)
            header = loaded.meta.header
            if header.format_version > FORMAT_VERSION:
                raise newer_format(session_id, header.format_version)
            events = self._hooks.codec.decode_log(loaded.events, session_id=session_id)
        except BaseException:
            await backend.release(session_id)
            raise
        session = self._install(
            header, loaded.meta.summary, events, origin="resumed", stored=len(events)
        )
        await record_takeover()
        return session

    async def open(self, session_id: str, *, steal: bool = False) -> Session:
        """Resume the session if it is stored, else create it (race-free).

        A created session is registered with the backend at once (which
        takes its writer role), so two processes opening one new id cannot
        both create it: the second resumes it, or is refused while the
        first drives it.

        Raises:
            SessionLockedError: another process drives it (and not `steal`).
            InvalidSessionIdError, PersistenceNotConfiguredError,
            SessionCorruptError, UnsupportedFormatError: as `resume`.
        """
        session_id = validate_session_id(session_id)
        self._hooks.require_persistence()
        for _ in range(2):
            try:
                return await self.resume(session_id, steal=steal)
            except SessionNotFoundError:
                pass
            session = self.create(session_id)
            try:
                await self._hooks.register_session(session)
            except SessionExistsError:
                # Stored meanwhile by another process: resume that one.
                await self.abandon(session_id, reason="created elsewhere first")
                continue
            except BaseException:
                await self.abandon(session_id, reason="could not be registered")
                raise
            return session
        return await self.resume(session_id, steal=steal)

    async def close_all(self) -> list[CloseReport]:
        """Close every live session at once; never fails on one.

        A session that cannot be stored (taken over, deleted, its backend
        failing) is abandoned and its report says why; a flush of unknown
        outcome is reported `in_doubt`.
        """
        closing = (self.close_or_abandon(s.id) for s in self.list())
        return list(await asyncio.gather(*closing))

    async def close_or_abandon(self, session_id: str) -> CloseReport:
        """`close`, or `abandon` a session that cannot be stored; never fails on it.

        The report says what stayed unsaved and why (a flush of unknown
        outcome as `in_doubt`).

        Raises:
            SessionNotFoundError: no live session has this id.
        """
        try:
            return await self.close(session_id)
        except FlushError as exc:
            report = await self.abandon(session_id, reason=str(exc))
            if isinstance(exc, FlushOutcomeUnknownError) and not report.saved:
                doubt = (exc.first_seq, exc.last_seq)
                report = attrs.evolve(report, in_doubt=doubt)
            return report

    async def close(self, session_id: str) -> CloseReport:
        """Flush a live session, release its writer role and drop it.

        A session another process took over cannot be stored by this one:
        it is closed all the same, and the report says what stayed unsaved.

        Returns:
            What was stored (`outcome` `saved` or `fenced`).

        Raises:
            SessionNotFoundError: no live session has this id.
            FlushError: its events could not be stored for another reason
                (a storage error); the session stays live, so nothing is
                lost and a later `close` retries. `abandon` drops it.
        """
        session = self.get(session_id)
        # Closed before the flush, so nothing appended meanwhile is left out.
        session.closed = True
        try:
            await session.flush()
        except FlushError as exc:
            if not self._hooks.is_fenced(session):
                session.closed = False
                raise
            doubt = None
            if isinstance(exc, FlushOutcomeUnknownError):
                doubt = (exc.first_seq, exc.last_seq)
            return await self._drop(session, "fenced", str(exc), doubt)
        except BaseException:
            session.closed = False
            raise
        return await self._drop(session, "saved", "")

    async def abandon(self, session_id: str, *, reason: str = "") -> CloseReport:
        """Drop a live session without storing what it holds.

        The way out for a session that cannot be stored (its backend keeps
        failing, or another process took it over): its writer role is
        released and the report says what stayed unsaved.

        Raises:
            SessionNotFoundError: no live session has this id.
        """
        session = self.get(session_id)
        session.closed = True
        fenced = self._hooks.is_fenced(session)
        return await self._drop(
            session, "fenced" if fenced else "abandoned", reason or "abandoned"
        )

    async def _drop(
        self,
        session: Session,
        outcome: CloseOutcome,
        reason: str,
        in_doubt: tuple[int, int] | None = None,
    ) -> CloseReport:
        unsaved = self._hooks.unsaved(session)
        report = CloseReport(
            session_id=session.id,
            outcome=outcome if unsaved else "saved",
            unsaved=unsaved,
            first_unsaved_seq=len(session.events) - unsaved if unsaved else None,
            reason=reason if unsaved else "",
            in_doubt=in_doubt if unsaved else None,
        )
        if self._live.get(session.id) is session:
            del self._live[session.id]
        try:
            await self._hooks.emit_session_closed(session)
        except FlushError:
            # Releasing a writer role that is already gone (taken over, or
            # its backend failing) must not keep the session trapped.
            if outcome == "saved":
                raise
        return report

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
