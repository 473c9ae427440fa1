"""The bytes of format version 1: lines, their checksums, the sidecar.

Owns the encoding of every line the backend writes and the typed decoders
that read them back (`docs/formats/jsonl.md` is the prose version). Every
line is one JSON object ending in a checksum field, `"crc":"<8 hex>"`: the
CRC-32 (zlib's) of the line as it would read without that field. For an event
line that is exactly the event's stored bytes, so the bytes core gave the
backend come back verbatim by cutting the field out again.

Non-event lines start with `{"mark":"`; an event whose bytes would also start
that way is refused at append, so the two kinds never mix up.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from itertools import repeat
from operator import add, itemgetter
from typing import Final, TypeAlias

import msgspec

from turnkeep.codec import EventRecord
from turnkeep.meta import ForkPoint, SessionStatus, SessionSummary

__all__ = [
    "FORMAT_NAME",
    "MARK",
    "MAX_CONTROL_BYTES",
    "MAX_HEADER_BYTES",
    "SAID_LIMIT",
    "SUFFIX_LEN",
    "Commit",
    "Control",
    "Header",
    "Owner",
    "Release",
    "Said",
    "Sidecar",
    "all_sealed",
    "bad_event_reason",
    "decode_control",
    "decode_controls",
    "decode_header",
    "decode_sidecar",
    "encode_commit",
    "encode_event_lines",
    "encode_header",
    "encode_owner",
    "encode_release",
    "encode_sidecar",
    "event_seq",
    "probe_header",
    "said_of",
    "seal",
    "unseal",
]

FORMAT_NAME: Final = "turnkeep-jsonl"
MARK: Final = b'{"mark":"'
SUFFIX_LEN: Final = 18
"""Length of `,"crc":"xxxxxxxx"}`, the tail every line ends with."""
MAX_HEADER_BYTES: Final = 64 * 1024
MAX_CONTROL_BYTES: Final = 8 * 1024

_CRC_KEY: Final = b',"crc":"'
_HEX8: Final = re.compile(rb"[0-9a-f]{8}")


class Header(msgspec.Struct, tag_field="mark", tag="header", kw_only=True):
    """The first line: what never changes about the session and its log file."""

    format: str
    format_version: int
    id: str
    log: str
    created_at: int
    cwd: str | None = None
    parent: ForkPoint | None = None


# Every control line carries the log's numbers once its unit is applied:
# `seq` (events), `turns` (`turn/end` events) and `size` (the events' stored
# bytes), so that listing reads them from the last control line alone.
# `turns` and `size` are absent (`None`) in lines written before they were
# added; a reader then recomputes them from the log.


class Said(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    """A summary's caller-set fields, as a flush's commit line carries them."""

    updated_at: int = 0
    title: str | None = None
    first_prompt: str | None = None
    status: SessionStatus = "active"


SAID_LIMIT: Final = 4 * 1024
"""The largest encoded `Said` a control line carries (it stays well below
`MAX_CONTROL_BYTES`); a larger summary is stored in the sidecar instead."""


def said_of(summary: SessionSummary) -> Said:
    """The fields of `summary` a commit line carries."""
    return Said(
        updated_at=summary.updated_at,
        title=summary.title,
        first_prompt=summary.first_prompt,
        status=summary.status,
    )


# A control line may speak for the summary, which the sidecar caches (its
# `flush` says as of which unit): `said` carries a summary stored with that
# unit (an append given one); `said_at` points, by byte offset, at the
# commit line that last did, while the sidecar has not caught up with it.
# The newest of the two wins. Lines written before these fields existed
# have neither.


class Owner(
    msgspec.Struct,
    tag_field="mark",
    tag="owner",
    kw_only=True,
    gc=False,
    omit_defaults=True,
):
    """A writer took the session: opens owner epoch `epoch` (a one-line unit)."""

    flush: int
    epoch: int
    seq: int
    time: int
    pid: int
    host: str
    boot: str
    turns: int | None = None
    size: int | None = None
    said_at: int | None = None


class Release(
    msgspec.Struct,
    tag_field="mark",
    tag="release",
    kw_only=True,
    gc=False,
    omit_defaults=True,
):
    """The owner of `epoch` let the session go cleanly (a one-line unit)."""

    flush: int
    epoch: int
    seq: int
    time: int
    turns: int | None = None
    size: int | None = None
    said_at: int | None = None


class Commit(
    msgspec.Struct,
    tag_field="mark",
    tag="commit",
    kw_only=True,
    gc=False,
    omit_defaults=True,
):
    """Closes a flush: the `n` event lines right before it, `len` bytes long.

    `span`, written only when it differs from `n`, is how many events those
    lines stand for (a packed record stands for several).
    """

    flush: int
    epoch: int
    seq: int
    time: int
    n: int
    len: int
    fcrc: str
    turns: int | None = None
    size: int | None = None
    said: Said | None = None
    said_at: int | None = None
    span: int | None = None

    @property
    def events(self) -> int:
        """How many events the flush holds (`span`, or `n` without packs)."""
        return self.n if self.span is None else self.span


Control: TypeAlias = Owner | Release | Commit


class Sidecar(
    msgspec.Struct, tag_field="mark", tag="sidecar", kw_only=True, omit_defaults=True
):
    """The summary file: mutable metadata plus the durable watermark.

    `said_flush`, when present, is the unit the summary is as new as (a
    non-owner's `update`, which keeps the watermark `flush` as it was, still
    replaces what the log's commit lines said up to that unit); absent, it
    is `flush`. See `rank`.
    """

    format_version: int
    id: str
    log: str
    flush: int
    seq: int
    summary: SessionSummary
    said_flush: int | None = None

    @property
    def rank(self) -> int:
        """The unit the summary is as new as (compared with a commit's `said`)."""
        return self.flush if self.said_flush is None else self.said_flush


class _Probe(msgspec.Struct):
    mark: str = ""
    format_version: int = 0


class _Seq(msgspec.Struct):
    seq: int


_encode: Final = msgspec.json.Encoder().encode
_header_decoder: Final = msgspec.json.Decoder(Header)
_probe_decoder: Final = msgspec.json.Decoder(_Probe)
_seq_decoder: Final = msgspec.json.Decoder(_Seq)
_control_decoder: Final = msgspec.json.Decoder(Control)
_controls_decoder: Final = msgspec.json.Decoder(list[Control])
_sidecar_decoder: Final = msgspec.json.Decoder(Sidecar)
_DECODE_ERRORS: Final = (msgspec.DecodeError, RecursionError, ValueError)


def seal(body: bytes) -> bytes:
    """`body` (a JSON object) as a line: its checksum field added, newline ended."""
    return b'%b,"crc":"%08x"}\n' % (body[:-1], zlib.crc32(body))


def unseal(line: bytes) -> bytes | None:
    """The object a line (without its newline) seals, or `None` if damaged."""
    if (
        len(line) < SUFFIX_LEN + 2
        or line[-SUFFIX_LEN:-10] != _CRC_KEY
        or line[-2:] != b'"}'
        or not _HEX8.fullmatch(line, len(line) - 10, len(line) - 2)
    ):
        return None
    body = line[:-SUFFIX_LEN] + b"}"
    return body if zlib.crc32(body) == int(line[-10:-2], 16) else None


_cut: Final = itemgetter(slice(None, -SUFFIX_LEN))
_key: Final = itemgetter(slice(-SUFFIX_LEN, -10))
_hex: Final = itemgetter(slice(-10, -2))
_end: Final = itemgetter(slice(-2, None))
_HEX_RUN: Final = re.compile(rb"[0-9a-f]*")


def all_sealed(lines: list[bytes]) -> bool:
    """Whether every line is exactly a sealed object (vectorised `unseal`).

    The suffix is checked byte for byte (its key, eight lowercase hex
    digits, the closing brace), then every checksum: C-level passes over the
    whole list rather than a Python loop per line.
    """
    count = len(lines)
    if count == 0:
        return True
    if min(map(len, lines)) < SUFFIX_LEN + 2:
        return False
    hexes = b"".join(map(_hex, lines))
    if (
        b"".join(map(_key, lines)) != _CRC_KEY * count
        or b"".join(map(_end, lines)) != b'"}' * count
        or _HEX_RUN.fullmatch(hexes) is None
    ):
        return False
    computed = map(zlib.crc32, map(add, map(_cut, lines), repeat(b"}")))
    return list(computed) == list(map(int, map(_hex, lines), repeat(16)))


def all_storable(raws: list[bytes]) -> bool:
    """Whether `bad_event_reason` has nothing to say about any of `raws`."""
    return (
        all(map(bytes.startswith, raws, repeat(b'{"')))
        and all(map(bytes.endswith, raws, repeat(b"}")))
        and not any(map(bytes.startswith, raws, repeat(MARK)))
        and b"\n" not in b"".join(raws)  # one memchr beats a call per event
    )


def bad_event_reason(raw: bytes) -> str | None:
    """Why `raw` cannot be stored as an event line, or `None` if it can."""
    if not (raw.startswith(b'{"') and raw.endswith(b"}")):
        return "its bytes are not a JSON object"
    if b"\n" in raw:
        return "its bytes contain a raw newline"
    if raw.startswith(MARK):
        return 'its bytes start like a control line ({"mark":...)'
    return None


_open_end: Final = itemgetter(slice(None, -1))


def encode_event_lines(records: Sequence[EventRecord]) -> bytes:
    """The event lines of one flush (each record's bytes plus its checksum)."""
    raws = [r.raw for r in records]
    parts: list[bytes] = [b""] * (2 * len(raws))
    parts[::2] = map(_open_end, raws)  # each event without its closing brace
    parts[1::2] = [b',"crc":"%08x"}\n' % c for c in map(zlib.crc32, raws)]
    return b"".join(parts)


def encode_header(header: Header) -> bytes:
    """The header line."""
    return seal(_encode(header))


def encode_owner(owner: Owner) -> bytes:
    """An owner line."""
    return seal(_encode(owner))


def encode_release(release: Release) -> bytes:
    """A release line."""
    return seal(_encode(release))


def encode_commit(
    *,
    flush: int,
    epoch: int,
    seq: int,
    time: int,
    region: bytes,
    n: int,
    turns: int,
    size: int,
    said: Said | None = None,
    said_at: int | None = None,
    span: int | None = None,
) -> bytes:
    """The commit line closing a flush whose event lines are `region`.

    `seq`, `turns` and `size` are the log's numbers with this flush applied;
    `said` and `said_at` speak for the summary (see `Said`); `span` is the
    events the `n` lines stand for, when packs make it more than `n`.
    """
    commit = Commit(
        flush=flush,
        epoch=epoch,
        seq=seq,
        time=time,
        n=n,
        len=len(region),
        fcrc=f"{zlib.crc32(region):08x}",
        turns=turns,
        size=size,
        said=said,
        said_at=said_at,
        span=span if span != n else None,
    )
    return seal(_encode(commit))


def encode_sidecar(sidecar: Sidecar) -> bytes:
    """The sidecar file's only line."""
    return seal(_encode(sidecar))


def probe_header(line: bytes) -> tuple[str, int] | None:
    """`(mark, format_version)` of a first line, read leniently (no checksum).

    Used before anything else so that a newer format, whose layout this code
    cannot know, is refused rather than reported as damage.
    """
    try:
        probe = _probe_decoder.decode(line)
    except _DECODE_ERRORS:
        return None
    return probe.mark, probe.format_version


def decode_header(line: bytes) -> Header | None:
    """The header of a first line (without newline), or `None` if damaged."""
    body = unseal(line)
    if body is None:
        return None
    try:
        return _header_decoder.decode(body)
    except _DECODE_ERRORS:
        return None


def decode_control(line: bytes) -> Control | None:
    """The control record of a line (without newline), or `None` if damaged."""
    if len(line) > MAX_CONTROL_BYTES:
        return None
    body = unseal(line)
    if body is None:
        return None
    try:
        return _control_decoder.decode(body)
    except _DECODE_ERRORS:
        return None


def decode_controls(lines: list[bytes]) -> list[Control] | None:
    """Decode many control lines at once (checksums not checked), or `None`."""
    try:
        return _controls_decoder.decode(b"[" + b",".join(lines) + b"]")
    except _DECODE_ERRORS:
        return None


def decode_sidecar(data: bytes) -> Sidecar | None:
    """The sidecar in a file's bytes, or `None` if missing, torn or damaged."""
    if not data.endswith(b"\n") or data.count(b"\n") != 1:
        return None
    body = unseal(data[:-1])
    if body is None:
        return None
    try:
        return _sidecar_decoder.decode(body)
    except _DECODE_ERRORS:
        return None


def event_seq(raw: bytes) -> int | None:
    """The `seq` of an event's bytes, or `None` if they are not an event."""
    try:
        return _seq_decoder.decode(raw).seq
    except _DECODE_ERRORS:
        return None
