"""A running turn's events as an async iterator: as appended, or once durable.

Owns `TurnStream` (made by `AgentLoop.stream_turn`) and how events reach it.

- Live delivery (the default) queues each event as the turn appends it. A
  crash can lose such an event, and the seq it had is then given to another
  event when the session is resumed.
- Committed delivery (`committed=True`) holds each appended event back until
  it is durable. After every flush the turn makes (a failed one included:
  part of it may have landed) and once more when the turn ends, the held
  events below the session's durable frontier, `len(session.events) -
  host.unsaved(session)`, are released in seq order. So a consumer sees
  only seqs that no crash can reuse. Events still held when the turn ends
  are never yielded: the stream raises the turn's error instead (or
  `TurnNotDurableError`, should the turn have ended without one).

The frontier is the one the durability gate uses, so without persistence
(nothing to wait for) every flush releases everything appended so far.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Callable

import attrs

from turnkeep.agent.turns import Outcome, Running, TurnResult
from turnkeep.errors import TurnNotDurableError
from turnkeep.events import SessionEvent
from turnkeep.session import Session

__all__ = ["TurnStream", "end_stream", "open_stream"]


@attrs.define(eq=False)
class _Held:
    """The appended events of a committed stream that are not durable yet."""

    queue: asyncio.Queue[SessionEvent | None]
    session: Session
    unsaved: Callable[[Session], int]
    events: collections.deque[SessionEvent] = attrs.field(
        factory=collections.deque[SessionEvent]
    )

    def hold(self, event: SessionEvent) -> None:
        self.events.append(event)

    def release(self) -> None:
        """Queue the held events that are durable now, in seq order."""
        durable = len(self.session.events) - self.unsaved(self.session)
        while self.events and self.events[0].seq < durable:
            self.queue.put_nowait(self.events.popleft())


@attrs.define(eq=False)
class TurnStream:
    """The events of one running turn, as an async iterator.

    Made by `AgentLoop.stream_turn`; see the module for the two deliveries.
    """

    _queue: asyncio.Queue[SessionEvent | None]
    _task: asyncio.Task[Outcome]
    _held: _Held | None = None
    _ended: bool = attrs.field(init=False, default=False)

    @property
    def committed(self) -> bool:
        """Whether the stream yields only events that are durable."""
        return self._held is not None

    def __aiter__(self) -> AsyncIterator[SessionEvent]:
        return self

    async def __anext__(self) -> SessionEvent:
        if self._ended:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is None:
            self._ended = True
            self._task.result()  # raises the turn's error, if any
            if self._held is not None and self._held.events:
                held = self._held.events
                raise TurnNotDurableError(
                    f"session {self._held.session.id!r}: the turn ended with "
                    f"seq {held[0].seq}..{held[-1].seq} not durable; they were "
                    "not yielded (the next flush retries them)"
                )
            raise StopAsyncIteration
        return item

    async def result(self) -> TurnResult:
        """Wait for the turn to end and return its result."""
        outcome = await asyncio.shield(self._task)
        assert outcome.result is not None  # noqa: S101 - a new turn always has one
        return outcome.result


def open_stream(
    running: Running, *, committed: bool, unsaved: Callable[[Session], int]
) -> TurnStream:
    """Attach a `TurnStream` to a started turn.

    Args:
        running: the turn, its task started.
        committed: yield events only once durable (else as appended).
        unsaved: how many of a session's events are not durable yet
            (`Host.unsaved`).
    """
    task = running.task
    assert task is not None  # noqa: S101 - set when the turn started
    queue: asyncio.Queue[SessionEvent | None] = asyncio.Queue()
    held: _Held | None = None
    if committed:
        held = _Held(queue, running.session, unsaved)
        running.sinks.append(held.hold)
        running.flush_watchers.append(held.release)
    else:
        running.sinks.append(queue.put_nowait)
    task.add_done_callback(end_stream(queue, held))
    return TurnStream(queue, task, held)


def end_stream(
    queue: asyncio.Queue[SessionEvent | None], held: _Held | None = None
) -> Callable[[asyncio.Task[Outcome]], None]:
    """A done-callback that ends a `TurnStream`'s queue when its turn ends."""

    def done(task: asyncio.Task[Outcome]) -> None:
        if held is not None:
            held.release()  # whatever became durable after the last flush
        queue.put_nowait(None)
        if not task.cancelled():
            # Seen here, so a consumer that stopped iterating early does not
            # leave "Task exception was never retrieved" behind; `result()`
            # still raises it.
            task.exception()

    return done
