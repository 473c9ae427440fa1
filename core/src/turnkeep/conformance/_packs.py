"""Contracts of packed records: one stored record standing for a seq range."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from turnkeep.capabilities import stores_packs
from turnkeep.codec import EventCodec, EventRecord
from turnkeep.errors import SequenceError
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    AssistantMessage,
    AssistantMessageData,
    SessionEvent,
)
from turnkeep.packing import pack_batch
from turnkeep.persistence import IncrementalRead, SessionPersistence

from ._harness import BackendHarness

__all__ = ["PacksContract"]

_codec = EventCodec()


def streamed(start: int, pieces: int, *, time: int = 1_700_000_000_000) -> EventRecord:
    """One pack of `pieces` chunks and their message, from seq `start`."""
    texts = [f"piece {n} ✓ " for n in range(pieces)]
    events: list[SessionEvent] = [
        AssistantChunk(
            seq=start + n, time=time + 17 * n, data=AssistantChunkData(text=t)
        )
        for n, t in enumerate(texts)
    ]
    events.append(
        AssistantMessage(
            seq=start + pieces,
            time=time + 17 * pieces,
            data=AssistantMessageData(text="".join(texts)),
        )
    )
    # `pack_batch` reads the session's log by seq: seqs before `start` are
    # never looked at, so any events stand there.
    log: list[SessionEvent] = [
        AssistantChunk(seq=n, time=time, data=AssistantChunkData(text=""))
        for n in range(start)
    ]
    packed = pack_batch(
        [_codec.record(e) for e in events], [*log, *events], max_bytes=1 << 24
    )
    assert len(packed) == 1, "the kit's own pack did not pack"
    return packed[0]


class PacksContract(BackendHarness):
    """[packs]: for a backend whose `stores_packs` is true."""

    @pytest.fixture
    def packing(self, backend: SessionPersistence) -> SessionPersistence:
        """The backend (skipped for one that does not store packs)."""
        if not stores_packs(backend):
            pytest.skip("the backend does not store packs (stores_packs is not set)")
        return backend

    async def _with_pack(
        self, backend: SessionPersistence, pieces: int = 30
    ) -> tuple[str, list[EventRecord]]:
        """A session of a turn with a streamed reply: 2 events, a pack, an end."""
        meta = self.meta()
        await backend.create(meta)
        head = self.records(0, 2)
        pack = streamed(2, pieces)
        # A turn end (seq 3 of the kit's records) right after the pack.
        end = [self._renumbered(self.records(3, 1)[0], pack.last + 1)]
        records = [*head, pack, *end]
        await backend.append(meta.id, records)
        return meta.id, records

    @staticmethod
    def _events(records: Sequence[EventRecord]) -> int:
        return records[-1].last + 1

    @pytest.mark.asyncio
    async def test_a_pack_round_trips_and_counts_as_its_events(
        self,
        packing: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        session_id, records = await self._with_pack(packing)
        assert records[2].span == 31
        loaded = await packing.load(session_id)
        assert loaded.events == self.raws(records)
        summary = loaded.meta.summary
        assert summary.event_count == self._events(records)
        assert summary.size == sum(len(r.raw) for r in records)
        assert summary.turns == sum(r.is_turn_end for r in records)
        # The next flush continues after the pack's last seq.
        more = self.records(self._events(records), 4)
        more = [
            self._renumbered(r, self._events(records) + i) for i, r in enumerate(more)
        ]
        await packing.append(session_id, more)
        self.need("supports_reopen")
        again = await open_backend().load(session_id)
        assert again.events == self.raws([*records, *more])
        assert again.meta.summary.event_count == self._events(more)
        listed = {m.id: m for m in (await open_backend().list()).items}
        assert listed[session_id].summary.event_count == self._events(more)

    @staticmethod
    def _renumbered(record: EventRecord, seq: int) -> EventRecord:
        raw = record.raw.replace(b'"seq":%d' % record.seq, b'"seq":%d' % seq, 1)
        return EventRecord(seq, record.type, record.time, raw)

    @pytest.mark.asyncio
    async def test_an_append_inside_or_at_a_pack_is_refused(
        self, packing: SessionPersistence
    ) -> None:
        session_id, records = await self._with_pack(packing)
        before = (await packing.load(session_id)).events
        pack = records[2]
        for seq in (pack.seq, pack.seq + 1, pack.last, records[-1].seq):
            stray = self._renumbered(self.records(0, 1)[0], seq)
            with pytest.raises(SequenceError) as info:
                await packing.append(session_id, [stray])
            assert info.value.expected == self._events(records)
        assert (await packing.load(session_id)).events == before

    @pytest.mark.asyncio
    async def test_a_batch_whose_record_ignores_a_packs_span_is_refused(
        self, packing: SessionPersistence
    ) -> None:
        session_id, records = await self._with_pack(packing)
        before = (await packing.load(session_id)).events
        start = self._events(records)
        pack = streamed(start, 5)
        # The next record claims the seq right after the pack's first.
        wrong = self._renumbered(self.records(0, 1)[0], pack.seq + 1)
        with pytest.raises(SequenceError):
            await packing.append(session_id, [pack, wrong])
        assert (await packing.load(session_id)).events == before

    @pytest.mark.asyncio
    async def test_reads_by_seq_start_at_the_pack_holding_the_seq(
        self, packing: SessionPersistence
    ) -> None:
        self.need("supports_load_after")
        session_id, records = await self._with_pack(packing)
        reader: IncrementalRead = packing  # pyright: ignore[reportAssignmentType]
        pack = records[2]
        raws = self.raws(records)
        assert await reader.last_seq(session_id) == records[-1].last
        assert await reader.load_after(session_id, pack.seq - 1, 10) == raws[2:]
        for after in (pack.seq, pack.seq + 7, pack.last - 1):
            assert await reader.load_after(session_id, after, 10) == raws[2:], after
            assert await reader.load_after(session_id, after, 1) == raws[2:3], after
        assert await reader.load_after(session_id, pack.last, 10) == raws[3:]
        assert await reader.load_after(session_id, records[-1].last, 10) == []

    @pytest.mark.asyncio
    async def test_a_pack_ending_the_log_sets_the_last_seq(
        self, packing: SessionPersistence
    ) -> None:
        meta = self.meta()
        await packing.create(meta)
        head = self.records(0, 2)
        pack = streamed(2, 9)
        await packing.append(meta.id, [*head, pack])
        loaded = await packing.load(meta.id)
        assert loaded.meta.summary.event_count == pack.last + 1
        assert loaded.meta.summary.updated_at >= pack.time
        if self.supports_load_after:
            reader: IncrementalRead = packing  # pyright: ignore[reportAssignmentType]
            assert await reader.last_seq(meta.id) == pack.last
        with pytest.raises(SequenceError) as info:
            await packing.append(meta.id, [self._renumbered(head[0], 3)])
        assert info.value.expected == pack.last + 1

    @pytest.mark.asyncio
    async def test_a_torn_tail_after_a_pack_leaves_it_whole(
        self, packing: SessionPersistence
    ) -> None:
        self.need("supports_tail_damage")
        session_id, records = await self._with_pack(packing)
        start = self._events(records)
        user = self._renumbered(self.records(1, 1)[0], start)
        second = [user, streamed(start + 1, 12)]
        await packing.append(session_id, second)
        await self.tear_tail(session_id)
        whole = [*records, *second]
        loaded = await packing.load(session_id)
        assert loaded.events == self.raws(whole)
        assert loaded.meta.summary.event_count == self._events(whole)
        # The next append cuts the torn tail and goes after the pack.
        third = [self._renumbered(self.records(3, 1)[0], self._events(whole))]
        await packing.append(session_id, third)
        after = await packing.load(session_id)
        assert after.events == self.raws([*whole, *third])
