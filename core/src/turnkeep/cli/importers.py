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
`turnkeep.cli.jsoninput` reads the bytes and finds the item's line. The
rules every import keeps (turns, pairs, the untrusted mark) are
`turnkeep.cli.importplan.Builder`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

import attrs

from turnkeep.cli.importplan import (
    NO_RESULT_OUTPUT,
    Builder,
    Plan,
    content_text,
    needs,
    wrong,
)
from turnkeep.cli.jsoninput import json_type
from turnkeep.errors import ImportInputError

__all__ = ["NO_RESULT_OUTPUT", "plan_messages"]


def plan_messages(items: Iterable[object]) -> Plan:
    """Turn chat messages or Agents SDK items into the events of a new session.

    Raises:
        ImportInputError: an item is not a JSON object, or a field of it has
            the wrong type or is missing (`item` is its index).
    """
    builder = Builder()
    shape = _Shape()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ImportInputError(
                f"item #{index} is {json_type(item)}, not a JSON object", item=index
            )
        fields = cast("dict[str, Any]", item)
        problem = _problem(fields)
        if problem is not None:
            raise ImportInputError(f"item #{index}: {problem}", item=index)
        try:
            _add(builder, shape, fields)
        except ImportInputError as exc:  # arguments nested too deep
            raise ImportInputError(f"item #{index}: {exc}", item=index) from None
    fmt = (
        "openai-chat" if shape.chat else "openai-agents" if shape.agents else "messages"
    )
    return builder.finish(fmt)


def _problem(item: Mapping[str, Any]) -> str | None:
    """What is wrong with an item's shape, if anything (see the module doc)."""
    kind, role = item.get("type"), item.get("role")
    if kind is None and role is None:
        return "has neither `role` nor `type` (not a chat message or session item)"
    problem = wrong(item, "type", str, "a string") or wrong(
        item, "role", str, "a string"
    )
    if problem is not None:
        return problem
    if kind == "function_call":
        return (
            needs(item, "call_id")
            or needs(item, "name")
            or wrong(item, "arguments", str | dict, "a string or an object")
        )
    if kind == "function_call_output":
        return needs(item, "call_id")
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
        return needs(item, "tool_call_id")
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
            wrong(call, "id", str, "a string", where)
            or needs(fn, "name", f"{where}.function")
            or wrong(
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


@attrs.define
class _Shape:
    """Which of the two outside shapes the items showed."""

    chat: bool = False
    agents: bool = False


def _add(builder: Builder, shape: _Shape, item: dict[str, Any]) -> None:
    kind = item.get("type")
    role = item.get("role")
    if kind == "function_call":
        shape.agents = True
        builder.call(item.get("call_id"), item.get("name"), item.get("arguments"))
    elif kind == "function_call_output":
        shape.agents = True
        builder.result(item.get("call_id"), content_text(item.get("output")))
    elif kind not in (None, "message"):
        builder.skipped[f"{kind} items"] += 1
    elif role == "user":
        shape.agents = shape.agents or kind == "message" or _has_parts(item)
        builder.user(content_text(item.get("content")))
    elif role == "assistant":
        shape.agents = shape.agents or kind == "message"
        _assistant(builder, shape, item)
    elif role == "tool":
        shape.chat = True
        builder.result(item.get("tool_call_id"), content_text(item.get("content")))
    elif role in ("system", "developer"):
        builder.skipped[f"{role} messages"] += 1
    else:
        builder.skipped[f"{role or 'unrecognised'} items"] += 1


def _assistant(builder: Builder, shape: _Shape, item: Mapping[str, Any]) -> None:
    builder.ensure_turn()
    text = content_text(item.get("content"))
    tool_calls = item.get("tool_calls")
    if text or not tool_calls:
        builder.assistant(text)
    if isinstance(tool_calls, list):
        shape.chat = True
        for raw_call in cast("list[object]", tool_calls):
            call = (
                cast("dict[str, Any]", raw_call) if isinstance(raw_call, dict) else {}
            )
            function = call.get("function")
            fn = cast("dict[str, Any]", function) if isinstance(function, dict) else {}
            builder.call(call.get("id"), fn.get("name"), fn.get("arguments"))


def _has_parts(item: Mapping[str, Any]) -> bool:
    return isinstance(item.get("content"), list)
