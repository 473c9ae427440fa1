"""Partial replies: what a cut-off model call streamed stays in the history.

A model call cancelled or failed while it streamed leaves a partial
`assistant/message`; the next model call sees it with a note that it was cut
off, byte-identical whether the session continues warm or is resumed cold.
After a crash, recovery keeps the chunks that were durable the same way;
with `Watch(stream_flush_seconds=...)` a long stream is flushed as it goes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import attrs
import pytest
from tests.loop.support import SharedMemory, shared_host, stored_events

from turnkeep import AgentLoop, Host, ModelOutput, ModelRequest, TextDelta
from turnkeep.agent import encode_messages
from turnkeep.agent.history import history_of
from turnkeep.agent.messages import PARTIAL_REPLY_NOTE, Message, derive_messages
from turnkeep.agent.partial import ReplyText, tail_text
from turnkeep.agent.watchdog import Watch
from turnkeep.errors import ConfigurationError, FlushError, SessionNotFoundError
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessage,
    AssistantMessageData,
    ModelInfo,
    SessionEvent,
    TurnEnd,
)


@attrs.define(eq=False)
class Streaming:
    """Streams `pieces` (a short sleep apart), then hangs or fails; later echoes."""

    pieces: tuple[str, ...] = ("thinking ", "about ", "it")
    then: str = "hang"
    gap: float = 0.0
    streamed: asyncio.Event = attrs.field(factory=asyncio.Event)
    requests: list[ModelRequest] = attrs.field(factory=list[ModelRequest])

    def describe(self) -> ModelInfo:
        """A test double: named by its class."""
        return ModelInfo(name="Streaming", provider="test")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        self.requests.append(request)
        if len(self.requests) > 1:
            yield TextDelta("fine")
            return
        for piece in self.pieces:
            yield TextDelta(piece)
            if self.gap:
                await asyncio.sleep(self.gap)
        self.streamed.set()
        if self.then == "fail":
            raise RuntimeError("connection reset")
        await asyncio.Event().wait()


def _partial_reply() -> Message:
    return Message(
        role="assistant",
        content=f"thinking about it\n\n{PARTIAL_REPLY_NOTE}",
        partial=True,
    )


@pytest.mark.parametrize("how", ["cancel", "fail"])
@pytest.mark.asyncio
async def test_a_cut_off_reply_stays_in_the_history_warm_and_cold(how: str) -> None:
    plugin = SharedMemory()
    model = Streaming(then="hang" if how == "cancel" else "fail")
    async with shared_host(plugin) as warm_host:
        loop = AgentLoop.create("a", host=warm_host, model=model)
        sid = loop.session_id
        if how == "cancel":
            running = asyncio.create_task(loop.run_turn("hi"))
            await model.streamed.wait()
            await loop.cancel()
            result = await running
        else:
            result = await loop.run_turn("hi")
        assert result.status == ("cancelled" if how == "cancel" else "failed")
        events = warm_host.sessions.get(sid).events
        assert [e.type for e in events[-5:]] == [
            "assistant/chunk",
            "assistant/chunk",
            "assistant/chunk",
            "assistant/message",
            "turn/end",
        ]
        warm = history_of(warm_host.sessions.get(sid))
        assert warm[-1] == _partial_reply()
        # Cold: the durable log, decoded afresh, derives the same bytes.
        cold = derive_messages(await stored_events(warm_host, sid))
        assert encode_messages(cold) == encode_messages(warm)
        # The next model call is told that its previous reply was cut off.
        assert (await loop.run_turn("go on")).status == "completed"
        assert model.requests[1].messages[-2] == _partial_reply()
        await loop.close()
    async with shared_host(plugin) as cold_host:
        resumed = await AgentLoop.resume("a", sid, host=cold_host, model=model)
        assert encode_messages(history_of(cold_host.sessions.get(sid))) == (
            encode_messages(derive_messages(await stored_events(cold_host, sid)))
        )
        assert _partial_reply() in history_of(cold_host.sessions.get(sid))
        await resumed.close()


@pytest.mark.asyncio
async def test_durable_chunks_survive_a_crash_as_a_partial_reply() -> None:
    plugin = SharedMemory()
    model = Streaming(gap=0.002)
    # Without redaction each delta is appended as it comes (with it, these
    # short pieces would be held back until the call ends).
    async with (
        shared_host(plugin, redact_secrets=False) as first,
        shared_host(plugin, redact_secrets=False) as second,
    ):
        # Every chunk after the first is at least 2 ms after the previous
        # flush, so a 1 ms interval flushes at the second and third chunk.
        loop = AgentLoop.create(
            "a", host=first, model=model, watch=Watch(stream_flush_seconds=0.001)
        )
        sid = loop.session_id
        running = asyncio.create_task(loop.run_turn("hi"))
        await model.streamed.wait()
        stored = await stored_events(first, sid)
        # Durable while the turn still runs: the last flush was at the third
        # chunk; the turn itself has not ended.
        assert [e.type for e in stored[-3:]] == ["assistant/chunk"] * 3
        # The process "crashes": another takes the session over from what
        # is stored, and recovery keeps the durable text as a partial reply.
        resumed = await AgentLoop.resume(
            "a", sid, host=second, model=Streaming(), steal=True
        )
        events = second.sessions.get(sid).events
        cut = [e for e in events if isinstance(e, AssistantMessage)]
        assert [c.data for c in cut] == [
            AssistantMessageData(text="thinking about it", partial=True)
        ]
        assert isinstance(events[-1], TurnEnd)
        assert events[-1].data.status == "interrupted"
        assert history_of(second.sessions.get(sid))[-1] == _partial_reply()
        assert encode_messages(
            derive_messages(await stored_events(second, sid))
        ) == encode_messages(history_of(second.sessions.get(sid)))
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await resumed.close()


@pytest.mark.asyncio
async def test_without_a_stream_flush_a_turn_is_one_durable_write(host: Host) -> None:
    model = Streaming()
    loop = AgentLoop.create("a", host=host, model=model)
    running = asyncio.create_task(loop.run_turn("hi"))
    await model.streamed.wait()
    # Nothing of the turn is durable while it streams (not even the session).
    with pytest.raises(SessionNotFoundError):
        await stored_events(host, loop.session_id)
    await loop.cancel()
    await running


def _collect() -> tuple[list[object], ReplyText, list[float], list[int]]:
    emitted: list[object] = []
    now = [0.0]
    flushes = [0]

    async def flush() -> None:
        flushes[0] += 1
        if flushes[0] == 2:
            raise FlushError("disk full", session_id="s")

    reply = ReplyText(emitted.append, flush, 5.0, clock=lambda: now[0])
    return emitted, reply, now, flushes


@pytest.mark.asyncio
async def test_the_stream_flush_interval_and_a_failed_flush() -> None:
    emitted, reply, now, flushes = _collect()
    await reply.add("a")  # starts the interval
    now[0] = 4.9
    await reply.add("")  # dropped
    await reply.add("b")
    assert flushes == [0]
    now[0] = 5.0
    await reply.add("c")
    assert flushes == [1]
    now[0] = 10.0
    await reply.add("d")  # this flush fails; the stream goes on
    assert flushes == [2]
    reply.cut_off()
    assert emitted[-1] == AssistantMessageData(text="abcd", partial=True)
    assert emitted[:-1] == [AssistantChunkData(text=t) for t in "abcd"]


def test_a_call_cut_off_before_any_text_leaves_no_reply() -> None:
    emitted: list[object] = []

    async def flush() -> None:
        raise AssertionError("not called")

    ReplyText(emitted.append, flush).cut_off()
    assert emitted == []


def test_tail_text_is_the_chunks_a_log_ends_with() -> None:
    def chunk(seq: int, text: str) -> SessionEvent:
        return AssistantChunk(seq=seq, time=0, data=AssistantChunkData(text=text))

    reply = AssistantMessage(seq=2, time=0, data=AssistantMessageData(text="ab"))
    assert tail_text([chunk(0, "a"), chunk(1, "b"), reply]) is None
    assert tail_text([reply, chunk(3, "c"), chunk(4, "d")]) == "cd"
    assert tail_text([]) is None


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "1"])
def test_bad_watch_settings_are_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="stream_flush_seconds"):
        Watch(stream_flush_seconds=bad)  # type: ignore[arg-type]
