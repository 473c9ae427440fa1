"""`MemoryPersistence`: the reference backend, in memory.

It keeps every contract of `SessionPersistence` that does not need a disk:
the seq check, atomic flushes, lazy visibility, metadata-only paging, and
ownership with fencing. Several instances over one `MemoryStorage` behave
like several processes over one store, which is how the conformance kit
exercises ownership. Nothing survives the Python process.

Also a builtin plugin: the host registers this module, which contributes the
backend under the name `memory`.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import itertools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final

import attrs
import msgspec

from turnkeep.audit import AuditRecord, check_record, check_records_range, numbered
from turnkeep.backendkit import check_batch, count_turn_ends, newer_format
from turnkeep.cancelrequest import CancelRequest, check_reason, next_request
from turnkeep.codec import EventRecord
from turnkeep.errors import (
    InvalidCursorError,
    SessionDeletedError,
    SessionExistsError,
    SessionFencedError,
    SessionHeldError,
    SessionLockedError,
    SessionNotFoundError,
    StorageError,
)
from turnkeep.follow import check_wait
from turnkeep.hookspecs import hookimpl
from turnkeep.ids import validate_session_id
from turnkeep.listfilter import ListFilter
from turnkeep.meta import FORMAT_VERSION, SessionMeta, SessionSummary
from turnkeep.persistence import LoadedSession, SessionPage, check_read_range

__all__ = ["MemoryPersistence", "MemoryStorage", "register_persistence"]

_owner_tokens = itertools.count(1)


@attrs.define(eq=False)
class _Stored:
    meta: SessionMeta
    events: list[bytes] = attrs.field(factory=list[bytes])
    """The stored records (an event each, or a pack standing for several)."""
    firsts: list[int] = attrs.field(factory=list[int])
    """The first seq of each record, for reads by seq."""
    next_seq: int = 0
    cancel: CancelRequest | None = None
    """The latest cancel request (it goes with the session)."""
    audit: list[AuditRecord] = attrs.field(factory=list[AuditRecord])
    """The session's audit records (they go with the session)."""


@attrs.define(eq=False)
class _Ownership:
    owner: int
    generation: int


@attrs.define(eq=False)
class MemoryStorage:
    """What several `MemoryPersistence` instances share (one "disk")."""

    sessions: dict[str, _Stored] = attrs.field(factory=dict[str, _Stored], repr=False)
    owners: dict[str, _Ownership] = attrs.field(
        factory=dict[str, _Ownership], repr=False
    )
    generation: int = attrs.field(default=0, repr=False)
    """The last writer generation handed out, over every session: one counter
    for all, so a deleted session's id is kept nowhere (R19) and a new
    session of that id still starts above any hold of the old one."""
    deleted: set[tuple[str, int]] = attrs.field(
        factory=set[tuple[str, int]], repr=False
    )
    """(id, generation) of each hold a forced delete ended: that holder is told."""
    followers: dict[str, set[asyncio.Event]] = attrs.field(
        factory=dict[str, set[asyncio.Event]], repr=False
    )
    """Per session, the events of `wait_for_commit` calls to set at a commit."""
    audit: list[AuditRecord] = attrs.field(factory=list[AuditRecord], repr=False)
    """The store's audit log (deletions; what outlives its session)."""

    def wake(self, session_id: str) -> None:
        """Wake every follower of `session_id` (a commit, a delete)."""
        for event in self.followers.get(session_id, ()):
            event.set()


@attrs.define(eq=False)
class MemoryPersistence:
    """An in-memory `SessionPersistence`.

    Args:
        storage: the shared storage (a new, empty one by default).
    """

    stores_packs: ClassVar[bool] = True
    """It keeps packed records (see [packs] in `turnkeep.persistence`)."""

    storage: MemoryStorage = attrs.Factory(MemoryStorage)
    _token: int = attrs.field(init=False, factory=lambda: next(_owner_tokens))
    _pending: dict[str, SessionMeta] = attrs.field(
        init=False, factory=dict[str, SessionMeta], repr=False
    )
    _held: dict[str, int] = attrs.field(init=False, factory=dict[str, int], repr=False)
    _closed: bool = attrs.field(init=False, default=False)

    async def create(self, meta: SessionMeta) -> None:
        """Register a new session (visible with its first append)."""
        self._check_open()
        session_id = validate_session_id(meta.id)
        if session_id in self.storage.sessions or session_id in self._pending:
            raise SessionExistsError(f"session {session_id!r} already exists")
        self._take(session_id, steal=False)
        self._pending[session_id] = meta

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        """Append one flush (and `summary`) atomically after the checks."""
        self._check_open()
        session_id = validate_session_id(session_id)
        self._check_deleted(session_id)
        stored = self.storage.sessions.get(session_id)
        pending = self._pending.get(session_id)
        if stored is None and pending is None:
            raise SessionNotFoundError(f"no session {session_id!r} to append to")
        if stored is not None:
            self._check_version(stored.meta)
        self._check_writer(session_id)
        if not events:
            return
        next_seq = stored.next_seq if stored is not None else 0
        check_batch(session_id, events, next_seq=next_seq)
        if stored is None:
            assert pending is not None  # noqa: S101 - narrowed by the check above
            # The caller's numbers count for nothing: the log's start at 0.
            stored = _Stored(
                meta=_with_summary(pending, event_count=0, turns=0, size=0)
            )
            self.storage.sessions[session_id] = stored
            del self._pending[session_id]
        stored.events.extend(bytes(r.raw) for r in events)
        stored.firsts.extend(r.seq for r in events)
        stored.next_seq = events[-1].last + 1
        kept = stored.meta.summary
        meta = stored.meta
        updated_at = max(kept.updated_at, events[-1].time)
        if summary is not None:
            meta = msgspec.structs.replace(meta, summary=summary)
            updated_at = max(updated_at, summary.updated_at)
        stored.meta = _with_summary(
            meta,
            updated_at=updated_at,
            event_count=stored.next_seq,
            turns=kept.turns + count_turn_ends(events),
            size=kept.size + sum(len(r.raw) for r in events),
        )
        self.storage.wake(session_id)

    async def load(self, session_id: str) -> LoadedSession:
        """Return the stored metadata and events."""
        stored = self._stored(session_id)
        self._check_version(stored.meta)
        return LoadedSession(meta=stored.meta, events=list(stored.events))

    async def load_after(self, session_id: str, after: int, limit: int) -> list[bytes]:
        """The stored records with seq > `after`, at most `limit`."""
        check_read_range(after, limit)
        stored = self._stored(session_id)
        self._check_version(stored.meta)
        if after + 1 >= stored.next_seq:
            return []
        # The record holding seq `after` + 1 (a pack may start before it).
        start = max(bisect.bisect_right(stored.firsts, after + 1) - 1, 0)
        return stored.events[start : start + limit]

    async def last_seq(self, session_id: str) -> int:
        """The last stored seq."""
        return self._stored(session_id).next_seq - 1

    async def wait_for_commit(
        self, session_id: str, after_seq: int, within: float
    ) -> int:
        """The last stored seq once past `after_seq`, or at `within`.

        Woken by the storage at each commit (of any instance over it).
        """
        check_wait(after_seq, within)
        session_id = validate_session_id(session_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        wake = asyncio.Event()
        followers = self.storage.followers.setdefault(session_id, set())
        followers.add(wake)
        try:
            while True:
                wake.clear()
                last = self._stored(session_id).next_seq - 1
                remaining = deadline - loop.time()
                if last > after_seq or remaining <= 0:
                    return last
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), remaining)
        finally:
            followers.discard(wake)
            if not followers:
                self.storage.followers.pop(session_id, None)

    async def request_cancel(self, session_id: str, reason: str) -> CancelRequest:
        """Record a request to cancel the running turn (no ownership needed)."""
        check_reason(reason)
        stored = self._stored(session_id)
        stored.cancel = next_request(stored.cancel, reason)
        return stored.cancel

    async def cancel_requested(
        self, session_id: str, after: int
    ) -> CancelRequest | None:
        """The latest cancel request numbered above `after`, or `None`."""
        request = self._stored(session_id).cancel
        return request if request is not None and request.number > after else None

    async def record_audit(self, scope: str | None, record: AuditRecord) -> AuditRecord:
        """Store an audit record (no ownership needed, the log untouched)."""
        check_record(record)
        records = self.storage.audit if scope is None else self._stored(scope).audit
        stored = numbered(record, len(records) + 1)
        records.append(stored)
        return stored

    async def audit_records(
        self, scope: str | None, after: int, limit: int
    ) -> list[AuditRecord]:
        """The scope's audit records numbered above `after`, at most `limit`."""
        check_records_range(after, limit)
        records = self.storage.audit if scope is None else self._stored(scope).audit
        return records[after : after + limit]

    async def list(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        where: ListFilter | None = None,
    ) -> SessionPage:
        """Page through stored sessions (those `where` keeps), newest first."""
        if limit <= 0:
            raise ValueError("limit must be positive")
        stored = self.storage.sessions.values()
        if where is not None:
            stored = [s for s in stored if where.matches(s.meta)]
        items = sorted(stored, key=_order)
        if cursor is not None:
            after = _decode_cursor(cursor)
            items = [s for s in items if _order(s) > after]
        page = [s.meta for s in items[:limit]]
        more = len(items) > limit
        return SessionPage(
            items=page,
            next_cursor=_encode_cursor(_order(items[limit - 1])) if more else None,
        )

    async def has(self, session_id: str) -> bool:
        """Whether the session is stored."""
        return validate_session_id(session_id) in self.storage.sessions

    async def held(self, session_ids: Sequence[str]) -> dict[str, bool]:
        """Which sessions an owner holds (its record is the liveness here)."""
        ids = [validate_session_id(i) for i in session_ids]
        return {i: i in self.storage.owners for i in ids}

    async def delete(self, session_id: str, *, force: bool = False) -> None:
        """Remove the session and its ownership record (see the protocol)."""
        self._check_open()
        session_id = validate_session_id(session_id)
        self._stored(session_id)
        storage = self.storage
        current = storage.owners.get(session_id)
        if current is not None and current.owner != self._token:
            if not force:
                raise SessionHeldError(session_id)
            storage.deleted.add((session_id, current.generation))
        del storage.sessions[session_id]
        storage.owners.pop(session_id, None)
        self._held.pop(session_id, None)
        storage.wake(session_id)  # its followers hear it is gone

    async def update(self, session_id: str, summary: SessionSummary) -> None:
        """Replace the summary (keeping the backend-maintained numbers)."""
        self._check_open()
        session_id = validate_session_id(session_id)
        pending = self._pending.get(session_id)
        if pending is not None:
            self._pending[session_id] = _with_summary(
                msgspec.structs.replace(pending, summary=summary),
                event_count=0,
                turns=0,
                size=0,
                updated_at=max(summary.updated_at, pending.summary.updated_at),
            )
            return
        self._check_deleted(session_id)
        stored = self._stored(session_id)
        kept = stored.meta.summary
        stored.meta = _with_summary(
            msgspec.structs.replace(stored.meta, summary=summary),
            event_count=stored.next_seq,
            turns=kept.turns,
            size=kept.size,
            updated_at=max(summary.updated_at, kept.updated_at),
        )

    async def claim(self, session_id: str, *, steal: bool = False) -> None:
        """Take the writer role of a stored session."""
        self._check_open()
        self._stored(session_id)
        self._take(session_id, steal=steal)

    async def release(self, session_id: str) -> None:
        """Give up the writer role if held."""
        generation = self._held.pop(session_id, None)
        self.storage.deleted.discard((session_id, generation or 0))
        current = self.storage.owners.get(session_id)
        if (
            generation is not None
            and current is not None
            and current.owner == self._token
        ):
            del self.storage.owners[session_id]
        self._pending.pop(session_id, None)

    async def aclose(self) -> None:
        """Release every writer role."""
        for session_id in list(self._held):
            await self.release(session_id)
        self._pending.clear()
        self._closed = True

    # -- internals ---------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("this MemoryPersistence instance was closed")

    def _stored(self, session_id: str) -> _Stored:
        session_id = validate_session_id(session_id)
        stored = self.storage.sessions.get(session_id)
        if stored is None:
            raise SessionNotFoundError(f"no stored session {session_id!r}")
        return stored

    def _take(self, session_id: str, *, steal: bool) -> None:
        owners = self.storage.owners
        current = owners.get(session_id)
        if current is not None and current.owner != self._token and not steal:
            raise SessionLockedError(
                f"session {session_id!r} is being written by another owner; "
                "take it over explicitly (steal=True) if that owner is gone"
            )
        if current is not None and current.owner == self._token:
            return
        self.storage.generation += 1
        generation = self.storage.generation
        owners[session_id] = _Ownership(owner=self._token, generation=generation)
        self._held[session_id] = generation

    def _check_writer(self, session_id: str) -> None:
        current = self.storage.owners.get(session_id)
        held = self._held.get(session_id)
        if held is not None and (current is None or current.generation != held):
            raise SessionFencedError(
                f"session {session_id!r} was taken over by another owner; this "
                "instance may no longer write it (nothing was written)"
            )
        if held is None:
            self._take(session_id, steal=False)

    def _check_deleted(self, session_id: str) -> None:
        held = self._held.get(session_id)
        if held is not None and (session_id, held) in self.storage.deleted:
            raise SessionDeletedError(session_id)

    @staticmethod
    def _check_version(meta: SessionMeta) -> None:
        if meta.header.format_version > FORMAT_VERSION:
            raise newer_format(meta.id, meta.header.format_version)


def _with_summary(meta: SessionMeta, **changes: Any) -> SessionMeta:
    return msgspec.structs.replace(
        meta, summary=msgspec.structs.replace(meta.summary, **changes)
    )


def _order(stored: _Stored) -> tuple[int, str]:
    return (-stored.meta.summary.updated_at, stored.meta.id)


_cursor_codec: Final = msgspec.json.Encoder()
_cursor_decoder: Final = msgspec.json.Decoder(tuple[int, str])


def _encode_cursor(key: tuple[int, str]) -> str:
    return base64.urlsafe_b64encode(_cursor_codec.encode(key)).decode("ascii")


def _decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        return _cursor_decoder.decode(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (ValueError, msgspec.DecodeError) as exc:
        raise InvalidCursorError(f"invalid list cursor {cursor!r}") from exc


@hookimpl
def register_persistence(register: Callable[..., None]) -> None:
    """Contribute the `memory` backend."""
    register("memory", lambda _config: MemoryPersistence())  # pyright: ignore[reportUnknownLambdaType]
