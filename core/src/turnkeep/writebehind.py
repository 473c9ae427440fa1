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
  rest is sent.
- The per-session state lives on the session, so after a hot reload the
  fresh instance adopts live sessions where the old one stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from turnkeep.codec import EventCodec, EventRecord
from turnkeep.errors import (
    EventRejectedError,
    FlushError,
    SequenceError,
    TurnkeepError,
)
from turnkeep.events import SessionEvent
from turnkeep.hookspecs import hookimpl
from turnkeep.persistence import SessionPersistence

if TYPE_CHECKING:
    from turnkeep.host import Host
    from turnkeep.session import Session

__all__ = ["WriteBehind"]


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
    _disposed: bool = attrs.field(init=False, default=False)

    # -- hooks -------------------------------------------------------------

    @hookimpl(tryfirst=True)
    def session_event(self, session: Session, event: SessionEvent) -> None:
        """Snapshot the event into the session's pending writes."""
        writes = session.writes
        pending = writes.pending
        if writes.persisted + len(pending) == event.seq:
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
        # Otherwise the state is behind (the session lived without a
        # persistence plugin for a while); flush catches up in seq order.

    @hookimpl
    def session_created(self, session: Session) -> None:
        """Snapshot a seed and start registering the session with the backend."""
        if session.origin == "resumed":
            return
        self._catch_up(session)
        self._start_init(session)

    @hookimpl
    async def session_flush(self, session: Session) -> None:
        """Append everything pending for the session, then its summary."""
        await self._drain(session)

    @hookimpl
    async def session_closed(self, session: Session) -> None:
        """Release the session's writer role."""
        await self.backend.release(session.id)

    @hookimpl
    def plugin_apply(self, host: Host) -> None:
        """Adopt the sessions that are already live."""
        for session in host.sessions.list():
            writes = session.writes
            if writes.init is not None and writes.init.done():
                if not writes.init.cancelled():
                    writes.init.exception()  # retried below; mark it as seen
                writes.init = None
            if writes.persisted == 0 and writes.init is None:
                # Nothing durable yet: a backend may have kept the registration
                # in the previous instance only (lazy creation), so register
                # the session with this one.
                writes.created = False
            if writes.created or writes.init is not None:
                continue
            try:
                self._catch_up(session)
            except EventRejectedError:
                continue  # reported by the next flush, which retries it
            self._start_init(session)

    @hookimpl
    async def plugin_dispose(self, host: Host) -> None:
        """Drain every live session, then close the backend."""
        self._disposed = True
        sessions = host.sessions.list()
        outcomes = await asyncio.gather(
            *(self._drain(s) for s in sessions), return_exceptions=True
        )
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

    def _catch_up(self, session: Session) -> None:
        """Snapshot events the state has not seen yet (seed, adoption)."""
        writes = session.writes
        events = session.events
        start = writes.persisted + len(writes.pending)
        snapshot = self.codec.snapshot
        for event in events[start:]:
            writes.pending.append(snapshot(event))

    def _start_init(self, session: Session) -> None:
        writes = session.writes
        if writes.created or writes.init is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet: the first flush registers the session
        writes.init = loop.create_task(self._create(session))

    async def _create(self, session: Session) -> None:
        await self.backend.create(session.meta)
        session.writes.created = True

    async def _ensure_created(self, session: Session) -> None:
        writes = session.writes
        if writes.created:
            writes.init = None
            return
        init = writes.init
        try:
            if init is None:
                await self._create(session)
            else:
                await init
        except TurnkeepError as exc:
            writes.init = None  # the next flush tries again
            raise FlushError(
                f"session {session.id!r} could not be registered with "
                f"{self.name!r}: {exc}",
                session_id=session.id,
            ) from exc
        finally:
            if writes.created:
                writes.init = None

    async def _drain(self, session: Session) -> None:
        writes = session.writes
        async with writes.lock:
            await self._ensure_created(session)
            try:
                self._catch_up(session)
            except EventRejectedError as exc:
                raise FlushError(
                    f"session {session.id!r}: {exc}", session_id=session.id
                ) from exc
            if writes.pending:
                events = session.events
                start = writes.persisted
                batch = [
                    EventRecord(seq, events[seq].type, events[seq].time, raw)
                    for seq, raw in enumerate(writes.pending, start)
                ]
                await self._append(session, batch)
            if writes.summary_dirty:
                writes.summary_dirty = False
                try:
                    await self.backend.update(session.id, session.summary)
                except TurnkeepError as exc:
                    writes.summary_dirty = True
                    raise FlushError(
                        f"session {session.id!r}: its summary could not be "
                        f"stored in {self.name!r}: {exc}",
                        session_id=session.id,
                    ) from exc

    async def _append(self, session: Session, batch: Sequence[EventRecord]) -> None:
        try:
            await self.backend.append(session.id, batch)
        except SequenceError as exc:
            landed = exc.expected - batch[0].seq
            if not 0 < landed <= len(batch):
                raise FlushError(
                    f"session {session.id!r}: the backend {self.name!r} expects "
                    f"seq {exc.expected} but {batch[0].seq} is next here; the "
                    "stored log and this live session disagree (was it written "
                    "by another process?)",
                    session_id=session.id,
                ) from exc
            # An earlier, failed-looking append had in fact landed `landed`
            # records: acknowledge them and send only the rest.
            self._acknowledge(session, landed)
            rest = batch[landed:]
            if rest:
                await self._append(session, rest)
            return
        except TurnkeepError as exc:
            raise FlushError(
                f"session {session.id!r}: {len(batch)} event(s) from seq "
                f"{batch[0].seq} could not be stored in {self.name!r}: {exc}. "
                "They stay buffered; the next flush retries them.",
                session_id=session.id,
            ) from exc
        self._acknowledge(session, len(batch))

    @staticmethod
    def _acknowledge(session: Session, count: int) -> None:
        writes = session.writes
        del writes.pending[:count]
        writes.persisted += count


def _group(failures: list[BaseException]) -> BaseException:
    if len(failures) == 1:
        return failures[0]
    return ExceptionGroup(
        "several flushes failed", [f for f in failures if isinstance(f, Exception)]
    )
