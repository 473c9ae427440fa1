"""Reading other programs' conversations into turnkeep events (for `import`).

Pure functions: decoded JSON items in, a `Plan` out (the event payloads to
append, in order, and what was skipped). Two outside shapes are understood, item by
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
counted. An item of the wrong shape (not an object, neither `role` nor
`type`, a field of the wrong JSON type, a call without its id or name) is
refused with `ImportInputError` naming the item, before anything is stored;
`turnkeep.cli.jsoninput` reads the bytes and finds the item's line.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from types import UnionType
from typing import Any, Final, cast

import attrs
import msgspec

from turnkeep.cli.jsoninput import json_type
from turnkeep.errors import ImportInputError
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

__all__ = ["NO_RESULT_OUTPUT", "Plan", "Step", "plan_messages"]

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


def plan_messages(items: Iterable[object]) -> Plan:
    """Turn chat messages or Agents SDK items into the events of a new session.

    Raises:
        ImportInputError: an item is not a JSON object, or a field of it has
            the wrong type or is missing (`item` is its index).
    """
    builder = _Builder()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ImportInputError(
                f"item #{index} is {json_type(item)}, not a JSON object", item=index
            )
        fields = cast("dict[str, Any]", item)
        problem = _problem(fields)
        if problem is not None:
            raise ImportInputError(f"item #{index}: {problem}", item=index)
        builder.add(fields)
    return builder.finish()


def _problem(item: Mapping[str, Any]) -> str | None:
    """What is wrong with an item's shape, if anything (see the module doc)."""
    kind, role = item.get("type"), item.get("role")
    if kind is None and role is None:
        return "has neither `role` nor `type` (not a chat message or session item)"
    wrong = _wrong(item, "type", str, "a string") or _wrong(
        item, "role", str, "a string"
    )
    if wrong is not None:
        return wrong
    if kind == "function_call":
        return (
            _needs(item, "call_id")
            or _needs(item, "name")
            or _wrong(item, "arguments", str | dict, "a string or an object")
        )
    if kind == "function_call_output":
        return _needs(item, "call_id")
    if kind not in (None, "message"):
        return None  # an item type without an event: skipped, whatever its shape
    content = item.get("content")
    if not isinstance(content, str | list | None):
        return (
            "`content` must be a string, a list of parts or null, not "
            f"{json_type(content)}"
        )
    for n, part in enumerate(cast("list[object]", content or [])):
        if not isinstance(part, str | dict):
            return (
                f"`content[{n}]` must be a string or an object, not {json_type(part)}"
            )
    if role == "tool":
        return _needs(item, "tool_call_id")
    if role == "assistant":
        return _tool_calls_problem(item.get("tool_calls"))
    return None


def _tool_calls_problem(calls: object) -> str | None:
    if calls is None:
        return None
    if not isinstance(calls, list):
        return f"`tool_calls` must be a list, not {json_type(calls)}"
    for n, raw in enumerate(cast("list[object]", calls)):
        where = f"tool_calls[{n}]"
        if not isinstance(raw, dict):
            return f"`{where}` must be an object, not {json_type(raw)}"
        call = cast("dict[str, Any]", raw)
        function = call.get("function")
        if not isinstance(function, dict):
            return f"`{where}.function` must be an object, not {json_type(function)}"
        fn = cast("dict[str, Any]", function)
        problem = (
            _wrong(call, "id", str, "a string", where)
            or _needs(fn, "name", f"{where}.function")
            or _wrong(
                fn,
                "arguments",
                str | dict,
                "a string or an object",
                f"{where}.function",
            )
        )
        if problem is not None:
            return problem
    return None


def _needs(item: Mapping[str, Any], field: str, where: str = "") -> str | None:
    value = item.get(field)
    if value is None:
        return f"`{_path(where, field)}` is missing"
    return _wrong(item, field, str, "a string", where)


def _wrong(
    item: Mapping[str, Any],
    field: str,
    kind: type | UnionType,
    what: str,
    where: str = "",
) -> str | None:
    value = item.get(field)
    if value is None or isinstance(value, kind):
        return None
    return f"`{_path(where, field)}` must be {what}, not {json_type(value)}"


def _path(where: str, field: str) -> str:
    return f"{where}.{field}" if where else field


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
