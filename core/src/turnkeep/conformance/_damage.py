"""Contracts for crashes and damage: torn tails vs acknowledged data, versions."""

from __future__ import annotations

import pytest

from turnkeep.errors import SessionCorruptError, UnsupportedFormatError
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["CrashTailContract", "FormatVersionContract"]


class CrashTailContract(BackendHarness):
    """[atomic-flush] under crashes: cut the torn tail, never acknowledged data."""

    @pytest.mark.asyncio
    async def test_a_torn_tail_is_excluded_by_load(
        self, backend: SessionPersistence
    ) -> None:
        self.need("supports_tail_damage")
        meta, written = await self.stored(backend, flushes=(4, 4))
        await self.tear_tail(meta.id)
        assert (await backend.load(meta.id)).events == self.raws(written)

    @pytest.mark.asyncio
    async def test_the_first_append_after_a_torn_tail_continues_cleanly(
        self, backend: SessionPersistence
    ) -> None:
        self.need("supports_tail_damage")
        meta, written = await self.stored(backend, flushes=(4, 4))
        await self.tear_tail(meta.id)
        await backend.load(meta.id)
        more = self.records(8, 3)
        await backend.append(meta.id, more)
        assert (await backend.load(meta.id)).events == self.raws([*written, *more])

    @pytest.mark.asyncio
    async def test_damage_inside_acknowledged_data_is_an_error_not_a_shorter_log(
        self, backend: SessionPersistence
    ) -> None:
        self.need("supports_committed_damage")
        meta, _ = await self.stored(backend, flushes=(4, 4, 4))
        await self.damage_committed(meta.id)
        with pytest.raises(SessionCorruptError) as info:
            await backend.load(meta.id)
        assert info.value.session_id == meta.id

    @pytest.mark.asyncio
    async def test_append_is_refused_on_a_corrupt_session(
        self, backend: SessionPersistence
    ) -> None:
        self.need("supports_committed_damage")
        meta, _ = await self.stored(backend, flushes=(4, 4, 4))
        await self.damage_committed(meta.id)
        with pytest.raises(SessionCorruptError):
            await backend.load(meta.id)
        with pytest.raises(SessionCorruptError):
            await backend.append(meta.id, self.records(12, 2))


class FormatVersionContract(BackendHarness):
    """[format-version]: newer formats are refused without changing a byte."""

    @pytest.mark.asyncio
    async def test_newer_format_is_refused_by_load_and_append(
        self, backend: SessionPersistence
    ) -> None:
        self.need("supports_format_aging")
        meta, _ = await self.stored(backend, flushes=(4, 4))
        await self.write_newer_format(meta.id)
        before = await self.storage_digest()
        with pytest.raises(UnsupportedFormatError):
            await backend.load(meta.id)
        with pytest.raises(UnsupportedFormatError):
            await backend.append(meta.id, self.records(8, 2))
        assert await self.storage_digest() == before
