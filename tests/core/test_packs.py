"""Packed records: a streamed reply stored as one record, read back as its events."""

from __future__ import annotations

import base64
import zlib
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from tests.conftest import make_config

from turnkeep import Host, SessionSummary, hookimpl
from turnkeep.codec import EventCodec, EventRecord
from turnkeep.config import as_config
from turnkeep.errors import ConfigurationError, SessionCorruptError, StorageError
from turnkeep.eventreads import last_durable_seq, read_after
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessageData,
    SessionEvent,
    TurnEndData,
    TurnStartData,
    UserMessageData,
)
from turnkeep.packing import pack_batch
from turnkeep.packs import PACK_TYPE, chunk_bytes, expand, expand_all, is_pack
from turnkeep.testing import MemoryPersistence, MemoryStorage

PIECES = ["He", "llo", ", ", "wörld", ' "quoted"\n', "", "\u2603\U0001f600", "\\end"]


class Shared:
    """The memory backend over one storage, optionally without packs."""

    def __init__(self, *, packs: bool = True, lose_acks: int = 0) -> None:
        self.storage = MemoryStorage()
        self.packs = packs
        self.lose_acks = lose_acks

    @hookimpl
    def register_persistence(self, register: Any) -> None:
        register("shared", self.make)

    def make(self, _config: object) -> MemoryPersistence:
        if self.packs:
            backend = Lossy(self.storage)
            backend.lose_acks = self.lose_acks
            return backend
        return Unpacked(self.storage)


class Lossy(MemoryPersistence):
    """Stores each append, then reports the first `lose_acks` as failed."""

    lose_acks: int = 0

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        await super().append(session_id, events, summary=summary)
        if self.lose_acks:
            self.lose_acks -= 1
            raise StorageError("connection reset after commit")


class Unpacked(MemoryPersistence):
    """A backend written before packs: it says nothing about them."""

    stores_packs = False  # pyright: ignore[reportIncompatibleVariableOverride]


def stream(session: Any, pieces: Sequence[str], *, message: str | None) -> None:
    session.append(TurnStartData(turn=1))
    session.append(UserMessageData(text="hi"))
    for piece in pieces:
        session.append(AssistantChunkData(text=piece))
    if message is not None:
        session.append(AssistantMessageData(text=message))
    session.append(TurnEndData(turn=1, status="completed"))


async def run(
    plugin: Shared, pieces: Sequence[str], *, message: str | None, **config: Any
) -> tuple[list[SessionEvent], list[bytes]]:
    settings = make_config(persistence="shared", **config)
    async with Host(settings, plugins=[plugin]) as host:
        session = host.sessions.create("s")
        stream(session, pieces, message=message)
        await session.flush()
        live = list(session.events)
        return live, [host.codec.encode(e) for e in live]


@pytest.mark.asyncio
@pytest.mark.parametrize("joined", [True, False])
async def test_a_streamed_reply_is_one_record_and_loads_back_byte_identical(
    joined: bool,
) -> None:
    plugin = Shared()
    message = "".join(PIECES) if joined else "something else"
    live, live_bytes = await run(plugin, PIECES, message=message)
    stored = plugin.storage.sessions["s"]
    packs = [raw for raw in stored.events if is_pack(raw)]
    assert len(packs) == 1
    # The turn start, the user message, the pack, then what the pack left out.
    assert len(stored.events) == (4 if joined else 5)
    assert expand_all(stored.events) == live_bytes
    assert stored.meta.summary.event_count == len(live)
    assert stored.next_seq == len(live)
    if joined:
        # The reply's text is stored once: in the message the pack carries.
        assert packs[0].count("wörld".encode()) == 1
    async with Host(make_config(persistence="shared"), plugins=[plugin]) as host:
        resumed = await host.sessions.resume("s")
        assert list(resumed.events) == live
        assert [host.codec.encode(e) for e in resumed.events] == live_bytes


@pytest.mark.asyncio
async def test_reads_by_seq_see_each_event_of_a_pack() -> None:
    plugin = Shared()
    _live, live_bytes = await run(plugin, PIECES, message="".join(PIECES))
    backend = MemoryPersistence(plugin.storage)
    assert await last_durable_seq(backend, "s") == len(live_bytes) - 1
    for after in range(-1, len(live_bytes) + 1):
        for limit in (1, 2, 3, 100):
            got = await read_after(backend, "s", after, limit)
            assert got == live_bytes[after + 1 : after + 1 + limit], (after, limit)
    # A backend without `load_after` is read through `load`, packs and all.
    plain = Plain(plugin.storage)
    for after in (-1, 2, 5):
        got = await read_after(plain, "s", after, 4)  # pyright: ignore[reportArgumentType]
        assert got == live_bytes[after + 1 : after + 5]
    assert await last_durable_seq(plain, "s") == len(live_bytes) - 1  # pyright: ignore[reportArgumentType]


class Plain:
    """A backend with only `load` (reads through the fallbacks)."""

    def __init__(self, storage: MemoryStorage) -> None:
        self.inner = MemoryPersistence(storage)

    async def load(self, session_id: str) -> Any:
        return await self.inner.load(session_id)


@pytest.mark.asyncio
async def test_no_packs_for_a_backend_that_does_not_store_them() -> None:
    plugin = Shared(packs=False)
    _live, live_bytes = await run(plugin, PIECES, message="".join(PIECES))
    assert plugin.storage.sessions["s"].events == live_bytes


@pytest.mark.asyncio
async def test_no_packs_in_a_session_of_an_older_format() -> None:
    # A reader of format 2 must keep reading every format-2 session.
    plugin = Shared()
    _live, live_bytes = await run(
        plugin, PIECES, message="".join(PIECES), session_format=2
    )
    stored = plugin.storage.sessions["s"]
    assert stored.meta.header.format_version == 2
    assert stored.events == live_bytes


def test_a_session_format_this_code_does_not_write_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="session_format"):
        as_config({"persistence": "memory", "session_format": 4})
    with pytest.raises(ConfigurationError, match="session_format"):
        as_config({"persistence": "memory", "session_format": 1})


@pytest.mark.asyncio
async def test_a_retried_flush_that_had_landed_inside_a_pack_is_not_stored_twice() -> (
    None
):
    # The first flush lands but reports failure; the retry carries it again
    # with more chunks, which now pack together across its end.
    plugin = Shared(lose_acks=1)
    async with Host(make_config(persistence="shared"), plugins=[plugin]) as host:
        session = host.sessions.create("s")
        session.append(TurnStartData(turn=1))
        for piece in PIECES[:4]:
            session.append(AssistantChunkData(text=piece))
        with pytest.raises(Exception, match="could not be stored"):
            await session.flush()
        for piece in PIECES[4:]:
            session.append(AssistantChunkData(text=piece))
        session.append(AssistantMessageData(text="".join(PIECES)))
        await session.flush()
        live_bytes = [host.codec.encode(e) for e in session.events]
    stored = plugin.storage.sessions["s"]
    assert expand_all(stored.events) == live_bytes
    assert stored.meta.summary.event_count == len(live_bytes)


def records_of(events: Sequence[SessionEvent]) -> list[EventRecord]:
    codec = EventCodec()
    return [codec.record(e) for e in events]


def chunks(
    pieces: Sequence[str], *, start: int = 0, time: int = 1_000
) -> list[SessionEvent]:
    out: list[SessionEvent] = []
    for offset, piece in enumerate(pieces):
        # Times move on unevenly, and once backwards (a clock that was set).
        time += (offset * 37) % 41 - (60 if offset == 3 else 0)
        out.append(
            AssistantChunk(
                seq=start + offset, time=time, data=AssistantChunkData(text=piece)
            )
        )
    return out


def test_chunk_bytes_are_what_the_codec_writes() -> None:
    codec = EventCodec()
    for event in chunks(PIECES):
        assert chunk_bytes(event.seq, event.time, event.data.text) == codec.encode(
            event
        )  # pyright: ignore[reportAttributeAccessIssue]


def test_a_pack_expands_to_the_same_bytes_and_is_smaller() -> None:
    pieces = [f"w{i % 7}" * 2 for i in range(300)]
    events = chunks(pieces)
    records = records_of(events)
    packed = pack_batch(records, events, max_bytes=1 << 24)
    assert len(packed) == 1
    assert (packed[0].type, packed[0].seq, packed[0].span) == (PACK_TYPE, 0, 300)
    assert packed[0].time == events[-1].time
    assert expand(packed[0].raw) == [r.raw for r in records]
    text = sum(len(p) for p in pieces)
    assert len(packed[0].raw) < 2 * text
    assert sum(len(r.raw) for r in records) > 10 * text


def test_a_pack_too_large_for_the_backend_stays_events() -> None:
    events = chunks(PIECES)
    records = records_of(events)
    assert pack_batch(records, events, max_bytes=40) == records


def test_a_lone_chunk_or_a_chunk_bytes_cannot_rebuild_is_not_packed() -> None:
    events = chunks(["a"])
    records = records_of(events)
    assert pack_batch(records, events, max_bytes=1 << 20) == records
    # Bytes other than what the codec writes (a backend-added key, say) stay.
    events = chunks(["a", "b", "c"])
    records = records_of(events)
    odd = EventRecord(
        1, records[1].type, records[1].time, records[1].raw[:-1] + b',"x":1}'
    )
    got = pack_batch([records[0], odd, records[2]], events, max_bytes=1 << 20)
    assert [r.span for r in got] == [1, 1, 1]


def damaged(raw: bytes, field: str, value: object) -> bytes:
    pack = msgspec.json.decode(raw)
    pack["data"][field] = value
    return msgspec.json.encode(pack)


def z_of(values: list[int]) -> str:
    return base64.b64encode(zlib.compress(bytes(values))).decode()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("z", "not base64!"),
        ("z", z_of([1, 1, 0])),  # describes fewer chunks than it covers
        ("z", z_of([0x81])),  # a varint cut short
        ("text", "too short"),
        ("of", "tool/result"),
    ],
)
def test_a_damaged_pack_is_corruption_at_its_seq(field: str, value: object) -> None:
    events = [*chunks(["x"]), *chunks(["ab", "cd", "ef"], start=1)]
    records = records_of(events)
    pack = pack_batch(records[1:], events, max_bytes=1 << 20)
    assert len(pack) == 1
    codec = EventCodec()
    good = [records[0].raw, pack[0].raw]
    assert codec.decode_log(good, session_id="s") == events
    bad = [records[0].raw, damaged(pack[0].raw, field, value)]
    with pytest.raises(SessionCorruptError) as caught:
        codec.decode_log(bad, session_id="s")
    assert caught.value.offset == 1


def test_a_pack_out_of_place_is_corruption() -> None:
    events = [*chunks(["x"] * 5), *chunks(["ab", "cd"], start=5)]
    pack = pack_batch(records_of(events[5:]), events, max_bytes=1 << 20)
    with pytest.raises(SessionCorruptError, match="not contiguous"):
        EventCodec().decode_log([pack[0].raw], session_id="s")


@pytest.mark.asyncio
async def test_flushes_after_a_pack_continue_after_its_last_seq() -> None:
    plugin = Shared()
    async with Host(make_config(persistence="shared"), plugins=[plugin]) as host:
        session = host.sessions.create("s")
        for _turn in range(3):
            stream(session, PIECES, message="".join(PIECES))
            await session.flush()
            assert session.settled
        live_bytes = [host.codec.encode(e) for e in session.events]
    stored = plugin.storage.sessions["s"]
    assert sum(map(is_pack, stored.events)) == 3
    assert expand_all(stored.events) == live_bytes
