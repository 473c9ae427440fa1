"""Contracts of `update` and the summary: mutable metadata beside the log."""

from __future__ import annotations

import msgspec
import pytest

from turnkeep.errors import SessionNotFoundError
from turnkeep.meta import SessionSummary
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["MetadataContract"]


class MetadataContract(BackendHarness):
    """Summary updates never touch the log, and the log never drops the summary."""

    @pytest.mark.asyncio
    async def test_update_is_visible_to_load_and_list(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        summary = SessionSummary(
            updated_at=meta.summary.updated_at + 5,
            title="renamed",
            first_prompt="hello 1",
            status="idle",
        )
        await backend.update(meta.id, summary)
        loaded = await backend.load(meta.id)
        assert loaded.events == self.raws(written)
        assert loaded.meta.summary.title == "renamed"
        assert loaded.meta.summary.first_prompt == "hello 1"
        assert loaded.meta.summary.status == "idle"
        assert loaded.meta.header == meta.header
        (listed,) = (await backend.list()).items
        assert listed.summary.title == "renamed"

    @pytest.mark.asyncio
    async def test_summary_survives_later_appends(
        self, backend: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(2,))
        await backend.update(meta.id, SessionSummary(title="keep me", status="idle"))
        await backend.append(meta.id, self.records(2, 4))
        loaded = await backend.load(meta.id)
        assert loaded.meta.summary.title == "keep me"
        assert loaded.meta.summary.status == "idle"
        assert loaded.meta.summary.event_count == 6

    @pytest.mark.asyncio
    async def test_update_before_the_first_flush_lands_with_it(
        self, backend: SessionPersistence
    ) -> None:
        meta = self.meta()
        await backend.create(meta)
        await backend.update(meta.id, SessionSummary(title="early"))
        assert not await backend.has(meta.id)
        await backend.append(meta.id, self.records(0, 2))
        assert (await backend.load(meta.id)).meta.summary.title == "early"

    @pytest.mark.asyncio
    async def test_updated_at_never_goes_back(
        self, backend: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(2,))
        before = (await backend.load(meta.id)).meta.summary.updated_at
        await backend.update(meta.id, SessionSummary(title="t", updated_at=1))
        after = (await backend.load(meta.id)).meta.summary.updated_at
        assert after >= before

    @pytest.mark.asyncio
    async def test_event_count_is_the_backends_not_the_callers(
        self, backend: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(3,))
        await backend.update(meta.id, SessionSummary(title="t", event_count=999))
        assert (await backend.load(meta.id)).meta.summary.event_count == 3

    @pytest.mark.asyncio
    async def test_update_of_an_unknown_session_is_not_found(
        self, backend: SessionPersistence
    ) -> None:
        with pytest.raises(SessionNotFoundError):
            await backend.update("missing", SessionSummary(title="x"))

    @pytest.mark.asyncio
    async def test_update_leaves_the_header_alone(
        self, backend: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(1,))
        await backend.update(
            meta.id, msgspec.structs.replace(meta.summary, title="only the summary")
        )
        assert (await backend.load(meta.id)).meta.header == meta.header
