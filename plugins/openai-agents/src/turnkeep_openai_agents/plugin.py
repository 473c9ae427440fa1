"""The turnkeep plugin: the `oai/*` event types and how `turnkeep show` reads them.

Installed as the entry point `openai-agents` (groups `turnkeep` and
`turnkeep.event_types`), so every host, and the `turnkeep` command with any
`--store`, decodes these sessions. `render_transcript` prints the history
the session holds now: the items left after pops and clears, with a note
of what they removed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, cast

import msgspec

from turnkeep.errors import SessionCorruptError
from turnkeep.events import SessionEvent
from turnkeep.hookspecs import RegisterEventType, hookimpl
from turnkeep.transcripts import TranscriptEntry

from .events import EVENT_TYPES, ClearData, PopData, is_oai, last_stack, take

__all__ = ["register_event_types", "render_transcript"]

_encoder: Final = msgspec.json.Encoder()


@hookimpl
def register_event_types(register: RegisterEventType) -> None:
    """Contribute `oai/items`, `oai/pop` and `oai/clear`."""
    for cls in EVENT_TYPES:
        register(cls)


@hookimpl
def render_transcript(events: Sequence[SessionEvent]) -> list[TranscriptEntry] | None:
    """The items a session of the Agents SDK holds now, with what was removed."""
    if not any(is_oai(e) for e in events):
        return None
    pops = sum(isinstance(e.data, PopData) for e in events)
    clears = [e.data.removed for e in events if isinstance(e.data, ClearData)]
    stack = last_stack(events)
    entries: list[TranscriptEntry] = []
    removed: list[str] = []
    if clears:
        removed.append(f"{len(clears)} clear_session call(s) ({sum(clears)} items)")
    if pops:
        removed.append(f"{pops} pop_item call(s)")
    note = f"{stack.length} item(s) in the session"
    if removed:
        note += f"; removed by {' and '.join(removed)}, still in the log until "
        note += "`turnkeep rm` or `turnkeep prune` erases the session"
    entries.append(TranscriptEntry(label=note, note=True))
    try:
        items = take(stack, None, events, session_id="")
    except SessionCorruptError as exc:
        entries.append(
            TranscriptEntry(label=f"cannot read the items: {exc}", note=True)
        )
        return entries
    entries.extend(describe(item) for item in items)
    return entries


def describe(item: Any) -> TranscriptEntry:
    """One item as a labelled entry (messages, tool calls, reasoning, others)."""
    if not isinstance(item, dict):
        return TranscriptEntry(label="item", text=_json(item))
    fields = cast("dict[str, Any]", item)
    kind = fields.get("type")
    role = fields.get("role")
    if role is not None and kind in (None, "message"):
        return TranscriptEntry(label=str(role), text=_content(fields.get("content")))
    if kind == "function_call":
        name = fields.get("name", "?")
        call = f"{fields.get('arguments', '')}  [{fields.get('call_id', '')}]"
        return TranscriptEntry(label=f"tool call {name}", text=call)
    if kind == "function_call_output":
        output = fields.get("output")
        text = output if isinstance(output, str) else _json(output)
        return TranscriptEntry(
            label=f"tool result [{fields.get('call_id', '')}]", text=text
        )
    if kind == "reasoning":
        return TranscriptEntry(label="reasoning", text=_content(fields.get("summary")))
    return TranscriptEntry(label=str(kind or "item"), text=_json(fields))


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in cast("list[object]", content):
            text = _text_of(part)
            parts.append(text if text is not None else _json(part))
        return "\n".join(parts)
    return "" if content is None else _json(content)


def _json(value: object) -> str:
    try:
        return _encoder.encode(value).decode()
    except (TypeError, ValueError):
        return repr(value)


def _text_of(part: object) -> str | None:
    if isinstance(part, dict):
        text = cast("dict[str, object]", part).get("text")
        return text if isinstance(text, str) else None
    return None
