"""The operations on one store: items read and changed on a turnkeep host.

A `StoreItems` runs on the event loop of its host and owns, per session id,
one `Shared` record: the lock that orders that session's operations and the
live turnkeep session that writes it (made live by the first change, and
shared by every `TurnkeepSession` object with that id). Reads of a live
session walk its log in memory; reads of a session this process does not
write walk the stored log with the backend's tail read, fetching only the
events that hold the items asked for. Every change is one event, flushed
before the call returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, cast

import attrs
import msgspec

from turnkeep.errors import (
    FlushError,
    SessionCorruptError,
    SessionHeldError,
    SessionLockedError,
    SessionNotFoundError,
)
from turnkeep.eventreads import last_durable_seq, read_after
from turnkeep.events import SessionEvent
from turnkeep.host import Host
from turnkeep.lossless import checks_for
from turnkeep.session import Session

from .events import (
    EMPTY,
    ClearData,
    ItemsData,
    OaiItems,
    PopData,
    Stack,
    below,
    is_oai,
    items_of,
    last_stack,
    stack_after,
    take,
    walk,
)

__all__ = ["Item", "Shared", "StoreItems", "copy_items"]

Item = dict[str, Any]

_JUMP: Final = 16
"""At most this many events are read from storage right after a jump."""

_FIRST_PROMPT: Final = 500
"""Characters of the first user message kept as the session's first prompt."""

_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder()


@attrs.define(eq=False)
class Shared:
    """One session id's state on a store, shared by its session objects."""

    session_id: str
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    live: Session | None = None


_lossless: Final = checks_for([OaiItems])[OaiItems]


def copy_items(items: Sequence[Any]) -> list[Item]:
    """A deep copy of JSON items (what is stored is what was given then).

    Raises:
        LossyPayloadError: an item holds a value JSON would give back as
            something else (a set, tuple, bytes, NaN, a non-text key, an
            object); the message names its path. Nothing was stored.
    """
    _lossless(
        OaiItems(seq=0, time=0, data=ItemsData(items=list(items), below=None, length=0))
    )
    return _copy(items)


def _copy(items: Sequence[Any]) -> list[Item]:
    # Stored items passed the check when they were added.
    return cast("list[Item]", _decoder.decode(_encoder.encode(items)))


@attrs.define(eq=False)
class StoreItems:
    """The SDK's session operations on one started host."""

    host: Host
    _shared: dict[str, Shared] = attrs.field(factory=dict[str, Shared], init=False)

    @asynccontextmanager
    async def _locked(self, session_id: str) -> AsyncGenerator[Shared]:
        """The shared state of `session_id`, its lock held (made on first use)."""
        while True:
            shared = self._shared.get(session_id)
            if shared is None:
                shared = self._shared[session_id] = Shared(session_id)
            async with shared.lock:
                if self._shared.get(session_id) is shared:  # not released meanwhile
                    yield shared
                    return

    async def get(self, session_id: str, limit: int | None) -> list[Item]:
        """The newest `limit` items (all when `None`), oldest first."""
        async with self._locked(session_id) as shared:
            live = self._usable(shared)
            if live is not None:
                events = live.events
                found = take(last_stack(events), limit, events, shared.session_id)
            else:
                found = await self._stored(shared.session_id, limit)
        return _copy(found)

    async def add(self, session_id: str, items: list[Item]) -> None:
        """Push `items` in one event, durable when this returns."""
        async with self._locked(session_id) as shared:
            session = await self._open(shared)
            stack = last_stack(session.events)
            data = ItemsData(
                items=items, below=stack.top, length=stack.length + len(items)
            )
            session.append(data)
            if session.summary.first_prompt is None:
                prompt = _first_prompt(items)
                if prompt is not None:
                    session.set_summary(first_prompt=prompt)
            await self._flush(shared, session)

    async def pop(self, session_id: str) -> Item | None:
        """Remove the newest item and return it (`None`: there is none)."""
        async with self._locked(session_id) as shared:
            if not await self._exists(shared):
                return None
            session = await self._open(shared)
            events = session.events
            stack = last_stack(events)
            if stack.top is None:
                return None
            (item,) = take(stack, 1, events, shared.session_id)  # checks the pointer
            data = items_of(events[stack.top.seq], shared.session_id)
            after = PopData(top=below(stack.top, data), length=stack.length - 1)
            session.append(after)
            await self._flush(shared, session)
        return _copy([item])[0]

    async def clear(self, session_id: str) -> None:
        """Remove every item (one `oai/clear` event; nothing if already empty)."""
        async with self._locked(session_id) as shared:
            if not await self._exists(shared):
                return
            session = await self._open(shared)
            stack = last_stack(session.events)
            if stack.length == 0:
                return
            session.append(ClearData(removed=stack.length))
            await self._flush(shared, session)

    async def release(self, session_id: str) -> None:
        """Close the live session (its writer role is released)."""
        async with self._locked(session_id) as shared:
            live, shared.live = shared.live, None
            if live is not None and not live.closed:
                await self.host.sessions.close(live.id)
            del self._shared[session_id]

    # -- the pieces ----------------------------------------------------------

    def _usable(self, shared: Shared) -> Session | None:
        live = shared.live
        if live is None or live.closed or self.host.is_fenced(live):
            return None
        return live

    async def _exists(self, shared: Shared) -> bool:
        if self._usable(shared) is not None:
            return True
        return await self.host.require_persistence().has(shared.session_id)

    async def _open(self, shared: Shared) -> Session:
        live = self._usable(shared)
        if live is not None:
            return live
        if shared.live is not None and not shared.live.closed:
            # Taken over by another process: what this one held is theirs now.
            await self.host.sessions.abandon(shared.live.id, reason="taken over")
        shared.live = None
        try:
            shared.live = await self.host.sessions.open(shared.session_id)
        except SessionHeldError:
            raise
        except SessionLockedError as exc:
            # The backend's message offers `claim(steal=True)`, which this
            # class does not: say what its user can do.
            raise SessionLockedError(
                f"conversation {shared.session_id!r} is being written by another "
                "live process; use it from one process at a time, or close the "
                "other one (a process that died lets go of it: at once on JSONL "
                "and SQLite, when its 30 s lease runs out on PostgreSQL)"
            ) from exc
        return shared.live

    async def _flush(self, shared: Shared, session: Session) -> None:
        try:
            await session.flush()
        except FlushError:
            # The call fails; storage holds the change or not, and the next
            # call reads that, not an unsaved copy kept here.
            shared.live = None
            if not session.closed:
                await self.host.sessions.abandon(session.id, reason="flush failed")
            raise

    async def _stored(self, session_id: str, limit: int | None) -> list[Item]:
        backend = self.host.require_persistence()
        codec = self.host.codec
        try:
            last = await last_durable_seq(backend, session_id)
        except SessionNotFoundError:
            return []
        cache: dict[int, SessionEvent] = {}
        previous = [last + 1]

        async def fetch(seq: int, wanted: int) -> SessionEvent:
            # Read back from `seq`, in one call, as many events as items are
            # still wanted (each holds at least one): one pass, whatever the
            # backend's cost per call. Right after a jump over popped or
            # cleared events only a few, as another jump may follow.
            jumped = seq != previous[0] - 1
            previous[0] = seq
            if seq not in cache:
                span = min(max(wanted, 1), _JUMP) if jumped else max(wanted, 1)
                start = max(0, seq - span + 1)
                raws = await read_after(backend, session_id, start - 1, seq - start + 1)
                for offset, raw in enumerate(raws):
                    cache[start + offset] = codec.decode(raw)
            if seq not in cache:
                raise SessionCorruptError(
                    f"session {session_id!r}: event {seq} is not stored though "
                    f"the last durable seq is {last}",
                    session_id=session_id,
                    offset=seq,
                )
            return cache[seq]

        stack = EMPTY
        seq = last
        while seq >= 0:  # the last event of ours (others are not expected)
            event = await fetch(seq, limit if limit is not None else 1)
            if is_oai(event):
                stack = stack_after(event)
                break
            seq -= 1
        return await _walk_stored(stack, limit, session_id, fetch)


async def _walk_stored(
    stack: Stack,
    limit: int | None,
    session_id: str,
    fetch: Callable[[int, int], Awaitable[SessionEvent]],
) -> list[Item]:
    steps = walk(stack, limit, session_id)
    try:
        seq, wanted = next(steps)
        while True:
            seq, wanted = steps.send(await fetch(seq, wanted))
    except StopIteration as done:
        return cast("list[Item]", done.value)


def _first_prompt(items: Sequence[Item]) -> str | None:
    for item in items:
        if item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str) and content.strip():
                return content[:_FIRST_PROMPT]
    return None
