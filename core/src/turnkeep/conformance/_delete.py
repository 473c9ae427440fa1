"""Contracts of `delete`: a session and everything it owns go away."""

from __future__ import annotations

import pytest

from turnkeep.errors import SessionNotFoundError
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["DeleteContract"]


class DeleteContract(BackendHarness):
    """Deletion is complete and precise."""

    @pytest.mark.asyncio
    async def test_deleted_session_is_gone(self, backend: SessionPersistence) -> None:
        meta, _ = await self.stored(backend, flushes=(4, 4))
        await backend.delete(meta.id)
        assert not await backend.has(meta.id)
        with pytest.raises(SessionNotFoundError):
            await backend.load(meta.id)
        assert meta.id not in {m.id for m in (await backend.list()).items}

    @pytest.mark.asyncio
    async def test_delete_touches_no_other_session(
        self, backend: SessionPersistence
    ) -> None:
        a, _ = await self.stored(backend, flushes=(2,))
        b, wb = await self.stored(backend, flushes=(3,))
        await backend.delete(a.id)
        assert (await backend.load(b.id)).events == self.raws(wb)

    @pytest.mark.asyncio
    async def test_delete_of_an_unknown_session_is_not_found(
        self, backend: SessionPersistence
    ) -> None:
        with pytest.raises(SessionNotFoundError):
            await backend.delete("missing")

    @pytest.mark.asyncio
    async def test_an_id_can_be_reused_after_delete(
        self, backend: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4,))
        await backend.delete(meta.id)
        again, written = await self.stored(backend, flushes=(2,), session_id=meta.id)
        assert (await backend.load(again.id)).events == self.raws(written)
