"""Contracts of `append`: append-only, the seq check, atomic flushes, lazy creation."""

from __future__ import annotations

import pytest

from turnkeep.codec import EventRecord
from turnkeep.errors import SequenceError, SessionExistsError, SessionNotFoundError
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["AppendContract"]


class AppendContract(BackendHarness):
    """[append-only], [atomic-flush], [lazy]."""

    @pytest.mark.asyncio
    async def test_appended_bytes_load_back_verbatim(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4, 1, 7))
        loaded = await backend.load(meta.id)
        assert loaded.events == self.raws(written)

    @pytest.mark.asyncio
    async def test_reappend_of_a_stored_seq_is_refused_and_writes_nothing(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        again = self.records(2, 4, text="different")
        with pytest.raises(SequenceError) as info:
            await backend.append(meta.id, again)
        assert info.value.expected == 4
        assert info.value.got == 2
        assert (await backend.load(meta.id)).events == self.raws(written)

    @pytest.mark.asyncio
    async def test_full_reappend_is_refused(self, backend: SessionPersistence) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        with pytest.raises(SequenceError):
            await backend.append(meta.id, written)
        assert (await backend.load(meta.id)).events == self.raws(written)

    @pytest.mark.asyncio
    async def test_a_gap_is_refused_and_writes_nothing(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        with pytest.raises(SequenceError) as info:
            await backend.append(meta.id, self.records(5, 2))
        assert info.value.expected == 4
        assert (await backend.load(meta.id)).events == self.raws(written)

    @pytest.mark.asyncio
    async def test_first_append_must_start_at_zero(
        self, backend: SessionPersistence
    ) -> None:
        meta = self.meta()
        await backend.create(meta)
        with pytest.raises(SequenceError):
            await backend.append(meta.id, self.records(1, 3))
        assert not await backend.has(meta.id)

    @pytest.mark.asyncio
    async def test_a_batch_with_a_hole_writes_nothing(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        batch = self.records(4, 3)
        holed: list[EventRecord] = [batch[0], batch[2]]
        with pytest.raises(SequenceError):
            await backend.append(meta.id, holed)
        assert (await backend.load(meta.id)).events == self.raws(written)
        await backend.append(meta.id, batch)  # the real next flush still lands
        assert len((await backend.load(meta.id)).events) == 7

    @pytest.mark.asyncio
    async def test_append_to_an_unknown_session_is_refused(
        self, backend: SessionPersistence
    ) -> None:
        with pytest.raises(SessionNotFoundError):
            await backend.append("never-created", self.records(0, 2))

    @pytest.mark.asyncio
    async def test_an_empty_append_changes_nothing(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(3,))
        await backend.append(meta.id, [])
        assert (await backend.load(meta.id)).events == self.raws(written)

    @pytest.mark.asyncio
    async def test_created_session_without_events_is_invisible(
        self, backend: SessionPersistence
    ) -> None:
        meta = self.meta()
        await backend.create(meta)
        assert not await backend.has(meta.id)
        assert meta.id not in {m.id for m in (await backend.list()).items}
        with pytest.raises(SessionNotFoundError):
            await backend.load(meta.id)

    @pytest.mark.asyncio
    async def test_session_becomes_visible_with_its_first_flush(
        self, backend: SessionPersistence
    ) -> None:
        meta = self.meta()
        await backend.create(meta)
        await backend.append(meta.id, self.records(0, 2))
        assert await backend.has(meta.id)
        assert (await backend.load(meta.id)).meta.header == meta.header

    @pytest.mark.asyncio
    async def test_create_of_a_stored_id_is_refused(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(2,))
        with pytest.raises(SessionExistsError):
            await backend.create(self.meta(meta.id))
        assert (await backend.load(meta.id)).events == self.raws(written)

    @pytest.mark.asyncio
    async def test_large_and_unusual_payloads_round_trip(
        self, backend: SessionPersistence
    ) -> None:
        meta = self.meta()
        await backend.create(meta)
        big = self.records(0, 2, text="x" * 300_000 + ' "quotes" \\ \n\t \u2028 😀')
        await backend.append(meta.id, big)
        assert (await backend.load(meta.id)).events == self.raws(big)

    @pytest.mark.asyncio
    async def test_many_small_flushes_keep_order(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(1,) * 60)
        assert (await backend.load(meta.id)).events == self.raws(written)
