"""The incremental history equals a whole-log derivation after any sequence of events.

Operations mix appends of every vocabulary event (calls and results in any
order, repeated call ids, orphan and duplicate results, partial replies),
whole turns a cancel, failure or timeout cut off while the model streamed
(chunks, the partial reply, the turn's end), reads of the history
after one or several appends, trims (a rejected flush drops its events),
reloads (the same log as fresh objects, as after a resume) and forks (a new
session from a prefix). After every read the incremental messages must encode
to the same bytes as a from-scratch derivation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings, strategies as st

from turnkeep import Host, SessionEvent, derive_messages
from turnkeep.agent import encode_messages
from turnkeep.agent.history import History, history_of
from turnkeep.agent.messages import (
    INTERRUPTED_TOOL_OUTPUT,
    PARTIAL_REPLY_NOTE,
    HistoryToolCall,
    Message,
)
from turnkeep.codec import EventCodec
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
    TurnStatus,
    UserMessage,
    UserMessageData,
)

CALL_IDS = ("a", "b", "c")

_call = st.builds(
    lambda cid: (ToolCall, ToolCallData(call_id=cid, name="t", arguments={"id": cid})),
    st.sampled_from(CALL_IDS),
)
_result = st.builds(
    lambda cid, out, status: (
        ToolResult,
        ToolResultData(call_id=cid, output=out, status=status),
    ),
    st.sampled_from(CALL_IDS),
    st.text(max_size=2),
    st.sampled_from(["ok", "error", "interrupted"]),
)
payloads = st.one_of(
    _call,
    _result,
    _call,
    _result,
    st.builds(lambda t: (UserMessage, UserMessageData(text=t)), st.text(max_size=3)),
    st.builds(
        lambda t, partial: (
            AssistantMessage,
            AssistantMessageData(text=t, partial=partial),
        ),
        st.text(max_size=3),
        st.booleans(),
    ),
    st.builds(
        lambda t: (AssistantChunk, AssistantChunkData(text=t)), st.text(min_size=1)
    ),
    st.builds(lambda n: (TurnStart, TurnStartData(turn=n)), st.integers(1, 3)),
    st.builds(
        lambda n: (TurnEnd, TurnEndData(turn=n, status="completed")),
        st.integers(1, 3),
    ),
)


@st.composite
def _cut_off_turn(draw: st.DrawFn) -> list[tuple[type[SessionEvent], Any]]:
    """A turn whose model call was cut off while it streamed, as the loop logs it."""
    turn = draw(st.integers(1, 3))
    chunks = draw(st.lists(st.text(min_size=1, max_size=3), min_size=1, max_size=3))
    status: TurnStatus = draw(st.sampled_from(["cancelled", "failed", "timed_out"]))
    events: list[tuple[type[SessionEvent], Any]] = [
        (TurnStart, TurnStartData(turn=turn)),
        (UserMessage, UserMessageData(text=draw(st.text(max_size=3)))),
    ]
    events += [(AssistantChunk, AssistantChunkData(text=c)) for c in chunks]
    events.append(
        (AssistantMessage, AssistantMessageData(text="".join(chunks), partial=True))
    )
    events.append((TurnEnd, TurnEndData(turn=turn, status=status, error="cut")))
    return events


batches = st.one_of(
    payloads.map(lambda p: [p]), payloads.map(lambda p: [p]), _cut_off_turn()
)

# Each step appends one event (or a cut-off turn's events), then (sometimes)
# trims, reloads or forks; the history is read after every step.
ACTIONS = ("append",) * 6 + ("trim", "reload", "fork")
operations = st.lists(
    st.tuples(
        batches,
        st.sampled_from(ACTIONS),
        st.integers(1, 4),
    ),
    max_size=60,
)

_codec = EventCodec()


def reference_messages(log: Sequence[SessionEvent]) -> list[Message]:
    """The rules of `turnkeep.agent.messages`, written as a whole-log pass.

    An oracle independent of `History`, which `derive_messages` also uses.
    """
    results: dict[str, ToolResult] = {}
    for event in log:
        if isinstance(event, ToolResult):
            results.setdefault(event.data.call_id, event)

    messages: list[Message] = []
    # Tool calls of the open assistant message, flushed (with their results)
    # when the next non-call event arrives.
    open_text: str | None = None
    open_partial = False
    open_calls: list[ToolCall] = []
    answered: set[str] = set()

    def close() -> None:
        nonlocal open_text, open_partial
        if open_text is None:
            return
        requests = tuple(
            HistoryToolCall(
                id=c.data.call_id, name=c.data.name, arguments=c.data.arguments
            )
            for c in open_calls
        )
        messages.append(
            Message(
                role="assistant",
                content=open_text,
                tool_calls=requests,
                partial=open_partial,
            )
        )
        for call in open_calls:
            messages.append(
                _tool_message(call, results.get(call.data.call_id), answered)
            )
        open_text = None
        open_calls.clear()

    for event in log:
        if isinstance(event, ToolCall):
            if open_text is None:
                open_text, open_partial = "", False
            open_calls.append(event)
        elif isinstance(event, AssistantMessage):
            close()
            open_text, open_partial = event.data.text, event.data.partial
            if open_partial:  # the model is told that this reply was cut off
                open_text = "\n\n".join(t for t in (open_text, PARTIAL_REPLY_NOTE) if t)
        elif isinstance(event, UserMessage):
            close()
            messages.append(
                Message(
                    role="user", content=event.data.text, untrusted=event.data.untrusted
                )
            )
        elif isinstance(event, TurnStart):
            close()
    close()
    return messages


def _tool_message(
    call: ToolCall, result: ToolResult | None, answered: set[str]
) -> Message:
    call_id = call.data.call_id
    if result is None or call_id in answered:
        # A call id repeated in the log gets one real answer; later copies are
        # rendered as interrupted so every call still pairs with one message.
        return Message(
            role="tool",
            content=INTERRUPTED_TOOL_OUTPUT,
            tool_call_id=call_id,
            status="interrupted",
        )
    answered.add(call_id)
    if result.data.status == "interrupted":
        content = result.data.output or INTERRUPTED_TOOL_OUTPUT
    else:
        content = result.data.output
    return Message(
        role="tool", content=content, tool_call_id=call_id, status=result.data.status
    )


def _fresh_copies(log: list[SessionEvent]) -> list[SessionEvent]:
    """The same events as new objects, as a resume decodes them from disk."""
    return [_codec.decode(_codec.encode(event)) for event in log]


class _Follower:
    """What `history_of` does for a session, on a plain list."""

    def __init__(self) -> None:
        self.history = History()
        self.given: list[tuple[Sequence[Message], bytes]] = []

    def read(self, log: list[SessionEvent]) -> bytes:
        if not self.history.follows(log):
            self.history = History()
        view = self.history.messages(log)
        encoded = encode_messages(view)
        self.given.append((view, encoded))
        return encoded

    def unchanged(self) -> bool:
        """Every history handed out still shows what it showed then."""
        return all(encode_messages(view) == then for view, then in self.given)


@settings(max_examples=300, deadline=None)
@given(operations)
@example(  # a result after its call closed, read before and after it came
    [
        ([(ToolCall, ToolCallData(call_id="a", name="t", arguments={}))], "append", 1),
        ([(UserMessage, UserMessageData(text="next"))], "append", 1),
        ([(ToolResult, ToolResultData(call_id="a", output="o"))], "append", 1),
    ]
)
def test_incremental_history_equals_a_whole_log_derivation(
    ops: list[tuple[list[tuple[type[SessionEvent], Any]], str, int]],
) -> None:
    log: list[SessionEvent] = []
    follower = _Follower()
    for batch, action, n in ops:
        for kind, data in batch:
            log.append(kind(seq=len(log), time=len(log), data=data))
        if action == "trim":  # a rejected flush drops its events
            del log[max(0, len(log) - n) :]
        elif action == "reload":  # resumed: the same log as new objects
            log = _fresh_copies(log)
        elif action == "fork":  # a new session from a prefix
            log = _fresh_copies(log[: max(0, len(log) - n)])
            follower = _Follower()
        if action != "append" or n % 2:  # sometimes several events per read
            assert follower.read(log) == encode_messages(reference_messages(log)), ops
    assert follower.read(log) == encode_messages(reference_messages(log))
    # One pass of `History` is the library's whole-log derivation.
    assert encode_messages(derive_messages(log)) == follower.read(log)
    # A model may keep what it was given: later events never change it.
    assert follower.unchanged(), ops


def test_a_result_after_the_call_closed_replaces_its_placeholder() -> None:
    log: list[SessionEvent] = []

    def add(kind: type[SessionEvent], data: object) -> None:
        log.append(kind(seq=len(log), time=len(log), data=data))

    history = History()
    add(AssistantMessage, AssistantMessageData(text="calling"))
    add(ToolCall, ToolCallData(call_id="a", name="t", arguments={}))
    add(UserMessage, UserMessageData(text="next"))
    before = history.messages(log)
    assert before[1].status == "interrupted"
    add(ToolResult, ToolResultData(call_id="a", output="done", status="ok"))
    after = history.messages(log)
    assert (after[1].status, after[1].content) == ("ok", "done")
    assert encode_messages(after) == encode_messages(reference_messages(log))
    # The history given before the result still shows the placeholder.
    assert before[1].status == "interrupted"


def test_a_read_copies_nothing_it_read_before() -> None:
    log: list[SessionEvent] = []
    history = History()
    for seq in range(1000):
        log.append(UserMessage(seq=seq, time=seq, data=UserMessageData(text="x")))
    first = history.messages(log)
    reply = AssistantMessageData(text="y")
    log.append(AssistantMessage(seq=1000, time=1000, data=reply))
    second = history.messages(log)
    # Both show the one list of settled messages (a copy would cost O(log));
    # the open assistant message is the only entry the second read made.
    assert first._settled is second._settled  # pyright: ignore[reportAttributeAccessIssue, reportPrivateUsage]
    assert (len(first), len(second)) == (1000, 1001)
    assert second[-1] == Message(role="assistant", content="y")


def test_each_read_only_visits_the_new_events() -> None:
    seen: list[int] = []

    class Counting(list[SessionEvent]):
        def __getitem__(self, index: Any) -> Any:
            if isinstance(index, int):
                seen.append(index)
            return super().__getitem__(index)

    log = Counting()
    history = History()
    for seq in range(50):
        log.append(UserMessage(seq=seq, time=seq, data=UserMessageData(text="x")))
    history.messages(log)
    seen.clear()
    log.append(UserMessage(seq=50, time=50, data=UserMessageData(text="y")))
    assert history.follows(log)
    history.messages(log)
    # the new event, plus the last one to remember where it stopped
    assert sorted(set(seen)) <= [49, 50]


@pytest.mark.asyncio
async def test_history_of_a_live_session_follows_appends() -> None:
    async with Host({"persistence": "memory", "plugins": "none"}) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="hi"))
        assert list(history_of(session)) == derive_messages(session.events)
        session.append(AssistantMessageData(text="hello"))
        session.append(ToolCallData(call_id="x", name="t", arguments={}))
        session.append(ToolResultData(call_id="x", output="1", status="ok"))
        assert encode_messages(history_of(session)) == encode_messages(
            derive_messages(session.events)
        )
        assert msgspec.json.encode(history_of(session)[-1]) == msgspec.json.encode(
            derive_messages(session.events)[-1]
        )
        await host.sessions.close(session.id)
