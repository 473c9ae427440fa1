"""`turnkeep.salvage.read_intact` on a backend without `SessionSalvage`.

The CLI tests damage real JSONL, SQLite and PostgreSQL logs; here the
memory backend shows the two generic paths: undecodable stored bytes end
the prefix (core decodes it), and damage the backend itself refuses is a
typed error saying the backend cannot read past it.
"""

from __future__ import annotations

import pytest

from turnkeep.codec import EventCodec
from turnkeep.errors import SessionCorruptError
from turnkeep.events import TurnStart, TurnStartData
from turnkeep.meta import SessionHeader, SessionMeta
from turnkeep.persistence import LoadedSession
from turnkeep.salvage import read_intact, supports_salvage
from turnkeep.testing import MemoryPersistence


class Garbled(MemoryPersistence):
    """Returns event 2 garbled, or refuses the load as damaged."""

    def __init__(self, *, refuse: bool = False) -> None:
        super().__init__()
        self.refuse = refuse

    async def load(self, session_id: str) -> LoadedSession:
        if self.refuse:
            raise SessionCorruptError("damaged", session_id=session_id, offset=7)
        loaded = await super().load(session_id)
        events = list(loaded.events)
        events[2] = b"{not json"
        return LoadedSession(meta=loaded.meta, events=events)


async def stored(backend: MemoryPersistence) -> list[bytes]:
    codec = EventCodec()
    await backend.create(SessionMeta(header=SessionHeader(id="s")))
    records = [
        codec.record(TurnStart(seq=i, time=i, data=TurnStartData(turn=i)))
        for i in range(5)
    ]
    await backend.append("s", records)
    return [r.raw for r in records]


@pytest.mark.asyncio
async def test_undecodable_bytes_end_the_prefix() -> None:
    backend = Garbled()
    raws = await stored(backend)
    assert not supports_salvage(backend)
    got = await read_intact(backend, "s")
    assert [e.seq for e in got.events] == [0, 1]
    assert got.damage is not None
    assert got.damage.first_seq == 2
    assert got.damage.last_seq == 4
    assert got.damage.lost_bytes == len(b"{not json") + sum(len(r) for r in raws[3:])
    assert "event 2 does not decode" in got.damage.reason


@pytest.mark.asyncio
async def test_an_undamaged_log_reports_no_damage() -> None:
    backend = MemoryPersistence()
    await stored(backend)
    got = await read_intact(backend, "s")
    assert len(got.events) == 5
    assert got.damage is None


@pytest.mark.asyncio
async def test_damage_the_backend_cannot_read_past_is_a_typed_error() -> None:
    backend = Garbled(refuse=True)
    await stored(backend)
    with pytest.raises(SessionCorruptError, match="SessionSalvage") as caught:
        await read_intact(backend, "s")
    assert caught.value.offset == 7
    assert caught.value.session_id == "s"
