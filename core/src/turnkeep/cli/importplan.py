"""What an import appends: the `Plan` every reader of another program's log builds.

The readers (`importers` for chat messages and Agents SDK items,
`import_pi`, `import_codex`) turn records into calls on one `Builder`,
which owns the rules every import keeps: turns start at each user message
and end before the next; every user message is `untrusted`; a tool call is
a record, never run, and a call its source left without a result is
answered `interrupted` when its turn ends, so the log keeps its pairing
invariant; a result is kept only for a call seen before it. The shape
checks the readers share (`needs`, `wrong`) and the text of content parts
live here too.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Mapping
from types import UnionType
from typing import Any, Final, cast

import attrs
import msgspec

from turnkeep.cli.jsoninput import MAX_DEPTH, json_type, too_deep
from turnkeep.errors import ImportInputError
from turnkeep.events import (
    AssistantMessage,
    AssistantMessageData,
    SessionEvent,
    ToolCall,
    ToolCallData,
    ToolResult,
    ToolResultData,
    ToolResultStatus,
    TurnEnd,
    TurnEndData,
    TurnStart,
    TurnStartData,
    TurnStatus,
    UserMessage,
    UserMessageData,
)

__all__ = [
    "NO_RESULT_OUTPUT",
    "Builder",
    "Plan",
    "Step",
    "content_text",
    "iso_ms",
    "needs",
    "parse_arguments",
    "wrong",
]

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
            `messages`, `pi`, `codex`, `turnkeep-export`).
        steps: the events to append, in order.
        times: each step's time (epoch ms) when the source recorded one.
        skipped: records left out, by reason.
        first_prompt: the first user message's text.
        title: a title the source gave the conversation.
        cwd: the working directory the source recorded.
        interrupted: the calls the import answered `interrupted` because
            the source recorded no result for them (never run).
        closed_turn: whether the source ended inside a turn that the import
            ended (a turnkeep export; other sources' turns are the import's).
    """

    format: str
    steps: list[Step] = attrs.field(factory=list[Step])
    times: list[int | None] = attrs.field(factory=list[int | None])
    skipped: Counter[str] = attrs.field(factory=Counter[str])
    first_prompt: str | None = None
    title: str | None = None
    cwd: str | None = None
    interrupted: list[str] = attrs.field(factory=list[str])
    closed_turn: bool = False


@attrs.define
class Builder:
    """Collects the events of an import, keeping turns and tool pairs whole."""

    skipped: Counter[str] = attrs.field(factory=Counter[str])
    time: int | None = None  # the current record's time, given to what it emits
    steps: list[Step] = attrs.field(factory=list[Step])
    times: list[int | None] = attrs.field(factory=list[int | None])
    turn: int = 0
    open: bool = False
    status: TurnStatus = "completed"  # how the open turn ends
    error: str | None = None
    calls: list[str] = attrs.field(factory=list[str])  # this turn's unanswered
    known: set[str] = attrs.field(factory=set[str])
    answered: set[str] = attrs.field(factory=set[str])
    interrupted: list[str] = attrs.field(factory=list[str])
    first_prompt: str | None = None

    def emit(self, kind: type[SessionEvent], payload: object) -> None:
        """Append one event, at the current record's time."""
        self.steps.append((kind, payload))
        self.times.append(self.time)

    def ensure_turn(self) -> None:
        """Open a turn unless one is open."""
        if not self.open:
            self.turn += 1
            self.open = True
            self.status, self.error = "completed", None
            self.emit(TurnStart, TurnStartData(turn=self.turn))

    def end_with(self, status: TurnStatus, error: str | None) -> None:
        """How the open turn ends, as the source recorded (a later reply resets)."""
        if self.open:
            self.status, self.error = status, error

    def end_turn(self) -> None:
        """Close the open turn, answering its calls left without a result."""
        if not self.open:
            return
        for call_id in self.calls:
            self.emit(
                ToolResult,
                ToolResultData(
                    call_id=call_id, output=NO_RESULT_OUTPUT, status="interrupted"
                ),
            )
            self.answered.add(call_id)
            self.interrupted.append(call_id)
        self.calls.clear()
        self.emit(
            TurnEnd, TurnEndData(turn=self.turn, status=self.status, error=self.error)
        )
        self.open = False

    def user(self, text: str) -> None:
        """A user message (untrusted): it ends the open turn and starts one."""
        self.end_turn()
        self.ensure_turn()
        if self.first_prompt is None:
            self.first_prompt = text
        self.emit(UserMessage, UserMessageData(text=text, untrusted=True))

    def assistant(self, text: str) -> None:
        """A reply of the model; the turn counts as completed again."""
        self.ensure_turn()
        self.status, self.error = "completed", None
        self.emit(AssistantMessage, AssistantMessageData(text=text))

    def call(
        self,
        call_id: object,
        name: object,
        arguments: object,
        *,
        line: int | None = None,
    ) -> None:
        """A tool call, recorded, never run (a repeated id is skipped).

        Raises:
            ImportInputError: `arguments` is JSON text nested too deep
                (see `parse_arguments`), with `line` when given.
        """
        try:
            parsed = parse_arguments(arguments)
        except ImportInputError as exc:
            raise ImportInputError(str(exc), line=line) from None
        self.ensure_turn()
        ident = str(call_id) if call_id else f"imported-{len(self.known) + 1}"
        if ident in self.known:
            self.skipped["repeated tool calls"] += 1
            return
        self.known.add(ident)
        self.calls.append(ident)
        self.emit(
            ToolCall,
            ToolCallData(
                call_id=ident,
                name=str(name) if name else "unknown",
                arguments=parsed,
            ),
        )

    def result(
        self, call_id: object, output: str, status: ToolResultStatus = "ok"
    ) -> None:
        """A tool's result, kept only for a known call not answered yet."""
        ident = str(call_id) if call_id else ""
        if ident not in self.known or ident in self.answered:
            self.skipped["tool results without a matching call"] += 1
            return
        self.ensure_turn()
        self.answered.add(ident)
        if ident in self.calls:
            self.calls.remove(ident)
        self.emit(
            ToolResult, ToolResultData(call_id=ident, output=output, status=status)
        )

    def undo(self, turns: int) -> None:
        """Drop the last `turns` turns, as the source's rollback did."""
        self.end_turn()
        keep = max(self.turn - max(turns, 0), 0)
        cut = next(
            (
                index
                for index, (kind, payload) in enumerate(self.steps)
                if kind is TurnStart
                and isinstance(payload, TurnStartData)
                and payload.turn > keep
            ),
            len(self.steps),
        )
        for kind, payload in self.steps[cut:]:
            if kind is ToolCall and isinstance(payload, ToolCallData):
                self.known.discard(payload.call_id)
                self.answered.discard(payload.call_id)
        if self.turn > keep:
            self.skipped["turns undone by a rollback"] += self.turn - keep
        del self.steps[cut:]
        del self.times[cut:]
        self.turn = keep
        if keep == 0:
            self.first_prompt = None

    def finish(self, fmt: str) -> Plan:
        """The plan, its last turn closed."""
        self.end_turn()
        return Plan(
            format=fmt,
            steps=self.steps,
            times=self.times,
            skipped=self.skipped,
            first_prompt=self.first_prompt,
            interrupted=self.interrupted,
        )


def needs(item: Mapping[str, Any], field: str, where: str = "") -> str | None:
    """The problem when `item[field]` is not a string (missing included)."""
    value = item.get(field)
    if value is None:
        return f"`{_path(where, field)}` is missing"
    return wrong(item, field, str, "a string", where)


def wrong(
    item: Mapping[str, Any],
    field: str,
    kind: type | UnionType,
    what: str,
    where: str = "",
) -> str | None:
    """The problem when `item[field]` is present, not null, and not `kind`."""
    value = item.get(field)
    if value is None or isinstance(value, kind):
        return None
    return f"`{_path(where, field)}` must be {what}, not {json_type(value)}"


def _path(where: str, field: str) -> str:
    return f"{where}.{field}" if where else field


def content_text(content: object) -> str:
    """The text of a content value: a string, or a list of typed parts.

    Parts without text (images, files) become a placeholder such as
    `[image omitted]`, so the reader sees something was there.
    """
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


def parse_arguments(arguments: object) -> dict[str, Any]:
    """Tool arguments as an object: JSON text parsed, anything else wrapped.

    Raises:
        ImportInputError: `arguments` is JSON text that nests lists and
            objects more than `MAX_DEPTH` deep (the file's own nesting was
            checked before it was decoded; text inside a string was not).
    """
    value: object = arguments
    if isinstance(arguments, str):
        if too_deep(arguments.encode()) is not None:
            raise ImportInputError(
                "a tool call's arguments are JSON text nested more than "
                f"{MAX_DEPTH} deep"
            )
        try:
            value = msgspec.json.decode(arguments) if arguments.strip() else {}
        except msgspec.DecodeError:
            return {"raw": arguments}
    if value is None:
        return {}
    if isinstance(value, dict):
        return cast("dict[str, Any]", value)
    return {"value": value}


def iso_ms(value: object) -> int | None:
    """Epoch milliseconds of an ISO 8601 time (`...Z` included), or None."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)
