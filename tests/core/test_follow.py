"""`turnkeep.follow`: the native wait where a backend has one, a poll where not."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import attrs
import pytest
from tests.support.delegating import Delegating
from tests.support.waiting import eventually

from turnkeep.conformance import BackendHarness
from turnkeep.errors import ConfigurationError, SessionNotFoundError
from turnkeep.follow import has_commit_waiter, poll_for_commit, wait_for_commit
from turnkeep.meta import SessionSummary
from turnkeep.persistence import EventRecord, LoadedSession, validate_backend
from turnkeep.testing import MemoryPersistence, MemoryStorage


@attrs.define(eq=False)
class CountingLoads(Delegating):
    """A backend without `wait_for_commit` or `last_seq`, counting its loads."""

    loads: int = 0

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        await self.inner.append(session_id, events, summary=summary)

    async def load(self, session_id: str) -> LoadedSession:
        self.loads += 1
        return await super().load(session_id)


async def _stored(backend: MemoryPersistence, count: int) -> str:
    meta = BackendHarness.meta()
    await backend.create(meta)
    await backend.append(meta.id, BackendHarness.records(0, count))
    return meta.id


@pytest.mark.asyncio
async def test_a_backend_without_it_is_polled() -> None:
    storage = MemoryStorage()
    writer, old = MemoryPersistence(storage), CountingLoads(MemoryPersistence(storage))
    assert not has_commit_waiter(old)
    assert has_commit_waiter(writer)
    sid = await _stored(writer, 4)
    assert await wait_for_commit(old, sid, 1, 5.0) == 3  # already past: at once
    started = time.monotonic()
    assert await wait_for_commit(old, sid, 3, 0.2) == 3  # no commit: unchanged
    assert time.monotonic() - started >= 0.15
    waiting = asyncio.ensure_future(wait_for_commit(old, sid, 3, 10.0))
    await asyncio.sleep(0.15)
    assert not waiting.done()
    await writer.append(sid, BackendHarness.records(4, 2))
    assert await asyncio.wait_for(waiting, 5.0) == 5
    assert old.loads > 3  # it asked again and again (`load`: it has no `last_seq`)


@pytest.mark.asyncio
async def test_the_poll_interval_is_the_callers() -> None:
    storage = MemoryStorage()
    writer, old = MemoryPersistence(storage), CountingLoads(MemoryPersistence(storage))
    sid = await _stored(writer, 2)
    # A commit after its third look is seen at a later one: three pauses of
    # the caller's interval at least (not the default's, not a busy loop). A
    # busy machine makes that later, never sooner; a count of looks in a
    # fixed time would come short there.
    loop = asyncio.get_running_loop()
    started = loop.time()
    polling = asyncio.ensure_future(poll_for_commit(old, sid, 1, 30.0, interval=0.1))
    await eventually(lambda: old.loads >= 3, what="three looks", within=10.0)
    await writer.append(sid, BackendHarness.records(2, 1))
    assert await asyncio.wait_for(polling, 10.0) == 2
    assert loop.time() - started >= 0.29


@pytest.mark.asyncio
async def test_bad_arguments_and_unknown_sessions_are_refused() -> None:
    backend = MemoryPersistence()
    old = CountingLoads(backend)
    sid = await _stored(backend, 2)
    for waiter in (backend, old):
        for after, within in ((-2, 1.0), (0, -0.5), (0, float("inf"))):
            with pytest.raises(ValueError, match=r"after_seq|within"):
                await wait_for_commit(waiter, sid, after, within)
        with pytest.raises(SessionNotFoundError):
            await wait_for_commit(waiter, "never-stored", -1, 0.1)


def test_a_wait_for_commit_that_is_not_async_is_refused() -> None:
    class SyncWait(MemoryPersistence):
        def wait_for_commit(  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride] - the mistake under test
            self, session_id: str, after_seq: int, within: float
        ) -> int:
            return after_seq

    with pytest.raises(ConfigurationError, match=r"wait_for_commit\(\) is not async"):
        validate_backend(SyncWait())
