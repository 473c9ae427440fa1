"""The backend kit: turn ends, the batch check, refusals, the guard, undo."""

from __future__ import annotations

import attrs
import msgspec
import pytest

from turnkeep.backendkit import (
    TURN_END_HEAD_BYTES,
    DamagedSessions,
    Undo,
    check_batch,
    count_stored_turn_ends,
    count_turn_ends,
    count_turn_ends_in_lines,
    is_turn_end_type,
    newer_format,
    newer_schema,
    positive,
    stored_turn_end,
    stored_turn_end_by_head,
)
from turnkeep.codec import EventCodec, EventRecord
from turnkeep.errors import (
    EventTooLargeError,
    SequenceError,
    SessionCorruptError,
    StorageError,
    UnsupportedFormatError,
)
from turnkeep.events import VOCABULARY, event_type_name
from turnkeep.meta import FORMAT_VERSION

# -- turn ends -----------------------------------------------------------------

ODD_LAYOUTS = [
    b'{"type":"turn/end","seq":0}',
    b'{"seq":1,"type":"turn/end"}',
    b'{"seq":2, "type" : "turn/end"}',
    b'{"type":"turn/ending","seq":3}',
    b'{"type":"turn/start","seq":4}',
    b'{"seq":5,"data":{"type":"turn/end"},"type":"user/message"}',
    b'{"seq":7}',
    b"not json",
    # Bytes that start with their type are judged by that prefix alone (as
    # core writes them, a type is never escaped): not a turn end.
    b'{"type":"turn\\/end","seq":6}',
]
ODD_TURN_ENDS = 3


SAMPLE_DATA: dict[str, object] = {
    "turn/start": {"turn": 1},
    "user/message": {"text": "hi"},
    "assistant/chunk": {"text": "h"},
    "assistant/message": {"text": "hello"},
    "tool/call": {"call_id": "c", "name": "n", "arguments": {}},
    "tool/result": {"call_id": "c", "output": "o"},
    "turn/checkpoint": {"turn": 1, "reason": "unsafe-tool"},
    "turn/end": {"turn": 1, "status": "completed", "manifest": {"w": "v1"}},
    "run/context": {
        "instructions_sha256": None,
        "model": {"name": "m", "provider": "p", "settings": {}},
        "tools": [],
        "budgets": {"max_steps": 16},
    },
    "run/instructions": {"sha256": "0" * 64, "text": "be brief"},
    "effect/resolved": {"call_id": "c", "outcome": "done", "result": "ok", "by": "x"},
    "run/drift": {
        "since_seq": 7,
        "differences": [{"name": "w", "recorded": "v1", "current": "v2"}],
        "manifest": {"w": "v2"},
    },
}


def vocabulary_records() -> list[EventRecord]:
    """One record of every built-in type, as core encodes it."""
    codec = EventCodec()
    records: list[EventRecord] = []
    for seq, cls in enumerate(VOCABULARY):
        name = event_type_name(cls)
        wire = {"type": name, "seq": seq, "time": 1, "data": SAMPLE_DATA[name]}
        records.append(codec.record(codec.decode(msgspec.json.encode(wire))))
    return records


def test_a_record_knows_whether_it_ends_a_turn() -> None:
    records = vocabulary_records()
    ends = [r.type for r in records if r.is_turn_end]
    assert ends == ["turn/end"]
    assert count_turn_ends(records) == 1
    assert [is_turn_end_type(event_type_name(c)) for c in VOCABULARY] == [
        r.is_turn_end for r in records
    ]


def test_the_head_of_core_written_bytes_decides() -> None:
    for record in vocabulary_records():
        head = record.raw[:TURN_END_HEAD_BYTES]
        assert stored_turn_end_by_head(head) is record.is_turn_end, record.type
        assert stored_turn_end(record.raw) is record.is_turn_end
    assert stored_turn_end_by_head(b'{"seq":1,"type":"turn/end"}') is None


def test_stored_bytes_laid_out_otherwise_are_decoded_for_their_type() -> None:
    assert [stored_turn_end(r) for r in ODD_LAYOUTS].count(True) == ODD_TURN_ENDS
    assert count_stored_turn_ends(ODD_LAYOUTS) == ODD_TURN_ENDS
    assert count_stored_turn_ends(iter(ODD_LAYOUTS)) == ODD_TURN_ENDS
    # The object with keys of the backend's own added reads the same.
    sealed = [r[:-1] + b',"crc":"00000000"}' for r in ODD_LAYOUTS if r[-1:] == b"}"]
    assert count_stored_turn_ends(sealed) == ODD_TURN_ENDS
    assert count_stored_turn_ends([]) == 0


def test_lines_are_counted_from_the_buffer_when_every_event_starts_with_its_type() -> (
    None
):
    raws = [r.raw for r in vocabulary_records()] * 3
    control = b'{"mark":"commit"}'
    buf = b"\n".join([*raws[:5], control, *raws[5:], control]) + b"\n"
    assert count_turn_ends_in_lines(buf, len(buf), len(raws)) == 3
    # Only the lines before `end` count: here, up to the first turn end.
    first = [r.is_turn_end for r in vocabulary_records()].index(True) + 1
    cut = buf.index(b"\n", buf.index(b'"turn/end"')) + 1
    assert count_turn_ends_in_lines(buf, cut, first) == 1
    assert count_turn_ends_in_lines(b"", 0, 0) == 0


def test_lines_laid_out_otherwise_are_left_to_the_caller() -> None:
    lines = [b'{"type":"turn/end","seq":0}', b'{"seq":1,"type":"turn/end"}']
    buf = b"\n".join(lines) + b"\n"
    assert count_turn_ends_in_lines(buf, len(buf), 2) is None
    assert count_stored_turn_ends(lines) == 2


# -- the batch check -----------------------------------------------------------


def records(first: int, n: int, size: int = 10) -> list[EventRecord]:
    return [
        EventRecord(first + i, "x/y", 1, b"{" + b" " * (size - 2) + b"}")
        for i in range(n)
    ]


def test_a_batch_that_continues_the_log_passes() -> None:
    check_batch("s", records(4, 3), next_seq=4, max_event_bytes=10)
    check_batch("s", records(4, 3), next_seq=None)
    check_batch("s", [], next_seq=7, max_event_bytes=1)


def test_a_batch_that_starts_elsewhere_is_refused_with_the_stored_next_seq() -> None:
    with pytest.raises(SequenceError) as info:
        check_batch("s-1", records(5, 2), next_seq=4)
    assert (info.value.session_id, info.value.expected, info.value.got) == ("s-1", 4, 5)
    assert "'s-1'" in str(info.value)
    assert "nothing was written" in str(info.value)


def test_a_batch_with_a_hole_is_refused_where_it_breaks() -> None:
    holed = [*records(4, 2), *records(7, 1)]
    for next_seq in (4, None):
        with pytest.raises(SequenceError, match="not contiguous") as info:
            check_batch("s", holed, next_seq=next_seq)
        assert (info.value.expected, info.value.got) == (6, 7)


def test_an_oversized_record_is_refused_naming_it() -> None:
    batch = [*records(0, 1), *records(1, 1, size=11)]
    check_batch("s", batch, next_seq=0)  # no limit given
    with pytest.raises(EventTooLargeError) as info:
        check_batch("big", batch, next_seq=0, max_event_bytes=10)
    assert info.value.event_type == "x/y"
    message = str(info.value)
    assert all(part in message for part in ("'big'", "seq 1", "11 bytes", "(10)"))


# -- refusals of newer data ------------------------------------------------------


def test_newer_data_is_refused_saying_what_to_upgrade() -> None:
    error = newer_format("s", FORMAT_VERSION + 1, reader="turnkeep-x")
    assert isinstance(error, UnsupportedFormatError)
    text = str(error)
    for part in ("'s'", f"version {FORMAT_VERSION + 1}", f"up to {FORMAT_VERSION}"):
        assert part in text
    assert "upgrade turnkeep-x" in text
    assert "nothing was changed" in text
    schema = str(newer_schema("database /d", 9, supported=2, reader="turnkeep-y"))
    for part in ("database /d", "version 9", "newer", "up to 2", "upgrade turnkeep-y"):
        assert part in schema


# -- the damaged-session guard ---------------------------------------------------


def test_a_session_found_damaged_takes_no_appends_until_forgotten() -> None:
    guard = DamagedSessions()
    guard.check("s")
    damage = SessionCorruptError("session 's': bad at byte 7", session_id="s", offset=7)
    with pytest.raises(SessionCorruptError), guard.watch("s"):
        raise damage
    assert "s" in guard
    assert "other" not in guard
    guard.check("other")
    with pytest.raises(SessionCorruptError) as info:
        guard.check("s")
    assert info.value is not damage  # a fresh error each time, caused by the first
    assert info.value.__cause__ is damage
    assert (info.value.session_id, info.value.offset) == ("s", 7)
    assert "bad at byte 7" in str(info.value)
    guard.forget("s")
    guard.check("s")
    guard.forget("s")


def test_a_session_found_newer_takes_no_appends_and_the_first_finding_wins() -> None:
    guard = DamagedSessions()
    newer = newer_format("n", FORMAT_VERSION + 1)
    guard.record("n", newer)
    guard.record("n", SessionCorruptError("later", session_id="n"))
    with pytest.raises(UnsupportedFormatError) as info:
        guard.check("n")
    assert info.value.__cause__ is newer


def test_watch_records_a_newer_format_and_re_raises_it() -> None:
    guard = DamagedSessions()
    newer = newer_format("n", FORMAT_VERSION + 1)
    with pytest.raises(UnsupportedFormatError) as raised, guard.watch("n"):
        raise newer
    assert raised.value is newer
    with pytest.raises(UnsupportedFormatError) as info:
        guard.check("n")
    assert info.value.__cause__ is newer


def test_other_errors_are_not_recorded() -> None:
    guard = DamagedSessions()
    with pytest.raises(StorageError), guard.watch("s"):
        raise StorageError("the disk is full")
    with guard.watch("s"):
        pass
    assert "s" not in guard


# -- undo ------------------------------------------------------------------------


def test_undo_takes_changes_back_newest_first() -> None:
    held = {"a": 1, "b": 2}
    pending = {"p"}
    order: list[str] = []
    undo = Undo()
    undo.put(held, "a", 10)
    undo.put(held, "b", None)
    undo.put(held, "c", 3)
    undo.put(held, "c", 4)
    undo.mark(pending, "p", False)
    undo.mark(pending, "q", True)
    undo.on_rollback(lambda: order.append("last registered"))
    assert held == {"a": 10, "c": 4}
    assert pending == {"q"}
    undo.rollback()
    assert held == {"a": 1, "b": 2}
    assert pending == {"p"}
    assert order == ["last registered"]
    undo.rollback()  # each step runs once
    assert order == ["last registered"]


# -- validators ------------------------------------------------------------------


def test_positive_refuses_zero_and_below_naming_the_option() -> None:
    @attrs.frozen
    class Options:
        threads: int = attrs.field(default=1, validator=positive)

    assert Options(3).threads == 3
    for bad in (0, -1):
        with pytest.raises(ValueError, match="threads"):
            Options(bad)
