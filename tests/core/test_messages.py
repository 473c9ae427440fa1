from __future__ import annotations

from turnkeep import SessionEvent, define_event_type, derive_messages
from turnkeep.agent import encode_messages
from turnkeep.agent.messages import INTERRUPTED_TOOL_OUTPUT
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessage,
    AssistantMessageData,
    ToolCall,
    ToolCallData,
    ToolResult,
    ToolResultData,
    TurnEnd,
    TurnEndData,
    TurnStart,
    TurnStartData,
    UserMessage,
    UserMessageData,
)


def log(*pairs: tuple[type[SessionEvent], object]) -> list[SessionEvent]:
    return [kind(seq=i, time=i, data=data) for i, (kind, data) in enumerate(pairs)]


def call(cid: str, name: str = "t") -> tuple[type[SessionEvent], object]:
    return (ToolCall, ToolCallData(call_id=cid, name=name, arguments={"x": cid}))


def result(cid: str, out: str, status: str = "ok") -> tuple[type[SessionEvent], object]:
    return (ToolResult, ToolResultData(call_id=cid, output=out, status=status))  # type: ignore[arg-type]


def test_chunks_and_markers_are_skipped() -> None:
    events = log(
        (TurnStart, TurnStartData(turn=1)),
        (UserMessage, UserMessageData(text="hi")),
        (AssistantChunk, AssistantChunkData(text="hel")),
        (AssistantChunk, AssistantChunkData(text="lo")),
        (AssistantMessage, AssistantMessageData(text="hello")),
        (TurnEnd, TurnEndData(turn=1, status="completed")),
    )
    assert [(m.role, m.content) for m in derive_messages(events)] == [
        ("user", "hi"),
        ("assistant", "hello"),
    ]


def test_calls_pair_with_results_in_call_order_even_when_results_arrive_reversed() -> (
    None
):
    events = log(
        (UserMessage, UserMessageData(text="go")),
        (AssistantMessage, AssistantMessageData(text="calling")),
        call("a"),
        call("b"),
        result("b", "B"),
        result("a", "A"),
        (AssistantMessage, AssistantMessageData(text="done")),
    )
    messages = derive_messages(events)
    assert [m.role for m in messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert [c.id for c in messages[1].tool_calls] == ["a", "b"]
    assert [(m.tool_call_id, m.content) for m in messages[2:4]] == [
        ("a", "A"),
        ("b", "B"),
    ]


def test_a_call_without_text_gets_an_empty_assistant_message() -> None:
    messages = derive_messages(
        log((UserMessage, UserMessageData(text="q")), call("a"), result("a", "r"))
    )
    assert messages[1].role == "assistant"
    assert messages[1].content == ""
    assert messages[1].tool_calls[0].id == "a"


def test_interrupted_calls_are_rendered_explicitly() -> None:
    events = log(
        (AssistantMessage, AssistantMessageData(text="x")),
        call("lost"),
        call("settled"),
        result("settled", "", status="interrupted"),
    )
    messages = derive_messages(events)
    assert messages[1].status == "interrupted"
    assert messages[1].content == INTERRUPTED_TOOL_OUTPUT
    assert messages[2].status == "interrupted"
    assert "unknown" in messages[2].content


def test_orphan_and_duplicate_results_are_dropped() -> None:
    events = log(
        (AssistantMessage, AssistantMessageData(text="x")),
        call("a"),
        result("a", "first"),
        result("a", "second"),
        result("ghost", "?"),
    )
    messages = derive_messages(events)
    assert [(m.role, m.content) for m in messages] == [
        ("assistant", "x"),
        ("tool", "first"),
    ]


def test_unknown_event_types_are_skipped_and_output_is_deterministic() -> None:
    note = define_event_type("plug/note", ignorable=True)
    events = [
        *log((UserMessage, UserMessageData(text="u", untrusted=True))),
        note(seq=1, time=1, data={"k": 1}),
    ]
    first = encode_messages(derive_messages(events))
    assert first == encode_messages(derive_messages(iter(events)))
    assert derive_messages(events)[0].untrusted is True
    assert len(derive_messages(events)) == 1
