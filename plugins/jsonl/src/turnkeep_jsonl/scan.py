"""Reading a session log back: validation, the torn-tail rule, damage (R4).

Owns `scan`, the one reader of log files. It returns the whole units (owner,
release and flush units) that validate, in order, and where they end; bytes
after that end are a *tail*. A tail is legal only if it could be the single
flush in flight at a crash: when any valid control line numbered two or more
past the last good unit follows the first bad record, or an event of a later
unit follows the commit line (intact or not, readable as one or not) that
closed a unit's events, those damaged bytes had been made durable, so
`SessionCorruptError` is raised with their offset.

The common case (an undamaged log) goes through a vectorised path that checks
each unit with one CRC over its bytes; anything it cannot accept is handed to
a line-by-line analysis, which is authoritative. The fast path reads chunk by
chunk, each starting at a line start, and carries a unit that spans chunks
as its events so far plus a running CRC, so every byte is read, split and
checksummed once however the events were grouped into flushes (joining a
large unit's chunks before looking at it made one huge flush load slower
than the same events flushed per turn). The log's turn count comes from the
last control line, which carries it; only lines from before that field
existed are counted. Memory stays bounded by the chunk size plus the longest
acceptable line, or the largest valid unit, whatever the file holds.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from itertools import accumulate, compress, count, repeat
from operator import add, itemgetter
from typing import Final

import attrs

from turnkeep.backendkit import (
    count_stored_turn_ends,
    newer_format,
    stored_last_seq,
)
from turnkeep.errors import EventDecodeError, SessionCorruptError
from turnkeep.meta import FORMAT_VERSION

from .format import (
    FORMAT_NAME,
    MARK,
    MAX_CONTROL_BYTES,
    MAX_HEADER_BYTES,
    SUFFIX_LEN,
    Commit,
    Control,
    Header,
    Owner,
    Release,
    Said,
    all_sealed,
    decode_control,
    decode_controls,
    decode_header,
    event_seq,
    probe_header,
    unseal,
)

__all__ = ["CHUNK", "Reader", "ScanResult", "ScanState", "check_header", "scan"]

CHUNK: Final = 4 * 1024 * 1024
"""Bytes read at a time (small enough that a garbage line never costs more
than a few times `max_line` of memory while it is being recognised)."""

Reader = Callable[[int, int], bytes]
"""`read(offset, size)`: up to `size` bytes of the file at `offset`."""

DataFrom = Callable[[int], int]
"""`data_from(offset)`: the first offset at or after it holding data."""

_cut: Final = itemgetter(slice(None, -SUFFIX_LEN))
_CLOSE: Final = b"}"
_NEEDLE: Final = b"\n" + MARK


@attrs.define
class ScanState:
    """Where the valid units left the session.

    Attributes:
        flush: number of the last valid unit (0: none).
        seq: the next event seq (the number of events).
        epoch: the current owner epoch (0: no owner yet).
        time: `updated_at` as of the last valid unit.
        owner: the last owner line.
        released: the last unit is a release of the current epoch.
        turns: how many of the events are `turn/end` events.
        size: the events' stored bytes, summed (each event line is its
            event's bytes plus `SUFFIX_LEN`, the checksum field and newline).
        said: the summary the last commit line that carried one said.
        said_flush: the number of that commit's unit (0: none).
    """

    flush: int = 0
    seq: int = 0
    epoch: int = 0
    time: int = 0
    owner: Owner | None = None
    released: bool = False
    turns: int = 0
    size: int = 0
    said: Said | None = None
    said_flush: int = 0

    def copy(self) -> ScanState:
        """A copy of every field (what `attrs.evolve` gives, ~5x faster)."""
        return ScanState(
            self.flush,
            self.seq,
            self.epoch,
            self.time,
            self.owner,
            self.released,
            self.turns,
            self.size,
            self.said,
            self.said_flush,
        )

    def accept(
        self, control: Control, n: int, region: bytes | memoryview, turns: int = 0
    ) -> bool:
        """Apply a unit of `n` event lines (bytes `region`) if it is valid.

        `turns` is how many of those lines are `turn/end` events.
        """
        return self.apply(control, n, len(region), zlib.crc32(region), turns)

    def apply(
        self, control: Control, n: int, length: int, crc: int, turns: int = 0
    ) -> bool:
        """`accept` for event lines of `length` bytes whose CRC-32 is `crc`.

        The fast path checksums a unit's lines chunk by chunk as they are
        read (and counts their turn ends afterwards, many units at once).
        """
        if control.flush != self.flush + 1:
            return False
        if type(control) is Commit:
            if (
                n == 0
                or control.n != n
                or control.epoch != self.epoch
                or control.seq != self.seq + control.events
                or control.events < n
                or control.len != length
                or control.fcrc != f"{crc:08x}"
            ):
                return False
            self.released = False
            self.turns += turns
            self.size += length - SUFFIX_LEN * n
            if control.said is not None:
                self.said = control.said
                self.said_flush = control.flush
        elif n or control.seq != self.seq:
            return False
        elif type(control) is Owner:
            if control.epoch <= self.epoch:
                return False
            self.owner = control
            self.released = False
        elif type(control) is Release:
            if control.epoch != self.epoch:
                return False
            self.released = True
        self.flush = control.flush
        self.seq = control.seq
        self.epoch = control.epoch
        self.time = max(self.time, control.time)
        return True


@attrs.frozen
class ScanResult:
    """What `scan` found.

    Attributes:
        header: the header line.
        events: the events of the valid units (empty unless collected).
        end: the offset just after the last valid unit.
        size: the file size that was scanned.
        state: the session as of the last valid unit.
        damage: offset of the first bad record in the tail (`None` when the
            tail is only an unfinished unit or there is none).
        durable_damage: that record had been acknowledged (a later unit
            proves it); only a `tolerate` scan returns such a result.
    """

    header: Header
    events: list[bytes]
    end: int
    size: int
    state: ScanState
    damage: int | None
    durable_damage: bool = False

    @property
    def tail(self) -> int:
        """How many bytes follow the last valid unit."""
        return self.size - self.end


def _corrupt(session_id: str, offset: int, why: str) -> SessionCorruptError:
    return SessionCorruptError(
        f"session {session_id!r}: {why} at byte {offset} of its log; "
        "acknowledged data is damaged, so it cannot be loaded (restore the file "
        "from a backup, or move it aside to start over)",
        session_id=session_id,
        offset=offset,
    )


def check_header(line: bytes, session_id: str) -> Header:
    """The header of session `session_id`'s log, from its first line.

    Raises:
        UnsupportedFormatError: the format version is newer (checked first,
            before any checksum: a newer layout may differ).
        SessionCorruptError: the line is damaged or names another session.
    """
    probe = probe_header(line)
    if probe is None or probe[0] != "header":
        raise _corrupt(session_id, 0, "the header line is unreadable")
    if probe[1] > FORMAT_VERSION:
        raise newer_format(session_id, probe[1], reader="turnkeep-jsonl")
    header = decode_header(line)
    if header is None or header.format != FORMAT_NAME:
        raise _corrupt(session_id, 0, "the header line is damaged")
    if header.id != session_id:
        raise _corrupt(session_id, 0, f"the header names session {header.id!r}")
    return header


def scan(
    read: Reader,
    size: int,
    *,
    session_id: str,
    collect: bool,
    max_line: int,
    data_from: DataFrom | None = None,
    tolerate: bool = False,
) -> ScanResult:
    """Validate a log of `size` bytes and return its valid units.

    With `tolerate` (salvage), damage before a later durable unit is
    returned as `durable_damage` with the units before it, not raised.

    Raises:
        SessionCorruptError: the header is damaged or names another session,
            or damage lies before a later durable unit (R4).
        UnsupportedFormatError: the header's format version is newer.
    """
    first = read(0, min(size, CHUNK)) if size else b""
    newline = first.find(b"\n", 0, MAX_HEADER_BYTES)
    if newline < 0:
        check_header(first[:MAX_HEADER_BYTES], session_id)  # a newer format refuses
        raise _corrupt(session_id, 0, "the header line is incomplete")
    header = check_header(first[:newline], session_id)
    state = ScanState()
    events: list[bytes] = []
    found = events if collect else None
    pending = _Pending()
    pos = at = newline + 1  # pos: the end of the valid units; at: buf's start
    buf: bytes | None = first[at:]
    del first
    while buf is not None:
        ended = at + len(buf) >= size
        used, accepted, failed = _fast(buf, state, pending, found)
        if accepted >= 0:
            pos = at + accepted
        if failed or ended:
            break
        at += used
        if len(buf) - used > max_line:
            break  # an overlong line: the slow path names it
        buf, shrunk = _read_lines(read, at, size, max_line)
        if shrunk:
            size = at + len(buf or b"")
    del buf, pending
    if pos >= size:
        return ScanResult(header, events, pos, size, state, None)
    skip = data_from if data_from is not None else _no_holes
    return _slow(read, pos, size, header, state, found, max_line, skip, tolerate)


def _read_lines(
    read: Reader, at: int, size: int, max_line: int
) -> tuple[bytes | None, bool]:
    """The bytes from line start `at` on: a chunk, or more to end a line in it.

    Whatever `_fast` did not take (an unfinished last line) is read again
    with the next chunk, so a unit spanning chunks is never re-joined or
    re-split: it is read, split and checksummed once, chunk by chunk.

    Returns:
        The bytes (`None` when a line grows past `max_line` before it ends:
        the slow path names it), and whether the file ended before `size`
        (it shrank while being read).
    """
    chunk = read(at, min(CHUNK, size - at))
    got = at + len(chunk)
    if b"\n" in chunk or got >= size:
        return chunk, len(chunk) < min(CHUNK, size - at)
    parts = [chunk]  # a line longer than a chunk: read on to its end
    length = len(chunk)
    while got < size:
        more = read(got, min(CHUNK, size - got))
        if not more:
            return b"".join(parts), True
        got += len(more)
        parts.append(more)
        if b"\n" in more:
            break
        length += len(more)
        if length > max_line:
            return None, False
    return b"".join(parts), False


def _no_holes(offset: int) -> int:
    return offset


@attrs.define
class _Pending:
    """What was read of a unit whose control line is yet to come.

    `items` are its event lines, already cut to the events' bytes when the
    scan collects them (so a large unit's lines are freed chunk by chunk).
    """

    items: list[bytes] = attrs.Factory(list[bytes])
    crc: int = 0
    length: int = 0


def _fast(
    buf: bytes, state: ScanState, pending: _Pending, events: list[bytes] | None
) -> tuple[int, int, bool]:
    """Accept the whole units ending in `buf` (which starts a line), at C speed.

    A unit may have started in earlier chunks (`pending`); the event lines
    after the last control line become `pending` for the next chunk.

    Returns:
        How many bytes of `buf` were taken (its whole lines), where the last
        unit accepted in it ends (-1: none), and whether a unit failed.
    """
    lines = buf.split(b"\n")
    used = len(buf) - len(lines.pop())  # the unfinished remainder stays
    marks = list(compress(count(), map(bytes.startswith, lines, repeat(MARK))))
    view = memoryview(buf)
    accepted = -1
    start = 0
    a = 0
    failed = False
    try:
        if marks:
            last = marks[-1]
            starts = [0, *accumulate(map(add, map(len, lines[: last + 1]), repeat(1)))]
            ctl_lines = [lines[i] for i in marks]
            # Checked all at once; on any doubt, line by line in the loop.
            controls = decode_controls(ctl_lines) if all_sealed(ctl_lines) else None
            carried: list[bytes] = []  # the first unit's items from earlier chunks
            taken: list[bytes] = []  # the event lines of the units accepted
            done: Control | None = None  # the last control line accepted
            for k, mark in enumerate(marks):
                control = (
                    controls[k] if controls is not None else decode_control(lines[mark])
                )
                b = starts[mark]
                if control is None or not state.apply(
                    control,
                    len(pending.items) + mark - start,
                    pending.length + b - a,
                    zlib.crc32(view[a:b], pending.crc),
                ):
                    failed = True
                    break
                done = control
                if pending.items:
                    carried = pending.items
                    pending.items = []
                    pending.crc = pending.length = 0
                taken += lines[start:mark]
                start = mark + 1
                a = accepted = starts[start]
            if done is not None:
                _count_turns(state, done, carried, taken)
                if events is not None:
                    events += carried
                    events.extend(map(add, map(_cut, taken), repeat(_CLOSE)))
        if not failed and start < len(lines):
            rest = lines[start:]
            if events is not None:
                pending.items.extend(map(add, map(_cut, rest), repeat(_CLOSE)))
            else:
                pending.items += rest
            pending.crc = zlib.crc32(view[a:used], pending.crc)
            pending.length += used - a
    finally:
        view.release()
    return used, accepted, failed


def _count_turns(
    state: ScanState, last: Control, carried: list[bytes], lines: list[bytes]
) -> None:
    """Bring `state.turns` up to date with the units just accepted.

    `last` is the last one's control line, which carries the log's turn
    count since that field exists; for older lines, the units' events are
    counted (`carried`, the first unit's from earlier chunks, and `lines`).
    """
    if last.turns is not None:
        state.turns = last.turns
    else:
        state.turns += count_stored_turn_ends(carried) + count_stored_turn_ends(lines)


def _lines(
    read: Reader, pos: int, size: int, max_line: int
) -> Iterator[tuple[int, bytes | None]]:
    """`(offset, line)` from `pos` on; `None` for an overlong or unfinished line."""
    buf = b""
    at = 0  # where the next line starts in `buf` (no re-slicing per line)
    offset = pos
    got = pos
    while True:
        newline = buf.find(b"\n", at)
        if newline >= 0:
            if newline - at > max_line:
                yield offset, None
                return
            yield offset, buf[at:newline]
            offset += newline - at + 1
            at = newline + 1
            continue
        rest = len(buf) - at
        done = rest > max_line or got >= size
        chunk = b"" if done else read(got, min(CHUNK, size - got))
        if not chunk:
            if rest:
                yield offset, None
            return
        got += len(chunk)
        buf = buf[at:] + chunk
        at = 0


def _slow(
    read: Reader,
    pos: int,
    size: int,
    header: Header,
    state: ScanState,
    events: list[bytes] | None,
    max_line: int,
    data_from: DataFrom,
    tolerate: bool = False,
) -> ScanResult:
    """Line-by-line analysis from the unit starting at `pos` (R4)."""
    unit_start = pos
    pending: list[bytes] = []  # event lines of the unit being read
    raws: list[bytes] = []
    bad: int | None = None
    closed_at: int | None = None  # just past a bad control line closing a unit
    expected = state.seq  # the seq the next event line must carry
    between: int | None = None  # just past an unreadable line after events
    for offset, line in _lines(read, pos, size, max_line):
        if line is None:
            bad = offset
            break
        if line.startswith(MARK):
            control = decode_control(line)
            region = b"".join([p + b"\n" for p in pending])
            if control is None:
                bad = offset
                if pending:
                    closed_at = offset + len(line) + 1
                break
            if not state.accept(
                control, len(pending), region, count_stored_turn_ends(raws)
            ):
                # Every line checked out on its own, yet they do not add up
                # to this commit: the unit as a whole is the bad record.
                bad = unit_start if pending else offset
                break
            if events is not None:
                events.extend(raws)
            unit_start = offset + len(line) + 1
            pending = []
            raws = []
            expected = state.seq
            continue
        raw = unseal(line)
        if raw is None or event_seq(raw) != expected:
            bad = offset
            if raw is None and pending:
                between = offset + len(line) + 1
            break
        pending.append(line)
        raws.append(raw)
        expected = _last_or(raw, expected) + 1
    after = expected  # the seq of the next unit's first event
    if bad is not None and (
        _durable_after(read, data_from, bad, size, state.flush + 2, max_line)
        # A control line that no longer decodes, where the unit's commit line
        # stands, followed by an event of a later unit: a unit's write ends
        # with its commit line and the next one starts only after it was
        # fsynced, so this unit had been acknowledged.
        or (
            closed_at is not None
            and _later_event(read, closed_at, size, after, max_line)
        )
        # The same when the damage hit the line's `{"mark":` too: an
        # unreadable line between the unit's events and the event that comes
        # next in seq held no event, so it was the unit's commit line. (A hole
        # a crash leaves in the flush in flight takes at least one event with
        # it, and nothing of that flush follows its commit line.)
        or (
            between is not None and _next_event_is(read, between, size, after, max_line)
        )
    ):
        if not tolerate:
            raise _corrupt(header.id, bad, "a record is damaged")
        return ScanResult(header, events or [], unit_start, size, state, bad, True)
    return ScanResult(header, events or [], unit_start, size, state, bad)


def _last_or(raw: bytes, seq: int) -> int:
    """The last seq of an event line that carries `seq` (its own, for an event)."""
    try:
        return stored_last_seq(raw)
    except EventDecodeError:
        return seq


def _durable_after(
    read: Reader,
    data_from: DataFrom,
    start: int,
    size: int,
    flush: int,
    max_line: int,
) -> bool:
    """Whether a record after `start` proves unit `flush - 1` was acknowledged.

    A unit starts only after the one before it was fsynced, so any record of
    unit `flush` or later proves every byte before that unit was durable.
    Two kinds of record say so: a valid control line numbered `flush` or
    more, and a valid event line following the valid control line of unit
    `flush - 1` with a seq at or past that line's (an event of a later
    unit). Holes (zeros never written) hold no line and are skipped.
    """
    overlap = MAX_CONTROL_BYTES
    at = start
    while at < size:
        if at > start:
            # A line can only start right after a newline, in data; back off
            # one byte so a newline just before the data is seen.
            at = max(start, data_from(at) - 1)
            if at >= size - 1:
                return False
        chunk = read(at, min(CHUNK + overlap, size - at))
        if not chunk:
            return False
        found = chunk.find(_NEEDLE) if b"\n" in chunk else -1
        while found >= 0:
            begin = found + 1
            end = chunk.find(b"\n", begin, begin + MAX_CONTROL_BYTES + 1)
            if end < 0 and at + len(chunk) >= size:
                break  # an unfinished last line proves nothing
            if end >= 0:
                control = decode_control(chunk[begin:end])
                if control is not None and control.flush >= flush:
                    return True
                if (
                    control is not None
                    and control.flush == flush - 1
                    and _later_event(read, at + end + 1, size, control.seq, max_line)
                ):
                    return True
            found = chunk.find(_NEEDLE, begin)
        if at + len(chunk) >= size:
            return False
        at += len(chunk) - overlap
    return False


def _later_event(read: Reader, pos: int, size: int, seq: int, max_line: int) -> bool:
    """Whether a valid event line with a seq of `seq` or more starts at or after `pos`.

    Only a whole, sealed line counts; the search ends at the first line too
    long or unfinished to judge.
    """
    for _, line in _lines(read, pos, size, max_line):
        if line is None:
            return False
        if line.startswith(MARK):
            continue  # a control line: the caller judges those
        raw = unseal(line)
        if raw is not None and (found := event_seq(raw)) is not None and found >= seq:
            return True
    return False


def _next_event_is(read: Reader, pos: int, size: int, seq: int, max_line: int) -> bool:
    """Whether the line at `pos` is a valid event line numbered exactly `seq`."""
    for _, line in _lines(read, pos, size, max_line):
        if line is None or line.startswith(MARK):
            return False
        raw = unseal(line)
        return raw is not None and event_seq(raw) == seq
    return False
