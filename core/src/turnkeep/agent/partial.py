"""The text one model call streams, and what is kept of it when it is cut off.

`ReplyText` owns a model call's streamed text: each delta becomes an
`assistant/chunk`; a call that finishes records its whole text as an
`assistant/message`, and one that is cut off (cancelled, failed, timed out)
records what it streamed as a *partial* `assistant/message`, which the
history shows with a note that the reply was cut off
(`turnkeep.agent.messages.PARTIAL_REPLY_NOTE`). Because that message is an
event of the log, a cold resume and a warm continue see the same history.

With secret redaction on, each delta is held back until the text after it
decides every secret that could include it (`turnkeep.heldstream`): its
chunk is appended then, redacted in the context of the whole reply, and
whatever is still held is appended when the call finishes or is cut off.
So no piece of a secret split across deltas reaches the log, the
`session_event` observers or a turn's streams.

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

from turnkeep.agent.turns import Running
from turnkeep.agent.usage import UsageMeter
from turnkeep.agent.watchdog import Guard
from turnkeep.errors import EventRejectedError, FlushError
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessageData,
    RunDrift,
    SessionEvent,
)
from turnkeep.heldstream import HeldStream

__all__ = ["ChunkWriter", "ReplyText", "tail_text"]


@attrs.define(eq=False)
class ChunkWriter:
    """Appends a model call's deltas as `assistant/chunk`s for its turn.

    What the turn's `_emit` does for any event, inlined for this one kind:
    it runs for every delta. Each chunk is counted (`meter`), moves the
    stall limit (`guard`) and goes to the turn's sinks.

    Attributes:
        running: the turn; its `redactor`, if any, redacted the pieces
            given to `released` already.
        meter: its usage.
        guard: its watchdog.
    """

    running: Running
    meter: UsageMeter
    guard: Guard

    def one(self, text: str) -> None:
        """Append one delta as it came."""
        running = self.running
        event = running.session.append(AssistantChunkData(text=text))
        meter = self.meter
        meter.events += 1
        meter.bytes += meter.size(event)
        for sink in running.sinks:
            sink(event)
        guard = self.guard
        if guard.stall is not None:  # else nothing to move
            guard.activity()

    def released(self, pieces: list[str]) -> None:
        """Append pieces a held stream released, redacted by `redactor`."""
        running = self.running
        append, by = running.session.append_redacted, running.redactor
        meter, sinks = self.meter, running.sinks
        size = meter.size
        count = total = 0
        try:
            for text in pieces:
                event = append(AssistantChunkData(text=text), by)
                count += 1
                total += size(event)
                if sinks:
                    for sink in sinks:
                        sink(event)
        finally:  # counted once, also when a piece is refused
            meter.events += count
            meter.bytes += total
        guard = self.guard
        if guard.stall is not None:  # else nothing to move
            guard.activity()


@attrs.define(eq=False)
class ReplyText:
    """The streamed text of one model call.

    Attributes:
        emit: appends one event payload to the session.
        flush: makes the session durable (raises `FlushError`).
        flush_every: seconds between flushes while text streams (`None`:
            none; the chunks wait for the turn's next durability point).
        clock: monotonic seconds.
        writer: appends the deltas as `assistant/chunk`s (default: each
            through `emit`). With a `redactor`, each delta is held back
            (`held`) until its text can be redacted knowing what follows.
    """

    emit: Callable[[object], object]
    flush: Callable[[], Awaitable[None]]
    flush_every: float | None = None
    clock: Callable[[], float] = time.monotonic
    writer: ChunkWriter | None = None
    held: HeldStream | None = attrs.field(init=False, default=None)
    parts: list[str] = attrs.field(factory=list[str])
    _flushed_at: float | None = None

    def __attrs_post_init__(self) -> None:
        writer = self.writer
        if writer is not None and writer.running.redactor is not None:
            self.held = writer.running.redactor.held_stream()

    async def add(self, text: str) -> None:
        """Record one delta (empty ones are dropped), flushing when due."""
        if self.take(text):
            await self.flush_now()

    def take(self, text: str) -> bool:
        """Record one delta (empty ones are dropped); no flush.

        Returns:
            Whether a flush is due (`flush_every` has passed): then await
            `flush_now`. Synchronous, so a delta costs no coroutine.
        """
        if not text:
            return False
        self.parts.append(text)
        held = self.held
        if held is None:
            writer = self.writer
            if writer is None:
                self.emit(AssistantChunkData(text=text))
            else:
                writer.one(text)
        else:
            writer = self.writer
            assert writer is not None  # noqa: S101 - `held` needs one
            released = held.feed(text)
            if released:
                writer.released(released)
            elif writer.guard.stall is not None:
                writer.guard.activity()  # the model is streaming all the same
        every = self.flush_every
        if every is None:
            return False
        now = self.clock()
        if self._flushed_at is None:
            self._flushed_at = now  # the first chunk starts the interval
        elif now - self._flushed_at >= every:
            self._flushed_at = now
            return True
        return False

    async def flush_now(self) -> None:
        """Flush while text streams (best effort)."""
        # What fails to land stays in memory and the turn's next durability
        # point retries it, as for any flush.
        with contextlib.suppress(FlushError):
            await self.flush()

    @property
    def text(self) -> str:
        """The text streamed so far."""
        return "".join(self.parts)

    def finished(self) -> str:
        """Record the whole reply; always, even empty (it opens its calls).

        Returns:
            The reply as recorded (redacted).
        """
        self._release_held()
        said = self.emit(AssistantMessageData(text=self.text))
        return said.data.text if isinstance(said, SessionEvent) else self.text

    def cut_off(self) -> None:
        """Record the text streamed so far as a partial reply (if there is any)."""
        if not self.parts:
            return
        # A partial reply the admission rules refuse leaves its chunks in the
        # log without a message; the turn's own error matters more.
        with contextlib.suppress(EventRejectedError):
            self._release_held()
        with contextlib.suppress(EventRejectedError):
            self.emit(AssistantMessageData(text=self.text, partial=True))

    def _release_held(self) -> None:
        """Append what `held` still holds: the stream has ended."""
        held, writer = self.held, self.writer
        if held is None or writer is None:
            return
        released = held.end()
        if released:
            writer.released(released)


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
