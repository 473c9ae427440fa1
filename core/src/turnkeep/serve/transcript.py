"""A session's log as HTML: the transcript the web page shows.

Owns the markup of turns, messages and tool calls, the same marks the
terminal transcript makes (`turnkeep show`): each call with its replay
policy and its result's status right below it; calls without a result
(interrupted, outcome unknown); replies cut off while streaming (partial);
turn boundaries with each turn's usage (events, stored bytes, tool calls,
time taken). The page's script (`static/page.js`) renders events that
arrive later the same way, from the same class names. All stored text is
escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Final

import attrs
import msgspec

from turnkeep.agent.recovery import open_turn
from turnkeep.events import (
    AssistantChunk,
    AssistantMessage,
    SessionEvent,
    ToolCall,
    ToolResult,
    TurnCheckpoint,
    TurnEnd,
    TurnStart,
    UserMessage,
)

__all__ = ["render_events", "size_text"]

_encoder: Final = msgspec.json.Encoder()


def size_text(size: int) -> str:
    """`size` bytes for a person (B, kB, MB)."""
    if size < 1000:
        return f"{size} B"
    if size < 1_000_000:
        return f"{size / 1000:.1f} kB"
    return f"{size / 1_000_000:.1f} MB"


def _json(value: object) -> str:
    try:
        return _encoder.encode(value).decode()
    except (TypeError, ValueError):
        return repr(value)


@attrs.define
class _TurnUsage:
    start_time: int
    events: int = 0
    size: int = 0
    calls: int = 0


@attrs.define
class _Renderer:
    results: dict[str, ToolResult]
    called: set[str]
    cut_calls: set[str]
    live: bool
    out: list[str] = attrs.field(factory=list[str])
    chunks: list[str] = attrs.field(factory=list[str])
    turn: _TurnUsage | None = None
    in_turn: bool = False

    def event(self, event: SessionEvent, size: int) -> None:
        if self.turn is not None:
            self.turn.events += 1
            self.turn.size += size
        if isinstance(event, AssistantChunk):
            self.chunks.append(event.data.text)
            return
        if isinstance(event, AssistantMessage):
            self.chunks.clear()
            self._message("assistant", "assistant", event.data.text, event.seq)
            return
        self.partial()
        if isinstance(event, TurnStart):
            self.close_section()
            self.turn = _TurnUsage(start_time=event.time, events=1, size=size)
            self.out.append(
                f'<section class="turn" data-turn="{event.data.turn}">'
                f'<h3 class="turn-head">turn {event.data.turn}</h3>'
            )
            self.in_turn = True
        elif isinstance(event, UserMessage):
            who = "user (imported, untrusted)" if event.data.untrusted else "user"
            self._message("user", who, event.data.text, event.seq)
        elif isinstance(event, ToolCall):
            if self.turn is not None:
                self.turn.calls += 1
            self._call(event)
        elif isinstance(event, ToolResult):
            if event.data.call_id not in self.called:  # else: shown under its call
                self.out.append(
                    f'<div class="other" data-seq="{event.seq}">tool result for '
                    f"unknown call {escape(event.data.call_id)}</div>"
                )
        elif isinstance(event, TurnEnd):
            self._turn_end(event)
        elif not isinstance(event, TurnCheckpoint):
            self.out.append(
                f'<div class="other" data-seq="{event.seq}">'
                f"{escape(event.type)} (seq {event.seq})</div>"
            )

    def _message(self, kind: str, who: str, text: str, seq: int) -> None:
        self.out.append(
            f'<div class="msg {kind}" data-seq="{seq}"><div class="who">'
            f"{escape(who)}</div><pre>{escape(text)}</pre></div>"
        )

    def partial(self) -> None:
        if self.chunks:
            self.out.append(
                '<div class="msg assistant partial"><div class="who">assistant '
                '<span class="mark">partial: reply cut off while streaming</span>'
                f"</div><pre>{escape(''.join(self.chunks))}</pre></div>"
            )
            self.chunks.clear()

    def _call(self, call: ToolCall) -> None:
        data = call.data
        result = self.results.get(data.call_id)
        if result is not None:
            status = result.data.status
            below = (
                '<div class="mark">INTERRUPTED: outcome unknown, recorded by '
                "recovery; it was not run again</div>"
                if status == "interrupted"
                else f'<pre class="output">{escape(result.data.output)}</pre>'
            )
        elif data.call_id in self.cut_calls and self.live:
            status, below = "running", ""
        else:
            status = "unanswered"
            below = (
                '<div class="mark">INTERRUPTED: no result, outcome unknown (the '
                "session stopped before its result was saved)</div>"
            )
        self.out.append(
            f'<div class="call" data-call="{escape(data.call_id)}" '
            f'data-status="{status}" data-seq="{call.seq}"><div class="who">tool call '
            f"<b>{escape(data.name)}</b> "
            f'<span class="replay" title="replay policy">{escape(data.replay)}</span> '
            f'<span class="status">{status}</span></div>'
            f'<pre class="args">{escape(_json(data.arguments))}</pre>{below}</div>'
        )

    def _turn_end(self, end: TurnEnd) -> None:
        data = end.data
        why = f": {escape(data.error)}" if data.error else ""
        usage = ""
        if self.turn is not None:
            took = max(0, end.time - self.turn.start_time) / 1000
            usage = (
                f' <span class="usage">{self.turn.events} events, '
                f"{size_text(self.turn.size)}, {self.turn.calls} tool calls, "
                f"{took:.1f} s</span>"
            )
        self.out.append(
            f'<div class="turn-end" data-status="{escape(data.status)}">turn '
            f"{data.turn} {escape(data.status)}{why}{usage}</div>"
        )
        self.close_section()

    def close_section(self) -> None:
        if self.in_turn:
            self.out.append("</section>")
            self.in_turn = False
        self.turn = None


def render_events(
    events: Sequence[SessionEvent], sizes: Sequence[int], *, live: bool
) -> str:
    """The transcript of `events` (`sizes`: each one's stored bytes).

    `live`: a process holds the session, so an open turn is running rather
    than cut off.
    """
    results: dict[str, ToolResult] = {}
    called: set[str] = set()
    for event in events:
        if isinstance(event, ToolResult):
            results.setdefault(event.data.call_id, event)
        elif isinstance(event, ToolCall):
            called.add(event.data.call_id)
    cut = open_turn(events)
    renderer = _Renderer(
        results=results,
        called=called,
        cut_calls={c.data.call_id for c in cut.unanswered}
        if cut is not None
        else set(),
        live=live,
    )
    for event, size in zip(events, sizes, strict=True):
        renderer.event(event, size)
    renderer.partial()
    renderer.close_section()
    if cut is not None:
        if live:
            note = f"turn {cut.turn} is running"
            kind = "running"
        else:
            note = (
                f"turn {cut.turn} was cut off: the log ends inside it (the writer "
                "stopped mid-turn); POST /recover or `turnkeep recover` settles it"
            )
            kind = "cut"
        renderer.out.append(f'<div class="open-turn {kind}">{escape(note)}</div>')
    return "".join(renderer.out)
