"""Edges of the loop: two loops on one session, early-abandoned streams,
models that fail before streaming, and titles taken after redaction."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest
from tests.conftest import make_config

from turnkeep import AgentLoop, Host, ToolContext, function_tool, hookimpl
from turnkeep.agent.models import (
    ModelInfo,
    ModelOutput,
    ModelRequest,
    ModelToolCall,
    TextDelta,
)
from turnkeep.agent.recovery import pairing_problems
from turnkeep.errors import StorageError, TurnInProgressError
from turnkeep.events import ToolCall
from turnkeep.meta import SessionSummary
from turnkeep.persistence import EventRecord
from turnkeep.testing import (
    EchoModel,
    MemoryPersistence,
    Reply,
    ScriptedCall,
    ScriptedModel,
)


@pytest.mark.asyncio
async def test_a_second_loop_cannot_recover_a_turn_that_is_still_running(
    host: Host,
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    runs: list[str] = []

    @function_tool(name="pay")
    async def pay(arguments: Mapping[str, Any], context: ToolContext) -> str:
        runs.append(context.call_id)
        started.set()
        await release.wait()
        return "paid"

    model = ScriptedModel([Reply("paying", (ScriptedCall("pay"),)), Reply("done")])
    first = AgentLoop.create("a1", host=host, model=model, tools=[pay])
    turn = asyncio.ensure_future(first.run_turn("pay the bill"))
    await started.wait()
    with pytest.raises(TurnInProgressError):
        await AgentLoop.resume(
            "a2", first.session_id, host=host, model=model, tools=[pay]
        )
    second = AgentLoop.create(
        "a3", host=host, model=model, tools=[pay], session_id="other"
    )
    # Only the deprecated form lets one loop name another loop's session.
    with (
        pytest.warns(DeprecationWarning, match="one loop per session"),
        pytest.raises(TurnInProgressError),
    ):
        await second.run_turn(first.session_id, "me too")
    release.set()
    assert (await turn).status == "completed"
    session = host.sessions.get(first.session_id)
    assert pairing_problems(session.events) == []
    assert len(runs) == 1


class Exploding:
    """A model adapter that fails before it yields anything."""

    def describe(self) -> ModelInfo:
        """A test double: named by its class."""
        return ModelInfo(name="Exploding", provider="test")

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        raise KeyError("OPENAI_API_KEY")


@pytest.mark.asyncio
async def test_a_model_failing_before_it_streams_ends_the_turn_failed(
    host: Host,
) -> None:
    loop = AgentLoop.create("a", host=host, model=Exploding())
    result = await loop.run_turn("hi")
    assert result.status == "failed"
    assert result.error is not None
    assert "KeyError" in result.error


class FailingAppends(MemoryPersistence):
    failures = 0

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        if self.failures:
            self.failures -= 1
            raise StorageError("disk unplugged")
        await super().append(session_id, events, summary=summary)


@pytest.mark.asyncio
async def test_an_abandoned_stream_leaves_no_unretrieved_task_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = FailingAppends()

    class Plugin:
        @hookimpl
        def register_persistence(self, register: Any) -> None:
            register("failing", lambda _config: backend)

    async with Host(make_config(persistence="failing"), plugins=[Plugin()]) as host:
        loop = AgentLoop.create("a", host=host, model=EchoModel())
        backend.failures = 5  # the turn's final flush fails: the task raises
        stream = loop.stream_turn("hello there")
        async for _ in stream:
            break  # the consumer stops early, as it may, and never asks again
        task = stream._task
        del stream
        await asyncio.wait([task])  # the turn ends (its final flush failed)
        del task
        gc.collect()
        backend.failures = 0
    assert "never retrieved" not in caplog.text


@pytest.mark.asyncio
async def test_titles_come_from_the_redacted_message() -> None:
    token = "ghp_" + "Zq8Rt2Lm9Xv4Bn7Ck3Jd6Hs1Fp5Gt0Wy2Ea4Ub"
    async with Host(make_config(redact_secrets=True)) as host:
        model = ScriptedModel([Reply("ok")])
        loop = AgentLoop.create("a", host=host, model=model)
        prompt = "x" * 70 + f" {token} please use it"
        await loop.run_turn(prompt)
        summary = host.sessions.get(loop.session_id).summary
        assert summary.title is not None
        assert summary.first_prompt is not None
        assert token[:12] not in summary.title
        assert token[:12] not in summary.first_prompt
        assert "[REDACTED" in summary.first_prompt


class _EditingModel:
    """Asks for one call, then changes the arguments its history shows."""

    def __init__(self) -> None:
        self.calls = 0

    def describe(self) -> ModelInfo:
        return ModelInfo(name="editing", provider="test")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        self.calls += 1
        for message in request.messages:
            for call in message.tool_calls:
                call.arguments["options"]["paths"].append("/etc")
                call.arguments["added"] = self.calls
        if self.calls == 1:
            yield ModelToolCall("look", {"options": {"paths": ["/a"]}})
        else:
            yield TextDelta("done")


@pytest.mark.asyncio
async def test_a_model_that_changes_its_history_leaves_the_logged_call_alone(
    host: Host,
) -> None:
    @function_tool(name="look", replay="safe")
    async def look(arguments: Mapping[str, Any], context: ToolContext) -> str:
        return "seen"

    model = _EditingModel()
    loop = AgentLoop.create("a", host=host, model=model, tools=[look])
    await loop.run_turn("look")  # the second call sees the open call
    await loop.run_turn("again")  # this one sees it settled in the history
    assert model.calls == 3
    session = host.sessions.get(loop.session_id)
    calls = [e for e in session.events if isinstance(e, ToolCall)]
    assert [c.data.arguments for c in calls] == [{"options": {"paths": ["/a"]}}]
    await host.sessions.close(loop.session_id)
    resumed = await host.sessions.resume(loop.session_id)
    stored = [e for e in resumed.events if isinstance(e, ToolCall)]
    assert [c.data.arguments for c in stored] == [{"options": {"paths": ["/a"]}}]


@pytest.mark.asyncio
async def test_a_tool_that_changes_its_arguments_leaves_the_logged_call_alone(
    host: Host,
) -> None:
    @function_tool(name="edit")
    async def edit(arguments: Mapping[str, Any], context: ToolContext) -> str:
        options: Any = arguments["options"]
        options["depth"] = 99
        options["paths"].append("/etc")
        arguments["extra"] = True  # pyright: ignore[reportIndexIssue]
        return "edited"

    given = {"options": {"depth": 1, "paths": ["/a"]}, "n": 2.5, "flag": None}
    model = ScriptedModel([Reply("editing", (ScriptedCall("edit", given),)), "done"])
    loop = AgentLoop.create("a", host=host, model=model, tools=[edit])
    await loop.run_turn("edit it")
    calls = [
        e for e in host.sessions.get(loop.session_id).events if e.type == "tool/call"
    ]
    assert [c.data.arguments for c in calls] == [  # pyright: ignore[reportAttributeAccessIssue]
        {"options": {"depth": 1, "paths": ["/a"]}, "n": 2.5, "flag": None}
    ]
