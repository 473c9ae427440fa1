"""Reading a Codex rollout file (JSON lines) into a `Plan`.

Each line of a rollout is `{"timestamp", "type", "payload"}`. The types are
`session_meta` (the session's id, cwd, instructions), `response_item` (one
item of the model's history, in the Responses API's shapes), `turn_context`
(the model and policies of a turn), `compacted` (a summary that replaced the
history) and `event_msg` (what the user interface was shown, which repeats
the items: the user's message, the agent's message, token counts).

The conversation is read from the `response_item`s (the table in
`docs/cli.md`, "Codex rollouts"): user and assistant messages, function,
custom-tool and local-shell calls and their outputs. User messages Codex
writes itself to carry context (its `<environment_context>`, the AGENTS.md
instructions) are skipped and counted, as are developer and system
messages, reasoning, hosted tools, turn contexts, compactions and event
messages, except `turn_aborted`, which ends its turn as `cancelled`, and
`thread_rolled_back`, which drops the last turns as Codex did.
Unknown types are skipped and counted; a line of the wrong shape is an
`ImportInputError` naming it. Rollouts written before records had
`type`/`payload` (a header line `{"id", "timestamp", "instructions"?}`,
then bare items and `{"record_type": "state"}` markers) are read too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, cast

from turnkeep.cli.importplan import (
    Builder,
    Plan,
    content_text,
    iso_ms,
    needs,
    wrong,
)
from turnkeep.cli.jsoninput import Record, json_type
from turnkeep.errors import ImportInputError
from turnkeep.events import ToolResultStatus

__all__ = ["FORMAT", "is_codex", "plan_codex"]

FORMAT: Final = "codex"

RECORD_TYPES: Final = frozenset(
    {"session_meta", "response_item", "turn_context", "compacted", "event_msg"}
)
"""The record types a rollout line has (its `type`)."""

# The openings of the user-role messages Codex adds to carry context rather
# than the user's words; compared without case, after leading blanks.
_CONTEXT_MARKERS: Final = (
    "<environment_context",
    "<user_instructions",
    "# agents.md instructions",
    "<turn_aborted",
    "<user_shell_command",
    "<skills_instructions",
    "<context_update",
    "<subagent_notification",
)

_SKIPPED_RECORDS: Final = {
    "turn_context": "turn contexts",
    "compacted": "compaction summaries",
}

_CALLS: Final = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_OUTPUTS: Final = frozenset({"function_call_output", "custom_tool_call_output"})


def is_codex(first: dict[str, Any] | None) -> bool:
    """Whether a file whose first record is `first` is a Codex rollout."""
    return first is not None and (
        _is_legacy(first)
        or (
            first.get("type") in RECORD_TYPES
            and isinstance(first.get("payload"), dict)
            and "timestamp" in first
        )
    )


def _is_legacy(first: dict[str, Any]) -> bool:
    """The header of a rollout written before records had `type`/`payload`."""
    return (
        isinstance(first.get("id"), str)
        and isinstance(first.get("timestamp"), str)
        and not {"type", "role", "payload", "format"} & first.keys()
    )


def plan_codex(records: Sequence[Record]) -> Plan:
    """The events of a Codex rollout.

    Raises:
        ImportInputError: a record has the wrong shape (`line` names it).
    """
    builder = Builder()
    if records and _is_legacy(records[0][1]):
        _legacy(builder, records)
        return builder.finish(FORMAT)
    cwd: str | None = None
    for line, record in records:
        _fail(line, needs(record, "type"))
        kind = record["type"]
        if kind not in RECORD_TYPES:
            builder.skipped[f"unknown `{kind}` records"] += 1
            continue
        payload = record.get("payload")
        if not isinstance(payload, dict):
            raise ImportInputError(
                f"a `{kind}` record's `payload` must be an object, not "
                f"{json_type(payload)}",
                line=line,
            )
        fields = cast("dict[str, Any]", payload)
        builder.time = iso_ms(record.get("timestamp"))
        if kind == "session_meta":
            _fail(line, wrong(fields, "cwd", str, "a string", "payload"))
            cwd = cwd or fields.get("cwd") or None
        elif kind == "response_item":
            _item(builder, line, fields)
        elif kind == "event_msg":
            _event(builder, line, fields)
        else:
            builder.skipped[_SKIPPED_RECORDS[kind]] += 1
    plan = builder.finish(FORMAT)
    plan.cwd = cwd
    return plan


def _legacy(builder: Builder, records: Sequence[Record]) -> None:
    """An older rollout: a header line, then bare items and state markers."""
    builder.time = iso_ms(records[0][1].get("timestamp"))
    for line, record in records[1:]:
        if "record_type" in record and "type" not in record:
            builder.skipped["state records"] += 1
        else:
            _item(builder, line, record, where="")


def _event(builder: Builder, line: int, fields: dict[str, Any]) -> None:
    _fail(line, needs(fields, "type", "payload"))
    if fields["type"] == "turn_aborted":
        reason = fields.get("reason")
        builder.end_with(
            "cancelled",
            f"aborted: {reason}" if isinstance(reason, str) else "aborted",
        )
    elif fields["type"] == "thread_rolled_back":
        _fail(line, wrong(fields, "num_turns", int, "a number", "payload"))
        builder.undo(fields.get("num_turns") or 0)
    else:
        builder.skipped["event messages"] += 1


def _item(
    builder: Builder, line: int, item: dict[str, Any], where: str = "payload"
) -> None:
    _fail(line, needs(item, "type", where))
    kind = item["type"]
    if kind == "message":
        _message(builder, line, item, where)
    elif kind in _CALLS:
        _call(builder, line, item, where)
    elif kind in _OUTPUTS:
        _fail(line, needs(item, "call_id", where))
        text, status = _output(item.get("output"))
        builder.result(item["call_id"], text, status)
    elif kind == "reasoning":
        builder.skipped["reasoning items"] += 1
    else:
        builder.skipped[f"`{kind}` items"] += 1


def _message(builder: Builder, line: int, item: dict[str, Any], where: str) -> None:
    _fail(line, needs(item, "role", where))
    path = f"{where}.content" if where else "content"
    content: object = item.get("content")
    if not isinstance(content, str | list | None):
        raise ImportInputError(
            f"`{path}` must be a list of parts, not {json_type(content)}",
            line=line,
        )
    parts = cast("list[object]", content) if isinstance(content, list) else []
    for n, part in enumerate(parts):
        if not isinstance(part, dict):
            raise ImportInputError(
                f"`{path}[{n}]` must be an object, not {json_type(part)}",
                line=line,
            )
    role = item["role"]
    text = content_text(item.get("content"))
    if role == "user":
        if _is_context(item.get("content")):
            builder.skipped["Codex context messages"] += 1
        else:
            builder.user(text)
    elif role == "assistant":
        builder.assistant(text)
    else:
        builder.skipped[f"{role} messages"] += 1


def _call(builder: Builder, line: int, item: dict[str, Any], where: str) -> None:
    kind = item["type"]
    if kind == "local_shell_call":
        _fail(
            line,
            wrong(item, "call_id", str, "a string", where)
            or wrong(item, "action", dict, "an object", where),
        )
        builder.call(item.get("call_id"), "local_shell", item.get("action"))
        return
    _fail(line, needs(item, "call_id", where) or needs(item, "name", where))
    if kind == "function_call":
        _fail(
            line,
            wrong(item, "arguments", str | dict, "a string or an object", where),
        )
        builder.call(item["call_id"], item["name"], item.get("arguments"), line=line)
    else:
        _fail(line, wrong(item, "input", str, "a string", where))
        builder.call(item["call_id"], item["name"], {"input": item.get("input", "")})


def _output(output: object) -> tuple[str, ToolResultStatus]:
    """A call output's text and status (`error` when it says it failed)."""
    if isinstance(output, dict):
        fields = cast("dict[str, Any]", output)
        failed = fields.get("success") is False
        return content_text(fields.get("content")), "error" if failed else "ok"
    return content_text(output), "ok"


def _is_context(content: object) -> bool:
    """Whether every text part of a user message is context Codex added."""
    parts = (
        [cast("object", content)]
        if isinstance(content, str)
        else cast("list[object]", content or [])
    )
    found = False
    for raw in parts:
        text = raw if isinstance(raw, str) else None
        if isinstance(raw, dict):
            value = cast("dict[str, Any]", raw).get("text")
            text = value if isinstance(value, str) else None
        if text is None:
            continue
        if not text.lstrip().lower().startswith(_CONTEXT_MARKERS):
            return False
        found = True
    return found


def _fail(line: int, problem: str | None) -> None:
    if problem is not None:
        raise ImportInputError(problem, line=line)
