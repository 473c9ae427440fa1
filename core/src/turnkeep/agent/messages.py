"""Model history derived from a session's log: `derive_messages`.

The log is the only truth; the history a model sees is a pure function of
it, so a session continued from disk (cold) and one continued in memory
(warm) give byte-identical histories for the same log.

Rules:
- `user/message` becomes a user message; `assistant/message` an assistant
  message; streamed `assistant/chunk`s and the `turn/*` markers are skipped.
- each `tool/call` attaches to the latest assistant message of its turn (an
  assistant message with empty text is synthesised if the model called tools
  without text), and is followed, in call order, by one tool message: its
  `tool/result` wherever that lies later in the log;
- a call with no result is rendered explicitly as interrupted, outcome
  unknown; a result whose status is `interrupted` says the same;
- a result that answers no call, and a second result for one call, are
  dropped (the log invariant forbids them; history stays well-formed);
- event types outside the vocabulary are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, TypeAlias

import msgspec

from turnkeep._deprecated import renamed
from turnkeep.events import (
    AssistantMessage,
    SessionEvent,
    ToolCall,
    ToolResult,
    TurnStart,
    UserMessage,
)

__all__ = [
    "INTERRUPTED_TOOL_OUTPUT",
    "HistoryToolCall",
    "Message",
    "MessageRole",
    "derive_messages",
    "encode_messages",
]

MessageRole: TypeAlias = Literal["user", "assistant", "tool"]

INTERRUPTED_TOOL_OUTPUT: Final = (
    "[interrupted] This tool call was started but the session stopped before "
    "its result was recorded. Its outcome is unknown: inspect before repeating it."
)


class HistoryToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call in the derived history: what an assistant message asked for.

    Made from a `tool/call` event (`turnkeep.events.ToolCall`); the model
    itself streams `turnkeep.agent.ModelToolCall`, which has no id yet.
    """

    id: str
    name: str
    arguments: dict[str, Any]


class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One entry of model history.

    Attributes:
        role: who speaks.
        content: the text.
        tool_calls: for an assistant message, the tools it asked for.
        tool_call_id: for a tool message, the call it answers.
        status: for a tool message, `ok`, `error` or `interrupted`.
        untrusted: the text came from an outside source (imports).
    """

    role: MessageRole
    content: str
    tool_calls: tuple[HistoryToolCall, ...] = ()
    tool_call_id: str | None = None
    status: str | None = None
    untrusted: bool = False


_encoder: Final = msgspec.json.Encoder()


def derive_messages(events: Iterable[SessionEvent]) -> list[Message]:
    """Return the model history of a log (pure and deterministic)."""
    log: Sequence[SessionEvent] = (
        events if isinstance(events, Sequence) else list(events)
    )
    results: dict[str, ToolResult] = {}
    for event in log:
        if isinstance(event, ToolResult):
            results.setdefault(event.data.call_id, event)

    messages: list[Message] = []
    # Tool calls of the open assistant message, flushed (with their results)
    # when the next non-call event arrives.
    open_text: str | None = None
    open_calls: list[ToolCall] = []
    answered: set[str] = set()

    def close() -> None:
        nonlocal open_text
        if open_text is None:
            return
        requests = tuple(
            HistoryToolCall(
                id=c.data.call_id, name=c.data.name, arguments=c.data.arguments
            )
            for c in open_calls
        )
        messages.append(
            Message(role="assistant", content=open_text, tool_calls=requests)
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
                open_text = ""
            open_calls.append(event)
        elif isinstance(event, AssistantMessage):
            close()
            open_text = event.data.text
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


def encode_messages(messages: Sequence[Message]) -> bytes:
    """Return the canonical JSON of a history (for byte-for-byte comparison)."""
    return _encoder.encode(messages)


__getattr__ = renamed(__name__, {"ToolCallRequest": f"{__name__}:HistoryToolCall"})
