"""The turn deadline and the stall watchdog end a stuck turn `timed_out`.

While a model call or tool runs, the turn's `deadline` budget and
`Watch(stall_seconds=...)` (no event for that long) are enforced: the call is
cancelled where it waits, a tool gets an `interrupted` result, streamed text
is kept as a partial reply, the turn ends `timed_out`, and the loop takes the
next turn. The models and tools here hang forever, so only the limits can
end them; the limits are small so the tests stay fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs
import pytest
from tests.loop.support import stored_events

from turnkeep import AgentLoop, Host, ModelOutput, ModelRequest, TextDelta
from turnkeep.agent.tools import ToolContext
from turnkeep.agent.turns import CANCELLED_SAFE_OUTPUT, CANCELLED_UNSAFE_OUTPUT
from turnkeep.agent.watchdog import Guard, TimedOut, Watch
from turnkeep.errors import ConfigurationError
from turnkeep.events import (
    AssistantMessage,
    AssistantMessageData,
    ModelInfo,
    ToolResult,
    TurnEnd,
)
from turnkeep.testing import EchoModel, Reply, ScriptedCall, ScriptedModel


@attrs.define(eq=False)
class HangingModel:
    """Streams one piece, then waits forever (until cancelled)."""

    closed: bool = False

    def describe(self) -> ModelInfo:
        """A test double: named by its class."""
        return ModelInfo(name="HangingModel", provider="test")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        try:
            yield TextDelta("let me see")
            await asyncio.Event().wait()
        finally:
            self.closed = True


@attrs.define(eq=False)
class SlowStreamer:
    """Streams `count` pieces `gap` seconds apart, then finishes."""

    count: int
    gap: float

    def describe(self) -> ModelInfo:
        """A test double: named by its class."""
        return ModelInfo(name="SlowStreamer", provider="test")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        for _ in range(self.count):
            await asyncio.sleep(self.gap)
            yield TextDelta(".")


@attrs.define(eq=False)
class HangingTool:
    """A tool that waits forever; records that it was cancelled."""

    name: str = "wait"
    description: str = "waits"
    parameters: dict[str, Any] = attrs.field(factory=lambda: {"type": "object"})
    replay: str = "unsafe"
    cancelled: bool = False
    swallow: bool = False
    started: asyncio.Event = attrs.field(factory=asyncio.Event)

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            if not self.swallow:
                raise
        return "finished anyway"


def _end(host: Host, session_id: str) -> TurnEnd:
    end = host.sessions.get(session_id).events[-1]
    assert isinstance(end, TurnEnd)
    return end


@pytest.mark.asyncio
async def test_a_hanging_model_call_stalls_and_the_loop_goes_on(host: Host) -> None:
    model = HangingModel()
    loop = AgentLoop.create(
        "a", host=host, model=model, watch=Watch(stall_seconds=0.05)
    )
    sid = loop.session_id
    result = await loop.run_turn("hi")
    assert result.status == "timed_out"
    assert result.error is not None
    assert "stalled" in result.error
    assert "the model call" in result.error
    assert model.closed
    events = host.sessions.get(sid).events
    replies = [e.data for e in events if isinstance(e, AssistantMessage)]
    assert replies == [AssistantMessageData(text="let me see", partial=True)]
    assert _end(host, sid).data.status == "timed_out"
    assert host.sessions.get(sid).summary.status == "idle"
    assert await stored_events(host, sid) == list(events)  # durable
    loop.model = EchoModel()
    assert (await loop.run_turn("again")).status == "completed"


@pytest.mark.parametrize("swallow", [False, True])
@pytest.mark.parametrize("replay", ["unsafe", "safe"])
@pytest.mark.asyncio
async def test_a_hanging_tool_is_cancelled_and_the_turn_times_out(
    host: Host, replay: str, swallow: bool
) -> None:
    tool = HangingTool(replay=replay, swallow=swallow)
    model = ScriptedModel([Reply(calls=(ScriptedCall("wait", {}),)), Reply("done")])
    loop = AgentLoop.create(
        "a", host=host, model=model, tools=[tool], watch=Watch(stall_seconds=0.05)
    )
    sid = loop.session_id
    result = await loop.run_turn("hi")
    assert tool.cancelled
    assert result.status == "timed_out"
    assert result.error is not None
    assert "the tool 'wait'" in result.error
    results = [e for e in host.sessions.get(sid).events if isinstance(e, ToolResult)]
    assert len(results) == 1
    assert results[0].data.status == "interrupted"
    assert results[0].data.output == (
        CANCELLED_UNSAFE_OUTPUT if replay == "unsafe" else CANCELLED_SAFE_OUTPUT
    )
    assert _end(host, sid).data.status == "timed_out"
    loop.model = EchoModel()
    assert (await loop.run_turn("again")).status == "completed"


@pytest.mark.asyncio
async def test_the_turn_deadline_is_enforced_while_a_call_runs(host: Host) -> None:
    loop = AgentLoop.create("a", host=host, model=HangingModel(), deadline=0.1)
    result = await loop.run_turn("hi")
    assert result.status == "timed_out"
    assert result.error is not None
    assert "deadline (0.1 s)" in result.error
    # A stall limit longer than the deadline does not change which one fired.
    loop.watch = Watch(stall_seconds=60)
    assert (await loop.run_turn("again")).status == "timed_out"


@pytest.mark.asyncio
async def test_each_event_restarts_the_stall_limit(host: Host) -> None:
    # Twelve pieces 100 ms apart take longer than the 1 s stall limit in
    # all, but no single gap comes near it, even one that CI's busy machine
    # stretched by most of a second.
    loop = AgentLoop.create(
        "a",
        host=host,
        model=SlowStreamer(count=12, gap=0.1),
        watch=Watch(stall_seconds=1.0),
    )
    result = await loop.run_turn("hi")
    assert result.status == "completed"
    assert result.text == "." * 12


@pytest.mark.asyncio
async def test_a_cancel_during_a_watched_call_is_a_cancel(host: Host) -> None:
    tool = HangingTool()
    model = ScriptedModel([Reply(calls=(ScriptedCall("wait", {}),)), Reply("done")])
    loop = AgentLoop.create(
        "a", host=host, model=model, tools=[tool], watch=Watch(stall_seconds=30)
    )
    running = asyncio.create_task(loop.run_turn("hi"))
    await tool.started.wait()
    cancelled = await loop.cancel()
    assert cancelled is not None
    assert cancelled.status == "cancelled"
    assert await running == cancelled


@pytest.mark.asyncio
async def test_the_guard_passes_a_body_s_own_timeout_error_through() -> None:
    guard = Guard(stall=30)
    with pytest.raises(TimeoutError):
        async with guard.watching("x"):
            raise TimeoutError("the body's")
    async with Guard().watching("no limits"):  # nothing to watch
        await asyncio.sleep(0)
    guard = Guard(stall=0.01)
    with pytest.raises(TimedOut, match="stalled"):
        async with guard.watching("x"):
            await asyncio.sleep(10)


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "1"])
def test_a_bad_stall_limit_is_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="stall_seconds"):
        Watch(stall_seconds=bad)  # type: ignore[arg-type]
