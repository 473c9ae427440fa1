"""A session's metadata read from its files, without reading its whole log.

Owns what listing and summary updates need from disk: the header line, the
sidecar (trusted only when it names the same log file), and the last control
line of the log, found by reading backwards from the end, whose numbers
(events, turns, bytes) are the log's. Nothing here validates the log; `scan`
does that for `load` and for writers, and here only for a log written before
control lines carried turns and bytes (they are recomputed from it).
"""

from __future__ import annotations

import os
from typing import Final

import attrs
import msgspec

from turnkeep.errors import SessionCorruptError, UnsupportedFormatError
from turnkeep.meta import SessionHeader, SessionSummary

from .fileops import FileOps
from .format import (
    FORMAT_NAME,
    MARK,
    MAX_CONTROL_BYTES,
    MAX_HEADER_BYTES,
    Commit,
    Control,
    Header,
    Release,
    Said,
    Sidecar,
    decode_control,
    decode_header,
    decode_sidecar,
)
from .handle import scan_log
from .names import LOG_SUFFIX, SIDECAR_SUFFIX
from .scan import ScanState

__all__ = [
    "SIDECAR_LIMIT",
    "Inspected",
    "Numbers",
    "inspect_session",
    "last_control",
    "log_numbers",
    "merge_summary",
    "numbers_of",
    "read_sidecar",
    "session_header",
]

SIDECAR_LIMIT: Final = 1024 * 1024
"""A sidecar larger than this is not ours (it holds a short summary)."""

_TAIL_WINDOWS: Final = (64 * 1024, 1024 * 1024, 32 * 1024 * 1024)
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def session_header(header: Header) -> SessionHeader:
    """The core header a log header stands for."""
    return SessionHeader(
        id=header.id,
        format_version=header.format_version,
        created_at=header.created_at,
        cwd=header.cwd,
        parent=header.parent,
    )


def read_sidecar(
    ops: FileOps, dir_fd: int, stem: str, header: Header
) -> Sidecar | None:
    """The session's sidecar if it is intact and belongs to this very log file.

    A sidecar of an earlier incarnation of the id (deleted, then created
    again) names another log and is ignored, as is a torn or damaged one.

    Raises:
        OSError: the sidecar exists but cannot be read.
    """
    try:
        fd = ops.open(stem + SIDECAR_SUFFIX, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        data = ops.pread(fd, SIDECAR_LIMIT + 1, 0)
    finally:
        ops.close(fd)
    sidecar = decode_sidecar(data)
    if sidecar is None or sidecar.id != header.id or sidecar.log != header.log:
        return None
    return sidecar


@attrs.frozen
class Numbers:
    """A log's numbers as of its last unit.

    Attributes:
        seq: its events.
        time: `updated_at` as of that unit.
        turns: its `turn/end` events.
        size: its events' stored bytes.
        released: that unit is a release.
        said: the summary the log's last summary-carrying commit line said
            (as far as the reader looked: see `log_numbers`).
        said_flush: the unit number of that commit line (0: none).
        flush: the number of the log's last unit.
    """

    seq: int = 0
    time: int = 0
    turns: int = 0
    size: int = 0
    released: bool = False
    said: Said | None = None
    said_flush: int = 0
    flush: int = 0


def numbers_of(state: ScanState) -> Numbers:
    """The numbers a verified scan ended with."""
    return Numbers(
        state.seq,
        state.time,
        state.turns,
        state.size,
        state.released,
        state.said,
        state.said_flush,
        state.flush,
    )


def merge_summary(sidecar: Sidecar | None, numbers: Numbers) -> SessionSummary:
    """The summary shown for a session: the newest stored, with the log's numbers.

    The caller-set fields come from the sidecar, or from the log's commit
    line when that said them after the sidecar was written (an append that
    carried a summary, which the sidecar caches lazily). The log wins where
    both speak: `event_count`, `turns` and `size` are the log's, and
    `updated_at` never goes back behind the log's last unit.
    """
    summary = sidecar.summary if sidecar is not None else SessionSummary()
    said = numbers.said
    if said is not None and (sidecar is None or numbers.said_flush > sidecar.rank):
        summary = SessionSummary(
            updated_at=max(summary.updated_at, said.updated_at),
            title=said.title,
            first_prompt=said.first_prompt,
            status=said.status,
        )
    return msgspec.structs.replace(
        summary,
        updated_at=max(summary.updated_at, numbers.time),
        event_count=numbers.seq,
        turns=numbers.turns,
        size=numbers.size,
    )


def log_numbers(
    ops: FileOps, fd: int, size: int, header: Header, *, max_line: int
) -> Numbers:
    """A log's numbers, from its last control line when that carries them all.

    A log whose last control line was written before `turns` and `size`
    existed has them recomputed from the whole log (its next writer writes
    them down again). A log that cannot be read so keeps the control line's
    numbers: `load` reports what is wrong with it.

    Raises:
        OSError: the log cannot be read.
    """
    control = last_control(ops, fd, size)
    if control is None:
        return Numbers()
    released = type(control) is Release
    said, said_flush = _said(ops, fd, control)
    if control.turns is not None and control.size is not None:
        return Numbers(
            control.seq,
            control.time,
            control.turns,
            control.size,
            released,
            said,
            said_flush,
            control.flush,
        )
    try:
        result = scan_log(
            ops, fd, size, session_id=header.id, collect=False, max_line=max_line
        )
    except (SessionCorruptError, UnsupportedFormatError):
        return Numbers(control.seq, control.time, released=released)
    return numbers_of(result.state)


def _said(ops: FileOps, fd: int, control: Control) -> tuple[Said | None, int]:
    """The summary `control` speaks for (see `format.Said`), and its unit.

    A commit line that carries one says it; a line that points back at one
    (`said_at`) costs one read at that offset, checked like any control line.
    """
    if type(control) is Commit and control.said is not None:
        return control.said, control.flush
    at = control.said_at
    if at is None or at < 0:
        return None, 0
    data = ops.pread(fd, MAX_CONTROL_BYTES + 1, at)
    newline = data.find(b"\n")
    found = decode_control(data[:newline]) if newline >= 0 else None
    if type(found) is not Commit or found.said is None or found.flush > control.flush:
        return None, 0  # not what it points at: the sidecar speaks alone
    return found.said, found.flush


def last_control(ops: FileOps, fd: int, size: int) -> Control | None:
    """The last intact control line of a log, reading backwards from the end."""
    for window in _TAIL_WINDOWS:
        start = max(0, size - window)
        data = ops.pread(fd, size - start, start)
        lines = data.split(b"\n")
        lines.pop()  # after the last newline: unfinished (or empty)
        if start:
            lines = lines[1:]  # may be cut at the front
        for line in reversed(lines):
            if line.startswith(MARK):
                control = decode_control(line)
                if control is not None:
                    return control
        if not start:
            return None
    return None


@attrs.frozen
class Inspected:
    """A session as its files describe it (for listing).

    Attributes:
        header: its log header.
        summary: the merged summary.
        released: its last unit is a release (no writer left it dirty).
    """

    header: Header
    summary: SessionSummary
    released: bool


def inspect_session(
    ops: FileOps, dir_fd: int, stem: str, *, max_line: int
) -> Inspected | None:
    """Read a session's header, sidecar and last control line (see `log_numbers`).

    Returns `None` when there is no such log, or when its header cannot be
    read by this code (damaged or newer); `load` reports those properly.

    Raises:
        OSError: a file exists but cannot be read.
    """
    try:
        fd = ops.open(stem + LOG_SUFFIX, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        size = ops.fstat(fd).st_size
        head = ops.pread(fd, min(size, MAX_HEADER_BYTES), 0)
        newline = head.find(b"\n")
        header = decode_header(head[:newline]) if newline >= 0 else None
        if header is None or header.format != FORMAT_NAME:
            return None
        numbers = log_numbers(ops, fd, size, header, max_line=max_line)
    finally:
        ops.close(fd)
    sidecar = read_sidecar(ops, dir_fd, stem, header)
    return Inspected(
        header=header,
        summary=merge_summary(sidecar, numbers),
        released=numbers.released,
    )
