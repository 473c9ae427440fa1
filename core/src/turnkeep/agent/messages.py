"""Model history derived from a session's log: `derive_messages`.

The log is the only truth; the history a model sees is a pure function of
it, so a session continued from disk (cold) and one continued in memory
(warm) give byte-identical histories for the same log.

Rules:
- `user/message` becomes a user message; `assistant/message` an assistant
  message; streamed `assistant/chunk`s and the `turn/*` markers are skipped.
  A partial `assistant/message` (a model call cut off while it streamed)
  keeps its text followed by `PARTIAL_REPLY_NOTE`, so the model sees that it
  was cut off, and is marked `partial`;
- each `tool/call` attaches to the latest assistant message of its turn (an
  assistant message with empty text is synthesised if the model called tools
  without text), and is followed, in call order, by one tool message: its
  `tool/result` wherever that lies later in the log;
- a call with no result is rendered explicitly as interrupted, outcome
  unknown; a result whose status is `interrupted` says the same;
- a result that answers no call, and a second result for one call, are
  dropped (the log invariant forbids them; history stays well-formed);
- event types outside the vocabulary are skipped.

`History` applies these rules one event at a time (`derive_messages` is one
pass of it), so a live session's history can be extended as its log grows
(`turnkeep.agent.history`). Two rules reach backwards in the log, and it
keeps just enough state for them: a call closed before its result arrived
gets a placeholder that the result later replaces (only the first
occurrence of a call id can hold the real answer), and the open assistant
message with its calls is rendered on demand and committed to the list only
when the log moves past it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs
import msgspec

from turnkeep._deprecated import renamed
from turnkeep.agent.historyview import HistoryView
from turnkeep.agent.tools import fresh_arguments
from turnkeep.events import (
    AssistantChunk,
    AssistantMessage,
    EffectResolved,
    SessionEvent,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
    UserMessage,
)

__all__ = [
    "INTERRUPTED_TOOL_OUTPUT",
    "PARTIAL_REPLY_NOTE",
    "History",
    "HistoryToolCall",
    "Message",
    "MessageRole",
    "derive_messages",
    "encode_messages",
    "partial_content",
    "resolved_note",
]

MessageRole: TypeAlias = Literal["user", "assistant", "tool"]

INTERRUPTED_TOOL_OUTPUT: Final = (
    "[interrupted] This tool call was started but the session stopped before "
    "its result was recorded. Its outcome is unknown: inspect before repeating it."
)

PARTIAL_REPLY_NOTE: Final = (
    "[cut off] This reply was interrupted before it finished; the text above "
    "is all of it that was recorded."
)


class HistoryToolCall(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A tool call in the derived history: what an assistant message asked for.

    Made from a `tool/call` event (`turnkeep.events.ToolCall`); the model
    itself streams `turnkeep.agent.ModelToolCall`, which has no id yet.
    """

    id: str
    name: str
    arguments: dict[str, Any]


# gc=False (here and above): a live session's history keeps one per message
# for its whole life, and they hold nothing that could refer back to them, so
# the cyclic collector need not walk them over and over.
class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One entry of model history.

    Attributes:
        role: who speaks.
        content: the text.
        tool_calls: for an assistant message, the tools it asked for.
        tool_call_id: for a tool message, the call it answers.
        status: for a tool message, `ok`, `error` or `interrupted`.
        untrusted: the text came from an outside source (imports).
        partial: for an assistant message, the reply was cut off (its
            content ends with `PARTIAL_REPLY_NOTE`).
    """

    role: MessageRole
    content: str
    tool_calls: tuple[HistoryToolCall, ...] = ()
    tool_call_id: str | None = None
    status: str | None = None
    untrusted: bool = False
    partial: bool = False


_encoder: Final = msgspec.json.Encoder()

_UNSEEN: Final = frozenset({AssistantChunk, TurnEnd})
"""Types whose events leave the history as it is (streamed pieces, ends)."""


def derive_messages(events: Iterable[SessionEvent]) -> list[Message]:
    """Return the model history of a log (pure and deterministic)."""
    log: Sequence[SessionEvent] = (
        events if isinstance(events, Sequence) else list(events)
    )
    return list(History().messages(log))


@attrs.define(eq=False)
class History:
    """The derived history of one log, extended one event at a time."""

    _messages: list[Message] = attrs.field(factory=list[Message], init=False)
    _results: dict[str, ToolResult] = attrs.field(
        factory=dict[str, ToolResult], init=False
    )
    # Index into `_messages` of the placeholder for the first occurrence of a
    # call id closed before any result for it was seen.
    _waiting: dict[str, int] = attrs.field(factory=dict[str, int], init=False)
    # Call ids whose first occurrence has been rendered (answered or not).
    _seen_calls: set[str] = attrs.field(factory=set[str], init=False)
    _open_text: str | None = attrs.field(default=None, init=False)
    _open_partial: bool = attrs.field(default=False, init=False)
    _open_calls: list[ToolCall] = attrs.field(factory=list[ToolCall], init=False)
    _read: int = attrs.field(default=0, init=False)
    _last: SessionEvent | None = attrs.field(default=None, init=False)
    # Whether a `HistoryView` may show `_messages` (then it is only appended to).
    _shared: bool = attrs.field(default=False, init=False)

    def follows(self, log: Sequence[SessionEvent]) -> bool:
        """Whether `log` continues the log this history has read so far."""
        read = self._read
        return read == 0 or (len(log) >= read and log[read - 1] is self._last)

    def messages(self, log: Sequence[SessionEvent]) -> HistoryView[Message]:
        """Return the history of `log`, reading only what is new since last time.

        `log` must continue the log read so far (`follows`). The result is a
        view (`HistoryView`): it costs the same whatever the history's length.
        """
        add, unseen = self._add, _UNSEEN
        for event in log[self._read :]:
            if type(event) not in unseen:  # most events: no call at all
                add(event)
        if len(log):
            self._read = len(log)
            self._last = log[-1]
        done = self._messages
        self._shared = True
        if self._open_text is None:
            return HistoryView(done, len(done))
        tail: list[Message] = []
        self._render_open(tail, commit=False)
        return HistoryView(done, len(done), tuple(tail))

    def _add(self, event: SessionEvent) -> None:
        if type(event) in _UNSEEN:
            return  # most of a turn's events: skipped before the checks below
        if isinstance(event, ToolCall):
            if self._open_text is None:
                self._open_text = ""
            self._open_calls.append(event)
        elif isinstance(event, AssistantMessage):
            self._close()
            self._open_text = event.data.text
            self._open_partial = event.data.partial
        elif isinstance(event, UserMessage):
            self._close()
            self._messages.append(
                Message(
                    role="user", content=event.data.text, untrusted=event.data.untrusted
                )
            )
        elif isinstance(event, TurnStart):
            self._close()
        elif isinstance(event, EffectResolved) and event.data.call_id in self._results:
            # Settled after its result was recorded (by a person, between
            # turns): the model learns it here. Before it, the result speaks.
            self._close()
            self._messages.append(Message(role="user", content=resolved_note(event)))
        elif isinstance(event, ToolResult):
            call_id = event.data.call_id
            if call_id not in self._results:
                self._results[call_id] = event
                index = self._waiting.pop(call_id, None)
                if index is not None:
                    if self._shared:  # views show the list: rewrite a copy
                        self._messages = list(self._messages)
                        self._shared = False
                    self._messages[index] = _answer(call_id, event)

    def _close(self) -> None:
        if self._open_text is None:
            return
        self._render_open(self._messages, commit=True)
        self._open_text = None
        self._open_partial = False
        self._open_calls.clear()

    def _render_open(self, out: list[Message], *, commit: bool) -> None:
        """Append the open assistant message and its calls' answers to `out`.

        With `commit`, the calls count as rendered and unanswered ones wait
        for their result; without, nothing is remembered (a preview).
        """
        assert self._open_text is not None  # noqa: S101 - callers check
        seen = self._seen_calls
        fresh: set[str] = set()
        calls = self._open_calls
        partial = self._open_partial
        out.append(
            Message(
                role="assistant",
                content=partial_content(self._open_text)
                if partial
                else self._open_text,
                partial=partial,
                tool_calls=tuple(
                    HistoryToolCall(
                        id=c.data.call_id,
                        name=c.data.name,
                        # The model's to read, or change: never the log's own.
                        arguments=fresh_arguments(c.data.arguments),
                    )
                    for c in calls
                ),
            )
        )
        for call in calls:
            call_id = call.data.call_id
            result = self._results.get(call_id)
            if call_id in seen or call_id in fresh:
                # A repeated call id: only its first occurrence is answered.
                out.append(_interrupted(call_id))
                continue
            fresh.add(call_id)
            if result is None:
                if commit:
                    self._waiting[call_id] = len(out)
                out.append(_interrupted(call_id))
            else:
                out.append(_answer(call_id, result))
        if commit:
            seen |= fresh


def partial_content(text: str) -> str:
    """The content of a partial reply: its text, then `PARTIAL_REPLY_NOTE`."""
    return f"{text}\n\n{PARTIAL_REPLY_NOTE}" if text else PARTIAL_REPLY_NOTE


def resolved_note(event: EffectResolved) -> str:
    """What the model is told when a call of unknown outcome was resolved."""
    data = event.data
    if data.outcome == "done":
        said = "it DID take effect" + (
            f"; its result: {data.result}" if data.result else ""
        )
    else:
        said = "it did NOT take effect; it may be called again"
    why = f" Reason: {data.reason}" if data.reason else ""
    return (
        f"[resolved] Tool call {data.call_id}, whose outcome was unknown after an "
        f"interruption, was checked by {data.by}: {said}.{why}"
    )


def _interrupted(call_id: str) -> Message:
    return Message(
        role="tool",
        content=INTERRUPTED_TOOL_OUTPUT,
        tool_call_id=call_id,
        status="interrupted",
    )


def _answer(call_id: str, result: ToolResult) -> Message:
    status = result.data.status
    if status == "interrupted":
        content = result.data.output or INTERRUPTED_TOOL_OUTPUT
    else:
        content = result.data.output
    return Message(role="tool", content=content, tool_call_id=call_id, status=status)


def encode_messages(messages: Sequence[Message]) -> bytes:
    """Return the canonical JSON of a history (for byte-for-byte comparison)."""
    if not isinstance(messages, (list, tuple)):
        messages = list(messages)  # a `HistoryView`: msgspec encodes lists
    return _encoder.encode(messages)


__getattr__ = renamed(__name__, {"ToolCallRequest": f"{__name__}:HistoryToolCall"})
