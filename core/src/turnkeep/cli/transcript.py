"""A session's log rendered for a person: the transcript and one-line events.

Owns how events look on a terminal: turns, what the user and the assistant
said, each tool call with its result right below it, and, marked so nobody
can miss them, calls whose result was never recorded (interrupted, outcome
unknown) and turns a crash cut off. Streamed chunks are shown only when the
assembled reply never landed (a reply cut off mid-stream). Each turn's
commit manifest (the versions of outside state it left) is shown under its
end, and a drift a resume recorded is marked. All stored text passes
through `clean` first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec
from rich.console import Console
from rich.text import Text

from turnkeep.agent.recovery import open_turn
from turnkeep.cli.output import clean, clean_id, format_time, shorten
from turnkeep.events import (
    AssistantChunk,
    AssistantMessage,
    Manifest,
    RunDrift,
    SessionEvent,
    ToolCall,
    ToolResult,
    TurnCheckpoint,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from turnkeep.transcripts import TranscriptEntry

__all__ = ["event_line", "render_entries", "render_transcript"]

_OUTPUT_LIMIT: Final = 2000
_encoder: Final = msgspec.json.Encoder()


def _json(value: object) -> str:
    try:
        return _encoder.encode(value).decode()
    except (TypeError, ValueError):
        return repr(value)


def _limit(text: str, full: bool, indent: str = "") -> str:
    text = clean(text)
    if not full and len(text) > _OUTPUT_LIMIT:
        rest = len(text) - _OUTPUT_LIMIT
        text = f"{text[:_OUTPUT_LIMIT]}… ({rest} more characters; --full shows all)"
    return "\n".join(indent + line for line in text.split("\n"))


def render_transcript(
    events: Sequence[SessionEvent], out: Console, *, session_id: str, full: bool = False
) -> None:
    """Print the transcript of a log."""
    results: dict[str, ToolResult] = {}
    calls: set[str] = set()
    for event in events:
        if isinstance(event, ToolResult):
            results.setdefault(event.data.call_id, event)
        elif isinstance(event, ToolCall):
            calls.add(event.data.call_id)
    cut = open_turn(events)
    cut_calls: set[str] = (
        {c.data.call_id for c in cut.unanswered} if cut is not None else set()
    )
    chunks: list[str] = []

    def partial() -> None:
        if chunks:
            out.print(Text("assistant (reply cut off while streaming)", "bold yellow"))
            out.print(Text(_limit("".join(chunks), full, "  ")))
            chunks.clear()

    for event in events:
        if isinstance(event, AssistantChunk):
            chunks.append(event.data.text)
            continue
        if isinstance(event, RunDrift):  # recorded before recovery: not a reply end
            _drift(out, event, full)
            continue
        if isinstance(event, AssistantMessage):
            chunks.clear()
            out.print(Text("assistant", "bold green"))
            out.print(Text(_limit(event.data.text, full, "  ")))
            continue
        partial()
        if isinstance(event, TurnStart):
            out.rule(Text(f"turn {event.data.turn}", "dim"), style="dim")
        elif isinstance(event, UserMessage):
            label = "user (imported, untrusted)" if event.data.untrusted else "user"
            out.print(Text(label, "bold cyan"))
            out.print(Text(_limit(event.data.text, full, "  ")))
        elif isinstance(event, ToolCall):
            _call(
                out,
                event,
                results.get(event.data.call_id),
                event.data.call_id in cut_calls,
                full,
            )
        elif isinstance(event, ToolResult):
            if event.data.call_id not in calls:
                out.print(
                    Text(
                        f"  tool result for unknown call {clean_id(event.data.call_id)}"
                        f" (seq {event.seq}): {shorten(event.data.output, 80)}",
                        "yellow",
                    )
                )
        elif isinstance(event, TurnEnd):
            if event.data.status != "completed":
                why = f": {clean(event.data.error)}" if event.data.error else ""
                style = (
                    "bold red"
                    if event.data.status in ("failed", "interrupted")
                    else "yellow"
                )
                out.print(
                    Text(
                        f"turn {event.data.turn} ended {event.data.status}{why}", style
                    )
                )
            if isinstance(event.data.manifest, dict):
                out.print(Text(_manifest(event.data.manifest, full), "dim"))
        elif not isinstance(event, TurnCheckpoint):
            out.print(Text(f"· {clean(event.type)} (seq {event.seq})", "dim"))
    partial()
    if cut is not None:
        out.print(
            Text(
                f"⚠ turn {cut.turn} was cut off: the log ends inside it (the "
                "writer stopped mid-turn). "
                f"`turnkeep recover {clean_id(session_id)}` settles it.",
                "bold red",
            )
        )


def _manifest(manifest: Manifest, full: bool) -> str:
    named = ", ".join(
        f"{clean(name)} {clean(version) if full else shorten(version, 24)}"
        for name, version in sorted(manifest.items())
    )
    return f"  manifest: {named}"


def _drift(out: Console, event: RunDrift, full: bool) -> None:
    out.print(
        Text(
            "⚠ outside state changed while the session was not running; the "
            f"resume recorded it (since seq {event.data.since_seq}):",
            "bold yellow",
        )
    )
    for difference in event.data.differences:
        out.print(Text(_limit(difference.describe(), full, "    "), "yellow"))


def render_entries(
    entries: Sequence[TranscriptEntry], out: Console, *, full: bool = False
) -> None:
    """Print the history a plugin rendered (`render_transcript`)."""
    for entry in entries:
        if entry.note:
            out.print(Text(f"· {_limit(entry.label, full)}", "dim"))
            continue
        out.print(Text(clean(entry.label), "bold cyan"))
        if entry.text:
            out.print(Text(_limit(entry.text, full, "  ")))


def _call(
    out: Console, call: ToolCall, result: ToolResult | None, cut: bool, full: bool
) -> None:
    data = call.data
    out.print(
        Text.assemble(
            ("  tool call ", "bold magenta"),
            (clean(data.name), "magenta"),
            " ",
            clean(_json(data.arguments)),
            (f"  [{data.replay}, {clean_id(data.call_id)}]", "dim"),
        )
    )
    if result is None:
        detail = (
            "the session stopped before its result was saved"
            if cut
            else "its turn ended without one (`turnkeep verify` checks the log)"
        )
        out.print(
            Text(
                f"    ⚠ INTERRUPTED: no result, outcome unknown ({detail})", "bold red"
            )
        )
        return
    status = result.data.status
    if status == "interrupted":
        out.print(
            Text(
                "    ⚠ INTERRUPTED: outcome unknown, recorded by recovery; it was not "
                "run again",
                "bold red",
            )
        )
        return
    style = "red" if status == "error" else "dim"
    out.print(Text(f"    ↳ {status}: ", style) + Text(_limit(result.data.output, full)))


def event_line(event: SessionEvent) -> str:
    """One line describing an event (for `tail`)."""
    head = f"{event.seq:>6}  {format_time(event.time)}  {clean(event.type):<16}"
    return f"{head}  {_gist(event)}".rstrip()


def _gist(event: SessionEvent) -> str:
    if isinstance(event, UserMessage | AssistantMessage | AssistantChunk):
        return shorten(event.data.text, 100)
    if isinstance(event, ToolCall):
        return shorten(f"{event.data.name} {_json(event.data.arguments)}", 100)
    if isinstance(event, ToolResult):
        return shorten(f"{event.data.status}: {event.data.output}", 100)
    if isinstance(event, TurnStart):
        return f"turn {event.data.turn}"
    if isinstance(event, TurnCheckpoint):
        return f"turn {event.data.turn} ({clean(event.data.reason)})"
    if isinstance(event, TurnEnd):
        error = f": {shorten(event.data.error, 80)}" if event.data.error else ""
        return f"turn {event.data.turn} {event.data.status}{error}"
    if isinstance(event, RunDrift):
        names = ", ".join(d.name for d in event.data.differences)
        return shorten(f"changed since seq {event.data.since_seq}: {names}", 100)
    return ""
