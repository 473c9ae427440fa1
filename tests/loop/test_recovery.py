"""Recovery of a turn a crash cut off (R8): report, never re-run, continue."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

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
from tests.support.writes import write_state

from turnkeep import AgentLoop, Host
from turnkeep.agent.messages import INTERRUPTED_TOOL_OUTPUT
from turnkeep.agent.recovery import open_turn, pairing_problems
from turnkeep.agent.turns import call_id_for
from turnkeep.errors import FlushError
from turnkeep.events import (
    AssistantMessageData,
    ReplayPolicy,
    ToolCallData,
    ToolResult,
    ToolResultData,
    TurnCheckpoint,
    TurnCheckpointData,
    TurnEnd,
    TurnEndData,
    TurnStart,
    TurnStartData,
    UserMessageData,
)
from turnkeep.testing import EchoModel, Reply, ScriptedCall, ScriptedModel


async def crashed_log(
    host: Host,
    session_id: str,
    calls: Sequence[tuple[str, ReplayPolicy]],
    *,
    answered: int = 0,
) -> list[str]:
    """Store a log that ends inside turn 2, as a crash leaves it.

    Turn 1 is complete; turn 2 asked for `calls`, of which the first
    `answered` have results. Returns the call ids.
    """
    session = host.sessions.create(session_id)
    session.append(TurnStartData(turn=1))
    session.append(UserMessageData(text="first"))
    session.append(AssistantMessageData(text="fine"))
    session.append(TurnEndData(turn=1, status="completed"))
    session.append(TurnStartData(turn=2))
    session.append(UserMessageData(text="second"))
    session.append(AssistantMessageData(text="working"))
    ids: list[str] = []
    for index, (name, replay) in enumerate(calls):
        call_id = call_id_for(session_id, session.next_seq)
        ids.append(call_id)
        session.append(
            ToolCallData(call_id=call_id, name=name, arguments={}, replay=replay),
        )
        if index < answered:
            session.append(ToolResultData(call_id=call_id, output="done"))
    session.append(TurnCheckpointData(turn=2, reason="unsafe-tool"))
    await session.flush()
    await host.sessions.close(session_id)
    return ids


@pytest.mark.asyncio
async def test_a_crash_mid_tool_is_reported_interrupted_and_never_run_again() -> None:
    shared = SharedMemory()
    first = await shared_host(shared).start()
    act_before = SpyTool("act", block=True)
    model = ScriptedModel([Reply("acting", (ScriptedCall("act", {"n": 1}),))])
    crashed = AgentLoop.create("agent", host=first, model=model, tools=[act_before])
    sid = crashed.session_id
    running = asyncio.create_task(crashed.run_turn("do the thing"))
    await act_before.started.wait()  # the intent is durable; the tool runs
    (call_id,) = act_before.call_ids

    # A new process takes the session over while the old one hangs.
    act_after = SpyTool("act")
    later = ScriptedModel(lambda _request: Reply("checking first"))
    async with shared_host(shared) as second:
        loop = await AgentLoop.resume(
            "agent", sid, host=second, model=later, tools=[act_after], steal=True
        )
        report = loop.recovery
        assert report is not None
        assert (report.turn, report.interrupted, report.rerun) == (1, (call_id,), ())
        assert not report.continued
        assert act_after.calls == []  # never re-invoked
        assert later.requests == []  # closing a turn asks no model
        stored = await stored_events(second, sid)
        result, checkpoint, end = stored[-3:]
        assert isinstance(result, ToolResult)
        assert (result.data.call_id, result.data.status) == (call_id, "interrupted")
        assert result.data.output == INTERRUPTED_TOOL_OUTPUT
        assert isinstance(checkpoint, TurnCheckpoint)
        assert checkpoint.data.reason == "recovery"
        assert isinstance(end, TurnEnd)
        assert (end.data.turn, end.data.status) == (1, "interrupted")
        assert pairing_problems(stored) == []
        assert "It was NOT run again" in report.describe()
        assert second.sessions.get(sid).summary.status == "interrupted"

        # The next turn sees the interruption in its history.
        nxt = await loop.run_turn("what happened?")
        assert nxt.turn == 2
        tool_messages = [m for m in later.requests[0].messages if m.role == "tool"]
        assert [(m.status, m.content) for m in tool_messages] == [
            ("interrupted", INTERRUPTED_TOOL_OUTPUT)
        ]
        durable = await stored_events(second, sid)

    # The old process wakes up: it was fenced out and writes nothing.
    act_before.release.set()
    with pytest.raises(FlushError):
        await running
    async with shared_host(shared) as third:
        assert await stored_events(third, sid) == durable
    # Fenced: its leftovers cannot be stored; the report says so.
    reports = await first.aclose()
    assert [(r.session_id, r.outcome) for r in reports] == [(sid, "fenced")]


@pytest.mark.asyncio
async def test_safe_calls_are_run_again_after_the_unsafe_ones_are_answered() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as host:
        ids = await crashed_log(
            host, "s", [("look", "safe"), ("act", "unsafe"), ("look", "safe")]
        )
        look = SpyTool("look", replay="safe", output="seen")
        act = SpyTool("act")
        loop = await AgentLoop.resume(
            "agent", "s", host=host, model=EchoModel(), tools=[look, act]
        )
        report = loop.recovery
        assert report is not None
        assert report.interrupted == (ids[1],)
        assert report.rerun == (ids[0], ids[2])
        assert act.calls == []
        assert look.call_ids == [ids[0], ids[2]]  # the same, stable call ids
        assert all(c.rerun for c in look.calls)
        assert all(c.turn == 2 for c in look.calls)
        events = list(host.sessions.get("s").events)
        answers = [e.data for e in events if isinstance(e, ToolResult)]
        # The interrupted answer is written (and flushed) before the re-runs.
        assert [(a.call_id, a.status) for a in answers] == [
            (ids[1], "interrupted"),
            (ids[0], "ok"),
            (ids[2], "ok"),
        ]
        assert pairing_problems(events) == []
        assert await stored_events(host, "s") == events


@pytest.mark.asyncio
async def test_a_safe_call_whose_tool_is_gone_or_now_unsafe_is_not_rerun() -> None:
    async with shared_host(SharedMemory()) as host:
        ids = await crashed_log(host, "s", [("gone", "safe"), ("look", "safe")])
        now_unsafe = SpyTool("look", replay="unsafe")
        loop = await AgentLoop.resume(
            "agent", "s", host=host, model=EchoModel(), tools=[now_unsafe]
        )
        assert loop.recovery is not None
        assert loop.recovery.interrupted == tuple(ids)
        assert now_unsafe.calls == []


@pytest.mark.asyncio
async def test_continue_turn_asks_the_model_again_with_that_history() -> None:
    async with shared_host(SharedMemory()) as host:
        ids = await crashed_log(host, "s", [("act", "unsafe")])
        act = SpyTool("act")
        model = ScriptedModel(lambda _request: Reply("I will check before redoing"))
        loop = await AgentLoop.resume(
            "agent",
            "s",
            host=host,
            model=model,
            tools=[act],
            continue_turn=True,
        )
        assert loop.recovery is not None
        assert loop.recovery.continued
        assert "continued by asking the model" in loop.recovery.describe()
        assert act.calls == []
        (request,) = model.requests
        assert request.turn == 2
        tool = [m for m in request.messages if m.role == "tool"]
        assert [(m.tool_call_id, m.status) for m in tool] == [(ids[0], "interrupted")]
        events = list(host.sessions.get("s").events)
        end = events[-1]
        assert isinstance(end, TurnEnd)
        assert (end.data.turn, end.data.status) == (2, "completed")
        assert [e.data.turn for e in events if isinstance(e, TurnStart)] == [1, 2]
        assert pairing_problems(events) == []
        assert (await loop.run_turn("next")).turn == 3


@pytest.mark.asyncio
async def test_a_continued_turn_may_call_the_tool_again_as_a_new_call() -> None:
    async with shared_host(SharedMemory()) as host:
        ids = await crashed_log(host, "s", [("act", "unsafe")], answered=0)
        act = SpyTool("act")
        model = ScriptedModel(
            lambda request: (
                Reply("done")
                if any(m.role == "tool" and m.status == "ok" for m in request.messages)
                else Reply("redo", (ScriptedCall("act"),))
            )
        )
        await AgentLoop.resume(
            "agent", "s", host=host, model=model, tools=[act], continue_turn=True
        )
        # The model decided to act again: that is a new call with a new id.
        assert len(act.calls) == 1
        assert act.call_ids[0] != ids[0]
        assert pairing_problems(list(host.sessions.get("s").events)) == []


@pytest.mark.asyncio
async def test_recover_on_a_log_that_ends_between_turns_does_nothing(
    host: Host,
) -> None:
    loop = AgentLoop.create("agent", host=host, model=EchoModel())
    await loop.run_turn("hi")
    before = list(host.sessions.get(loop.session_id).events)
    report = await loop.recover()
    assert not report.recovered
    assert report.describe().startswith("The session ended cleanly")
    assert list(host.sessions.get(loop.session_id).events) == before
    empty = AgentLoop.create("agent", host=host, model=EchoModel())
    assert not (await empty.recover()).recovered


@pytest.mark.asyncio
async def test_a_new_turn_on_a_cut_off_log_recovers_it_first() -> None:
    async with shared_host(SharedMemory()) as host:
        ids = await crashed_log(host, "s", [("act", "unsafe")])
        await host.sessions.resume("s")  # loaded by hand, not by AgentLoop.resume
        act = SpyTool("act")
        loop = AgentLoop.create("agent", host=host, model=EchoModel(), tools=[act])
        # Only the deprecated form drives a session the loop was not made for.
        with pytest.warns(DeprecationWarning, match="one loop per session"):
            result = await loop.run_turn("s", "go on")
        assert result.turn == 3
        assert act.calls == []
        events = list(host.sessions.get("s").events)
        assert pairing_problems(events) == []
        statuses = [e.data.status for e in events if isinstance(e, TurnEnd)]
        assert statuses == ["completed", "interrupted", "completed"]
        answer = next(
            e for e in events if isinstance(e, ToolResult) and e.data.call_id == ids[0]
        )
        assert answer.data.status == "interrupted"


@pytest.mark.asyncio
async def test_recovery_that_cannot_be_saved_is_retried_not_duplicated(
    tmp_path: Path,
) -> None:
    failing = [False]
    plugin = GatedPlugin(
        inner_factory("memory", tmp_path), fail=lambda _s, _e: failing[0]
    )
    async with gated_host(plugin) as host:
        ids = await crashed_log(host, "s", [("act", "unsafe")])
        failing[0] = True
        act = SpyTool("act")
        with pytest.raises(FlushError):
            await AgentLoop.resume(
                "agent", "s", host=host, model=EchoModel(), tools=[act]
            )
        session = host.sessions.get("s")
        assert open_turn(session.events) is not None  # still open, answer in memory
        assert (
            len(write_state(host, session).pending) == 2
        )  # the answer and the checkpoint
        failing[0] = False
        loop = await AgentLoop.resume(
            "agent", "s", host=host, model=EchoModel(), tools=[act]
        )
        result = await loop.run_turn("again")
        assert result.status == "completed"
        events = await stored_events(host, "s")
        assert pairing_problems(events) == []
        answers = [e for e in events if isinstance(e, ToolResult)]
        assert [a.data.call_id for a in answers] == ids
        assert act.calls == []
