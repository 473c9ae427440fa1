"""Salvage: reading the intact part of a log whose acknowledged data is damaged.

`load` refuses a session with damage inside acknowledged data
(`SessionCorruptError`), and rightly: a shorter history must never pass for
the whole one. Salvage is the explicit, reported way past it: `read_intact`
returns the events before the first damaged record, what is known about
what was lost, and never changes the store. `turnkeep repair --salvage`
writes them to a new session and keeps the damaged original.

`SessionSalvage` is an optional backend protocol (implemented by
`turnkeep-jsonl` and `turnkeep-sqlite`): `read_intact` reads past the damage
the backend itself detects (a bad checksum or commit line, a missing row).
Damage only core can see (stored bytes that do not decode, a seq out of
place) is found here, for every backend, by decoding the prefix; for a
backend without the protocol that is all salvage can do.
"""

from __future__ import annotations

from typing import Protocol, cast, runtime_checkable

import msgspec

from turnkeep.codec import EventCodec
from turnkeep.errors import (
    EventDecodeError,
    SessionCorruptError,
    UnknownEventTypeError,
)
from turnkeep.events import SessionEvent
from turnkeep.meta import SessionMeta
from turnkeep.packs import is_pack, unpack_events
from turnkeep.persistence import SessionPersistence

__all__ = [
    "Damage",
    "IntactLog",
    "SalvagedLog",
    "SessionSalvage",
    "read_intact",
    "supports_salvage",
]


class Damage(msgspec.Struct, frozen=True, kw_only=True):
    """What a damaged log lost after its intact prefix.

    Attributes:
        first_seq: the first event not salvaged (= the prefix's length).
        last_seq: the last event known to have been acknowledged (from
            later commit lines, the stored event count), when known.
        lost_bytes: how many stored bytes follow the prefix, when known.
        offset: where the first damaged record is (a byte offset for files,
            a seq for databases).
        first_flush: the first flush not salvaged (file logs number them).
        last_flush: the last flush known to have been acknowledged.
        reason: what is wrong, for a person.
    """

    first_seq: int
    last_seq: int | None = None
    lost_bytes: int | None = None
    offset: int | None = None
    first_flush: int | None = None
    last_flush: int | None = None
    reason: str


class IntactLog(msgspec.Struct, frozen=True, kw_only=True):
    """A session's metadata and its events up to the first damage.

    Attributes:
        meta: the header and summary as stored (title, status ...).
        events: each intact event's stored bytes, in seq order from 0.
        damage: what was lost; `None` when nothing is damaged.
    """

    meta: SessionMeta
    events: list[bytes]
    damage: Damage | None = None


class SalvagedLog(msgspec.Struct, frozen=True, kw_only=True):
    """`read_intact`'s answer: the intact prefix, decoded."""

    meta: SessionMeta
    events: list[SessionEvent]
    damage: Damage | None = None


@runtime_checkable
class SessionSalvage(Protocol):
    """Optional backend method: read a damaged log's intact prefix."""

    async def read_intact(self, session_id: str) -> IntactLog:
        """The session's events before the first damaged record. Read-only.

        The prefix ends on a whole flush where the backend records flushes.

        Raises:
            SessionNotFoundError: nothing is stored under this id.
            SessionCorruptError: not even the header or summary is readable.
            UnsupportedFormatError: the stored format is newer than the code.
        """
        ...


def supports_salvage(backend: object) -> bool:
    """Whether `backend` implements `SessionSalvage`."""
    return isinstance(backend, SessionSalvage)


async def read_intact(
    backend: SessionPersistence, session_id: str, *, codec: EventCodec | None = None
) -> SalvagedLog:
    """The intact, decodable prefix of a stored session, and what was lost.

    Never changes the store.

    Raises:
        SessionNotFoundError: nothing is stored under this id.
        SessionCorruptError: the backend found damage and cannot read past it
            (it does not implement `SessionSalvage`), or the header itself
            is damaged.
        UnsupportedFormatError: the stored format is newer than the code.
        UnknownEventTypeError: an intact event is of a type no plugin
            registered (load that plugin; it is not damage).
    """
    codec = codec if codec is not None else EventCodec()
    if supports_salvage(backend):
        intact = await cast("SessionSalvage", backend).read_intact(session_id)
    else:
        try:
            loaded = await backend.load(session_id)
        except SessionCorruptError as exc:
            raise SessionCorruptError(
                f"{exc}; the {type(backend).__qualname__} backend cannot read "
                "the intact part of a damaged log (it does not implement "
                "turnkeep.salvage.SessionSalvage)",
                session_id=session_id,
                offset=exc.offset,
            ) from exc
        intact = IntactLog(meta=loaded.meta, events=loaded.events)
    events: list[SessionEvent] = []
    for position, raw in enumerate(intact.events):
        index = len(events)  # the seq this record must start at
        try:
            got = (
                unpack_events(raw, codec.decode)
                if is_pack(raw)
                else [codec.decode(raw)]
            )
        except UnknownEventTypeError:
            raise  # a plugin is missing, not damage: load it and salvage again
        except EventDecodeError as exc:
            why = f"event {index} does not decode ({exc})"
        else:
            if got[0].seq == index:
                events.extend(got)
                continue
            why = f"event {index} carries seq {got[0].seq}"
        return SalvagedLog(
            meta=intact.meta,
            events=events,
            damage=_undecodable(intact, position, index, why),
        )
    return SalvagedLog(meta=intact.meta, events=events, damage=intact.damage)


def _undecodable(intact: IntactLog, position: int, index: int, why: str) -> Damage:
    cut = sum(len(r) for r in intact.events[position:])
    last = (
        max(intact.meta.summary.event_count, index + len(intact.events) - position) - 1
    )
    earlier = intact.damage
    lost_bytes: int | None = cut
    if earlier is not None:
        last = max(last, earlier.last_seq or last)
        lost_bytes = None if earlier.lost_bytes is None else cut + earlier.lost_bytes
        why = f"{why}; then {earlier.reason}"
    return Damage(
        first_seq=index,
        last_seq=last,
        lost_bytes=lost_bytes,
        offset=index,
        reason=why,
    )
