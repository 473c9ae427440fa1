"""`read_after` / `last_durable_seq`: native when a backend has them, else `load`."""

from __future__ import annotations

import attrs
import pytest

from turnkeep.conformance import BackendHarness
from turnkeep.errors import ConfigurationError, SessionNotFoundError
from turnkeep.eventreads import last_durable_seq, read_after
from turnkeep.memory import MemoryPersistence
from turnkeep.persistence import (
    LoadedSession,
    SessionPersistence,
    validate_backend,
)


@attrs.define(eq=False)
class OnlyLoads:
    """A backend written before `load_after`: it has `load` and nothing newer."""

    inner: MemoryPersistence
    loads: int = 0

    async def load(self, session_id: str) -> LoadedSession:
        self.loads += 1
        return await self.inner.load(session_id)


@attrs.define(eq=False)
class CountsNativeReads(MemoryPersistence):
    native: int = 0

    async def load_after(self, session_id: str, after: int, limit: int) -> list[bytes]:
        self.native += 1
        return await super().load_after(session_id, after, limit)

    async def load(self, session_id: str) -> LoadedSession:
        raise AssertionError("the native read must not load the whole log")


async def _stored(backend: MemoryPersistence, count: int) -> tuple[str, list[bytes]]:
    meta = BackendHarness.meta()
    await backend.create(meta)
    records = BackendHarness.records(0, count)
    await backend.append(meta.id, records)
    return meta.id, BackendHarness.raws(records)


@pytest.mark.asyncio
async def test_the_fallback_slices_load_for_an_older_backend() -> None:
    memory = MemoryPersistence()
    session_id, raws = await _stored(memory, 9)
    old = OnlyLoads(memory)
    backend: SessionPersistence = old  # pyright: ignore[reportAssignmentType]
    assert await read_after(backend, session_id, -1, 4) == raws[:4]
    assert await read_after(backend, session_id, 5, 100) == raws[6:]
    assert await read_after(backend, session_id, 8, 1) == []
    assert await last_durable_seq(backend, session_id) == 8
    assert old.loads == 4
    with pytest.raises(SessionNotFoundError):
        await read_after(backend, "missing", -1, 1)


@pytest.mark.asyncio
async def test_the_native_method_is_used_when_present() -> None:
    native = CountsNativeReads()
    session_id, raws = await _stored(native, 6)
    assert await read_after(native, session_id, 1, 2) == raws[2:4]
    assert await last_durable_seq(native, session_id) == 5
    assert native.native == 1


@pytest.mark.asyncio
async def test_a_bad_range_is_refused_before_any_read() -> None:
    memory = MemoryPersistence()
    old = OnlyLoads(memory)
    backend: SessionPersistence = old  # pyright: ignore[reportAssignmentType]
    for after, limit in ((-2, 1), (0, 0)):
        with pytest.raises(ValueError, match=r"after|limit"):
            await read_after(backend, "anything", after, limit)
    assert old.loads == 0


def test_a_sync_load_after_is_refused_at_activation() -> None:
    class SyncTail(MemoryPersistence):
        def load_after(self, session_id: str, after: int, limit: int) -> list[bytes]:  # pyright: ignore[reportIncompatibleMethodOverride]
            return []

    with pytest.raises(ConfigurationError, match=r"load_after\(\) is not async"):
        validate_backend(SyncTail())
