from __future__ import annotations

import msgspec
import pytest

from turnkeep import define_event_type
from turnkeep.errors import (
    EventDecodeError,
    EventNotSerializableError,
    EventTooLargeError,
    SessionCorruptError,
    UnknownEventTypeError,
)
from turnkeep.events import (
    VOCABULARY,
    AssistantMessage,
    AssistantMessageData,
    ToolCall,
    ToolCallData,
    UserMessage,
    UserMessageData,
    event_type_name,
)
from turnkeep.persistence import EventCodec


def test_every_vocabulary_type_round_trips() -> None:
    codec = EventCodec()
    for cls in VOCABULARY:
        assert event_type_name(cls) == cls.__struct_config__.tag
    event = ToolCall(
        seq=3,
        time=10,
        data=ToolCallData(call_id="c", name="n", arguments={"a": [1, "ü", None]}),
    )
    raw = codec.encode(event)
    assert raw.startswith(b'{"type":"tool/call","seq":3,"time":10,"data":')
    assert codec.decode(raw) == event
    assert codec.decode(raw).type == "tool/call"


def test_non_serialisable_data_is_refused_naming_the_type() -> None:
    kind = define_event_type("plug/thing")
    with pytest.raises(EventNotSerializableError) as info:
        EventCodec().encode(kind(seq=0, time=1, data={"x": object()}))
    assert info.value.event_type == "plug/thing"
    assert "plug/thing" in str(info.value)


def test_oversized_event_is_refused_naming_the_type() -> None:
    codec = EventCodec(max_event_bytes=100)
    with pytest.raises(EventTooLargeError) as info:
        codec.encode(UserMessage(seq=0, time=1, data=UserMessageData(text="x" * 200)))
    assert info.value.event_type == "user/message"
    assert "100" in str(info.value)


def test_unknown_type_is_refused_unless_ignorable() -> None:
    writer = EventCodec(types=[define_event_type("plug/strict")])
    strict_raw = writer.encode(writer.types[0](seq=0, time=1, data={"k": 1}))
    reader = EventCodec()
    with pytest.raises(UnknownEventTypeError, match="plug/strict"):
        reader.decode(strict_raw)


def test_ignorable_unknown_type_is_kept_opaque_and_reencodes_identically() -> None:
    note = define_event_type("plug/note", ignorable=True)
    writer = EventCodec(types=[note])
    raw = writer.encode(note(seq=4, time=9, data={"b": [1, 2], "a": "ü"}))
    assert b'"ignorable":true' in raw
    reader = EventCodec()
    opaque = reader.decode(raw)
    assert opaque.type == "plug/note"
    assert opaque.seq == 4
    assert reader.encode(opaque) == raw
    assert writer.decode(raw) == note(seq=4, time=9, data={"b": [1, 2], "a": "ü"})


def test_known_type_with_a_wrong_payload_is_a_decode_error() -> None:
    raw = b'{"type":"user/message","seq":0,"time":1,"data":{"text":5}}'
    with pytest.raises(EventDecodeError, match="schema"):
        EventCodec().decode(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"[]",
        b'{"type":"user/message"}',
        b"\xff\xfe",
        b'{"type":"user/message","seq":0,"time":1,"data":' + b"[" * 100_000,
    ],
)
def test_garbage_is_a_typed_decode_error(raw: bytes) -> None:
    with pytest.raises(EventDecodeError):
        EventCodec().decode(raw)


def test_deep_nesting_inside_an_unknown_ignorable_event_is_typed() -> None:
    raw = (
        b'{"type":"x/y","seq":0,"time":1,"ignorable":true,"data":'
        + b"[" * 50_000
        + b"]" * 50_000
        + b"}"
    )
    # The envelope cannot be read without recursing that deep: the event is
    # refused as malformed, typed, and no RecursionError escapes.
    with pytest.raises(EventDecodeError, match="malformed"):
        EventCodec().decode(raw)
    # The same shape, shallow, is an opaque event of the unknown type.
    shallow = raw.replace(b"[" * 50_000, b"[" * 5).replace(b"]" * 50_000, b"]" * 5)
    assert EventCodec().decode(shallow).type == "x/y"


def test_decode_log_refuses_gaps_with_the_offset() -> None:
    codec = EventCodec()
    a = codec.encode(
        AssistantMessage(seq=0, time=1, data=AssistantMessageData(text="a"))
    )
    c = codec.encode(
        AssistantMessage(seq=2, time=1, data=AssistantMessageData(text="c"))
    )
    with pytest.raises(SessionCorruptError) as info:
        codec.decode_log([a, c], session_id="s")
    assert info.value.offset == 1
    with pytest.raises(SessionCorruptError) as info:
        codec.decode_log([a, b"junk"], session_id="s")
    assert info.value.offset == 1


def _log(codec: EventCodec, *texts: str) -> list[bytes]:
    return [
        codec.encode(UserMessage(seq=i, time=1, data=UserMessageData(text=t)))
        for i, t in enumerate(texts)
    ]


def test_decode_log_keeps_an_ignorable_event_in_the_middle() -> None:
    note = define_event_type("plug/mid", ignorable=True)
    writer = EventCodec(types=[note])
    raws = _log(writer, "a", "b", "c")
    raws[1] = writer.encode(note(seq=1, time=1, data={"k": 1}))
    events = EventCodec().decode_log(raws, session_id="s")
    assert [e.type for e in events] == ["user/message", "plug/mid", "user/message"]
    assert [e.seq for e in events] == [0, 1, 2]


def test_decode_log_names_a_strict_unknown_type_and_a_bad_payload() -> None:
    strict = define_event_type("plug/strict-mid")
    writer = EventCodec(types=[strict])
    raws = _log(writer, "a", "b", "c")
    raws[2] = writer.encode(strict(seq=2, time=1, data={}))
    with pytest.raises(UnknownEventTypeError, match="plug/strict-mid"):
        EventCodec().decode_log(raws, session_id="s")
    raws[2] = b'{"type":"user/message","seq":2,"time":1,"data":{"text":5}}'
    with pytest.raises(SessionCorruptError) as info:
        EventCodec().decode_log(raws, session_id="s")
    assert info.value.offset == 2


def test_decode_log_refuses_an_oversized_stored_event_with_its_offset() -> None:
    codec = EventCodec(max_event_bytes=200)
    raws = _log(EventCodec(), "a", "x" * 500, "c")
    with pytest.raises(SessionCorruptError, match="#1") as info:
        codec.decode_log(raws, session_id="s")
    assert info.value.offset == 1


def test_decode_log_of_an_empty_log_and_of_a_generator() -> None:
    codec = EventCodec()
    assert codec.decode_log([], session_id="s") == []
    raws = _log(codec, "a", "b")
    assert [e.seq for e in codec.decode_log(iter(raws), session_id="s")] == [0, 1]


def test_stored_event_over_the_limit_is_refused_at_load() -> None:
    big = EventCodec().encode(
        UserMessage(seq=0, time=1, data=UserMessageData(text="x" * 500))
    )
    with pytest.raises(EventDecodeError):
        EventCodec(max_event_bytes=100).decode(big)


def test_record_carries_position_type_time_and_bytes() -> None:
    codec = EventCodec()
    event = UserMessage(seq=7, time=99, data=UserMessageData(text="hi"))
    record = codec.record(event)
    assert (record.seq, record.type, record.time) == (7, "user/message", 99)
    assert msgspec.json.decode(record.raw)["data"] == {"text": "hi", "untrusted": False}


def test_a_type_cannot_be_registered_twice() -> None:
    with pytest.raises(ValueError, match="twice"):
        EventCodec(types=[define_event_type("user/message")])


def test_stored_size_reuses_the_last_snapshot_and_encodes_anything_else() -> None:
    codec = EventCodec()
    said = UserMessage(seq=0, time=1, data=UserMessageData(text="hi"))
    other = UserMessage(seq=1, time=2, data=UserMessageData(text="hello"))
    assert codec.stored_size(said) == len(codec.encode(said))
    # What the write-behind left is read, not re-encoded (a stand-in proves it).
    codec.last_snapshot = (said, b"xyz")
    assert codec.stored_size(said) == 3
    assert codec.stored_size(other) == len(codec.encode(other))
    oversized = EventCodec(max_event_bytes=10)
    with pytest.raises(EventTooLargeError):
        oversized.stored_size(other)
