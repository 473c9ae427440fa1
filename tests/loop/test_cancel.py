"""Cancellation: a running turn ends with `turn/end` cancelled, cleanly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from tests.loop.support import (
    GatedPlugin,
    SharedMemory,
    SpyTool,
    gated_host,
    inner_factory,
    shared_host,
    stored_events,
)
from tests.loop.test_recovery import crashed_log

from turnkeep import AgentLoop, Host, ModelOutput, ModelRequest, SessionEvent, TextDelta
from turnkeep.agent.recovery import pairing_problems
from turnkeep.agent.turns import (
    CANCELLED_SAFE_OUTPUT,
    CANCELLED_UNSAFE_OUTPUT,
    NOT_RUN_CANCELLED_OUTPUT,
)
from turnkeep.events import (
    AssistantChunk,
    AssistantMessage,
    AssistantMessageData,
    ModelInfo,
    ToolCall,
    ToolResult,
    TurnEnd,
    UserMessage,
)
from turnkeep.testing import EchoModel, Reply, ScriptedCall, ScriptedModel


@attrs.define(eq=False)
class Hanging:
    """A model that streams a piece, then waits until cancelled."""

    streaming: asyncio.Event = attrs.field(factory=asyncio.Event)
    closed: bool = False

    def describe(self) -> ModelInfo:
        """A test double: named by its class."""
        return ModelInfo(name="Hanging", provider="test")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        try:
            yield TextDelta("thinking ")
            self.streaming.set()
            await asyncio.Event().wait()
            yield TextDelta("never")
        finally:
            self.closed = True


def last_end(host: Host, session_id: str) -> TurnEnd:
    end = host.sessions.get(session_id).events[-1]
    assert isinstance(end, TurnEnd)
    return end


@pytest.mark.asyncio
async def test_cancel_while_the_model_streams(host: Host) -> None:
    model = Hanging()
    loop = AgentLoop.create("a", host=host, model=model)
    sid = loop.session_id
    running = asyncio.create_task(loop.run_turn("hi"))
    await model.streaming.wait()
    cancelled = await loop.cancel()
    assert cancelled is not None
    assert cancelled.status == "cancelled"
    assert await running == cancelled
    assert model.closed  # the stream was closed
    events = list(host.sessions.get(sid).events)
    assert [e.type for e in events] == [
        "turn/start",
        "user/message",
        "run/context",
        "assistant/chunk",  # what was streamed stays in the log
        "assistant/message",  # ... and in the history, as a partial reply
        "turn/end",
    ]
    assert events[4].data == AssistantMessageData(text="thinking ", partial=True)
    assert last_end(host, sid).data.status == "cancelled"
    assert await stored_events(host, sid) == events
    assert not loop.running()
    # The session goes on.
    loop.model = EchoModel()
    assert (await loop.run_turn("again")).status == "completed"


@pytest.mark.parametrize(
    ("replay", "output"),
    [("unsafe", CANCELLED_UNSAFE_OUTPUT), ("safe", CANCELLED_SAFE_OUTPUT)],
)
@pytest.mark.asyncio
async def test_cancel_while_a_tool_runs(host: Host, replay: str, output: str) -> None:
    tool = SpyTool("work", replay=replay, block=True)  # type: ignore[arg-type]
    model = ScriptedModel([Reply("on it", (ScriptedCall("work"),))])
    loop = AgentLoop.create("a", host=host, model=model, tools=[tool])
    sid = loop.session_id
    running = asyncio.create_task(loop.run_turn("go"))
    await tool.started.wait()
    result = await loop.cancel()
    assert result is not None
    assert result.status == "cancelled"
    assert tool.cancelled == 1  # the in-flight tool task was cancelled
    assert (await running).status == "cancelled"
    events = list(host.sessions.get(sid).events)
    answer = events[-2]
    assert isinstance(answer, ToolResult)
    assert (answer.data.status, answer.data.output) == ("interrupted", output)
    assert last_end(host, sid).data.status == "cancelled"
    assert pairing_problems(events) == []
    assert await stored_events(host, sid) == events


@pytest.mark.asyncio
async def test_cancel_during_the_intent_flush_lets_it_land_and_runs_nothing(
    tmp_path: Path,
) -> None:
    plugin = GatedPlugin(inner_factory("memory", tmp_path))
    act = SpyTool("act")
    model = ScriptedModel([Reply("acting", (ScriptedCall("act"),))])
    async with gated_host(plugin) as host:
        gate = plugin.gate
        assert gate is not None
        loop = AgentLoop.create("a", host=host, model=model, tools=[act])
        sid = loop.session_id
        gate.hold = asyncio.Event()
        running = asyncio.create_task(loop.run_turn("go"))
        await gate.entered.wait()  # the intent's flush is in flight
        cancelling = asyncio.create_task(loop.cancel())
        await asyncio.sleep(0)  # let cancel() register before the flush lands
        gate.hold.set()
        result = await cancelling
        assert result is not None
        assert result.status == "cancelled"
        assert await running == result
        assert act.calls == []
        events = await stored_events(host, sid)
        call = next(e for e in events if isinstance(e, ToolCall))
        answer = next(e for e in events if isinstance(e, ToolResult))
        assert answer.data.call_id == call.data.call_id
        assert (answer.data.status, answer.data.output) == (
            "error",
            NOT_RUN_CANCELLED_OUTPUT,
        )
        assert gate.appends[0][3]  # the intent itself landed
        assert pairing_problems(events) == []


@pytest.mark.asyncio
async def test_cancelling_the_caller_ends_the_turn_before_passing_it_on(
    host: Host,
) -> None:
    tool = SpyTool("act", block=True)
    model = ScriptedModel([Reply("acting", (ScriptedCall("act"),))])
    loop = AgentLoop.create("a", host=host, model=model, tools=[tool])
    sid = loop.session_id
    caller = asyncio.create_task(loop.run_turn("go"))
    await tool.started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert tool.cancelled == 1
    assert last_end(host, sid).data.status == "cancelled"
    assert host.sessions.get(sid).settled
    assert not loop.running()


@pytest.mark.asyncio
async def test_cancel_without_a_running_turn_is_a_no_op(host: Host) -> None:
    loop = AgentLoop.create("a", host=host, model=EchoModel())
    assert await loop.cancel() is None
    await loop.run_turn("hi")
    assert await loop.cancel() is None
    assert last_end(host, loop.session_id).data.status == "completed"


@pytest.mark.asyncio
async def test_two_cancels_end_one_turn(host: Host) -> None:
    model = Hanging()
    loop = AgentLoop.create("a", host=host, model=model)
    sid = loop.session_id
    running = asyncio.create_task(loop.run_turn("hi"))
    await model.streaming.wait()
    first, second = await asyncio.gather(loop.cancel(), loop.cancel())
    assert first == second == await running
    ends = [e for e in host.sessions.get(sid).events if isinstance(e, TurnEnd)]
    assert len(ends) == 1


@pytest.mark.asyncio
async def test_a_streamed_turn_can_be_cancelled(host: Host) -> None:
    model = Hanging()
    loop = AgentLoop.create("a", host=host, model=model)
    seen: list[SessionEvent] = []
    stream = loop.stream_turn("hi")
    async for event in stream:
        seen.append(event)
        if isinstance(event, UserMessage):
            # Its piece is held back for redaction until the call ends.
            await model.streaming.wait()
            await loop.cancel()
    assert isinstance(seen[-1], TurnEnd)
    assert seen[-1].data.status == "cancelled"
    assert (await stream.result()).status == "cancelled"
    # What was held back is released when the cancel cuts the call off.
    assert [e.data.text for e in seen if isinstance(e, AssistantChunk)] == ["thinking "]
    # The only reply is the partial one the cancel cut off.
    replies = [e for e in seen if isinstance(e, AssistantMessage)]
    assert [r.data for r in replies] == [
        AssistantMessageData(text="thinking ", partial=True)
    ]


@pytest.mark.asyncio
async def test_cancel_during_recovery_reruns() -> None:
    async with shared_host(SharedMemory()) as host:
        ids = await crashed_log(host, "s", [("look", "safe")])
        await host.sessions.resume("s")
        look = SpyTool("look", replay="safe", block=True)
        loop = AgentLoop.create("agent", host=host, model=EchoModel(), tools=[look])

        async def recover_then_cancel() -> tuple[asyncio.Task[Any], Any]:
            recovering = asyncio.create_task(loop.recover("s"))
            await look.started.wait()
            return recovering, await loop.cancel("s")

        # Only the deprecated form drives a session the loop was not made for.
        with pytest.warns(DeprecationWarning, match="one loop per session"):
            recovering, result = await recover_then_cancel()
        assert result is not None
        assert result.status == "cancelled"
        report = await recovering
        assert report.rerun == (ids[0],)
        events = list(host.sessions.get("s").events)
        assert pairing_problems(events) == []
        assert last_end(host, "s").data.status == "cancelled"
