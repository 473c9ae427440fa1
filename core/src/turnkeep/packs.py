"""Packed records: a streamed reply stored as one record covering a seq range.

A model that streams its reply in hundreds of small deltas makes one
`assistant/chunk` event per delta. The log keeps every one of them (seqs
stay contiguous, ADR 2), but storing each with its own envelope costs many
times the text. Core therefore stores a run of chunks that reach the store
in one flush as one *pack*, and unpacks it on every read into the identical
events, byte for byte:

    {"type":"turnkeep/pack","seq":F,"last":L,"time":T,"data":{
        "of":"assistant/chunk","t0":T0,"z":"...","msg":{...} | "text":"..."}}

- `seq`..`last` is the range the pack stands for; `time` is the time of its
  last event (what a backend moves `updated_at` to).
- `z` is base64 of zlib-compressed unsigned LEB128 varints: each chunk's
  text length in code points, then each chunk's time as a zigzag delta from
  the one before (the first from `t0`).
- `msg`, when the run ends with the `assistant/message` that assembles those
  chunks (its text is exactly their concatenation), is that message's stored
  bytes verbatim; the pack then covers it too (`last` is its seq) and the
  chunks' text is read from it, so a reply's text is stored once.
- `text`, otherwise, is the chunks' text concatenated.

Only chunks whose stored bytes are exactly what `chunk_bytes` rebuilds are
packed (the check runs as the pack is made), so unpacking is lossless by
construction. Backends store a pack as one opaque record (`EventRecord.span`
says how many seqs it covers) and never look inside.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import msgspec

from turnkeep.errors import EventDecodeError
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessage,
    SessionEvent,
)

__all__ = [
    "MIN_RUN",
    "PACK_PREFIX",
    "PACK_TYPE",
    "PackData",
    "PackRecord",
    "chunk_bytes",
    "encode_varints",
    "expand",
    "expand_all",
    "is_pack",
    "record_first",
    "record_last",
    "unpack_events",
]

PACK_TYPE: Final = "turnkeep/pack"
"""The stored `type` of a packed record."""

PACK_PREFIX: Final = b'{"type":"turnkeep/pack",'
"""How a packed record's bytes start."""

MIN_RUN: Final = 2
"""The fewest chunks worth a pack (one chunk alone stays an event)."""

_CHUNK_TYPE: Final = AssistantChunk.type  # pyright: ignore[reportAttributeAccessIssue]
_MESSAGE_TYPE: Final = AssistantMessage.type  # pyright: ignore[reportAttributeAccessIssue]
_CHUNK_HEAD: Final = b'{"type":"assistant/chunk","seq":%d,"time":%d,"data":{"text":'
_encode: Final = msgspec.json.Encoder().encode


_NO_MESSAGE: Final = msgspec.Raw(b"null")


class PackData(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    """A pack's `data`: the kind packed, the first time, `z`, and the text."""

    of: str
    t0: int
    z: str
    msg: msgspec.Raw = _NO_MESSAGE
    text: str | None = None


class PackRecord(msgspec.Struct, kw_only=True, gc=False):
    """A pack as stored (the fields in the order they are written)."""

    type: str
    seq: int
    last: int
    time: int
    data: PackData


class _Head(msgspec.Struct, gc=False):
    seq: int
    last: int


_pack_decoder: Final = msgspec.json.Decoder(PackRecord)
_head_decoder: Final = msgspec.json.Decoder(_Head)


def is_pack(raw: bytes) -> bool:
    """Whether stored record bytes are a pack."""
    return raw.startswith(PACK_PREFIX)


def chunk_bytes(seq: int, time: int, text: str) -> bytes:
    """The stored bytes of an `assistant/chunk` event, as the codec writes them."""
    return _CHUNK_HEAD % (seq, time) + _encode(text) + b"}}"


def record_first(raw: bytes) -> int:
    """The first seq a stored record stands for (its `seq`).

    Raises:
        EventDecodeError: the bytes are not a readable record.
    """
    try:
        return msgspec.json.decode(raw, type=_Seq).seq
    except (msgspec.DecodeError, RecursionError) as exc:
        raise EventDecodeError(f"stored record is unreadable: {exc}") from exc


def record_last(raw: bytes) -> int:
    """The last seq a stored record stands for (its own seq, or a pack's `last`).

    Raises:
        EventDecodeError: the bytes are not a readable record.
    """
    try:
        head = _head_decoder.decode(raw) if is_pack(raw) else None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise EventDecodeError(f"stored pack is unreadable: {exc}") from exc
    return head.last if head is not None else record_first(raw)


class _Seq(msgspec.Struct, gc=False):
    seq: int


def encode_varints(texts: Sequence[str], times: Sequence[int]) -> bytes:
    """The varints of `z`: each text's length, then each time's zigzag delta."""
    out = bytearray()
    for text in texts:
        _put(out, len(text))
    previous = times[0]
    for time in times:
        delta = time - previous
        _put(out, (delta << 1) ^ (delta >> 63))
        previous = time
    return bytes(out)


def _put(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


# -- reading packs ----------------------------------------------------------------


def _read(raw: bytes) -> tuple[PackRecord, list[str], list[int], bytes | None]:
    """A pack's fields, each chunk's text and time, and the message's bytes.

    Raises:
        EventDecodeError: the pack is malformed or does not add up.
    """
    try:
        pack = _pack_decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise EventDecodeError(f"stored pack is unreadable: {exc}") from exc
    data = pack.data
    if data.of != _CHUNK_TYPE or pack.type != PACK_TYPE:
        raise EventDecodeError(f"stored pack of {data.of!r} is of no known kind")
    message = bytes(data.msg) if data.msg != _NO_MESSAGE else None
    if message is not None:
        text = _message_text(message, pack.last)
    elif data.text is not None:
        text = data.text
    else:
        raise EventDecodeError(f"stored pack at seq {pack.seq} holds no text")
    count = pack.last - pack.seq + 1 - (message is not None)
    try:
        values = _values(zlib.decompress(base64.b64decode(data.z, validate=True)))
    except (binascii.Error, zlib.error, ValueError) as exc:
        raise EventDecodeError(
            f"stored pack at seq {pack.seq} is damaged: {exc}"
        ) from exc
    if count < 1 or len(values) != 2 * count:
        raise EventDecodeError(
            f"stored pack at seq {pack.seq} covers {count} chunk(s) but describes "
            f"{len(values) // 2}"
        )
    texts: list[str] = []
    at = 0
    for length in values[:count]:
        texts.append(text[at : at + length])
        at += length
    if at != len(text):
        raise EventDecodeError(
            f"stored pack at seq {pack.seq}: its lengths add up to {at} characters "
            f"but its text holds {len(text)}"
        )
    times: list[int] = []
    time = data.t0
    for zigzag in values[count:]:
        time += (zigzag >> 1) ^ -(zigzag & 1)
        times.append(time)
    return pack, texts, times, message


def _message_text(message: bytes, seq: int) -> str:
    try:
        decoded = msgspec.json.decode(message, type=_Message)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise EventDecodeError(
            f"the message in a stored pack is unreadable: {exc}"
        ) from exc
    if decoded.type != _MESSAGE_TYPE or decoded.seq != seq:
        raise EventDecodeError(
            f"a stored pack ending at seq {seq} carries a {decoded.type!r} at seq "
            f"{decoded.seq}"
        )
    return decoded.data.text


class _MessageText(msgspec.Struct, gc=False):
    text: str


class _Message(msgspec.Struct, gc=False):
    type: str
    seq: int
    data: _MessageText


def _values(buf: bytes) -> list[int]:
    values: list[int] = []
    value = shift = 0
    for byte in buf:
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
        else:
            values.append(value)
            value = shift = 0
    if shift:
        raise ValueError("a varint is cut short")
    return values


def _seqs(pack: PackRecord, texts: Sequence[str]) -> range:
    return range(pack.seq, pack.seq + len(texts))


def expand(raw: bytes) -> list[bytes]:
    """The stored bytes of each event a record stands for (itself, if no pack).

    Raises:
        EventDecodeError: a pack is malformed or does not add up.
    """
    if not is_pack(raw):
        return [raw]
    pack, texts, times, message = _read(raw)
    out = [
        chunk_bytes(seq, time, text)
        for seq, time, text in zip(_seqs(pack, texts), times, texts, strict=True)
    ]
    if message is not None:
        out.append(message)
    return out


def expand_all(raws: Iterable[bytes]) -> list[bytes]:
    """`expand` over stored records: one entry per event, in seq order."""
    out: list[bytes] = []
    for raw in raws:
        if is_pack(raw):
            out.extend(expand(raw))
        else:
            out.append(raw)
    return out


def unpack_events(
    raw: bytes, decode: Callable[[bytes], SessionEvent]
) -> list[SessionEvent]:
    """The events a pack stands for, built without decoding their bytes.

    `decode` decodes the message a pack may carry (the codec's `decode`).

    Raises:
        EventDecodeError: the pack is malformed or does not add up.
    """
    pack, texts, times, message = _read(raw)
    out: list[SessionEvent] = [
        AssistantChunk(seq=seq, time=time, data=AssistantChunkData(text=text))
        for seq, time, text in zip(_seqs(pack, texts), times, texts, strict=True)
    ]
    if message is not None:
        out.append(decode(message))
    return out
