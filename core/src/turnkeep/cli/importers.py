"""Reading other programs' conversations into turnkeep events (for `import`).

Pure functions: bytes in, a `Plan` out (the event payloads to append, in
order, and what was skipped). Two outside shapes are understood, item by
item, so mixed lists work too:

- the OpenAI chat `messages` list: `{role, content, tool_calls?,
  tool_call_id?}` (a request body `{"messages": [...]}` is accepted too);
- the OpenAI Agents SDK's session items: `{"role": "user", "content": ...}`,
  `{"type": "message", "role": "assistant", "content": [{"type":
  "output_text", "text": ...}]}`, `{"type": "function_call", "call_id",
  "name", "arguments"}`, `{"type": "function_call_output", "call_id",
  "output"}`.

Every user message becomes `user/message` with `untrusted=True`: it is
context from outside, not this user's instruction. Tool calls and results
become `tool/call` / `tool/result` records; nothing is ever executed. Turns
start at each user message and end before the next; a call the source left
without a result is answered `interrupted` so the log keeps its invariant.
System and developer messages (instructions, not conversation) and item
types without an event (reasoning, hosted tool calls) are skipped and
counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final, cast

import attrs
import msgspec

from turnkeep.events import (
    AssistantMessage,
    AssistantMessageData,
    SessionEvent,
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

__all__ = ["NO_RESULT_OUTPUT", "Plan", "Step", "parse_items", "plan_messages"]

NO_RESULT_OUTPUT: Final = (
    "[imported] The imported conversation recorded no result for this call; "
    "its outcome is unknown."
)

Step = tuple[type[SessionEvent], object]
"""One event to append: its class and its payload."""


@attrs.define
class Plan:
    """What an import will append, and what it left out.

    Attributes:
        format: the detected shape (`openai-chat`, `openai-agents`,
            `messages`).
        steps: the events to append, in order.
        skipped: items left out, by reason.
        first_prompt: the first user message's text.
    """

    format: str
    steps: list[Step] = attrs.field(factory=list[Step])
    skipped: Counter[str] = attrs.field(factory=Counter[str])
    first_prompt: str | None = None


def parse_items(data: bytes) -> list[object]:
    """The items of a JSON list, a `{"messages": [...]}` body, or JSON lines.

    Raises:
        ValueError: the input is none of these.
    """
    try:
        document: object = msgspec.json.decode(data)
    except msgspec.DecodeError:
        document = None
        lines = [line for line in data.splitlines() if line.strip()]
        try:
            return [msgspec.json.decode(line) for line in lines]
        except msgspec.DecodeError as exc:
            raise ValueError(
                "the file is neither a turnkeep export, a JSON list of messages, "
                f"nor JSON lines: {exc}"
            ) from exc
    if isinstance(document, dict) and "messages" in document:
        document = cast("dict[str, object]", document)["messages"]
    if not isinstance(document, list):
        raise ValueError(
            "expected a JSON list of messages or session items (or a request "
            "body with a `messages` list)"
        )
    return cast("list[object]", document)


def plan_messages(items: Iterable[object]) -> Plan:
    """Turn chat messages or Agents SDK items into the events of a new session.

    Raises:
        ValueError: an item is not a JSON object.
    """
    builder = _Builder()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"item #{index} is not a JSON object")
        builder.add(cast("dict[str, Any]", item))
    return builder.finish()


@attrs.define
class _Builder:
    steps: list[Step] = attrs.field(factory=list[Step])
    skipped: Counter[str] = attrs.field(factory=Counter[str])
    turn: int = 0
    open: bool = False
    calls: list[str] = attrs.field(factory=list[str])  # this turn's unanswered
    known: set[str] = attrs.field(factory=set[str])
    answered: set[str] = attrs.field(factory=set[str])
    first_prompt: str | None = None
    chat: bool = False
    agents: bool = False

    def add(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        role = item.get("role")
        if kind == "function_call":
            self.agents = True
            self.call(item.get("call_id"), item.get("name"), item.get("arguments"))
        elif kind == "function_call_output":
            self.agents = True
            self.result(item.get("call_id"), _text(item.get("output")))
        elif kind not in (None, "message"):
            self.skipped[f"{kind} items"] += 1
        elif role == "user":
            self.agents = self.agents or kind == "message" or _has_parts(item)
            self.user(_text(item.get("content")))
        elif role == "assistant":
            self.agents = self.agents or kind == "message"
            self.assistant(item)
        elif role == "tool":
            self.chat = True
            self.result(item.get("tool_call_id"), _text(item.get("content")))
        elif role in ("system", "developer"):
            self.skipped[f"{role} messages"] += 1
        else:
            self.skipped[f"{role or 'unrecognised'} items"] += 1

    def ensure_turn(self) -> None:
        if not self.open:
            self.turn += 1
            self.open = True
            self.steps.append((TurnStart, TurnStartData(turn=self.turn)))

    def end_turn(self) -> None:
        if not self.open:
            return
        for call_id in self.calls:
            self.steps.append(
                (
                    ToolResult,
                    ToolResultData(
                        call_id=call_id, output=NO_RESULT_OUTPUT, status="interrupted"
                    ),
                )
            )
            self.answered.add(call_id)
        self.calls.clear()
        self.steps.append((TurnEnd, TurnEndData(turn=self.turn, status="completed")))
        self.open = False

    def user(self, text: str) -> None:
        self.end_turn()
        self.ensure_turn()
        if self.first_prompt is None:
            self.first_prompt = text
        self.steps.append((UserMessage, UserMessageData(text=text, untrusted=True)))

    def assistant(self, item: Mapping[str, Any]) -> None:
        self.ensure_turn()
        text = _text(item.get("content"))
        tool_calls = item.get("tool_calls")
        if text or not tool_calls:
            self.steps.append((AssistantMessage, AssistantMessageData(text=text)))
        if isinstance(tool_calls, list):
            self.chat = True
            for raw_call in cast("list[object]", tool_calls):
                call = (
                    cast("dict[str, Any]", raw_call)
                    if isinstance(raw_call, dict)
                    else {}
                )
                function = call.get("function")
                fn = (
                    cast("dict[str, Any]", function)
                    if isinstance(function, dict)
                    else {}
                )
                self.call(call.get("id"), fn.get("name"), fn.get("arguments"))

    def call(self, call_id: object, name: object, arguments: object) -> None:
        self.ensure_turn()
        ident = str(call_id) if call_id else f"imported-{len(self.known) + 1}"
        if ident in self.known:
            self.skipped["repeated tool calls"] += 1
            return
        self.known.add(ident)
        self.calls.append(ident)
        self.steps.append(
            (
                ToolCall,
                ToolCallData(
                    call_id=ident,
                    name=str(name) if name else "unknown",
                    arguments=_arguments(arguments),
                ),
            )
        )

    def result(self, call_id: object, output: str) -> None:
        ident = str(call_id) if call_id else ""
        if ident not in self.known or ident in self.answered:
            self.skipped["tool results without a matching call"] += 1
            return
        self.ensure_turn()
        self.answered.add(ident)
        if ident in self.calls:
            self.calls.remove(ident)
        self.steps.append((ToolResult, ToolResultData(call_id=ident, output=output)))

    def finish(self) -> Plan:
        self.end_turn()
        fmt = (
            "openai-chat"
            if self.chat
            else "openai-agents"
            if self.agents
            else "messages"
        )
        return Plan(
            format=fmt,
            steps=self.steps,
            skipped=self.skipped,
            first_prompt=self.first_prompt,
        )


def _has_parts(item: Mapping[str, Any]) -> bool:
    return isinstance(item.get("content"), list)


def _text(content: object) -> str:
    """The text of a content value: a string, or a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for raw_part in cast("list[object]", content):
            if isinstance(raw_part, str):
                pieces.append(raw_part)
                continue
            if not isinstance(raw_part, dict):
                continue
            part = cast("dict[str, Any]", raw_part)
            text = part.get("text")
            if isinstance(text, str):
                pieces.append(text)
            elif part.get("type") is not None:
                pieces.append(f"[{part['type']} omitted]")
        return "\n".join(pieces)
    return msgspec.json.encode(content).decode()


def _arguments(arguments: object) -> dict[str, Any]:
    value: object = arguments
    if isinstance(arguments, str):
        try:
            value = msgspec.json.decode(arguments) if arguments.strip() else {}
        except msgspec.DecodeError:
            return {"raw": arguments}
    if isinstance(value, dict):
        return cast("dict[str, Any]", value)
    return {"value": value}
