"""Reading a stored log by seq, one event per entry, whatever the backend keeps.

Readers that page or follow a session (the CLI's `tail`, the service, the
adapters) ask for events by seq. A backend answers in records, some of which
may be packs standing for several events (`turnkeep.packs`), and older
backends answer only whole logs: this module turns either into the events'
own stored bytes, one per seq.
"""

from __future__ import annotations

from typing import cast

from turnkeep.packs import expand, is_pack, record_first, record_last
from turnkeep.persistence import IncrementalRead, SessionPersistence, check_read_range

__all__ = ["events_after", "last_durable_seq", "read_after"]


async def read_after(
    backend: SessionPersistence, session_id: str, after: int, limit: int
) -> list[bytes]:
    """The stored bytes of the events with seq > `after`, at most `limit`, in order.

    `-1` reads from the start. Uses `backend.load_after` where the backend
    has it (see [load-after]), else a slice of `load`, which reads the whole
    log: a backend written before `load_after` existed keeps working, only
    slower. Packs come back as the events they stand for.

    Raises:
        ValueError: `after` < -1 or `limit` < 1 (nothing was read).
        SessionNotFoundError, SessionCorruptError: as `load_after`.
    """
    check_read_range(after, limit)
    if getattr(backend, "load_after", None) is not None:
        native = cast("IncrementalRead", backend)
        records = await native.load_after(session_id, after, limit)
    else:
        records = (await backend.load(session_id)).events
        if not any(map(is_pack, records)):
            return records[after + 1 : after + 1 + limit]
    return events_after(records, after, limit)


def events_after(records: list[bytes], after: int, limit: int) -> list[bytes]:
    """The events `records` stand for with seq > `after`, at most `limit`.

    `records` are consecutive stored records (packs expanded here).

    Raises:
        EventDecodeError: a record is unreadable.
    """
    if not records:
        return []
    out: list[bytes] = []
    seq = record_first(records[0])
    if seq == after + 1 and not any(map(is_pack, records)):
        return records[:limit]  # one event per record, from `after` + 1 on
    for raw in records:
        if is_pack(raw):
            events = expand(raw)
            seq = record_first(raw)
        else:
            events = [raw]
        for event in events:
            if seq > after:
                out.append(event)
                if len(out) == limit:
                    return out
            seq += 1
    return out


async def last_durable_seq(backend: SessionPersistence, session_id: str) -> int:
    """The last seq of the session's durable records (`-1` for none).

    `backend.last_seq` where it has it, else read from `load`.

    Raises:
        SessionNotFoundError: nothing is stored under this id.
    """
    if getattr(backend, "last_seq", None) is not None:
        return await cast("IncrementalRead", backend).last_seq(session_id)
    records = (await backend.load(session_id)).events
    return record_last(records[-1]) if records else -1
