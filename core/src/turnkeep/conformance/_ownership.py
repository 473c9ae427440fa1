"""Contracts of the one-writer rule: claims, takeover, fencing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from turnkeep.errors import (
    SessionExistsError,
    SessionFencedError,
    SessionLockedError,
    SessionNotFoundError,
)
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["OwnershipContract"]


class OwnershipContract(BackendHarness):
    """[one-writer]."""

    @pytest.fixture
    def second(
        self, open_backend: Callable[[], SessionPersistence]
    ) -> SessionPersistence:
        """Another instance over the same storage: another process."""
        self.need("supports_multiple_processes")
        return open_backend()

    @pytest.mark.asyncio
    async def test_a_second_owner_is_refused_at_once(
        self, backend: SessionPersistence, second: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        with pytest.raises(SessionLockedError):
            await second.claim(meta.id)
        with pytest.raises(SessionLockedError):
            await second.append(meta.id, self.records(4, 2))
        assert (await backend.load(meta.id)).events == self.raws(written)

    @pytest.mark.asyncio
    async def test_reading_needs_no_ownership(
        self, backend: SessionPersistence, second: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        assert await second.has(meta.id)
        assert (await second.load(meta.id)).events == self.raws(written)
        assert [m.id for m in (await second.list()).items] == [meta.id]
        # ...and reading did not take anything away from the owner.
        more = self.records(4, 2)
        await backend.append(meta.id, more)
        assert (await second.load(meta.id)).events == self.raws([*written, *more])

    @pytest.mark.asyncio
    async def test_takeover_fences_the_old_owner(
        self, backend: SessionPersistence, second: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        await second.claim(meta.id, steal=True)
        theirs = self.records(4, 3, text="new owner")
        await second.append(meta.id, theirs)
        with pytest.raises(SessionFencedError):
            await backend.append(meta.id, self.records(7, 2, text="stale owner"))
        loaded = await second.load(meta.id)
        assert loaded.events == self.raws([*written, *theirs])

    @pytest.mark.asyncio
    async def test_fenced_owner_writes_nothing_even_at_the_right_seq(
        self, backend: SessionPersistence, second: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        await second.claim(meta.id, steal=True)
        with pytest.raises(SessionFencedError):
            await backend.append(meta.id, self.records(4, 2, text="stale"))
        assert (await second.load(meta.id)).events == self.raws(written)

    @pytest.mark.asyncio
    async def test_release_lets_another_owner_in(
        self, backend: SessionPersistence, second: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        await backend.release(meta.id)
        await second.claim(meta.id)
        more = self.records(4, 2)
        await second.append(meta.id, more)
        assert (await backend.load(meta.id)).events == self.raws([*written, *more])

    @pytest.mark.asyncio
    async def test_closing_an_instance_releases_its_sessions(
        self, backend: SessionPersistence, second: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(2,))
        await backend.aclose()
        await second.claim(meta.id)

    @pytest.mark.asyncio
    async def test_creating_an_id_another_owner_is_creating_is_refused(
        self, backend: SessionPersistence, second: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(2,))
        with pytest.raises((SessionExistsError, SessionLockedError)):
            await second.create(self.meta(meta.id))
        assert (await backend.load(meta.id)).events == self.raws(written)

    @pytest.mark.asyncio
    async def test_claim_of_an_unknown_session_is_not_found(
        self, backend: SessionPersistence
    ) -> None:
        with pytest.raises(SessionNotFoundError):
            await backend.claim("missing")

    @pytest.mark.asyncio
    async def test_claiming_twice_is_harmless(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(2,))
        await backend.claim(meta.id)
        await backend.claim(meta.id)
        more = self.records(2, 2)
        await backend.append(meta.id, more)
        assert (await backend.load(meta.id)).events == self.raws([*written, *more])
