"""The kit for backend authors: what every persistence backend needs, written once.

Used by core's reference backend (`turnkeep.memory`) and by `turnkeep-jsonl`,
`turnkeep-sqlite` and `turnkeep-postgres`; meant for third-party backends
too. The protocol (`turnkeep.persistence`) says what a backend must do and
the conformance kit (`turnkeep.conformance`) checks it; this module holds
the pieces each backend would otherwise write again, so that no backend
needs to know the event vocabulary or the codec's byte layout:

- turn ends: `EventRecord.is_turn_end` and `count_turn_ends` for the records
  of an `append`; `is_turn_end_type`, `stored_turn_end`,
  `stored_turn_end_by_head`, `count_stored_turn_ends` and
  `count_turn_ends_in_lines` for bytes a backend reads back;
- `check_batch`: the seq and size checks every `append` makes first;
- `stored_last_seq`: the last seq a stored record stands for (packs), and
  `records_after`: a `load_after` answer cut from a whole log;
- `outcome_unknown`: the error of an `append` that cannot tell whether its
  flush landed (a lost acknowledgement, a takeover racing it);
- `newer_format` and `newer_schema`: the refusal of data newer than the code;
- `DamagedSessions`: a session found damaged (or newer) takes no appends;
- `Undo`: in-memory changes taken back when their transaction rolls back;
- `positive`: the attrs validator of options that must be above zero.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterable, MutableMapping, Sequence
from functools import partial
from itertools import count, repeat
from operator import attrgetter, eq
from typing import Final, TypeVar

import attrs
import msgspec

from turnkeep.codec import TURN_END_PREFIX, TYPE_PREFIX, EventRecord, count_turn_ends
from turnkeep.errors import (
    EventTooLargeError,
    FlushOutcomeUnknownError,
    SequenceError,
    SessionCorruptError,
    UnsupportedFormatError,
)
from turnkeep.meta import FORMAT_VERSION, TURN_END_TYPE
from turnkeep.packs import is_pack, record_last

__all__ = [
    "TURN_END_HEAD_BYTES",
    "DamagedSessions",
    "Undo",
    "check_batch",
    "count_stored_turn_ends",
    "count_turn_ends",
    "count_turn_ends_in_lines",
    "is_turn_end_type",
    "newer_format",
    "newer_schema",
    "outcome_unknown",
    "positive",
    "records_after",
    "stored_last_seq",
    "stored_turn_end",
    "stored_turn_end_by_head",
]

K = TypeVar("K")
V = TypeVar("V")

positive: Final = attrs.validators.gt(0)
"""attrs validator of an option that must be above zero (`validator=positive`)."""

# -- turn ends -------------------------------------------------------------------

TURN_END_HEAD_BYTES: Final = len(TURN_END_PREFIX)
"""How many leading bytes of a stored event `stored_turn_end_by_head` needs."""

_LINE_TYPE: Final = b"\n" + TYPE_PREFIX
_LINE_TURN_END: Final = b"\n" + TURN_END_PREFIX


class _Type(msgspec.Struct):
    type: object = None


_type_decoder: Final = msgspec.json.Decoder(_Type)


def is_turn_end_type(type_name: str) -> bool:
    """Whether events of type `type_name` end a turn (for a stored `type` column)."""
    return type_name == TURN_END_TYPE


def stored_turn_end_by_head(head: bytes) -> bool | None:
    """Whether stored event bytes beginning with `head` are a turn end, if it tells.

    `head` is the first `TURN_END_HEAD_BYTES` bytes of the event (or more).
    Core writes an event's `type` first, so for its bytes the head decides;
    `None` means bytes laid out otherwise, which `stored_turn_end` decides
    from the whole.
    """
    if head.startswith(TURN_END_PREFIX):
        return True
    if head.startswith(TYPE_PREFIX):
        return False
    return None


def stored_turn_end(raw: bytes) -> bool:
    """Whether the stored event bytes `raw` are a turn end.

    `raw` may also be the event's object with keys of the backend's own added
    after the event's (a checksum, say): only `type` is read. Unreadable bytes
    are not a turn end.
    """
    decided = stored_turn_end_by_head(raw)
    if decided is not None:
        return decided
    return _type_of(raw) == TURN_END_TYPE


def count_stored_turn_ends(raws: Iterable[bytes]) -> int:
    """How many of the stored events `raws` are turn ends (see `stored_turn_end`).

    One prefix comparison per event, at C speed, when every event starts as
    core writes it; only the others are decoded, for their `type` alone.
    """
    raws = raws if isinstance(raws, list) else list(raws)
    turns = sum(map(bytes.startswith, raws, repeat(TURN_END_PREFIX)))
    if all(map(bytes.startswith, raws, repeat(TYPE_PREFIX))):
        return turns
    for raw in raws:
        if not raw.startswith(TYPE_PREFIX):
            turns += _type_of(raw) == TURN_END_TYPE
    return turns


def stored_last_seq(raw: bytes) -> int:
    """The last seq stored record bytes stand for (see [packs]).

    An event's own `seq`; for a packed record, the last seq of its range.
    Backends that read seqs back from stored bytes (to check a log, or to
    find a seq in it) use this instead of parsing records themselves.

    Raises:
        EventDecodeError: the bytes are not a readable record.
    """
    return record_last(raw)


def records_after(records: Sequence[bytes], after: int, limit: int) -> list[bytes]:
    """What `load_after(after, limit)` returns, cut from a whole log's records.

    `records` are a session's durable records from seq 0 (what `load`
    returns). For a backend whose `load_after` falls back to its `load`:
    with packs, a record's index is not its seq.

    Raises:
        EventDecodeError: a pack is unreadable.
    """
    if not any(map(is_pack, records)):
        return list(records[after + 1 : after + 1 + limit])
    seq = 0
    for index, raw in enumerate(records):
        last = record_last(raw) if is_pack(raw) else seq
        if last > after:
            return list(records[index : index + limit])
        seq = last + 1
    return []


def count_turn_ends_in_lines(buf: bytes, end: int, events: int) -> int | None:
    """How many turn ends the lines of `buf[:end]` hold, if their heads tell.

    For backends that keep one event per line: each event line starts with
    the event's bytes, and no other line starts like an event (with
    `{"type":`). `events` is how many event lines `buf[:end]` holds. When
    every one of them starts as core writes events, two counts over the
    buffer decide; otherwise the answer is `None` and the caller counts the
    event lines with `count_stored_turn_ends`.
    """
    typed = buf.count(_LINE_TYPE, 0, end) + buf.startswith(TYPE_PREFIX, 0, end)
    if typed != events:
        return None
    return buf.count(_LINE_TURN_END, 0, end) + buf.startswith(TURN_END_PREFIX, 0, end)


def _type_of(raw: bytes) -> object:
    try:
        return _type_decoder.decode(raw).type
    except (msgspec.DecodeError, RecursionError):
        return None


# -- the checks of append ----------------------------------------------------------

_seq: Final = attrgetter("seq")
_raw: Final = attrgetter("raw")
_span: Final = attrgetter("span")


def check_batch(
    session_id: str,
    records: Sequence[EventRecord],
    *,
    next_seq: int | None,
    max_event_bytes: int | None = None,
) -> None:
    """Refuse a batch that does not continue the log, or holds an oversized event.

    Call it before writing anything. The common case costs a few C-level
    passes; the records are walked one by one only to name what is wrong.

    Args:
        session_id: the session, for messages.
        records: the batch given to `append`.
        next_seq: the stored next seq, or `None` when the backend compares
            the first seq with storage itself as it writes (the batch is then
            only checked to be contiguous).
        max_event_bytes: the largest `raw` accepted (`None`: no limit).

    Raises:
        SequenceError: the batch does not start at `next_seq` (`expected` is
            the stored next seq), or has a hole (`expected` and `got` name
            the first record out of place).
        EventTooLargeError: a record's bytes exceed `max_event_bytes`.
    """
    if not records:
        return
    first = records[0].seq if next_seq is None else next_seq
    if (
        all(map(eq, map(_seq, records), count(first)))
        and sum(map(_span, records)) == len(records)
        and (
            max_event_bytes is None
            or max(map(len, map(_raw, records))) <= max_event_bytes
        )
    ):
        return
    expected = first
    for offset, record in enumerate(records):
        if record.span < 1:
            raise SequenceError(
                f"session {session_id!r}: the record at seq {record.seq} stands "
                f"for {record.span} events; nothing was written",
                session_id=session_id,
                expected=expected,
                got=record.seq,
            )
        if record.seq != expected:
            where = (
                f"the append starts at seq {record.seq} but the stored log "
                f"continues at {expected}"
                if offset == 0
                else f"the batch is not contiguous: seq {record.seq} stands where "
                f"{expected} belongs"
            )
            raise SequenceError(
                f"session {session_id!r}: {where}; nothing was written",
                session_id=session_id,
                expected=expected,
                got=record.seq,
            )
        size = len(record.raw)
        if max_event_bytes is not None and size > max_event_bytes:
            raise EventTooLargeError(
                f"session {session_id!r}: event {record.type!r} (seq {record.seq}) "
                f"is {size} bytes, over this backend's max_event_bytes "
                f"({max_event_bytes}); nothing was written. Raise the backend's "
                "max_event_bytes, or store large content elsewhere and reference it",
                event_type=record.type,
            )
        expected += record.span


def outcome_unknown(
    session_id: str, records: Sequence[EventRecord], why: str, *, fenced: bool = False
) -> FlushOutcomeUnknownError:
    """The error of an `append` whose flush may or may not have landed.

    Raise it (`from` the driver error) whenever the flush was handed to the
    storage but its acknowledgement never came back: a `COMMIT` that failed
    or lost its connection, a sync that failed after the bytes were written,
    a takeover that may have copied the flush in. Never report such a flush
    as not written: a caller would store it again elsewhere.

    Args:
        session_id: the session.
        records: the flush (not empty).
        why: what happened, for people (a clause: "the connection dropped
            during COMMIT").
        fenced: this instance lost the writer role too.
    """
    first, last = records[0].seq, records[-1].last
    then = (
        "this process can no longer write the session: resume it afresh to see "
        "whether they are there"
        if fenced
        else "a retry of the same events settles it (they land, or the seq "
        "check reports that they had)"
    )
    return FlushOutcomeUnknownError(
        f"session {session_id!r}: the flush of seq {first}..{last} may or may not "
        f"be stored ({why}); the log holds all of it or none of it, and {then}. "
        "Do not store these events anywhere else.",
        session_id=session_id,
        first_seq=first,
        last_seq=last,
        fenced=fenced,
    )


def newer_format(
    session_id: str, version: int, *, reader: str = "turnkeep"
) -> UnsupportedFormatError:
    """The refusal of a session stored in a format newer than `FORMAT_VERSION`.

    Args:
        session_id: the session.
        version: the format version it is stored in.
        reader: the distribution that refuses it (the one to upgrade).
    """
    return UnsupportedFormatError(
        f"session {session_id!r} is stored in format version {version}, newer "
        f"than this {reader} reads (up to {FORMAT_VERSION}); upgrade {reader} "
        "to open it (nothing was changed)"
    )


def newer_schema(
    store: str, version: int, *, supported: int, reader: str
) -> UnsupportedFormatError:
    """The refusal of a whole store whose schema is newer than the code.

    Args:
        store: what holds the sessions, as a user would find it (`SQLite
            database /path`, `the PostgreSQL schema 'turnkeep'`).
        version: its schema version.
        supported: the newest schema version this code reads.
        reader: the distribution that refuses it (the one to upgrade).
    """
    return UnsupportedFormatError(
        f"{store} is at schema version {version}, newer than this {reader} reads "
        f"(up to {supported}); upgrade {reader} to open it (nothing was changed)"
    )


# -- the damaged-session guard ------------------------------------------------------

_Found = SessionCorruptError | UnsupportedFormatError


@attrs.define(eq=False)
class DamagedSessions:
    """The sessions this backend instance found it must not append to.

    When reading a session finds damage inside acknowledged data
    (`SessionCorruptError`) or a format newer than the code
    (`UnsupportedFormatError`), the backend records it here (`watch` does so
    for what it wraps), and `check` refuses every later `append` to that
    session with the same kind of error, before anything is written: new
    flushes would bury the damage, or write into a format this code cannot
    read. Kept in memory per instance; `forget` a session when it is
    deleted (or when the handle the refusal belongs to is let go).
    """

    _found: dict[str, _Found] = attrs.field(init=False, factory=dict[str, _Found])

    @contextlib.contextmanager
    def watch(self, session_id: str) -> Generator[None]:
        """Record what the wrapped code raises about `session_id`, and re-raise it."""
        try:
            yield
        except (SessionCorruptError, UnsupportedFormatError) as exc:
            self.record(session_id, exc)
            raise

    def record(self, session_id: str, error: _Found) -> None:
        """Refuse appends to `session_id` from now on (the first error found wins)."""
        self._found.setdefault(session_id, error)

    def check(self, session_id: str) -> None:
        """Raise if `session_id` was found damaged or newer; return otherwise.

        Raises:
            SessionCorruptError: it was found damaged (same `offset`).
            UnsupportedFormatError: it was found in a newer format.
        """
        found = self._found.get(session_id)
        if found is None:
            return
        if isinstance(found, SessionCorruptError):
            raise SessionCorruptError(
                f"session {session_id!r} was found damaged, and appending to it "
                f"would bury the damage under new flushes, so it is refused: {found}",
                session_id=session_id,
                offset=found.offset,
            ) from found
        raise UnsupportedFormatError(
            f"session {session_id!r} was found in a format this code cannot "
            f"write, so appending to it is refused: {found}"
        ) from found

    def forget(self, session_id: str) -> None:
        """Take back what was found about `session_id` (no-op if nothing was)."""
        self._found.pop(session_id, None)

    def __contains__(self, session_id: object) -> bool:
        """Whether appends to `session_id` are refused."""
        return session_id in self._found


# -- undoing in-memory changes ---------------------------------------------------------


@attrs.define(eq=False)
class Undo:
    """In-memory changes to take back if the writes they go with roll back.

    A backend that groups operations into one transaction changes its own
    bookkeeping (what it owns, what is pending) as each operation runs; each
    change registers its undo here, and `rollback` runs them, newest first,
    when the operation's writes do not commit, so memory never claims what
    storage does not.
    """

    _steps: list[Callable[[], object]] = attrs.field(
        init=False, factory=list[Callable[[], object]]
    )

    def on_rollback(self, step: Callable[[], object]) -> None:
        """Run `step` if the writes are rolled back."""
        self._steps.append(step)

    def rollback(self) -> None:
        """Run the registered steps, newest first, each once."""
        steps = self._steps
        while steps:
            steps.pop()()

    def put(self, mapping: MutableMapping[K, V], key: K, value: V | None) -> None:
        """Set `mapping[key]` to `value` (remove it for `None`), undoably."""
        if key in mapping:
            self._steps.append(partial(mapping.__setitem__, key, mapping[key]))
        else:
            self._steps.append(partial(mapping.pop, key, None))
        if value is None:
            mapping.pop(key, None)
        else:
            mapping[key] = value

    def mark(self, members: set[K], key: K, present: bool) -> None:
        """Add `key` to `members` (or discard it), undoably."""
        self._steps.append(
            partial(members.add if key in members else members.discard, key)
        )
        if present:
            members.add(key)
        else:
            members.discard(key)
