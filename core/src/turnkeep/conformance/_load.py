"""Contracts of `load`: read-only, whole flushes, durable across instances."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from turnkeep.errors import SessionNotFoundError
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["LoadContract"]


class LoadContract(BackendHarness):
    """[durable-ack], read-only load, header round trip."""

    @pytest.mark.asyncio
    async def test_load_of_an_unknown_session_is_not_found(
        self, backend: SessionPersistence
    ) -> None:
        with pytest.raises(SessionNotFoundError):
            await backend.load("no-such-session")
        assert not await backend.has("no-such-session")

    @pytest.mark.asyncio
    async def test_header_round_trips(self, backend: SessionPersistence) -> None:
        meta, _ = await self.stored(backend)
        loaded = await backend.load(meta.id)
        assert loaded.meta.header == meta.header

    @pytest.mark.asyncio
    async def test_load_is_repeatable_and_changes_nothing(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4, 4))
        first = await backend.load(meta.id)
        second = await backend.load(meta.id)
        assert first == second
        more = self.records(8, 2)
        await backend.append(meta.id, more)
        assert (await backend.load(meta.id)).events == self.raws([*written, *more])

    @pytest.mark.asyncio
    async def test_acknowledged_flushes_survive_a_new_instance(
        self,
        backend: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        self.need("supports_reopen")
        meta, written = await self.stored(backend, flushes=(4, 3), title="kept")
        await backend.aclose()
        reopened = open_backend()
        loaded = await reopened.load(meta.id)
        assert loaded.events == self.raws(written)
        assert loaded.meta.header == meta.header
        assert loaded.meta.summary.title == "kept"
        assert loaded.meta.summary.event_count == 7

    @pytest.mark.asyncio
    async def test_a_reopened_session_continues_after_claim(
        self,
        backend: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        self.need("supports_reopen")
        meta, written = await self.stored(backend, flushes=(4,))
        await backend.aclose()
        reopened = open_backend()
        await reopened.claim(meta.id)
        more = self.records(4, 4)
        await reopened.append(meta.id, more)
        assert (await reopened.load(meta.id)).events == self.raws([*written, *more])

    @pytest.mark.asyncio
    async def test_sessions_do_not_mix(self, backend: SessionPersistence) -> None:
        a, wa = await self.stored(backend, flushes=(4, 2))
        b, wb = await self.stored(backend, flushes=(3,))
        more = self.records(6, 1)
        await backend.append(a.id, more)
        assert (await backend.load(b.id)).events == self.raws(wb)
        assert (await backend.load(a.id)).events == self.raws([*wa, *more])
