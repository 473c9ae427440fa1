"""The loop's parts on their own: models, tools, log analysis, call ids."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, strategies as st

from turnkeep import (
    ModelRequest,
    ModelToolCall,
    SessionEvent,
    TextDelta,
    ToolContext,
    function_tool,
)
from turnkeep.agent import replay_policy
from turnkeep.agent.messages import Message
from turnkeep.agent.models import split_words
from turnkeep.agent.recovery import (
    RecoveryReport,
    last_turn_number,
    open_turn,
    pairing_problems,
)
from turnkeep.agent.tools import int_argument, str_argument, tool_spec
from turnkeep.agent.turns import call_id_for
from turnkeep.errors import ModelError, ToolError
from turnkeep.events import (
    ToolCall,
    ToolCallData,
    ToolResult,
    ToolResultData,
    TurnEnd,
    TurnEndData,
    TurnStart,
    TurnStartData,
)
from turnkeep.testing import EchoModel, Reply, ScriptedCall, ScriptedModel


@given(st.text())
def test_split_words_joins_back_exactly(text: str) -> None:
    pieces = split_words(text)
    assert "".join(pieces) == text
    assert all(pieces)


async def collect(model: Any, request: ModelRequest) -> list[Any]:
    return [item async for item in model.stream(request)]


@pytest.mark.asyncio
async def test_scripted_model_follows_the_history() -> None:
    model = ScriptedModel(
        [Reply("one two", (ScriptedCall("t", {"a": 1}),)), Reply("three")]
    )
    first = ModelRequest(messages=(Message(role="user", content="hi"),))
    assert await collect(model, first) == [
        TextDelta("one "),
        TextDelta("two"),
        ModelToolCall("t", {"a": 1}),
    ]
    later = ModelRequest(
        messages=(*first.messages, Message(role="assistant", content="one two"))
    )
    assert await collect(model, later) == [TextDelta("three")]
    done = ModelRequest(
        messages=(*later.messages, Message(role="assistant", content="three"))
    )
    with pytest.raises(ModelError, match="has 2 replies and was asked for reply #3"):
        await collect(model, done)
    assert model.requests == [first, later, done]


@pytest.mark.asyncio
async def test_echo_model_repeats_the_last_user_message() -> None:
    request = ModelRequest(
        messages=(
            Message(role="user", content="first"),
            Message(role="assistant", content="x"),
            Message(role="user", content="second one"),
        )
    )
    pieces = await collect(EchoModel(), request)
    assert "".join(p.text for p in pieces) == "You said: second one"
    assert await collect(EchoModel(prefix=""), ModelRequest(messages=())) == []


@pytest.mark.asyncio
async def test_function_tools_and_argument_helpers() -> None:
    @function_tool(parameters={"type": "object", "properties": {"n": {}}})
    async def count(arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Count to n.

        Longer explanation that is not the description.
        """
        return str(int_argument(arguments, "n") + len(str_argument(arguments, "s", "")))

    assert (count.name, count.description, count.replay) == (
        "count",
        "Count to n.",
        "unsafe",
    )
    assert replay_policy(count) == "unsafe"
    assert replay_policy(object()) == "unsafe"
    spec = tool_spec(count)
    assert spec.parameters == {"type": "object", "properties": {"n": {}}}
    context = ToolContext(call_id="c", session_id="s", agent_id="a", turn=1)
    assert await count.run({"n": 2, "s": "ab"}, context) == "4"
    for bad, message in [
        ({}, "missing argument 'n'"),
        ({"n": "2"}, "must be an integer"),
        ({"n": True}, "must be an integer"),
        ({"n": 1, "s": 3}, "must be text"),
    ]:
        with pytest.raises(ToolError, match=message):
            await count.run(bad, context)


def _log(*items: tuple[str, Any]) -> list[SessionEvent]:
    events: list[SessionEvent] = []
    for kind, value in items:
        seq = len(events)
        if kind == "start":
            events.append(TurnStart(seq=seq, time=0, data=TurnStartData(turn=value)))
        elif kind == "end":
            events.append(
                TurnEnd(
                    seq=seq, time=0, data=TurnEndData(turn=value, status="completed")
                )
            )
        elif kind == "call":
            events.append(
                ToolCall(
                    seq=seq,
                    time=0,
                    data=ToolCallData(call_id=value, name="t", arguments={}),
                )
            )
        else:
            events.append(
                ToolResult(
                    seq=seq, time=0, data=ToolResultData(call_id=value, output="")
                )
            )
    return events


def test_pairing_problems_finds_every_broken_invariant() -> None:
    good = _log(("start", 1), ("call", "a"), ("result", "a"), ("end", 1))
    assert pairing_problems(good) == []
    assert pairing_problems(_log(("start", 1), ("call", "a"))) == []  # open turn
    bad = {
        "has no result": _log(("start", 1), ("call", "a"), ("end", 1)),
        "answers no earlier call": _log(("start", 1), ("result", "a"), ("end", 1)),
        "has two results": _log(
            ("start", 1), ("call", "a"), ("result", "a"), ("result", "a"), ("end", 1)
        ),
        "is used twice": _log(
            ("start", 1),
            ("call", "a"),
            ("result", "a"),
            ("call", "a"),
            ("result", "a"),
            ("end", 1),
        ),
        "inside turn": _log(("start", 1), ("start", 2), ("end", 2)),
        "closes turn": _log(("start", 1), ("end", 2)),
    }
    for expected, events in bad.items():
        problems = pairing_problems(events)
        assert any(expected in p for p in problems), (expected, problems)


def test_open_turn_and_numbering() -> None:
    assert open_turn([]) is None
    assert last_turn_number([]) == 0
    done = _log(("start", 1), ("call", "a"), ("result", "a"), ("end", 1))
    assert open_turn(done) is None
    cut = _log(
        ("start", 1),
        ("end", 1),
        ("start", 2),
        ("call", "a"),
        ("result", "a"),
        ("call", "b"),
        ("call", "c"),
    )
    found = open_turn(cut)
    assert found is not None
    assert (found.turn, found.start_seq) == (2, 2)
    assert [c.data.call_id for c in found.unanswered] == ["b", "c"]
    assert last_turn_number(cut) == 2
    assert open_turn(_log(("call", "x"))) is None  # no turn at all


def test_recovery_report_says_what_happened_in_plain_words() -> None:
    report = RecoveryReport(
        session_id="s",
        turn=3,
        interrupted=("c1",),
        rerun=("c2",),
        names={"c1": "run_command", "c2": "read_file"},
    )
    text = report.describe()
    assert "Turn 3 was cut off by a crash." in text
    assert "run_command (call c1)" in text
    assert "NOT run again" in text
    assert "read_file (call c2) is safe to repeat and was run again" in text
    assert "closed as interrupted" in text
    quiet = RecoveryReport(session_id="s", turn=1).describe()
    assert "No tool call was left without a result." in quiet


def test_call_ids_are_stable_and_distinct() -> None:
    assert call_id_for("s", 4) == call_id_for("s", 4)
    ids = {call_id_for(s, q) for s in ("s", "t", "s\x001") for q in range(200)}
    assert len(ids) == 600
    assert all(i.startswith("call_") and len(i) == 25 for i in ids)


@pytest.mark.asyncio
async def test_scripted_model_keeps_a_bounded_tail_of_requests() -> None:
    model = ScriptedModel(lambda request: Reply("fine thanks"), keep_requests=3)
    request = ModelRequest(messages=())
    for _ in range(10):
        assert await collect(model, request) == [
            TextDelta("fine "),
            TextDelta("thanks"),
        ]
    assert 3 <= len(model.requests) <= 6


@pytest.mark.asyncio
async def test_scripted_model_can_stream_a_reply_as_one_delta() -> None:
    model = ScriptedModel(["fine thanks"], stream_words=False)
    assert await collect(model, ModelRequest(messages=())) == [TextDelta("fine thanks")]
