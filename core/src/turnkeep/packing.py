"""Making packs: the write path's half of `turnkeep.packs`.

The write-behind (`turnkeep.writebehind`) hands each flush's records here
before appending them, when the backend stores packs and the session's
format has them (`FORMAT_VERSION` 3 on). See `turnkeep.packs` for the
record's layout and why it exists.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Sequence
from typing import Final

import msgspec

from turnkeep.codec import EventRecord
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessage,
    SessionEvent,
)
from turnkeep.packs import (
    MIN_RUN,
    PACK_TYPE,
    PackData,
    PackRecord,
    chunk_bytes,
    encode_varints,
)

__all__ = ["pack_batch"]

_CHUNK_TYPE: Final = AssistantChunk.type  # pyright: ignore[reportAttributeAccessIssue]
_MESSAGE_TYPE: Final = AssistantMessage.type  # pyright: ignore[reportAttributeAccessIssue]
encode: Final = msgspec.json.Encoder().encode


def pack_batch(
    records: Sequence[EventRecord],
    events: Sequence[SessionEvent],
    *,
    max_bytes: int,
) -> list[EventRecord]:
    """`records` with each run of packable chunks replaced by one pack.

    `events` is the session's log, indexed by seq (`events[r.seq]` is the
    event `r` was snapshotted from). A run is at least `MIN_RUN` consecutive
    chunks whose bytes are what `chunk_bytes` rebuilds; the message right
    after it joins the pack when its text is the run's text. Records outside
    runs are returned as they are, in order, and so is a run whose pack
    would be over `max_bytes` (the largest record a backend takes).
    """
    out: list[EventRecord] = []
    index, total = 0, len(records)
    while index < total:
        texts = _run(records, events, index)
        end = index + len(texts)
        if len(texts) < MIN_RUN:
            out.append(records[index])
            index += 1
            continue
        message = _message(records, events, end, "".join(texts))
        pack = _make_pack(records[index:end], texts, message)
        if len(pack.raw) > max_bytes:
            out.extend(records[index:end])
            index = end
            continue
        out.append(pack)
        index += pack.span
    return out


def _run(
    records: Sequence[EventRecord], events: Sequence[SessionEvent], start: int
) -> list[str]:
    """The texts of the packable chunks from `records[start]` on (the run)."""
    texts: list[str] = []
    for at in range(start, len(records)):  # (no slice: this runs per record)
        record = records[at]
        if record.type != _CHUNK_TYPE or record.span != 1:
            break
        data = events[record.seq].data
        if not isinstance(data, AssistantChunkData):
            break
        if record.raw != chunk_bytes(record.seq, record.time, data.text):
            break
        texts.append(data.text)
    return texts


def _message(
    records: Sequence[EventRecord],
    events: Sequence[SessionEvent],
    at: int,
    text: str,
) -> EventRecord | None:
    """`records[at]` if it is the message assembling a run whose text is `text`."""
    if at >= len(records):
        return None
    record = records[at]
    if record.type != _MESSAGE_TYPE or record.span != 1:
        return None
    message = events[record.seq]
    if not isinstance(message, AssistantMessage) or message.data.text != text:
        return None
    return record


def _make_pack(
    chunks: Sequence[EventRecord], texts: list[str], message: EventRecord | None
) -> EventRecord:
    times = [r.time for r in chunks]
    z = base64.b64encode(zlib.compress(encode_varints(texts, times), 9)).decode("ascii")
    first = chunks[0].seq
    if message is not None:
        data = PackData(of=_CHUNK_TYPE, t0=times[0], z=z, msg=msgspec.Raw(message.raw))
        last, time = message.seq, message.time
    else:
        data = PackData(of=_CHUNK_TYPE, t0=times[0], z=z, text="".join(texts))
        last, time = chunks[-1].seq, times[-1]
    pack = PackRecord(type=PACK_TYPE, seq=first, last=last, time=time, data=data)
    return EventRecord(first, PACK_TYPE, time, encode(pack), last - first + 1)
