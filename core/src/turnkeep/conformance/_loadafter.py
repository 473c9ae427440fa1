"""Contracts of `load_after` and `last_seq`: a log's tail, read incrementally."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from turnkeep.errors import (
    InvalidSessionIdError,
    SessionCorruptError,
    SessionNotFoundError,
)
from turnkeep.persistence import IncrementalRead, SessionPersistence

from ._harness import BackendHarness

__all__ = ["LoadAfterContract"]


def _native(backend: SessionPersistence) -> IncrementalRead:
    # The native methods, never the `read_after` fallback, which would pass
    # whatever the backend does.
    for method in ("load_after", "last_seq"):
        assert callable(getattr(backend, method, None)), (
            f"the backend declares supports_load_after but has no {method}() method"
        )
    return backend  # pyright: ignore[reportReturnType] - checked just above


class LoadAfterContract(BackendHarness):
    """[load-after]."""

    @pytest.fixture
    def reader(self, backend: SessionPersistence) -> IncrementalRead:
        """The backend's incremental read (skipped for a backend without it)."""
        self.need("supports_load_after")
        return _native(backend)

    @pytest.mark.asyncio
    async def test_every_range_is_the_matching_slice_of_load(
        self, backend: SessionPersistence, reader: IncrementalRead
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4, 3, 5))
        raws = self.raws(written)
        assert (await backend.load(meta.id)).events == raws
        for after in (-1, 0, 2, 3, 6, 10):
            for limit in (1, 2, 5, 100):
                got = await reader.load_after(meta.id, after, limit)
                assert got == raws[after + 1 : after + 1 + limit], (after, limit)

    @pytest.mark.asyncio
    async def test_after_the_end_is_empty_and_last_seq_is_the_last_record(
        self, backend: SessionPersistence, reader: IncrementalRead
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4, 4))
        assert await reader.last_seq(meta.id) == 7
        assert await reader.load_after(meta.id, 7, 10) == []
        assert await reader.load_after(meta.id, 50, 10) == []

    @pytest.mark.asyncio
    async def test_new_flushes_are_seen_by_this_and_other_instances(
        self,
        backend: SessionPersistence,
        reader: IncrementalRead,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        self.need("supports_reopen")
        meta, written = await self.stored(backend, flushes=(4,))
        other = _native(open_backend())
        assert await other.last_seq(meta.id) == 3
        more = self.records(4, 3)
        await backend.append(meta.id, more)
        assert await reader.last_seq(meta.id) == 6
        assert await other.last_seq(meta.id) == 6
        assert await other.load_after(meta.id, 3, 10) == self.raws(more)
        assert await reader.load_after(meta.id, 2, 2) == self.raws(
            [written[3], more[0]]
        )

    @pytest.mark.asyncio
    async def test_a_torn_tail_is_never_returned(
        self, backend: SessionPersistence, reader: IncrementalRead
    ) -> None:
        self.need("supports_tail_damage")
        meta, written = await self.stored(backend, flushes=(4, 4))
        await self.tear_tail(meta.id)
        assert await reader.last_seq(meta.id) == 7
        assert await reader.load_after(meta.id, 5, 100) == self.raws(written[6:])
        assert await reader.load_after(meta.id, 7, 100) == []
        assert await reader.load_after(meta.id, -1, 100) == self.raws(written)

    @pytest.mark.asyncio
    async def test_damage_in_what_is_read_is_an_error_not_a_shorter_answer(
        self, backend: SessionPersistence, reader: IncrementalRead
    ) -> None:
        self.need("supports_committed_damage")
        meta, _ = await self.stored(backend, flushes=(4, 4, 4))
        await self.damage_committed(meta.id)
        with pytest.raises(SessionCorruptError) as info:
            await reader.load_after(meta.id, -1, 100)
        assert info.value.session_id == meta.id

    @pytest.mark.asyncio
    async def test_unknown_unflushed_and_invalid_ids_and_bad_ranges_are_refused(
        self, backend: SessionPersistence, reader: IncrementalRead
    ) -> None:
        with pytest.raises(SessionNotFoundError):
            await reader.load_after("never-stored", -1, 10)
        with pytest.raises(SessionNotFoundError):
            await reader.last_seq("never-stored")
        pending = self.meta()
        await backend.create(pending)  # lazy: nothing is stored yet
        with pytest.raises(SessionNotFoundError):
            await reader.last_seq(pending.id)
        with pytest.raises(InvalidSessionIdError):
            await reader.load_after("../bad\x00", -1, 10)
        meta, _ = await self.stored(backend, flushes=(2,))
        for after, limit in ((-2, 10), (0, 0), (0, -1)):
            with pytest.raises(ValueError, match=r"after|limit"):
                await reader.load_after(meta.id, after, limit)
