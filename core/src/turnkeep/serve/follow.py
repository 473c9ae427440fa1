"""Following sessions from another process: the next commit, and the tails.

`wait_for_commit` is the one way the service learns that a session's log
moved: the backend's own `wait_for_commit` where it has one (inotify,
else a stat, on JSONL, `data_version` on SQLite, `LISTEN/NOTIFY` on PostgreSQL: see
`turnkeep.follow`), else its cheap last-durable-seq probe at a short
interval; either wakes early when this process's own `session_committed`
hook says so.

`Tails` keeps one reader per followed session, however many clients
follow it: the reader fetches each committed record once (`read_after`)
and offers it to every subscriber, whose queue holds `queue_size` records
at most. A subscriber whose queue would overflow is dropped, not waited
for: a slow client never slows the reader, other clients, or the writer.
Its stream ends, and it reconnects from the last seq it got (SSE's
`Last-Event-ID`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from typing import Final

import attrs

from turnkeep import follow
from turnkeep.errors import TurnkeepError
from turnkeep.eventreads import last_durable_seq, read_after
from turnkeep.persistence import SessionPersistence

__all__ = ["READ_PAGE", "Subscriber", "Tails", "wait_for_commit"]

READ_PAGE: Final = 500
"""Records fetched per `read_after` while catching up."""

_log: Final = logging.getLogger("turnkeep.serve")


async def wait_for_commit(
    backend: SessionPersistence,
    session_id: str,
    after: int,
    *,
    within: float,
    interval: float,
    wake: asyncio.Event | None = None,
) -> int:
    """The session's last durable seq once it differs from `after`.

    Returns the last durable seq as soon as it is not `after` (larger: new
    commits; smaller: the session was deleted and stored again), or
    whatever it is when `timeout` seconds have passed.

    Raises:
        SessionNotFoundError: nothing is stored under this id.
    """
    if follow.has_commit_waiter(backend):
        return await _wait_natively(backend, session_id, after, within, wake)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        last = await last_durable_seq(backend, session_id)
        left = deadline - loop.time()
        if last != after or left <= 0:
            return last
        pause = min(interval, left)
        if wake is None:
            await asyncio.sleep(pause)
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), pause)
        wake.clear()


async def _wait_natively(
    backend: SessionPersistence,
    session_id: str,
    after: int,
    within: float,
    wake: asyncio.Event | None,
) -> int:
    last = await last_durable_seq(backend, session_id)
    if last != after or within <= 0:
        return last  # moved already, or deleted and stored again (smaller)
    waiting = asyncio.ensure_future(
        follow.wait_for_commit(backend, session_id, after, within)
    )
    if wake is None:
        return await waiting
    woken = asyncio.ensure_future(wake.wait())
    try:
        await asyncio.wait({waiting, woken}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        woken.cancel()
        if not waiting.done():
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
    wake.clear()
    if waiting.done() and not waiting.cancelled():
        return waiting.result()  # raises what the backend's wait raised
    return await last_durable_seq(backend, session_id)


@attrs.define(eq=False)
class Subscriber:
    """One client's place in a tail: at most `limit` records waiting for it.

    The tail `offer`s batches; the client `take`s what is waiting. A batch
    that would pass `limit` drops the subscriber instead of waiting for it.
    """

    session_id: str
    limit: int
    pending: deque[tuple[int, bytes]] = attrs.field(factory=deque[tuple[int, bytes]])
    ready: asyncio.Event = attrs.field(factory=asyncio.Event)
    dropped: bool = False

    def offer(self, batch: Sequence[tuple[int, bytes]]) -> bool:
        """Queue `batch`; false (and nothing queued) if it would pass `limit`."""
        if len(self.pending) + len(batch) > self.limit:
            return False
        self.pending.extend(batch)
        self.ready.set()
        return True

    def drop(self) -> None:
        """End this subscriber: what waits is discarded, `take` says `None`."""
        self.dropped = True
        self.pending.clear()
        self.ready.set()

    async def take(self, most: int) -> list[tuple[int, bytes]] | None:
        """Up to `most` waiting records, once there are some; `None`: dropped."""
        while not self.pending:
            if self.dropped:
                return None
            await self.ready.wait()
            self.ready.clear()
        if self.dropped:
            return None
        count = min(most, len(self.pending))
        return [self.pending.popleft() for _ in range(count)]


@attrs.define(eq=False)
class _Tail:
    session_id: str
    subscribers: set[Subscriber] = attrs.field(factory=set[Subscriber])
    wake: asyncio.Event = attrs.field(factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


@attrs.define(eq=False)
class Tails:
    """The shared readers of followed sessions."""

    backend: SessionPersistence
    interval: float = 0.1
    queue_size: int = 1024
    _tails: dict[str, _Tail] = attrs.field(init=False, factory=dict[str, _Tail])

    def subscribe(self, session_id: str) -> Subscriber:
        """Start receiving the records `session_id` commits from now on."""
        tail = self._tails.get(session_id)
        if tail is None:
            tail = self._tails[session_id] = _Tail(session_id)
        sub = Subscriber(session_id, self.queue_size)
        tail.subscribers.add(sub)
        if tail.task is None or tail.task.done():
            tail.task = asyncio.get_running_loop().create_task(
                self._read(tail), name=f"turnkeep-serve-tail-{session_id}"
            )
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        """Stop delivering to `sub` (its tail stops with its last subscriber)."""
        tail = self._tails.get(sub.session_id)
        if tail is None:
            return
        tail.subscribers.discard(sub)
        if not tail.subscribers:
            del self._tails[sub.session_id]
            if tail.task is not None:
                tail.task.cancel()

    def poke(self, session_id: str) -> None:
        """Say that `session_id` committed (its reader looks at once)."""
        tail = self._tails.get(session_id)
        if tail is not None:
            tail.wake.set()

    @property
    def followed(self) -> int:
        """Sessions with a reader now."""
        return len(self._tails)

    async def aclose(self) -> None:
        """Stop every reader and end every subscriber's stream."""
        tails, self._tails = list(self._tails.values()), {}
        for tail in tails:
            for sub in tail.subscribers:
                sub.drop()
            if tail.task is not None:
                tail.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await tail.task

    async def _read(self, tail: _Tail) -> None:
        try:
            await self._follow(tail)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a reader must never fail in silence
            _log.exception("following %r failed; its streams end", tail.session_id)
            self._tails.pop(tail.session_id, None)
            for sub in list(tail.subscribers):
                sub.drop()  # their clients reconnect, to a new reader

    async def _follow(self, tail: _Tail) -> None:
        position: int | None = None
        notice: str | None = None
        while tail.subscribers:
            try:
                if position is None:
                    position = await last_durable_seq(self.backend, tail.session_id)
                last = await wait_for_commit(
                    self.backend,
                    tail.session_id,
                    position,
                    within=max(self.interval, 1.0),
                    interval=self.interval,
                    wake=tail.wake,
                )
                if last < position:
                    position = last  # deleted and stored again: follow the new log
                while position < last:
                    raws = await read_after(
                        self.backend, tail.session_id, position, READ_PAGE
                    )
                    if not raws:
                        break
                    batch = [(position + 1 + i, raw) for i, raw in enumerate(raws)]
                    position += len(raws)
                    # In pieces a queue can hold, letting the clients take
                    # each: a flush bigger than a queue must not drop
                    # clients that keep up.
                    for start in range(0, len(batch), self.queue_size):
                        self._fan_out(tail, batch[start : start + self.queue_size])
                        await asyncio.sleep(0)
                notice = None
            except TurnkeepError as exc:
                # A writer restarting, a session not stored yet, a store
                # briefly unreadable: say so once and keep looking.
                if notice != type(exc).__name__:
                    notice = type(exc).__name__
                    _log.warning("following %r: %s", tail.session_id, exc)
                await asyncio.sleep(self.interval)

    def _fan_out(self, tail: _Tail, batch: Sequence[tuple[int, bytes]]) -> None:
        for sub in list(tail.subscribers):
            if not sub.offer(batch):
                tail.subscribers.discard(sub)
                sub.drop()
