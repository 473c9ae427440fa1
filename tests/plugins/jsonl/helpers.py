"""Workload and lookup helpers of the turnkeep-jsonl tests.

Imported as `plugins.jsonl.helpers` (`tests/` is on `sys.path`, see
`conftest.py`): deterministic turns of encoded events, session metadata,
seeded random generators that print their seed, and file lookups.
"""

from __future__ import annotations

import functools
import os
import random
from pathlib import Path

import pytest

from turnkeep.codec import EventCodec, EventRecord
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessage,
    AssistantMessageData,
    SessionEvent,
    TurnEnd,
    TurnEndData,
    UserMessage,
    UserMessageData,
)
from turnkeep.meta import SessionHeader, SessionMeta, SessionSummary
from turnkeep.packing import pack_batch
from turnkeep_jsonl import FileOps, JsonlPersistence
from turnkeep_jsonl.names import LOG_SUFFIX, session_name

CODEC = EventCodec()
T0 = 1_700_000_000_000


def seeded(request: pytest.FixtureRequest, salt: object = "") -> random.Random:
    """A random generator whose seed is printed (and replayable)."""
    seed = int(os.environ.get("TURNKEEP_SEED", random.randrange(2**32)))
    print(f"\n[{request.node.nodeid}] seed={seed} (TURNKEEP_SEED={seed} replays it)")
    return random.Random(f"{seed}:{salt}")


@functools.lru_cache(maxsize=4096)
def turn(
    seq0: int,
    index: int,
    *,
    seed: object = 0,
    big: bool = False,
    tag: str = "",
    span: int = 300,
    streamed: bool = False,
) -> list[EventRecord]:
    """Turn `index` of a deterministic workload: 3-8 events from `seq0`.

    Sizes are 0-`span` bytes, with one event in twenty of 1-6 KiB, so some
    flushes span several disk sectors (`big`: 0 B to 64 KiB, log-uniform).
    `streamed`: a user message, a reply streamed in 2-60 chunks and its
    message (stored as one packed record), a turn end. Cached: treat the
    list as read-only.
    """
    if streamed:
        return _streamed(seq0, index, seed=seed, tag=tag)
    rnd = random.Random(f"{seed}:{index}:{tag}")
    count = rnd.randint(3, 8)
    events: list[SessionEvent] = []
    for i in range(count):
        seq = seq0 + i
        if big:
            size = int(2 ** rnd.uniform(0, 16)) - 1
        elif rnd.random() < 0.05:
            size = rnd.randint(1024, 6144)
        else:
            size = rnd.randint(0, span)
        text = f"{tag}#{index}.{i}|" + "ab\u00e9\u2603 "[i % 5] * size
        time = T0 + seq * 10
        if i == count - 1:
            events.append(
                TurnEnd(
                    seq=seq, time=time, data=TurnEndData(turn=index, status="completed")
                )
            )
        elif i == 0:
            events.append(
                UserMessage(seq=seq, time=time, data=UserMessageData(text=text))
            )
        else:
            events.append(
                AssistantMessage(
                    seq=seq, time=time, data=AssistantMessageData(text=text)
                )
            )
    return [CODEC.record(e) for e in events]


MIB = 1 << 20


@functools.lru_cache(maxsize=64)
def huge_turn(seq0: int, index: int, *, seed: object = 0) -> list[EventRecord]:
    """Turn `index` of plan item 5's workload: a reply of 1 to 8 MiB.

    A short user message, the large reply, the turn's end. Cached: treat the
    list as read-only.
    """
    rnd = random.Random(f"huge:{seed}:{index}")
    size = rnd.randint(MIB, 8 * MIB)
    time = T0 + seq0 * 10
    events: list[SessionEvent] = [
        UserMessage(seq=seq0, time=time, data=UserMessageData(text=f"#{index}")),
        AssistantMessage(
            seq=seq0 + 1,
            time=time,
            data=AssistantMessageData(text=f"#{index}|" + "abxy"[index % 4] * size),
        ),
        TurnEnd(
            seq=seq0 + 2, time=time, data=TurnEndData(turn=index, status="completed")
        ),
    ]
    return [CODEC.record(e) for e in events]


def _streamed(seq0: int, index: int, *, seed: object, tag: str) -> list[EventRecord]:
    rnd = random.Random(f"{seed}:{index}:{tag}:streamed")
    pieces = [
        f"{tag}{index}.{i}" + "ab\u00e9\u2603 "[i % 5] * rnd.randint(0, 9)
        for i in range(rnd.randint(2, 60))
    ]
    events: list[SessionEvent] = [
        UserMessage(seq=seq0, time=T0 + seq0 * 10, data=UserMessageData(text="go"))
    ]
    seq = seq0 + 1
    for piece in pieces:
        time = T0 + seq * 10 + rnd.randint(0, 9)
        events.append(
            AssistantChunk(seq=seq, time=time, data=AssistantChunkData(text=piece))
        )
        seq += 1
    reply = AssistantMessageData(text="".join(pieces))
    events.append(AssistantMessage(seq=seq, time=T0 + seq * 10, data=reply))
    end = TurnEndData(turn=index, status="completed")
    events.append(TurnEnd(seq=seq + 1, time=T0 + seq * 10 + 10, data=end))
    log = [*([events[0]] * seq0), *events]  # `pack_batch` reads events by seq
    return pack_batch([CODEC.record(e) for e in events], log, max_bytes=1 << 24)


def seqs(records: list[EventRecord]) -> int:
    """How many seqs `records` stand for (a packed record, several)."""
    return sum(r.span for r in records)


def turns(
    count: int,
    *,
    seed: object = 0,
    big: bool = False,
    tag: str = "",
    span: int = 300,
    streamed: bool = False,
) -> list[list[EventRecord]]:
    """`count` consecutive turns, seq contiguous from 0."""
    out: list[list[EventRecord]] = []
    seq = 0
    for index in range(count):
        batch = turn(
            seq, index, seed=seed, big=big, tag=tag, span=span, streamed=streamed
        )
        out.append(batch)
        seq += seqs(batch)
    return out


def meta(
    session_id: str = "s", *, title: str | None = None, cwd: str = "/w"
) -> SessionMeta:
    """A new session's metadata."""
    return SessionMeta(
        header=SessionHeader(id=session_id, created_at=T0, cwd=cwd),
        summary=SessionSummary(updated_at=T0, title=title),
    )


def raws(batches: list[list[EventRecord]]) -> list[bytes]:
    """The stored bytes of some flushes, in order."""
    return [r.raw for batch in batches for r in batch]


def log_file(root: Path, session_id: str = "s") -> Path:
    """The log file of a session in a store."""
    (found,) = root.glob(f"g-*/{session_name(session_id)}{LOG_SUFFIX}")
    return found


def write_session(
    root: Path,
    batches: list[list[EventRecord]],
    *,
    session_id: str = "s",
    title: str | None = None,
    ops: FileOps | None = None,
) -> Path:
    """Store `batches` as one session (fsync off unless `ops` says otherwise).

    The backend is closed without releasing, so the log ends with the last
    flush's commit line and no sidecar is written unless `title` is given.
    """
    from support.faultyops import NoSyncFileOps

    backend = JsonlPersistence(root, ops=ops if ops is not None else NoSyncFileOps())
    impl = backend._impl  # pyright: ignore[reportPrivateUsage]
    impl.create(meta(session_id, title=title))
    for batch in batches:
        impl.append(session_id, batch)
    impl.close()  # no release line: as if the process had simply stopped
    return log_file(root, session_id)


def units(data: bytes) -> list[tuple[int, int]]:
    """`(start, end)` byte ranges of a log's units (header excluded)."""
    out: list[tuple[int, int]] = []
    start = data.index(b"\n") + 1
    at = start
    while at < len(data):
        end = data.index(b"\n", at) + 1
        if data.startswith(b'{"mark":"', at):
            out.append((start, end))
            start = end
        at = end
    return out


def line_starts(data: bytes) -> list[int]:
    """The offset of every line of a log."""
    starts = [0]
    at = data.find(b"\n")
    while at >= 0 and at + 1 < len(data):
        starts.append(at + 1)
        at = data.find(b"\n", at + 1)
    return starts
