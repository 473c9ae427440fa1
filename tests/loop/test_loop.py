"""The agent loop's behaviour: turns, events, tools, models, errors, streaming."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from tests.conftest import make_config
from tests.loop.support import SharedMemory, SpyTool, shared_host, stored_events

from turnkeep import (
    AgentLoop,
    Host,
    ModelOutput,
    ModelRequest,
    SessionEvent,
    TextDelta,
    ToolContext,
    function_tool,
)
from turnkeep.agent.recovery import pairing_problems
from turnkeep.agent.turns import call_id_for
from turnkeep.errors import (
    ConfigurationError,
    PersistenceNotConfiguredError,
    SessionNotFoundError,
    ToolError,
    TurnInProgressError,
)
from turnkeep.events import (
    AssistantChunk,
    AssistantMessage,
    ToolCall,
    ToolResult,
    TurnCheckpoint,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from turnkeep.testing import EchoModel, Reply, ScriptedCall, ScriptedModel


def say(text: str, *calls: ScriptedCall) -> Reply:
    return Reply(text, calls)


def call(name: str, **arguments: Any) -> ScriptedCall:
    return ScriptedCall(name, arguments)


def kinds(events: list[SessionEvent] | tuple[SessionEvent, ...]) -> list[str]:
    return [e.type for e in events if not isinstance(e, AssistantChunk)]


@pytest.mark.asyncio
async def test_create_is_synchronous_and_ids_stay_distinct(host: Host) -> None:
    loop = AgentLoop.create("agent-1", host=host, model=EchoModel())
    assert loop.agent_id == "agent-1"
    assert loop.session_id != loop.agent_id
    assert loop.resumed_from is None
    assert loop.recovery is None
    assert host.sessions.get(loop.session_id).events == []
    named = AgentLoop.create("agent-1", host=host, model=EchoModel(), session_id="s")
    assert (named.agent_id, named.session_id) == ("agent-1", "s")


@pytest.mark.asyncio
async def test_a_turn_records_its_events_in_order(host: Host) -> None:
    look = SpyTool("look", replay="safe")
    act = SpyTool("act")
    model = ScriptedModel(
        [say("Looking.", call("look", x=1)), say("Acting.", call("act")), say("Done.")]
    )
    loop = AgentLoop.create("a", host=host, model=model, tools=[look, act])
    result = await loop.run_turn("do it")
    events = list(host.sessions.get(loop.session_id).events)
    assert kinds(events) == [
        "turn/start",
        "user/message",
        "run/context",  # the first turn records what it runs with
        "assistant/message",
        "tool/call",
        "tool/result",
        "assistant/message",
        "tool/call",
        "turn/checkpoint",  # the unsafe call is made durable before it runs
        "tool/result",
        "assistant/message",
        "turn/end",
    ]
    assert (result.status, result.text, result.turn) == ("completed", "Done.", 1)
    assert (result.start_seq, result.end_seq) == (0, len(events) - 1)
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [c.data.replay for c in calls] == ["safe", "unsafe"]
    assert [c.data.call_id for c in calls] == [
        call_id_for(loop.session_id, c.seq) for c in calls
    ]
    assert look.call_ids == [calls[0].data.call_id]
    assert act.call_ids == [calls[1].data.call_id]
    context = act.calls[0]
    assert (context.agent_id, context.session_id, context.turn) == (
        "a",
        loop.session_id,
        1,
    )
    assert not context.rerun
    chunks = "".join(e.data.text for e in events if isinstance(e, AssistantChunk))
    assert chunks == "Looking.Acting.Done."
    assert pairing_problems(events) == []
    assert host.sessions.get(loop.session_id).settled


@pytest.mark.asyncio
async def test_the_model_sees_history_derived_from_the_log(host: Host) -> None:
    model = ScriptedModel([say("one", call("look")), say("two"), say("three")])
    loop = AgentLoop.create(
        "a",
        host=host,
        model=model,
        tools=[SpyTool("look", replay="safe")],
        instructions="be brief",
    )
    await loop.run_turn("first")
    await loop.run_turn("second")
    last = model.requests[-1]
    assert [m.role for m in last.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert last.instructions == "be brief"
    assert last.turn == 2
    assert [t.name for t in last.tools] == ["look"]


@pytest.mark.asyncio
async def test_turn_numbering_continues_after_resume() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as first:
        loop = AgentLoop.create("agent", host=first, model=EchoModel())
        await loop.run_turn("a")
        await loop.run_turn("b")
        session_id = loop.session_id
        await loop.close()
    async with shared_host(shared) as second:
        again = await AgentLoop.resume(
            "agent", session_id, host=second, model=EchoModel()
        )
        assert again.session_id == session_id
        assert again.resumed_from == session_id
        assert again.agent_id == "agent" != session_id
        assert again.recovery is not None
        assert not again.recovery.recovered
        result = await again.run_turn("c")
        assert result.turn == 3
        starts = [
            e.data.turn
            for e in await stored_events(second, session_id)
            if isinstance(e, TurnStart)
        ]
        assert starts == [1, 2, 3]


@pytest.mark.asyncio
async def test_resume_without_persistence_is_a_typed_error() -> None:
    async with Host(make_config(persistence="none")) as host:
        with pytest.raises(PersistenceNotConfiguredError):
            await AgentLoop.resume("a", "whatever", host=host, model=EchoModel())
        assert host.sessions.list() == []
        # Without persistence a loop still runs (nothing outlives the process).
        loop = AgentLoop.create("a", host=host, model=EchoModel())
        assert (await loop.run_turn("hi")).status == "completed"
        assert (await loop.run_turn("again")).turn == 2


@pytest.mark.asyncio
async def test_resume_of_an_unknown_session_is_not_found(host: Host) -> None:
    with pytest.raises(SessionNotFoundError):
        await AgentLoop.resume("a", "nope", host=host, model=EchoModel())


@pytest.mark.asyncio
async def test_an_overlapping_turn_is_refused_before_it_changes_anything(
    host: Host,
) -> None:
    slow = SpyTool("slow", block=True)
    model = ScriptedModel([say("wait", call("slow")), say("done")])
    loop = AgentLoop.create("a", host=host, model=model, tools=[slow])
    sid = loop.session_id
    first = asyncio.create_task(loop.run_turn("one"))
    await slow.started.wait()
    session = host.sessions.get(sid)
    before = list(session.events)
    requests = len(model.requests)
    with pytest.raises(TurnInProgressError):
        await loop.run_turn("two")
    with pytest.raises(TurnInProgressError):
        loop.stream_turn("two")
    with pytest.raises(TurnInProgressError):
        await loop.recover()
    assert list(session.events) == before
    assert len(model.requests) == requests
    assert loop.running()
    slow.release.set()
    assert (await first).status == "completed"
    assert not loop.running()
    assert (await loop.run_turn("two")).turn == 2


@pytest.mark.asyncio
async def test_turns_of_different_sessions_run_side_by_side(host: Host) -> None:
    slow = SpyTool("slow", block=True)
    model = ScriptedModel([say("wait", call("slow")), say("done")])
    loop = AgentLoop.create("a", host=host, model=model, tools=[slow])
    other = AgentLoop.create("a", host=host, model=model, tools=[slow])
    first = asyncio.create_task(loop.run_turn("one"))
    await slow.started.wait()
    echo = AgentLoop.create("b", host=host, model=EchoModel(), session_id="third")
    assert (await echo.run_turn("hi")).status == "completed"
    second = asyncio.create_task(other.run_turn("two"))
    while len(slow.calls) < 2:
        slow.started.clear()
        await slow.started.wait()
    slow.release.set()
    assert [(await first).status, (await second).status] == ["completed"] * 2


@pytest.mark.asyncio
async def test_stream_turn_yields_each_event_as_it_is_appended(host: Host) -> None:
    model = ScriptedModel([say("Let me check.", call("look")), say("All fine.")])
    loop = AgentLoop.create(
        "a", host=host, model=model, tools=[SpyTool("look", replay="safe")]
    )
    session = host.sessions.get(loop.session_id)
    seen: list[SessionEvent] = []
    stream = loop.stream_turn("check")
    async for event in stream:
        # Yielded in append order, each one already in the log.
        assert session.events[event.seq] is event
        seen.append(event)
    assert seen == list(session.events)
    assert isinstance(seen[-1], TurnEnd)
    result = await stream.result()
    assert (result.status, result.text) == ("completed", "All fine.")
    with pytest.raises(StopAsyncIteration):
        await anext(stream)  # an ended stream stays ended


@pytest.mark.asyncio
async def test_on_event_sees_every_event_of_every_turn(host: Host) -> None:
    seen: list[SessionEvent] = []
    loop = AgentLoop.create("a", host=host, model=EchoModel(), on_event=seen.append)
    await loop.run_turn("x")
    await loop.run_turn("y")
    assert seen == list(host.sessions.get(loop.session_id).events)


class _Broken:
    """A model that fails after streaming a little."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        yield TextDelta("partial ")
        raise self.error


class _Odd:
    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        yield "not an output"  # type: ignore[misc]  # pyright: ignore[reportReturnType]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (ScriptedModel([]), "the scripted model has 0 replies"),
        (_Broken(RuntimeError("provider down")), "RuntimeError: provider down"),
        (_Broken(ToolError("odd")), "ToolError: odd"),
        (_Odd(), "expected TextDelta, ModelToolCall or Usage"),
    ],
)
@pytest.mark.asyncio
async def test_a_failing_model_ends_the_turn_failed(
    host: Host, model: Any, expected: str
) -> None:
    loop = AgentLoop.create("a", host=host, model=model)
    result = await loop.run_turn("hi")
    assert result.status == "failed"
    assert result.error is not None
    assert expected in result.error
    session = host.sessions.get(loop.session_id)
    end = session.events[-1]
    assert isinstance(end, TurnEnd)
    assert (end.data.status, end.data.error) == ("failed", result.error)
    assert session.settled
    assert session.summary.status == "failed"
    # The session stays usable.
    loop.model = EchoModel()
    assert (await loop.run_turn("again")).status == "completed"


@pytest.mark.asyncio
async def test_tool_failures_are_results_the_model_sees(host: Host) -> None:
    refusing = SpyTool("refusing", replay="safe", fail=ToolError("no such file"))
    crashing = SpyTool("crashing", fail=KeyError("k"))

    @function_tool(replay="safe")
    async def wrong(arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Returns the wrong type."""
        return 42  # type: ignore[return-value]  # pyright: ignore[reportReturnType]

    model = ScriptedModel(
        [
            say("", call("refusing"), call("crashing"), call("wrong"), call("nope")),
            say("I see."),
        ]
    )
    loop = AgentLoop.create(
        "a", host=host, model=model, tools=[refusing, crashing, wrong]
    )
    result = await loop.run_turn("go")
    assert result.status == "completed"
    events = host.sessions.get(loop.session_id).events
    results = [e.data for e in events if isinstance(e, ToolResult)]
    assert [(r.status, r.output) for r in results] == [
        ("error", "no such file"),
        ("error", "KeyError: 'k'"),
        ("error", "the tool returned int, not text"),
        (
            "error",
            "[not run] There is no tool named 'nope' (tools: crashing, "
            "refusing, wrong).",
        ),
    ]
    # An unknown tool runs nothing, so nothing is made durable for it.
    checkpoints = [e for e in events if isinstance(e, TurnCheckpoint)]
    assert len(checkpoints) == 1  # only for `crashing`, the unsafe one
    tool_messages = [m for m in model.requests[-1].messages if m.role == "tool"]
    assert [m.status for m in tool_messages] == ["error"] * 4
    assert pairing_problems(list(events)) == []


@pytest.mark.asyncio
async def test_a_model_that_never_stops_calling_tools_exhausts_the_step_budget(
    host: Host,
) -> None:
    model = ScriptedModel(lambda _request: say("again", call("look")))
    look = SpyTool("look", replay="safe")
    loop = AgentLoop.create("a", host=host, model=model, tools=[look], max_steps=3)
    result = await loop.run_turn("loop forever")
    assert result.status == "budget_exhausted"
    assert result.error is not None
    assert "step budget is spent: 3 model calls" in result.error
    assert len(model.requests) == 3  # the fourth call was never made
    assert len(look.calls) == 3
    assert pairing_problems(list(host.sessions.get(loop.session_id).events)) == []


@pytest.mark.asyncio
async def test_values_the_log_cannot_hold_keep_the_pairing() -> None:
    async with Host(make_config(max_event_bytes=400)) as host:
        big = SpyTool("big", replay="safe", output="x" * 1000)
        model = ScriptedModel(
            [say("", call("big"), call("big", blob="y" * 1000)), say("ok")]
        )
        loop = AgentLoop.create("a", host=host, model=model, tools=[big])
        result = await loop.run_turn("go")
        assert result.status == "completed"
        events = list(host.sessions.get(loop.session_id).events)
        results = [e.data for e in events if isinstance(e, ToolResult)]
        assert results[0].status == "error"
        assert results[0].output.startswith("[output not recorded]")
        assert results[1].output.startswith("[not run] its arguments could not")
        assert len(big.calls) == 1  # the call with unrecordable arguments never ran
        assert pairing_problems(events) == []
        # A user message the log cannot hold fails its turn, which still ends.
        failed = await loop.run_turn("z" * 1000)
        assert failed.status == "failed"
        assert "user/message" in (failed.error or "")
        assert "over the limit" in (failed.error or "")
        assert isinstance(host.sessions.get(loop.session_id).events[-1], TurnEnd)


@pytest.mark.asyncio
async def test_a_tool_gets_a_copy_of_its_arguments(host: Host) -> None:
    @function_tool(replay="safe")
    async def meddle(arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Mutates what it was given."""
        arguments["items"].append("sneaky")  # type: ignore[index]
        return "done"

    model = ScriptedModel([say("", call("meddle", items=["a"])), say("ok")])
    loop = AgentLoop.create("a", host=host, model=model, tools=[meddle])
    await loop.run_turn("go")
    logged = next(
        e for e in host.sessions.get(loop.session_id).events if isinstance(e, ToolCall)
    )
    assert logged.data.arguments == {"items": ["a"]}


@pytest.mark.asyncio
async def test_the_summary_follows_the_turns(host: Host) -> None:
    loop = AgentLoop.create("a", host=host, model=ScriptedModel([say("ok")]))
    session = host.sessions.get(loop.session_id)
    await loop.run_turn("  Fix the build\nthen the docs")
    assert session.summary.title == "Fix the build"
    assert session.summary.first_prompt == "  Fix the build\nthen the docs"
    assert session.summary.status == "idle"
    await loop.run_turn("second")  # the script has run out
    assert session.summary.status == "failed"
    assert session.summary.first_prompt == "  Fix the build\nthen the docs"
    stored = await host.require_persistence().load(loop.session_id)
    assert stored.meta.summary.status == "failed"


@pytest.mark.asyncio
async def test_bad_loop_definitions_are_configuration_errors(host: Host) -> None:
    class SyncRun:
        name = "sync"
        description = ""
        parameters: Mapping[str, Any] = {}

        def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
            return ""

    cases: list[dict[str, Any]] = [
        {"agent_id": ""},
        {"agent_id": "a\x00b"},
        {"tools": [SpyTool("x"), SpyTool("x")]},
        {"tools": [SpyTool("bad name")]},
        {"tools": [SyncRun()]},
        {"max_steps": 0},
        {"model": object()},
    ]
    for case in cases:
        arguments: dict[str, Any] = {"agent_id": "a", "model": EchoModel(), **case}
        agent_id = arguments.pop("agent_id")
        with pytest.raises(ConfigurationError):
            AgentLoop.create(agent_id, host=host, **arguments)
    assert host.sessions.list() == []  # nothing was created by a refused loop


@pytest.mark.asyncio
async def test_run_turn_on_a_session_that_is_not_live(host: Host) -> None:
    loop = AgentLoop.create("a", host=host, model=EchoModel())
    await loop.close()
    with pytest.raises(SessionNotFoundError):
        await loop.run_turn("hi")
    assert not loop.running()


@pytest.mark.asyncio
async def test_close_flushes_and_releases_the_session(host: Host) -> None:
    loop = AgentLoop.create("a", host=host, model=EchoModel())
    await loop.run_turn("hi")
    await loop.close()
    assert host.sessions.list() == []
    again = await AgentLoop.resume("a", loop.session_id, host=host, model=EchoModel())
    assert [e.type for e in host.sessions.get(again.session_id).events][-1] == (
        "turn/end"
    )
    await again.close()
    await again.close()  # closing twice is harmless


@pytest.mark.asyncio
async def test_echo_and_scripted_models_are_deterministic(host: Host) -> None:
    loop = AgentLoop.create("a", host=host, model=EchoModel(prefix="> "))
    result = await loop.run_turn("hello  world ")
    assert result.text == "> hello  world "
    chunks = [
        e.data.text
        for e in host.sessions.get(loop.session_id).events
        if isinstance(e, AssistantChunk)
    ]
    assert chunks == ["> ", "hello  ", "world "]
    messages = [
        e
        for e in host.sessions.get(loop.session_id).events
        if isinstance(e, UserMessage)
    ]
    assert len(messages) == 1
    assert isinstance(host.sessions.get(loop.session_id).events[-2], AssistantMessage)
