"""Deterministic workloads the SQLite and PostgreSQL tests share with their workers.

A worker process (`worker.py`) and the test that drives it build the same
turns from the same seed, so the test knows the exact bytes every worker
wrote. Also here: the metadata workers create sessions with, the turns of
the worker-pool test, and the seeded generator behind each directory's
`rng` fixture. Imported by worker processes too, so nothing here imports
pytest or a backend at run time.
"""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING

import attrs

from turnkeep.codec import EventCodec, EventRecord
from turnkeep.events import (
    AssistantMessage,
    AssistantMessageData,
    SessionEvent,
    TurnEnd,
    TurnEndData,
    UserMessage,
    UserMessageData,
)
from turnkeep.meta import SessionHeader, SessionMeta

if TYPE_CHECKING:
    import pytest

    from turnkeep.session import Session

__all__ = [
    "CODEC",
    "POSTGRES_WORKLOAD",
    "SQLITE_WORKLOAD",
    "T0",
    "WORKLOADS",
    "Workload",
    "meta",
    "pool_turn",
    "seeded_rng",
]

CODEC = EventCodec()
T0 = 1_700_000_000_000
"""The clock of generated events: event `seq` happens at `T0 + seq`."""


@attrs.frozen
class Workload:
    """A seeded turn generator; its four parameters fix every byte it makes.

    Turn `index` holds 3-8 events (a user message, assistant messages, a
    turn end). Each message body is a label and one filler character
    repeated 0-`small` times, or 0 B-64 KiB (log-uniform) when `big`.

    Attributes:
        key: Format of the per-turn random seed (fields `seed`, `index`,
            `tag`).
        small: The largest body size when not `big`.
        label: Format of each body's prefix (fields `tag`, `index`, `i`, the
            event's position in its turn).
        filler: The characters bodies repeat, cycled by event position.
    """

    key: str
    small: int
    label: str
    filler: str

    def turn(
        self, seq0: int, index: int, *, seed: int, tag: str = "", big: bool = False
    ) -> list[EventRecord]:
        """Turn `index` of the workload seeded `seed`, its first event at `seq0`."""
        rnd = random.Random(self.key.format(seed=seed, index=index, tag=tag))
        count = rnd.randint(3, 8)
        events: list[SessionEvent] = []
        for i in range(count):
            size = (
                int(2 ** rnd.uniform(0, 16)) - 1 if big else rnd.randint(0, self.small)
            )
            seq = seq0 + i
            text = self.label.format(tag=tag, index=index, i=i)
            text += self.filler[i % len(self.filler)] * size
            if i == 0:
                events.append(
                    UserMessage(seq=seq, time=T0 + seq, data=UserMessageData(text=text))
                )
            elif i == count - 1:
                events.append(
                    TurnEnd(
                        seq=seq,
                        time=T0 + seq,
                        data=TurnEndData(turn=index, status="completed"),
                    )
                )
            else:
                events.append(
                    AssistantMessage(
                        seq=seq, time=T0 + seq, data=AssistantMessageData(text=text)
                    )
                )
        return [CODEC.record(e) for e in events]

    def turns(
        self,
        count: int,
        *,
        seed: int,
        tag: str = "",
        big: bool = False,
        start: int = 0,
        seq0: int = 0,
    ) -> list[list[EventRecord]]:
        """`count` consecutive turns from turn `start` at seq `seq0`."""
        out: list[list[EventRecord]] = []
        for index in range(start, start + count):
            records = self.turn(seq0, index, seed=seed, tag=tag, big=big)
            seq0 += len(records)
            out.append(records)
        return out


# The two suites grew their workloads apart. Each keeps its own parameters,
# so the bytes its tests write, and the workload behind any seed a past
# failure printed, stay what they were.
SQLITE_WORKLOAD = Workload(
    key="{seed}:{index}:{tag}",
    small=200,
    label="{tag}#{index}|",
    filler="ab\u00e9\u2603",
)
POSTGRES_WORKLOAD = Workload(
    key="{seed}/{tag}/{index}",
    small=120,
    label="{tag}:{index}:{i}|",
    filler="x\u00e9\u2603",
)
WORKLOADS = {"sqlite": SQLITE_WORKLOAD, "postgres": POSTGRES_WORKLOAD}
"""The workload of each backend's tests, by backend key."""


def meta(session_id: str) -> SessionMeta:
    """The metadata worker processes create sessions with."""
    return SessionMeta(header=SessionHeader(id=session_id, created_at=T0))


def pool_turn(session: Session, worker: int, number: int) -> None:
    """Append one worker-pool turn to a live `Session`: who drove it, which turn.

    Five events: a user message `"<id>|turn <number>|worker <worker>"`, three
    assistant messages extending it with `|part <n>`, and the turn end.
    """
    text = f"{session.id}|turn {number}|worker {worker}"
    session.append(UserMessageData(text=text))
    for part in range(3):
        session.append(AssistantMessageData(text=f"{text}|part {part}"))
    session.append(TurnEndData(turn=number, status="completed"))


def seeded_rng(request: pytest.FixtureRequest) -> random.Random:
    """A seeded generator; the seed is printed so a failure reproduces.

    `TURNKEEP_SEED` fixes the seed; otherwise a fresh one is drawn.
    """
    seed = int(os.environ.get("TURNKEEP_SEED", random.randrange(2**32)))
    print(f"\n[{request.node.nodeid}] seed={seed} (TURNKEEP_SEED={seed} to reproduce)")
    return random.Random(seed)
