"""Reading a pi coding-agent session file (JSON lines) into a `Plan`.

A pi session file starts with a header record `{"type": "session", "id",
"timestamp", "cwd", "version"?}`; every later line is an entry with a `type`
and, from format version 2 on, an `id` and the `parentId` it continues
from, so one file holds a tree: going back to an earlier point and carrying
on starts a branch. The import keeps the branch pi itself resumes, from the
root to the last entry in the file; entries on other branches are skipped
and counted. Version 1 files (no header version) are one line of entries.

Entries mapped (the table in `docs/cli.md`, "pi sessions"): `message` with
the roles `user`, `assistant` (text, `toolCall` and `thinking` blocks),
`toolResult`, `bashExecution` and `custom`; `custom_message`,
`branch_summary`, and `session_info` (its name becomes the title). Model and
thinking-level changes, compactions (the entries they summarise are
imported in full), labels, extension records and unknown types are skipped
and counted. A line of the wrong shape is an `ImportInputError` naming it.
"""

from __future__ import annotations

from collections import Counter
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

__all__ = ["FORMAT", "is_pi", "plan_pi"]

FORMAT: Final = "pi"

_SKIPPED: Final = {
    "model_change": "model changes",
    "thinking_level_change": "thinking level changes",
    "compaction": "compaction summaries",
    "label": "labels",
    "custom": "extension records",
}


def is_pi(first: dict[str, Any] | None) -> bool:
    """Whether a file whose first record is `first` is a pi session."""
    return (
        first is not None
        and first.get("type") == "session"
        and isinstance(first.get("id"), str)
        and "payload" not in first
    )


def plan_pi(records: Sequence[Record]) -> Plan:
    """The events of a pi session file's current branch.

    Raises:
        ImportInputError: the first record is not a session header, or a
            record has the wrong shape (`line` names it).
    """
    if not records or not is_pi(records[0][1]):
        line = records[0][0] if records else 1
        raise ImportInputError(
            'not a pi session: the first line must be its header {"type": '
            '"session", "id": ...}',
            line=line,
        )
    header_line, header = records[0]
    problem = wrong(header, "cwd", str, "a string") or wrong(
        header, "version", int, "a number"
    )
    if problem is not None:
        raise ImportInputError(f"the session header: {problem}", line=header_line)
    entries = list(records[1:])
    for line, entry in entries:
        problem = needs(entry, "type")
        if problem is not None:
            raise ImportInputError(f"a pi entry: {problem}", line=line)
    builder = Builder()
    title: str | None = None
    tree = (header.get("version") or 1) >= 2
    for line, entry in _branch(entries, tree=tree, skipped=builder.skipped):
        builder.time = iso_ms(entry.get("timestamp"))
        kind = cast("str", entry["type"])
        if kind == "message":
            _message(builder, line, entry.get("message"))
        elif kind == "custom_message":
            _fail(line, _content_problem(entry, "content"))
            builder.user(content_text(entry.get("content")))
        elif kind == "branch_summary":
            _fail(line, needs(entry, "summary"))
            builder.user(f"[summary of an abandoned branch]\n{entry['summary']}")
        elif kind == "session_info":
            _fail(line, wrong(entry, "name", str, "a string"))
            name = entry.get("name")
            title = name.strip() if isinstance(name, str) and name.strip() else title
        elif kind == "session":
            builder.skipped["repeated session headers"] += 1
        else:
            builder.skipped[_SKIPPED.get(kind, f"unknown `{kind}` records")] += 1
    plan = builder.finish(FORMAT)
    plan.title = title
    cwd = header.get("cwd")
    plan.cwd = cwd if isinstance(cwd, str) and cwd else None
    return plan


def _branch(
    entries: list[Record], *, tree: bool, skipped: Counter[str]
) -> list[Record]:
    """The entries from the root to the last one, in file order."""
    if not tree:
        return entries
    by_id: dict[str, int] = {}
    for index, (line, entry) in enumerate(entries):
        problem = needs(entry, "id") or wrong(
            entry, "parentId", str, "a string or null"
        )
        if problem is not None:
            raise ImportInputError(f"a pi entry: {problem}", line=line)
        by_id[entry["id"]] = index
    kept: set[int] = set()
    current = len(entries) - 1 if entries else None
    while current is not None and current not in kept:
        kept.add(current)
        parent = entries[current][1].get("parentId")
        current = by_id.get(parent) if isinstance(parent, str) else None
    others = len(entries) - len(kept)
    if others:
        skipped["entries on other branches"] += others
    return [record for index, record in enumerate(entries) if index in kept]


def _message(builder: Builder, line: int, raw: object) -> None:
    if not isinstance(raw, dict):
        raise ImportInputError(
            f"`message` must be an object, not {json_type(raw)}", line=line
        )
    message = cast("dict[str, Any]", raw)
    _fail(line, needs(message, "role", "message"))
    stamp = message.get("timestamp")
    if isinstance(stamp, int) and not isinstance(stamp, bool):
        builder.time = stamp
    role = message["role"]
    if role == "user":
        _fail(line, _content_problem(message, "content", "message"))
        builder.user(content_text(message.get("content")))
    elif role == "assistant":
        _assistant(builder, line, message)
    elif role == "toolResult":
        _fail(
            line,
            needs(message, "toolCallId", "message")
            or _content_problem(message, "content", "message"),
        )
        failed = message.get("isError") is True
        builder.result(
            message["toolCallId"],
            content_text(message.get("content")),
            "error" if failed else "ok",
        )
    elif role == "bashExecution":
        _fail(
            line,
            needs(message, "command", "message")
            or wrong(message, "output", str, "a string", "message"),
        )
        if message.get("excludeFromContext") is True:
            builder.skipped["shell commands kept out of context"] += 1
            return
        builder.user(_shell_text(message))
    elif role == "custom":
        _fail(line, _content_problem(message, "content", "message"))
        builder.user(content_text(message.get("content")))
    else:
        builder.skipped[f"pi messages with role {role!r}"] += 1


def _assistant(builder: Builder, line: int, message: dict[str, Any]) -> None:
    content = message.get("content")
    if not isinstance(content, list):
        raise ImportInputError(
            f"`message.content` must be a list, not {json_type(content)}", line=line
        )
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for n, raw in enumerate(cast("list[object]", content)):
        where = f"message.content[{n}]"
        if not isinstance(raw, dict):
            raise ImportInputError(
                f"`{where}` must be an object, not {json_type(raw)}", line=line
            )
        block = cast("dict[str, Any]", raw)
        _fail(line, needs(block, "type", where))
        kind = block["type"]
        if kind == "text":
            _fail(line, needs(block, "text", where))
            texts.append(block["text"])
        elif kind == "thinking":
            builder.skipped["thinking blocks"] += 1
        elif kind == "toolCall":
            _fail(
                line,
                needs(block, "id", where)
                or needs(block, "name", where)
                or wrong(block, "arguments", dict, "an object", where),
            )
            calls.append(block)
        else:
            texts.append(f"[{kind} omitted]")
    stop = message.get("stopReason")
    text = "\n".join(texts)
    if text or (not calls and stop not in ("error", "aborted")):
        builder.assistant(text)
    for call in calls:
        builder.call(call["id"], call["name"], call.get("arguments"))
    if stop in ("error", "aborted"):
        builder.ensure_turn()
        reason = message.get("errorMessage")
        builder.end_with(
            "failed" if stop == "error" else "cancelled",
            reason if isinstance(reason, str) and reason else f"the model call {stop}",
        )


def _shell_text(message: dict[str, Any]) -> str:
    lines = [f"[shell command run by the user] $ {message['command']}"]
    output = message.get("output")
    if isinstance(output, str) and output:
        lines.append(output)
    code = message.get("exitCode")
    if message.get("cancelled") is True:
        lines.append("(cancelled)")
    elif isinstance(code, int) and code != 0:
        lines.append(f"(exit status {code})")
    return "\n".join(lines)


def _content_problem(item: dict[str, Any], field: str, where: str = "") -> str | None:
    content: object = item.get(field)
    path = f"{where}.{field}" if where else field
    if not isinstance(content, str | list | None):
        return f"`{path}` must be a string or a list of parts, not {json_type(content)}"
    parts = cast("list[object]", content) if isinstance(content, list) else []
    for n, part in enumerate(parts):
        if not isinstance(part, dict):
            return f"`{path}[{n}]` must be an object, not {json_type(part)}"
    return None


def _fail(line: int, problem: str | None) -> None:
    if problem is not None:
        raise ImportInputError(problem, line=line)
