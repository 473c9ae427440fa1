"""Reading a log's tail without reading the log: `load_after` and `last_seq`.

Owns the backwards walk. From the end of the file it reads a window, finds
the last intact control line (bytes after it are a torn or in-flight tail,
never returned), and walks the units back from there, checking each the way
`scan` does (consecutive unit numbers, the seq chain, epochs, and for a
flush its `n`, `len` and `fcrc` over the event lines), until the events
asked for are covered; a window too small is widened fourfold. It answers
only what it verified: on any doubt (a unit that does not check out, a
sidecar that says more was acknowledged, a log without a control line) it
answers `None`, and the caller falls back to `load`, whose scan is
authoritative (it cuts a legal tail and raises `SessionCorruptError` for
damage). Following a session therefore costs the new events plus one
window, whatever the log's size.
"""

from __future__ import annotations

import zlib
from typing import Final, Literal

from turnkeep.backendkit import stored_last_seq
from turnkeep.errors import EventDecodeError

from .fileops import FileOps
from .format import (
    MARK,
    MAX_HEADER_BYTES,
    SUFFIX_LEN,
    Commit,
    Control,
    Owner,
    decode_control as _decode,
)
from .scan import check_header
from .summary import last_control, read_sidecar

__all__ = ["last_seq", "read_after"]

_FIRST_WINDOW: Final = 16 * 1024
_HEAD_GUESS: Final = 2048
"""Bytes read first for the header line (a typical one is a few hundred)."""
_MORE: Final = "more"
"""`_walk`'s answer when the window does not reach back far enough."""


def last_seq(ops: FileOps, fd: int, size: int) -> int:
    """The last durable seq (`-1` for none), from the last control line."""
    control = last_control(ops, fd, size)
    return -1 if control is None else control.seq - 1


def read_after(
    ops: FileOps,
    fd: int,
    size: int,
    *,
    where: tuple[str, int, str],
    after: int,
    limit: int,
) -> list[bytes] | None:
    """The events with seq > `after`, at most `limit`; `None`: ask `load`.

    `where` is `(session_id, dir_fd, stem)` of the open log `fd`.

    Raises:
        UnsupportedFormatError, SessionCorruptError: the header says so.
        OSError: the files cannot be read.
    """
    session_id, dir_fd, stem = where
    head = ops.pread(fd, min(size, _HEAD_GUESS), 0)
    newline = head.find(b"\n")
    if newline < 0 and size > _HEAD_GUESS:  # a long header: read all it may be
        head = ops.pread(fd, min(size, MAX_HEADER_BYTES), 0)
        newline = head.find(b"\n")
    if newline < 0:
        return None
    header = check_header(head[:newline], session_id)
    body = newline + 1
    window = _FIRST_WINDOW
    while True:
        start = max(body, size - window)
        answer = _walk(ops.pread(fd, size - start, start), start == body, after, limit)
        if answer is None:
            return None
        if answer != _MORE:
            events, flush = answer
            sidecar = read_sidecar(ops, dir_fd, stem, header)
            if sidecar is not None and sidecar.flush > flush:
                return None  # acknowledged flushes are missing: `load` says so
            return events
        if start == body:
            return None
        window *= 4


def _walk(
    data: bytes, whole: bool, after: int, limit: int
) -> tuple[list[bytes], int] | Literal["more"] | None:
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: unfinished (or empty)
    if not whole:
        lines = lines[1:]  # may be cut at the front
    j = len(lines) - 1
    last: Control | None = None
    while j >= 0:
        if lines[j].startswith(MARK):
            last = _decode(lines[j])
            if last is not None:
                break
        j -= 1
    if last is None:
        return None if whole else _MORE
    want, end = after + 1, min(last.seq, after + 1 + limit)
    if want >= end:
        return [], last.flush
    taken: list[bytes] = []
    later = last
    expected_flush, expected_seq = last.flush, last.seq
    while True:
        control = _decode(lines[j]) if lines[j].startswith(MARK) else None
        if (
            control is None
            or control.flush != expected_flush
            or control.seq != expected_seq
            or not _epoch_fits(control, later)
        ):
            return None
        if type(control) is Commit:
            first = control.seq - control.n
            if j - control.n < 0:
                return None if whole else _MORE
            region = lines[j - control.n : j]
            joined = b"\n".join(region) + b"\n"
            if (
                control.n <= 0
                or len(joined) != control.len
                or f"{zlib.crc32(joined):08x}" != control.fcrc
                or any(line.startswith(MARK) for line in region)
            ):
                return None
            lo, hi = max(want, first), min(end, control.seq)
            if lo < hi:
                picked = _pick(region, first, lo, hi, control.span is not None)
                if picked is None:
                    return None
                taken[:0] = picked
            expected_seq = first
            j -= control.n + 1
        else:
            j -= 1
        later = control
        expected_flush -= 1
        if expected_seq <= want:
            return taken, last.flush
        if expected_flush < 1:
            return None  # the seq chain does not reach back: not a log we wrote
        if j < 0:
            return None if whole else _MORE


def _pick(
    region: list[bytes], first: int, lo: int, hi: int, packed: bool
) -> list[bytes] | None:
    """The records of a flush's event lines that hold a seq in `lo`..`hi - 1`.

    `first` is the flush's first seq. Without packs line `i` is seq
    `first + i`; with them each line's range is read from its record.
    `None`: the lines do not add up to the flush (not a log we wrote).
    """
    if not packed:
        return [line[:-SUFFIX_LEN] + b"}" for line in region[lo - first : hi - first]]
    picked: list[bytes] = []
    seq = first
    for line in region:
        raw = line[:-SUFFIX_LEN] + b"}"
        try:
            last = stored_last_seq(raw)
        except EventDecodeError:
            return None
        if last < seq:
            return None
        if last >= lo and seq < hi:
            picked.append(raw)
        seq = last + 1
    return picked


def _epoch_fits(earlier: Control, later: Control) -> bool:
    if earlier is later:
        return True
    if type(later) is Owner:
        return earlier.epoch < later.epoch
    return earlier.epoch == later.epoch
