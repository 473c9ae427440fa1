"""The run context: recorded when it changes, restored and checked on resume.

A turn appends `run/context` (instructions by hash, the model's description,
each tool's name, replay policy and schema hash, the budgets) before its
first model call when it differs from what the session last recorded;
`AgentLoop.resume` restores it (instructions and budgets left `RECORDED`),
refuses a different one with `ContextMismatchError` naming each difference,
and with `context="override"` runs with it and records the change.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.loop.support import SharedMemory, SpyTool, shared_host, stored_events

from turnkeep import AgentLoop, Host
from turnkeep.agent.context import INLINE_INSTRUCTIONS_BYTES, sha256_text
from turnkeep.agent.models import ModelRequest, TextDelta
from turnkeep.agent.recovery import pairing_problems
from turnkeep.errors import ConfigurationError, ContextMismatchError
from turnkeep.events import (
    AssistantMessageData,
    ModelInfo,
    RunContext,
    RunInstructions,
    SessionEvent,
    ToolResult,
    TurnEnd,
    TurnEndData,
    TurnStartData,
    UserMessageData,
)
from turnkeep.testing import EchoModel, Reply, ScriptedCall, ScriptedModel


def contexts(events: list[SessionEvent]) -> list[RunContext]:
    return [e for e in events if isinstance(e, RunContext)]


def echo(n: int) -> ScriptedModel:
    return ScriptedModel([f"reply {i}" for i in range(n)])


@pytest.mark.asyncio
async def test_the_first_turn_records_its_context_before_the_model_call(
    host: Host,
) -> None:
    look = SpyTool("look", replay="safe")
    act = SpyTool("act")
    model = ScriptedModel(["hi"], name="m-1", settings={"temperature": 0.2})
    loop = AgentLoop.create(
        "a",
        host=host,
        model=model,
        tools=[look, act],
        instructions="Be brief.",
        max_steps=5,
    )
    await loop.run_turn("hello")
    events = await stored_events(host, loop.session_id)
    [recorded] = contexts(events)
    first_model_output = next(e.seq for e in events if e.type == "assistant/message")
    assert recorded.seq < first_model_output
    data = recorded.data
    assert data.instructions == "Be brief."
    assert data.instructions_sha256 == sha256_text("Be brief.")
    assert (data.model.name, data.model.provider) == ("m-1", "scripted")
    assert data.model.settings == {"temperature": 0.2}
    assert [(t.name, t.replay) for t in data.tools] == [
        ("look", "safe"),
        ("act", "unsafe"),
    ]
    assert all(len(t.schema_sha256) == 64 for t in data.tools)
    assert (data.budgets.max_steps, data.budgets.max_tokens) == (5, None)
    # The model never sees it: history has no trace of the context.
    assert [m.role for m in model.requests[0].messages] == ["user"]


@pytest.mark.asyncio
async def test_an_unchanged_context_is_not_written_again(host: Host) -> None:
    loop = AgentLoop.create("a", host=host, model=echo(5), instructions="x")
    for n in range(5):
        await loop.run_turn(f"turn {n}")
    events = list(host.sessions.get(loop.session_id).events)
    assert len(contexts(events)) == 1


@pytest.mark.asyncio
async def test_a_changed_context_is_recorded_before_the_next_model_call(
    host: Host,
) -> None:
    loop = AgentLoop.create("a", host=host, model=echo(4), instructions="one")
    await loop.run_turn("a")
    loop.instructions = "two"
    await loop.run_turn("b")
    await loop.run_turn("c")
    loop.max_steps = 3
    await loop.run_turn("d")
    recorded = contexts(list(host.sessions.get(loop.session_id).events))
    assert [c.data.instructions for c in recorded] == ["one", "two", "two"]
    assert [c.data.budgets.max_steps for c in recorded] == [16, 16, 3]


@pytest.mark.asyncio
async def test_long_instructions_are_stored_once_per_session_by_hash(
    host: Host,
) -> None:
    long_text = "Rule. " * (INLINE_INSTRUCTIONS_BYTES // 4)
    loop = AgentLoop.create("a", host=host, model=echo(4), instructions=long_text)
    await loop.run_turn("a")
    loop.instructions = "short"
    await loop.run_turn("b")
    loop.instructions = long_text  # back to the long text: no second copy
    await loop.run_turn("c")
    events = await stored_events(host, loop.session_id)
    texts = [e for e in events if isinstance(e, RunInstructions)]
    assert [t.data.text for t in texts] == [long_text]
    assert texts[0].data.sha256 == sha256_text(long_text)
    recorded = contexts(events)
    assert [c.data.instructions for c in recorded] == [None, "short", None]
    assert recorded[2].data.instructions_sha256 == sha256_text(long_text)
    await loop.close()
    # Restored from the one stored copy in a new loop.
    again = await AgentLoop.resume("a", loop.session_id, host=host, model=echo(4))
    assert again.instructions == long_text


@pytest.mark.asyncio
async def test_resume_restores_the_recorded_instructions_and_budgets(
    host: Host,
) -> None:
    loop = AgentLoop.create(
        "a",
        host=host,
        model=ScriptedModel(["x", "y"], settings={"max_tokens": 50}),
        instructions="Stay on topic.",
        max_steps=4,
        max_tokens=500,
        deadline=30,
    )
    await loop.run_turn("hello")
    await loop.close()
    model = ScriptedModel(["x", "y"], settings={"max_tokens": 50})
    again = await AgentLoop.resume("a", loop.session_id, host=host, model=model)
    assert again.instructions == "Stay on topic."
    assert (again.max_steps, again.max_tokens, again.deadline) == (4, 500, 30.0)
    await again.run_turn("more")
    assert model.requests[-1].instructions == "Stay on topic."
    # Nothing changed, so nothing more was recorded.
    assert len(contexts(await stored_events(host, loop.session_id))) == 1


@pytest.mark.asyncio
async def test_a_different_context_is_refused_with_each_difference(
    host: Host,
) -> None:
    act = SpyTool("act")
    loop = AgentLoop.create(
        "a", host=host, model=echo(2), tools=[act], instructions="one"
    )
    await loop.run_turn("hello")
    await loop.close()
    before = await stored_events(host, loop.session_id)
    with pytest.raises(ContextMismatchError) as info:
        await AgentLoop.resume(
            "a",
            loop.session_id,
            host=host,
            model=EchoModel(),
            tools=[SpyTool("act", replay="safe"), SpyTool("extra")],
            instructions="two",
            max_steps=2,
        )
    error = info.value
    assert error.code == "context-mismatch"
    assert error.session_id == loop.session_id
    joined = "\n".join(error.differences)
    for expected in (
        "instructions: recorded sha256 ",
        "model name: recorded 'scripted', given 'echo'",
        "model provider: recorded 'scripted', given 'turnkeep'",
        "tool 'act': replay recorded unsafe, given safe",
        "tool 'extra': not recorded, given",
        "budget max_steps: recorded 16, given 2",
    ):
        assert expected in joined
    for difference in error.differences:
        assert difference in str(error)
    # Nothing was appended, and the session was let go: it resumes again.
    assert await stored_events(host, loop.session_id) == before
    assert host.sessions.list() == []
    again = await AgentLoop.resume(
        "a", loop.session_id, host=host, model=echo(2), tools=[act]
    )
    assert again.instructions == "one"


@pytest.mark.asyncio
async def test_override_runs_with_the_new_context_and_records_it(
    host: Host,
) -> None:
    loop = AgentLoop.create("a", host=host, model=echo(1), instructions="one")
    await loop.run_turn("hello")
    await loop.close()
    model = ScriptedModel(["x", "y"], name="m-2")
    again = await AgentLoop.resume(
        "a",
        loop.session_id,
        host=host,
        model=model,
        instructions="two",
        context="override",
    )
    # Recovery asked no model: nothing is recorded until the next one.
    assert len(contexts(await stored_events(host, loop.session_id))) == 1
    await again.run_turn("again")
    assert model.requests[-1].instructions == "two"
    recorded = contexts(await stored_events(host, loop.session_id))
    assert [(c.data.instructions, c.data.model.name) for c in recorded] == [
        ("one", "scripted"),
        ("two", "m-2"),
    ]


@pytest.mark.asyncio
async def test_an_unknown_context_mode_is_refused_and_the_session_let_go(
    host: Host,
) -> None:
    loop = AgentLoop.create("a", host=host, model=echo(1))
    await loop.run_turn("hello")
    await loop.close()
    with pytest.raises(ConfigurationError, match="context must be"):
        await AgentLoop.resume(
            "a",
            loop.session_id,
            host=host,
            model=echo(1),
            context="ignore",  # pyright: ignore[reportArgumentType]
        )
    assert host.sessions.list() == []


@pytest.mark.asyncio
async def test_a_session_without_a_recorded_context_accepts_any(host: Host) -> None:
    # A log written before contexts were recorded.
    session = host.sessions.create("old")
    session.append(TurnStartData(turn=1))
    session.append(UserMessageData(text="hi"))
    session.append(AssistantMessageData(text="hello"))
    session.append(TurnEndData(turn=1, status="completed"))
    await host.sessions.close("old")
    loop = await AgentLoop.resume(
        "a", "old", host=host, model=echo(2), instructions="new", max_steps=3
    )
    assert (loop.instructions, loop.max_steps) == ("new", 3)
    result = await loop.run_turn("again")
    assert result.turn == 2
    [recorded] = contexts(await stored_events(host, "old"))
    assert recorded.data.instructions == "new"


@pytest.mark.asyncio
async def test_an_unsafe_call_stays_unsafe_when_the_new_process_says_safe() -> None:
    shared = SharedMemory()
    act = SpyTool("act", block=True)
    model = ScriptedModel([Reply("acting", (ScriptedCall("act"),)), "done"])
    async with shared_host(shared) as crashed, shared_host(shared) as later:
        first = AgentLoop.create(
            "a", host=crashed, model=model, tools=[act], session_id="s"
        )
        running = asyncio.create_task(first.run_turn("go"))
        await act.started.wait()  # its intent is durable; the process "dies"
        del shared.storage.owners["s"]
        safe_now = SpyTool("act", replay="safe")
        # The default refuses: the replay policy is part of the context.
        with pytest.raises(ContextMismatchError, match="replay recorded unsafe"):
            await AgentLoop.resume("a", "s", host=later, model=model, tools=[safe_now])
        # Overridden, the new declaration holds for new calls only: the call
        # made while the tool was unsafe is not run again.
        loop = await AgentLoop.resume(
            "a", "s", host=later, model=model, tools=[safe_now], context="override"
        )
        report = loop.recovery
        assert report is not None
        assert report.interrupted == (act.call_ids[0],)
        assert report.rerun == ()
        assert safe_now.calls == []
        stored = await stored_events(later, "s")
        answer = next(e for e in stored if isinstance(e, ToolResult))
        assert answer.data.status == "interrupted"
        assert isinstance(stored[-1], TurnEnd)
        assert pairing_problems(stored) == []
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running


class _Undescribed:
    """A model written before `describe` existed."""

    async def stream(self, request: ModelRequest) -> Any:
        yield TextDelta("hi")


class _BadDescribe(_Undescribed):
    def describe(self) -> Any:
        return {"name": "x"}


@pytest.mark.asyncio
async def test_a_model_without_describe_is_named_by_its_class(host: Host) -> None:
    loop = AgentLoop.create("a", host=host, model=_Undescribed())  # pyright: ignore[reportArgumentType]
    await loop.run_turn("hello")
    [recorded] = contexts(list(host.sessions.get(loop.session_id).events))
    assert (recorded.data.model.name, recorded.data.model.provider) == (
        "_Undescribed",
        "unspecified",
    )


def test_a_describe_that_returns_something_else_is_refused(host: Host) -> None:
    with pytest.raises(ConfigurationError, match="not a ModelInfo"):
        AgentLoop.create("a", host=host, model=_BadDescribe())  # pyright: ignore[reportArgumentType]
    assert host.sessions.list() == []


@pytest.mark.asyncio
async def test_a_model_or_tool_change_between_turns_is_recorded(host: Host) -> None:
    model = ScriptedModel(["a", "b", "c", "d"], settings={"temperature": 0.0})
    loop = AgentLoop.create("a", host=host, model=model, tools=[SpyTool("one")])
    await loop.run_turn("1")
    model.settings = {"temperature": 0.7}
    await loop.run_turn("2")
    loop.tools = {"two": SpyTool("two")}
    await loop.run_turn("3")
    await loop.run_turn("4")  # nothing changed since the third
    recorded = contexts(list(host.sessions.get(loop.session_id).events))
    assert [c.data.model.settings["temperature"] for c in recorded] == [0.0, 0.7, 0.7]
    assert [[t.name for t in c.data.tools] for c in recorded] == [
        ["one"],
        ["one"],
        ["two"],
    ]


class _SharedSettings:
    """A model that hands out its own settings dict and changes it later."""

    def __init__(self) -> None:
        self.settings: dict[str, Any] = {"temperature": 0.0}
        self.inner = ScriptedModel(["a", "b"])

    def describe(self) -> ModelInfo:
        return ModelInfo(name="shared", settings=self.settings)

    def stream(self, request: ModelRequest) -> Any:
        return self.inner.stream(request)


@pytest.mark.asyncio
async def test_a_model_mutating_the_settings_it_returned_is_still_seen(
    host: Host,
) -> None:
    model = _SharedSettings()
    loop = AgentLoop.create("a", host=host, model=model)
    await loop.run_turn("1")
    model.settings["temperature"] = 0.9  # the same dict, changed in place
    await loop.run_turn("2")
    recorded = contexts(list(host.sessions.get(loop.session_id).events))
    assert [c.data.model.settings["temperature"] for c in recorded] == [0.0, 0.9]
