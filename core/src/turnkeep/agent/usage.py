"""What a turn uses: model tokens, model and tool time, events and bytes.

`UsageMeter` is filled in by `turnkeep.agent.steps` as a turn runs and read
once for its `turn/end` (`turnkeep.events.TurnUsage`). Tokens are only what
the model reported (`turnkeep.agent.models.Usage`): a turn whose model
reported none has `None`, never an estimate. Bytes are each appended
event's encoded size, which is what backends store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import attrs
import msgspec

from turnkeep.agent.models import Usage
from turnkeep.events import SessionEvent, TurnEnd, TurnUsage

__all__ = ["UsageMeter", "UsageTotals", "total_usage"]


@attrs.define(eq=False)
class UsageMeter:
    """Counts one turn's usage.

    Attributes:
        size: an event's stored size in bytes (the host codec's
            `stored_size`).
        clock: monotonic seconds.
    """

    size: Callable[[SessionEvent], int]
    clock: Callable[[], float] = time.perf_counter
    input_tokens: int | None = None
    output_tokens: int | None = None
    model_seconds: float = 0.0
    tool_seconds: float = 0.0
    events: int = 0
    bytes: int = 0

    def start(self) -> None:
        """Begin a turn: every count back to nothing."""
        self.input_tokens = self.output_tokens = None
        self.model_seconds = self.tool_seconds = 0.0
        self.events = self.bytes = 0

    def appended(self, event: SessionEvent) -> None:
        """Count an event the turn appended."""
        self.events += 1
        self.bytes += self.size(event)

    def reported(self, usage: Usage | None) -> None:
        """Add what the model reported for one call (nothing if it did not)."""
        if usage is None:
            return
        if usage.input_tokens is not None:
            self.input_tokens = (self.input_tokens or 0) + usage.input_tokens
        if usage.output_tokens is not None:
            self.output_tokens = (self.output_tokens or 0) + usage.output_tokens

    def finish(self) -> TurnUsage:
        """The turn's usage, for its `turn/end`."""
        return TurnUsage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            model_ms=round(self.model_seconds * 1000),
            tool_ms=round(self.tool_seconds * 1000),
            events=self.events,
            bytes=self.bytes,
        )


class UsageTotals(msgspec.Struct, frozen=True, kw_only=True):
    """A session's usage summed over the turns that recorded one.

    Attributes:
        turns: how many `turn/end`s carried usage (older ones do not).
        input_tokens: the reported input tokens (`None`: none reported).
        output_tokens: the reported output tokens (`None`: none reported).
        model_ms, tool_ms, events, bytes: sums of `TurnUsage`'s.
    """

    turns: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    model_ms: int = 0
    tool_ms: int = 0
    events: int = 0
    bytes: int = 0


def total_usage(events: Iterable[SessionEvent]) -> UsageTotals:
    """Sum the usage of every `turn/end` in `events` that has one."""
    turns = model_ms = tool_ms = count = size = 0
    tokens_in: int | None = None
    tokens_out: int | None = None
    for event in events:
        if not isinstance(event, TurnEnd) or event.data.usage is None:
            continue
        usage = event.data.usage
        turns += 1
        model_ms += usage.model_ms
        tool_ms += usage.tool_ms
        count += usage.events
        size += usage.bytes
        if usage.input_tokens is not None:
            tokens_in = (tokens_in or 0) + usage.input_tokens
        if usage.output_tokens is not None:
            tokens_out = (tokens_out or 0) + usage.output_tokens
    return UsageTotals(
        turns=turns,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        model_ms=model_ms,
        tool_ms=tool_ms,
        events=count,
        bytes=size,
    )
