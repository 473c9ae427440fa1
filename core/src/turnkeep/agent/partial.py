"""The text one model call streams, and what is kept of it when it is cut off.

`ReplyText` owns a model call's streamed text: each delta becomes an
`assistant/chunk`; a call that finishes records its whole text as an
`assistant/message`, and one that is cut off (cancelled, failed, timed out)
records what it streamed as a *partial* `assistant/message`, which the
history shows with a note that the reply was cut off
(`turnkeep.agent.messages.PARTIAL_REPLY_NOTE`). Because that message is an
event of the log, a cold resume and a warm continue see the same history.

Chunks become durable with the turn's next flush. A long stream can also be
flushed as it goes (`flush_every` seconds, off by default, so a short turn
stays one durable write); after a crash, recovery turns the chunks that were
durable at the log's end into the same partial message (`tail_text`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence

import attrs

from turnkeep.errors import EventRejectedError, FlushError
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessageData,
    RunDrift,
    SessionEvent,
)

__all__ = ["ReplyText", "tail_text"]


@attrs.define(eq=False)
class ReplyText:
    """The streamed text of one model call.

    Attributes:
        emit: appends one event payload to the session.
        flush: makes the session durable (raises `FlushError`).
        flush_every: seconds between flushes while text streams (`None`:
            none; the chunks wait for the turn's next durability point).
        clock: monotonic seconds.
    """

    emit: Callable[[object], object]
    flush: Callable[[], Awaitable[None]]
    flush_every: float | None = None
    clock: Callable[[], float] = time.monotonic
    parts: list[str] = attrs.field(factory=list[str])
    _flushed_at: float | None = None

    async def add(self, text: str) -> None:
        """Record one delta (empty ones are dropped), flushing when due."""
        if not text:
            return
        self.emit(AssistantChunkData(text=text))
        self.parts.append(text)
        every = self.flush_every
        if every is None:
            return
        now = self.clock()
        if self._flushed_at is None:
            self._flushed_at = now  # the first chunk starts the interval
        elif now - self._flushed_at >= every:
            self._flushed_at = now
            # Best effort: what fails to land stays in memory and the turn's
            # next durability point retries it, as for any flush.
            with contextlib.suppress(FlushError):
                await self.flush()

    @property
    def text(self) -> str:
        """The text streamed so far."""
        return "".join(self.parts)

    def finished(self) -> None:
        """Record the whole reply; always, even empty (it opens its calls)."""
        self.emit(AssistantMessageData(text=self.text))

    def cut_off(self) -> None:
        """Record the text streamed so far as a partial reply (if there is any)."""
        if not self.parts:
            return
        # A partial reply the admission rules refuse leaves its chunks in the
        # log without a message; the turn's own error matters more.
        with contextlib.suppress(EventRejectedError):
            self.emit(AssistantMessageData(text=self.text, partial=True))


def tail_text(events: Sequence[SessionEvent]) -> str | None:
    """The text of the chunks a log ends with, or `None` if it ends otherwise.

    A finished model call is followed by its `assistant/message` at once, so
    chunks at the very end are a call the process stopped inside. A
    `run/drift` that a resume recorded after them does not end them.
    """
    parts: list[str] = []
    for event in reversed(events):
        if isinstance(event, RunDrift) and not parts:
            continue
        if not isinstance(event, AssistantChunk):
            break
        parts.append(event.data.text)
    if not parts:
        return None
    return "".join(reversed(parts))
