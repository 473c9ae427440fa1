"""The benchmark conversation: deterministic turns of K = 12 events.

The shape follows the peer benchmark the project started from: per turn one
`user/message`, 7 `assistant/chunk`s splitting the reply, one
`assistant/message`, one `tool/call`, one `tool/result` and one `turn/end`;
user text, reply and tool output are 200-2000 characters (some non-ASCII),
drawn from a fixed seed so every run sees the same bytes.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from turnkeep import SessionEvent
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessage,
    AssistantMessageData,
    ToolCall,
    ToolCallData,
    ToolResult,
    ToolResultData,
    TurnEnd,
    TurnEndData,
    UserMessage,
    UserMessageData,
)
from turnkeep.persistence import EventCodec, EventRecord

CHUNKS = 7
K = CHUNKS + 5

_VOCAB = (
    "session event append durable store turn tool call result user assistant "
    "message stream chunk model context window function query path file line "
    "error retry timeout index cursor checkpoint resume replay snapshot hook "
    "plugin buffer flush fsync commit latency budget state write read list "
    "title schema version backend plän 目標 weather search summary plan goal"
).split()


class Workload:
    """Generates turns of typed events (and their plain-dict twins)."""

    def __init__(
        self, seed: int = 42, text_min: int = 200, text_max: int = 2000
    ) -> None:
        self.rnd = random.Random(seed)
        self.text_min = text_min
        self.text_max = text_max
        words = [self.rnd.choice(_VOCAB) for _ in range(40_000)]
        self.corpus = " ".join(words)

    def text(self) -> str:
        """A random slice of the corpus of 200-2000 characters."""
        n = self.rnd.randint(self.text_min, self.text_max)
        start = self.rnd.randrange(0, len(self.corpus) - n - 1)
        return self.corpus[start : start + n]

    def turn(
        self, turn: int, seq0: int, t0: int = 1_700_000_000_000
    ) -> list[SessionEvent]:
        """The K events of turn `turn`, numbered from `seq0`."""
        rnd = self.rnd
        reply = self.text()
        cuts = sorted(rnd.sample(range(1, len(reply)), CHUNKS - 1))
        bounds = [0, *cuts, len(reply)]
        call_id = f"call_{turn:06d}_{rnd.getrandbits(32):08x}"
        events: list[tuple[type[SessionEvent], Any]] = [
            (UserMessage, UserMessageData(text=self.text())),
            *(
                (
                    AssistantChunk,
                    AssistantChunkData(text=reply[bounds[i] : bounds[i + 1]]),
                )
                for i in range(CHUNKS)
            ),
            (AssistantMessage, AssistantMessageData(text=reply)),
            (
                ToolCall,
                ToolCallData(
                    call_id=call_id,
                    name=rnd.choice(("read_file", "search", "run_command")),
                    arguments={
                        "path": f"src/pkg/module_{rnd.randint(0, 999)}.py",
                        "query": self.text()[: rnd.randint(20, 120)],
                        "limit": rnd.randint(1, 100),
                    },
                    replay="safe",
                ),
            ),
            (ToolResult, ToolResultData(call_id=call_id, output=self.text())),
            (TurnEnd, TurnEndData(turn=turn, status="completed")),
        ]
        return [
            kind(seq=seq0 + i, time=t0 + (seq0 + i) * 7, data=data)
            for i, (kind, data) in enumerate(events)
        ]

    def session(self, turns: int) -> Iterator[list[SessionEvent]]:
        """`turns` consecutive turns, seq contiguous from 0."""
        for t in range(turns):
            yield self.turn(t + 1, t * K)


def records(
    events: list[SessionEvent], codec: EventCodec | None = None
) -> list[EventRecord]:
    """Encode events into the records a backend receives."""
    c = codec or EventCodec()
    return [c.record(e) for e in events]
