"""Encoding events to their stored bytes and decoding them back.

Core owns the wire format; backends only store and return the bytes. One
`EventCodec` per host holds a typed msgspec encoder and a decoder for the
union of every registered event type, plus the limits of R15 (maximum event
size at append; bounded decoding at load).

Unknown stored types are decoded in a second stage: the envelope with `data`
kept raw. An event marked ignorable becomes an opaque event of a class made
on the fly (so it re-encodes to the same JSON and keeps `seq` contiguous); any
other unknown type refuses the log with `UnknownEventTypeError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any, Final

import attrs
import msgspec

from turnkeep.errors import (
    EventDecodeError,
    EventNotSerializableError,
    EventTooLargeError,
    SessionCorruptError,
    UnknownEventTypeError,
)
from turnkeep.events import (
    VOCABULARY,
    SessionEvent,
    event_type_name,
    make_event_class,
)
from turnkeep.lossless import Check, checks_for
from turnkeep.meta import TURN_END_TYPE
from turnkeep.packs import PACK_PREFIX, unpack_events

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "TURN_END_PREFIX",
    "TYPE_PREFIX",
    "EventCodec",
    "EventRecord",
    "count_turn_ends",
]

DEFAULT_MAX_EVENT_BYTES: Final = 16 * 1024 * 1024
"""Default ceiling on one encoded event (16 MiB)."""

TYPE_PREFIX: Final = b'{"type":"'
"""How every event's bytes start: the codec writes the `type` key first."""

TURN_END_PREFIX: Final = b'{"type":"%b"' % TURN_END_TYPE.encode()
"""How a `turn/end` event's bytes start (`turnkeep.backendkit` counts by it)."""


class EventRecord(msgspec.Struct, frozen=True, gc=False):
    """An event as backends see it: its position, type, time and exact bytes.

    `raw` is the complete encoded event (`{"type", "seq", "time", "data"}`),
    produced once by core when the event was appended. Backends store it
    verbatim and hand it back from `load`; they never re-encode it. A *pack*
    (`span` > 1) is one record standing for the seqs `seq`..`last` (a run of
    streamed chunks, `turnkeep.packs`): backends key it on `seq`, count it
    as `span` events and store its bytes just as opaquely; `time` is that of
    its last event.
    """

    seq: int
    type: str
    time: int
    raw: bytes
    span: int = 1
    """How many seqs the record stands for: 1 for an event, more for a pack
    (`turnkeep.packs`), which stands for seqs `seq` to `last`."""

    @property
    def last(self) -> int:
        """The last seq this record stands for."""
        return self.seq + self.span - 1

    @property
    def is_turn_end(self) -> bool:
        """Whether this record ends a turn (counts in `SessionSummary.turns`).

        Backends store or count this flag rather than matching `type`
        against the vocabulary themselves.
        """
        return self.type == TURN_END_TYPE


_type: Final = attrgetter("type")


def count_turn_ends(records: Iterable[EventRecord]) -> int:
    """How many of `records` are `turn/end` events (`SessionSummary.turns`)."""
    return list(map(_type, records)).count(TURN_END_TYPE)  # C-level passes


class _Envelope(msgspec.Struct, gc=False):
    type: str
    seq: int
    time: int
    data: msgspec.Raw = msgspec.Raw(b"null")
    ignorable: bool = False


_envelope_decoder: Final = msgspec.json.Decoder(_Envelope)


@attrs.define(eq=False)
class EventCodec:
    """Encodes and decodes the events of one host's registered types.

    Args:
        types: event classes beyond the built-in vocabulary (from the
            `register_event_types` hook).
        max_event_bytes: the largest encoded event accepted at append.
    """

    types: Sequence[type[SessionEvent]] = ()
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    _by_name: dict[str, type[SessionEvent]] = attrs.field(init=False, repr=False)
    _encoder: msgspec.json.Encoder = attrs.field(init=False, repr=False)
    encode_unchecked: Callable[[object], bytes] = attrs.field(init=False, repr=False)
    """msgspec's encoder, bare: no size check, raw msgspec errors."""
    _decoder: msgspec.json.Decoder[Any] = attrs.field(init=False, repr=False)
    _opaque: dict[str, type[SessionEvent]] = attrs.field(
        init=False, factory=dict[str, type[SessionEvent]], repr=False
    )
    kinds: dict[type, type[SessionEvent]] = attrs.field(
        init=False, factory=dict[type, type[SessionEvent]], repr=False
    )
    """Payload class -> the event class it belongs to, for the payload classes
    that name exactly one registered type (updated in place: sessions keep a
    reference)."""
    checks: dict[type, Check] = attrs.field(
        init=False, factory=dict[type, Check], repr=False
    )
    """Event class -> its lossless check (`turnkeep.lossless`), for the classes
    whose payload has `Any`-typed parts (updated in place, like `kinds`)."""
    last_snapshot: tuple[SessionEvent, bytes] | None = attrs.field(
        init=False, default=None, repr=False
    )
    """The event the write-behind encoded last, with its bytes (`stored_size`
    reads it instead of encoding the event a second time)."""

    def __attrs_post_init__(self) -> None:
        if self.max_event_bytes <= 0:
            raise ValueError("max_event_bytes must be positive")
        self._encoder = msgspec.json.Encoder()
        self.encode_unchecked = self._encoder.encode
        self.set_types(self.types)

    def set_types(self, types: Sequence[type[SessionEvent]]) -> None:
        """Replace the extra (plugin) event types and rebuild the decoder.

        Raises:
            ValueError: two classes share a tag, or one reuses a built-in tag.
        """
        by_name: dict[str, type[SessionEvent]] = {}
        for cls in (*VOCABULARY, *types):
            name = event_type_name(cls)
            if name in by_name and by_name[name] is not cls:
                raise ValueError(f"event type {name!r} is registered twice")
            by_name[name] = cls
        self.types = tuple(types)
        self._by_name = by_name
        kinds = _payload_kinds(by_name.values())
        self.kinds.clear()
        self.kinds.update(kinds)
        self.checks.clear()
        self.checks.update(checks_for(by_name.values()))
        self._opaque = {}
        union: Any = _union(by_name.values())
        self._decoder = msgspec.json.Decoder(union)

    @property
    def known_types(self) -> frozenset[str]:
        """The wire tags this codec decodes into typed events."""
        return frozenset(self._by_name)

    def encode(self, event: SessionEvent) -> bytes:
        """Return the stored bytes of `event`.

        Raises:
            EventNotSerializableError: `data` holds something JSON cannot.
            EventTooLargeError: the encoding exceeds `max_event_bytes`.
        """
        try:
            raw = self._encoder.encode(event)
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise EventNotSerializableError(
                f"event {event.type!r} (seq {event.seq}) cannot be stored: its "
                f"data is not JSON-serialisable ({exc})",
                event_type=event.type,
            ) from exc
        if len(raw) > self.max_event_bytes:
            raise EventTooLargeError(
                f"event {event.type!r} (seq {event.seq}) is {len(raw)} bytes "
                f"encoded, over the limit of {self.max_event_bytes}; store large "
                "content elsewhere and reference it, or raise max_event_bytes",
                event_type=event.type,
            )
        return raw

    def stored_size(self, event: SessionEvent) -> int:
        """The size of `event` encoded (its bytes as stored).

        The last event the write-behind snapshotted (usually the one just
        appended) is not encoded again.

        Raises:
            EventNotSerializableError, EventTooLargeError: as `encode`.
        """
        last = self.last_snapshot
        if last is not None and last[0] is event:
            return len(last[1])
        return len(self.encode(event))

    def snapshot(self, event: SessionEvent) -> bytes:
        """`encode`, inlined for the hot path: it runs for every appended event."""
        try:
            raw = self.encode_unchecked(event)
        except (TypeError, ValueError, OverflowError, RecursionError):
            self.encode(event)  # raises the typed error with its message
            raise
        if len(raw) > self.max_event_bytes:
            self.encode(event)  # raises EventTooLargeError
        return raw

    def record(self, event: SessionEvent) -> EventRecord:
        """Snapshot `event` as the record a backend stores (see `encode`)."""
        return EventRecord(event.seq, event.type, event.time, self.snapshot(event))

    def decode(self, raw: bytes) -> SessionEvent:
        """Decode one stored event.

        Raises:
            UnknownEventTypeError: the type is unknown and not ignorable.
            EventDecodeError: the bytes are not a valid event.
        """
        if len(raw) > self.max_event_bytes:
            raise EventDecodeError(
                f"stored event of {len(raw)} bytes exceeds max_event_bytes "
                f"({self.max_event_bytes})"
            )
        try:
            return self._decoder.decode(raw)
        except msgspec.ValidationError as exc:
            return self._decode_unknown(raw, exc)
        except msgspec.DecodeError as exc:
            raise EventDecodeError(f"stored event is not valid JSON: {exc}") from exc
        except RecursionError as exc:
            raise EventDecodeError("stored event is nested too deeply") from exc

    def decode_log(
        self, raws: Iterable[bytes], *, session_id: str, start: int = 0
    ) -> list[SessionEvent]:
        """Decode stored records and check `seq` is contiguous from `start`.

        A pack (`turnkeep.packs`) becomes the events it stands for.

        Raises:
            SessionCorruptError: a record fails to decode or is out of place;
                `offset` is the seq where the first bad one stands.
            UnknownEventTypeError: see `decode`.
        """
        events: list[SessionEvent] = []
        append = events.append
        # `decode`, inlined for whole logs (a 100k-event load spends most of
        # its time here); anything unusual takes `decode` for its errors.
        fast = self._decoder.decode
        limit = self.max_event_bytes
        index = start
        for raw in raws:
            if raw.startswith(PACK_PREFIX):
                unpacked = self._unpack_at(raw, index, session_id)
                events.extend(unpacked)
                index += len(unpacked)
                continue
            if len(raw) > limit:
                event = self._decode_at(raw, index, session_id)
            else:
                try:
                    event = fast(raw)
                except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
                    event = self._decode_at(raw, index, session_id)
            if event.seq != index:
                raise _not_contiguous(session_id, index, event.seq)
            append(event)
            index += 1
        return events

    def _unpack_at(self, raw: bytes, index: int, session_id: str) -> list[SessionEvent]:
        try:
            unpacked = unpack_events(raw, self.decode)
        except UnknownEventTypeError:
            raise
        except EventDecodeError as exc:
            raise SessionCorruptError(
                f"session {session_id!r}: the record at seq {index} is unreadable "
                f"({exc})",
                session_id=session_id,
                offset=index,
            ) from exc
        if unpacked[0].seq != index:
            raise _not_contiguous(session_id, index, unpacked[0].seq)
        return unpacked

    def _decode_at(self, raw: bytes, index: int, session_id: str) -> SessionEvent:
        try:
            return self.decode(raw)
        except UnknownEventTypeError:
            raise
        except EventDecodeError as exc:
            raise SessionCorruptError(
                f"session {session_id!r}: event #{index} is unreadable ({exc})",
                session_id=session_id,
                offset=index,
            ) from exc

    def _decode_unknown(
        self, raw: bytes, cause: msgspec.ValidationError
    ) -> SessionEvent:
        try:
            env = _envelope_decoder.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise EventDecodeError(f"stored event is malformed: {cause}") from exc
        if env.type in self._by_name:
            # A known type whose payload does not match its schema.
            raise EventDecodeError(
                f"stored {env.type!r} event (seq {env.seq}) does not match its "
                f"schema: {cause}"
            ) from cause
        if not env.ignorable:
            raise UnknownEventTypeError(
                f"stored event type {env.type!r} (seq {env.seq}) is unknown and "
                "not marked ignorable; install the plugin that defines it"
            )
        cls = self._opaque.get(env.type)
        if cls is None:
            cls = make_event_class(env.type, msgspec.Raw, ignorable=True)
            self._opaque[env.type] = cls
        return cls(seq=env.seq, time=env.time, data=env.data)


def _not_contiguous(session_id: str, index: int, seq: int) -> SessionCorruptError:
    return SessionCorruptError(
        f"session {session_id!r}: event #{index} carries seq {seq}; the log is "
        "not contiguous",
        session_id=session_id,
        offset=index,
    )


def _payload_kinds(
    classes: Iterable[type[SessionEvent]],
) -> dict[type, type[SessionEvent]]:
    owners: dict[type, list[type[SessionEvent]]] = {}
    for cls in classes:
        data = next(f.type for f in msgspec.structs.fields(cls) if f.name == "data")
        if isinstance(data, type) and data not in _SHARED_PAYLOADS:
            owners.setdefault(data, []).append(cls)
    # A payload class shared by several types names none of them.
    return {data: found[0] for data, found in owners.items() if len(found) == 1}


_SHARED_PAYLOADS: Final = frozenset(
    {object, dict, list, str, int, float, bool, bytes, msgspec.Raw}
)
"""Classes too general to name an event type, even if only one uses them."""


def _union(classes: Iterable[type[SessionEvent]]) -> Any:
    result: Any = None
    for cls in classes:
        result = cls if result is None else result | cls
    return result
