"""The generic write-behind plugin: buffer snapshots, drain them at flush.

Wraps any `SessionPersistence`. The host registers one instance for the
active backend. On `session_event` it snapshots (encodes) the event into the
session's `WriteState`; on `session_flush` it appends everything pending in
one call (one flush is one atomic unit for the backend); on dispose it
drains every live session and closes the backend.

- New and seeded sessions are registered with the backend by a task started
  at `session_created` (their seed snapshotted at once); a flush awaits it.
- Forks persist their inherited seed once, under the new id, then continue.
- Resumed sessions append only events after the loaded ones.
- A failed flush keeps its events buffered, in order, and raises
  `FlushError`; the next flush retries. If a backend reports that part of a
  retried batch had already landed (an ambiguous earlier failure), only the
  rest is sent. A flush of unknown outcome stays *in doubt* (its seq range)
  until an append settles it; failures meanwhile say so, never "not stored".
- The per-session state (`WriteState`) is the write-behind's own: made at
  `session_created` (a resumed session starts with its loaded events
  durable), dropped at `session_closed`, and handed to the `successor`
  built over a reloaded backend, which continues where this one stopped.
- An event refused at its source after it was snapshotted is taken out of
  the buffer in one place, `discard`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from turnkeep.auditing import note
from turnkeep.capabilities import appends_summary, stores_packs
from turnkeep.codec import EventCodec, EventRecord
from turnkeep.errors import (
    EventRejectedError,
    FlushError,
    FlushOutcomeUnknownError,
    SequenceError,
    SessionDeletedError,
    SessionExistsError,
    SessionFencedError,
    SessionLockedError,
)
from turnkeep.events import SessionEvent
from turnkeep.flushfailures import deleted, in_doubt
from turnkeep.hookspecs import hookimpl
from turnkeep.meta import PACKS_FORMAT, SessionSummary
from turnkeep.packing import pack_batch
from turnkeep.packs import MIN_RUN
from turnkeep.persistence import SessionPersistence
from turnkeep.writestate import WriteState, acknowledge, initial_state, same_fields

if TYPE_CHECKING:
    from turnkeep.hookspecs import PluginHost
    from turnkeep.session import Session

__all__ = ["WriteBehind", "WriteState"]


@attrs.define(eq=False)
class WriteBehind:
    """Buffers each session's events and drains them to one backend.

    Args:
        backend: the active persistence backend.
        codec: encodes events into their stored bytes.
        name: the backend's configured name (for messages).
    """

    backend: SessionPersistence
    codec: EventCodec = attrs.field(repr=False)
    name: str = "backend"
    _states: dict[Session, WriteState] = attrs.field(
        factory=dict["Session", WriteState], alias="states", repr=False
    )
    _disposed: bool = attrs.field(init=False, default=False)
    # Whether the backend's `append` stores a summary in the same atomic
    # unit (asked once here, not per flush); if not, a changed summary costs
    # an `update` after the append.
    _joint: bool = attrs.field(init=False, default=False)
    # Whether the backend keeps packed records (`turnkeep.packs`).
    _packs: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        self._joint = appends_summary(self.backend)
        self._packs = stores_packs(self.backend)

    def successor(self, backend: SessionPersistence) -> WriteBehind:
        """A write-behind over `backend` that continues this one's sessions.

        Used by a hot reload of the backend's plugin: this instance drains
        and closes, the successor takes every session's state as it stands.
        """
        return WriteBehind(
            backend=backend, codec=self.codec, name=self.name, states=self._states
        )

    def state(self, session: Session) -> WriteState:
        """The session's write state (made on first sight)."""
        writes = self._states.get(session)
        if writes is None:
            writes = self._states[session] = initial_state(session)
        return writes

    def unsaved(self, session: Session) -> int:
        """How many of the session's events are not durable yet."""
        writes = self._states.get(session)
        persisted = writes.persisted if writes is not None else session.stored
        return len(session.events) - persisted

    def is_fenced(self, session: Session) -> bool:
        """Whether a takeover elsewhere fenced this process out of the session."""
        writes = self._states.get(session)
        return writes is not None and writes.fenced

    async def register(self, session: Session) -> None:
        """Make sure the backend has registered the session (awaits it).

        Raises:
            SessionExistsError: a new session's id is already stored.
            SessionLockedError: another process is creating or driving it.
            FlushError: the registration failed otherwise.
        """
        try:
            await self._ensure_created(session, self.state(session))
        except FlushError as exc:
            if isinstance(exc.__cause__, SessionExistsError | SessionLockedError):
                raise exc.__cause__ from None
            raise

    def discard(self, session: Session, seq: int) -> None:
        """Drop what was snapshotted of seq `seq` on (a rejected event)."""
        writes = self._states.get(session)
        if writes is not None:
            writes.discard_from(seq)

    # -- hooks -------------------------------------------------------------

    @hookimpl(tryfirst=True)
    def session_event(self, session: Session, event: SessionEvent) -> None:
        """Snapshot the event into the session's pending writes."""
        try:
            writes = self._states[session]
        except KeyError:
            writes = self.state(session)
        pending = writes.pending
        buffered = writes.persisted + len(pending)
        if buffered == event.seq:
            codec = self.codec
            # `codec.snapshot`, inlined: this runs for every streamed chunk.
            try:
                raw = codec.encode_unchecked(event)
            except (TypeError, ValueError, OverflowError, RecursionError):
                codec.encode(event)  # raises the typed error, naming the type
                raise
            if len(raw) > codec.max_event_bytes:
                codec.encode(event)  # raises EventTooLargeError
            pending.append(raw)
            codec.last_snapshot = (event, raw)  # the turn's usage counts it
        elif buffered > event.seq:
            # Snapshots of events that are no longer in the log (a rejection
            # the session could not see): drop them, then take this one.
            writes.discard_from(event.seq)
            pending.append(self.codec.snapshot(event))
        # Otherwise the state is behind (the session lived without a
        # persistence plugin for a while); flush catches up in seq order.

    @hookimpl
    def session_created(self, session: Session) -> None:
        """Set up the session's state; register a new one with the backend.

        A resumed session starts with its loaded events durable. A new,
        seeded or forked one has its seed snapshotted at once and its
        registration started as a task that the first flush awaits.
        """
        self._states[session] = initial_state(session)
        if session.origin == "resumed":
            return
        self._catch_up(session, self.state(session))
        self._start_init(session)

    @hookimpl
    async def session_flush(self, session: Session) -> None:
        """Append everything pending for the session, then its summary."""
        await self._drain(session)

    @hookimpl
    async def session_closed(self, session: Session) -> None:
        """Release the session's writer role and forget its state."""
        self._states.pop(session, None)
        await self.backend.release(session.id)

    @hookimpl
    def plugin_apply(self, host: PluginHost) -> None:
        """Adopt the sessions that are already live."""
        for session in host.sessions.list():
            writes = self.state(session)
            if self._known(writes):
                continue
            try:
                self._catch_up(session, writes)
            except EventRejectedError:
                continue  # reported by the next flush, which retries it
            self._start_init(session)

    @hookimpl
    async def plugin_dispose(self, host: PluginHost) -> None:
        """Drain every live session, then close the backend."""
        self._disposed = True
        sessions = host.sessions.list()
        outcomes = await asyncio.gather(
            *(self._drain(s) for s in sessions), return_exceptions=True
        )
        # Registrations still in flight (sessions created during the drain)
        # must finish before the backend closes, or they would outlive it.
        for session in host.sessions.list():
            writes = self.state(session)
            init = writes.init
            if writes.init_owner is self and init is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(init)
        await self.backend.aclose()
        failed = [
            (s.id, o)
            for s, o in zip(sessions, outcomes, strict=True)
            if isinstance(o, BaseException)
        ]
        if failed:
            raise FlushError(
                f"{len(failed)} session(s) could not be drained while closing "
                f"{self.name!r} ({', '.join(repr(i) for i, _ in failed)}); their "
                "events stay buffered in memory",
                session_id=failed[0][0],
            ) from _group([o for _, o in failed])

    # -- internals ---------------------------------------------------------

    def _known(self, writes: WriteState) -> bool:
        """Whether this backend can take the session's appends right now.

        A stored session (loaded, or with a durable flush) is known to any
        instance of the backend; one with nothing durable yet is known only
        to the instance it was registered with (backends create lazily).
        """
        return writes.created or writes.registered_with is self

    def _catch_up(self, session: Session, writes: WriteState) -> None:
        """Snapshot events the state has not seen yet (seed, adoption)."""
        events = session.events
        start = writes.persisted + len(writes.pending)
        snapshot = self.codec.snapshot
        for event in events[start:]:
            writes.pending.append(snapshot(event))

    def _start_init(self, session: Session) -> None:
        writes = self.state(session)
        if self._known(writes) or writes.init_owner is self or self._disposed:
            return  # (a disposing instance leaves it to its successor)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet: the first flush registers the session
        writes.init = loop.create_task(self._register(session))
        writes.init_owner = self

    async def _register(self, session: Session) -> None:
        """Register the session with this backend (after any earlier attempt)."""
        writes = self.state(session)
        earlier = writes.init if writes.init_owner is not self else None
        if earlier is not None and not earlier.done():
            # A registration with a previous instance (before a reload) must
            # not race this one; its outcome no longer matters.
            with contextlib.suppress(Exception):
                await asyncio.shield(earlier)
        if self._known(writes):
            return
        meta = session.meta
        try:
            await self.backend.create(meta)
        except SessionExistsError:
            if not writes.maybe_landed:
                raise
            # An earlier append that looked failed had in fact landed: the
            # session is stored. Take its writer role; the seq check of the
            # next append settles what landed.
            await self.backend.claim(session.id)
            writes.created = True
            return
        writes.registered_with = self
        writes.stored_summary = meta.summary

    async def _ensure_created(self, session: Session, writes: WriteState) -> None:
        if self._known(writes):
            return
        init = writes.init
        if init is None or writes.init_owner is not self:
            init = asyncio.ensure_future(self._register(session))
            writes.init, writes.init_owner = init, self
        try:
            # Shielded: cancelling one flush must not cancel the registration
            # every later flush waits for.
            await asyncio.shield(init)
        except asyncio.CancelledError:
            if init.cancelled():
                writes.init = writes.init_owner = None
            raise
        except Exception as exc:
            writes.init = writes.init_owner = None  # the next flush tries again
            raise FlushError(
                f"session {session.id!r} could not be registered with "
                f"{self.name!r}: {exc}",
                session_id=session.id,
            ) from exc
        if self._known(writes):
            writes.init = writes.init_owner = None

    async def _drain(self, session: Session) -> None:
        writes = self.state(session)
        async with writes.lock:
            await self._ensure_created(session, writes)
            events = session.events
            if writes.persisted + len(writes.pending) != len(events):
                writes.discard_from(len(events))
                try:
                    self._catch_up(session, writes)
                except EventRejectedError as exc:
                    raise FlushError(
                        f"session {session.id!r}: {exc}", session_id=session.id
                    ) from exc
            summary = session.summary
            stored = writes.stored_summary
            changed = summary is not stored
            if writes.pending:
                if stored is not None and same_fields(summary, stored):
                    # Changed and changed back within the flush (a turn's
                    # status): the append moves `updated_at` on by itself.
                    changed = False
                batch = self._batch(session, writes)
                carry = summary if changed and self._joint else None
                if await self._append(session, writes, batch, carry):
                    changed = False  # it rode in the flush's own atomic unit
                if not changed:
                    writes.stored_summary = summary
            if changed:
                try:
                    await self.backend.update(session.id, summary)
                except SessionDeletedError as exc:
                    writes.fenced = True
                    raise deleted(session.id, 0, None) from exc
                except Exception as exc:
                    raise FlushError(
                        f"session {session.id!r}: its summary could not be "
                        f"stored in {self.name!r}: {exc}",
                        session_id=session.id,
                    ) from exc
                writes.stored_summary = summary

    def _batch(self, session: Session, writes: WriteState) -> list[EventRecord]:
        """The records of what is pending: runs of chunks packed where they can be.

        Packs go only to a backend that stores them, and only into a session
        whose format has them (older readers of an older session's format
        must still read it: see `FORMAT_VERSION`).
        """
        events = session.events
        batch = [
            EventRecord(seq, events[seq].type, events[seq].time, raw)
            for seq, raw in enumerate(writes.pending, writes.persisted)
        ]
        if (
            self._packs
            and len(batch) >= MIN_RUN
            and session.header.format_version >= PACKS_FORMAT
        ):
            return pack_batch(batch, events, max_bytes=self.codec.max_event_bytes)
        return batch

    async def _refused(
        self,
        session: Session,
        writes: WriteState,
        batch: Sequence[EventRecord],
        why: str,
    ) -> None:
        """Mark the session fenced; record the refusal the first time."""
        if not writes.fenced:
            writes.fenced = True
            detail = {"first_seq": batch[0].seq, "events": _events(batch)}
            await note(self.backend, "fenced_write", session.id, why, detail=detail)

    async def _append(
        self,
        session: Session,
        writes: WriteState,
        batch: Sequence[EventRecord],
        summary: SessionSummary | None = None,
    ) -> bool:
        """Append `batch` (with `summary`, if given); whether `summary` landed."""
        try:
            if summary is None:
                await self.backend.append(session.id, batch)
            else:
                await self.backend.append(session.id, batch, summary=summary)
        except SequenceError as exc:
            landed = exc.expected - batch[0].seq
            # Only a refusal of the batch's start says how much had landed
            # (a hole inside a batch is refused at the hole's seq).
            if (
                exc.got != batch[0].seq
                or not 0 < landed <= batch[-1].last - batch[0].seq + 1
            ):
                raise FlushError(
                    f"session {session.id!r}: the backend {self.name!r} expects "
                    f"seq {exc.expected} but {batch[0].seq} is next here; the "
                    "stored log and this live session disagree (was it written "
                    "by another process?)",
                    session_id=session.id,
                ) from exc
            # An earlier, failed-looking append had in fact landed `landed`
            # records: acknowledge them and send only the rest.
            acknowledge(writes, landed)
            # Rebuilt, not sliced: `landed` may end inside a pack of this batch.
            rest = self._batch(session, writes)
            if not rest:
                return False  # the summary did not ride along: stored apart
            return await self._append(session, writes, rest, summary)
        except FlushOutcomeUnknownError as exc:
            writes.maybe_landed = True
            writes.in_doubt = (exc.first_seq, exc.last_seq)
            writes.fenced = writes.fenced or exc.fenced
            raise in_doubt(
                self.name, session.id, writes.in_doubt, writes.fenced, batch, exc
            ) from exc
        except SessionDeletedError as exc:
            await self._refused(session, writes, batch, "deleted by another process")
            raise deleted(session.id, _events(batch), batch[0].seq) from exc
        except SessionFencedError as exc:
            await self._refused(session, writes, batch, "another process took over")
            if writes.in_doubt is not None:
                raise in_doubt(
                    self.name, session.id, writes.in_doubt, writes.fenced, batch, exc
                ) from exc
            raise FlushError(
                f"session {session.id!r}: another process took it over, so "
                f"{_events(batch)} event(s) from seq {batch[0].seq} cannot be stored "
                "by this one; close it (a report says what stayed unsaved) or "
                "resume it afresh to continue from what the new owner wrote",
                session_id=session.id,
            ) from exc
        except Exception as exc:
            # It may have landed all the same (a lost acknowledgement).
            writes.maybe_landed = True
            if writes.in_doubt is not None:
                raise in_doubt(
                    self.name, session.id, writes.in_doubt, writes.fenced, batch, exc
                ) from exc
            raise FlushError(
                f"session {session.id!r}: {_events(batch)} event(s) from seq "
                f"{batch[0].seq} could not be stored in {self.name!r}: {exc}. "
                "They stay buffered; the next flush retries them.",
                session_id=session.id,
            ) from exc
        acknowledge(writes, _events(batch))
        return summary is not None


def _events(batch: Sequence[EventRecord]) -> int:
    """How many events `batch` stands for (a packed record, several)."""
    return batch[-1].last + 1 - batch[0].seq


def _group(failures: list[BaseException]) -> BaseException:
    if len(failures) == 1:
        return failures[0]
    return ExceptionGroup(
        "several flushes failed", [f for f in failures if isinstance(f, Exception)]
    )
