"""The model history of a live session, kept up to date as events arrive.

`derive_messages` is the definition: a pure function of the whole log. The
loop asks for the history before every model call, and deriving it from the
whole log each time makes a turn cost grow with the session. `History` gives
the same messages (byte for byte, see `tests/core/test_history.py`) while
reading each event once: it remembers how far into the log it has read and
extends itself from there.

Two rules of `derive_messages` reach backwards in the log, and `History`
keeps just enough state for them:
- a tool call is answered by the first `tool/result` with its id wherever
  that lies in the log, so the message of a call closed before its result
  arrived is a placeholder that the result later replaces (only the first
  occurrence of a call id can ever hold the real answer);
- tool calls attach to the open assistant message until the next message or
  turn marker, so the open message and its calls are rendered on demand and
  only committed to the list when the log moves past them.

If a session's log is no longer a continuation of what was read (events
trimmed after a rejected flush, a session reloaded), `history_of` starts
over from the log it is given.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Final

import attrs

from turnkeep.agent.messages import INTERRUPTED_TOOL_OUTPUT, HistoryToolCall, Message
from turnkeep.events import (
    AssistantMessage,
    SessionEvent,
    ToolCall,
    ToolResult,
    TurnStart,
    UserMessage,
)
from turnkeep.session import Session

__all__ = ["History", "history_of"]


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
    _open_calls: list[ToolCall] = attrs.field(factory=list[ToolCall], init=False)
    _read: int = attrs.field(default=0, init=False)
    _last: SessionEvent | None = attrs.field(default=None, init=False)

    def follows(self, log: Sequence[SessionEvent]) -> bool:
        """Whether `log` continues the log this history has read so far."""
        read = self._read
        return read == 0 or (len(log) >= read and log[read - 1] is self._last)

    def messages(self, log: Sequence[SessionEvent]) -> tuple[Message, ...]:
        """Return the history of `log`, reading only what is new since last time.

        `log` must continue the log read so far (`follows`).
        """
        for index in range(self._read, len(log)):
            self._add(log[index])
        if len(log):
            self._read = len(log)
            self._last = log[-1]
        done = self._messages
        if self._open_text is None:
            return tuple(done)
        # The open message is rendered onto the list and taken off again,
        # so the history is copied once, whatever its length.
        settled = len(done)
        self._render_open(done, commit=False)
        out = tuple(done)
        del done[settled:]
        return out

    def _add(self, event: SessionEvent) -> None:
        if isinstance(event, ToolCall):
            if self._open_text is None:
                self._open_text = ""
            self._open_calls.append(event)
        elif isinstance(event, AssistantMessage):
            self._close()
            self._open_text = event.data.text
        elif isinstance(event, UserMessage):
            self._close()
            self._messages.append(
                Message(
                    role="user", content=event.data.text, untrusted=event.data.untrusted
                )
            )
        elif isinstance(event, TurnStart):
            self._close()
        elif isinstance(event, ToolResult):
            call_id = event.data.call_id
            if call_id not in self._results:
                self._results[call_id] = event
                index = self._waiting.pop(call_id, None)
                if index is not None:
                    self._messages[index] = _answer(call_id, event)

    def _close(self) -> None:
        if self._open_text is None:
            return
        self._render_open(self._messages, commit=True)
        self._open_text = None
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
        out.append(
            Message(
                role="assistant",
                content=self._open_text,
                tool_calls=tuple(
                    HistoryToolCall(
                        id=c.data.call_id, name=c.data.name, arguments=c.data.arguments
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


_histories: Final = weakref.WeakKeyDictionary[Session, History]()


def history_of(session: Session) -> tuple[Message, ...]:
    """Return the model history of a live session (incrementally maintained).

    Equal to `derive_messages(session.events)`; each call reads only the
    events appended since the previous call for the same session.
    """
    log = session.events
    history = _histories.get(session)
    if history is None or not history.follows(log):
        # First use, or the log is not the one it followed (events trimmed
        # after a rejected flush, a reload): derive afresh.
        history = _histories[session] = History()
    return history.messages(log)
