"""Listing with liveness: crashed turns show as `interrupted`, cheaply.

Instances over one `MemoryStorage` stand for processes; a process's death
is the loss of its owner records (as its `flock`s would vanish).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from tests.support.delegating import Delegating

from turnkeep import Config, Host
from turnkeep.capabilities import probe_held
from turnkeep.conformance import BackendHarness
from turnkeep.errors import ConfigurationError
from turnkeep.listing import list_sessions, with_liveness
from turnkeep.meta import SessionHeader, SessionMeta, SessionStatus, SessionSummary
from turnkeep.persistence import (
    EventRecord,
    SessionPage,
    validate_backend,
)
from turnkeep.testing import MemoryPersistence, MemoryStorage


@attrs.define(eq=False)
class Counting(MemoryPersistence):
    """Counts `held` calls and the ids each was asked about."""

    asked: list[list[str]] = attrs.field(factory=list[list[str]])

    async def held(self, session_ids: Sequence[str]) -> dict[str, bool]:
        self.asked.append(list(session_ids))
        return await super().held(session_ids)


@attrs.define(eq=False)
class OldBackend(Delegating):
    """A backend written before `held`: every method but that one."""

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        await self.inner.append(session_id, events, summary=summary)


_time = iter(range(1_000, 10_000_000, 10))


async def store(
    backend: Any, session_id: str, status: SessionStatus, *, keep: bool = True
) -> None:
    """A stored session with `status`, held by `backend` unless not `keep`."""
    now = next(_time)
    meta = SessionMeta(
        header=SessionHeader(id=session_id, created_at=now),
        summary=SessionSummary(updated_at=now, status=status),
    )
    await backend.create(meta)
    await backend.append(session_id, BackendHarness.records(0, 4))
    if not keep:
        await backend.release(session_id)


def die(storage: MemoryStorage, session_id: str) -> None:
    """The holder's process is gone: its owner record goes with it."""
    del storage.owners[session_id]


def statuses(page: SessionPage) -> dict[str, str]:
    return {m.id: m.summary.status for m in page.items}


@pytest.mark.asyncio
async def test_a_crashed_turn_is_interrupted_and_a_running_one_active() -> None:
    storage = MemoryStorage()
    crashed, alive, reader = (Counting(storage) for _ in range(3))
    await store(crashed, "crashed", "active")
    await store(alive, "running", "active")
    await store(alive, "finished", "idle", keep=False)
    await store(alive, "failed", "failed", keep=False)
    die(storage, "crashed")

    page = await list_sessions(reader)

    assert statuses(page) == {
        "crashed": "interrupted",
        "running": "active",
        "finished": "idle",
        "failed": "failed",
    }
    # Only the running sessions were probed, in one call; nothing was written.
    assert [sorted(a) for a in reader.asked] == [["crashed", "running"]]
    assert (await reader.load("crashed")).meta.summary.status == "active"


@pytest.mark.asyncio
async def test_a_listing_of_n_sessions_probes_only_the_active_ones_once_a_page() -> (
    None
):
    storage = MemoryStorage()
    writer, reader = Counting(storage), Counting(storage)
    active = set[str]()
    for n in range(60):
        running = n % 7 == 0
        await store(writer, f"s{n:02}", "active" if running else "idle", keep=running)
        if running:
            active.add(f"s{n:02}")
    pages = 0
    cursor: str | None = None
    while True:
        page = await list_sessions(reader, limit=25, cursor=cursor)
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert pages == 3
    assert len(reader.asked) == pages  # one batch per page, never per session
    assert sorted(i for batch in reader.asked for i in batch) == sorted(active)


@pytest.mark.asyncio
async def test_a_page_without_running_sessions_is_not_probed() -> None:
    storage = MemoryStorage()
    writer, reader = Counting(storage), Counting(storage)
    await store(writer, "a", "idle", keep=False)
    await store(writer, "b", "closed", keep=False)
    assert statuses(await list_sessions(reader)) == {"a": "idle", "b": "closed"}
    assert reader.asked == []


@pytest.mark.asyncio
async def test_a_backend_without_held_keeps_the_stored_status() -> None:
    storage = MemoryStorage()
    old = OldBackend(MemoryPersistence(storage))
    validate_backend(old)  # still a valid backend
    await store(old, "crashed", "active")
    die(storage, "crashed")
    assert await probe_held(old, ["crashed"]) is None
    assert statuses(await list_sessions(old)) == {"crashed": "active"}
    (meta,) = await with_liveness(old, [(await old.load("crashed")).meta])
    assert meta.summary.status == "active"


def test_a_held_that_is_not_async_is_refused() -> None:
    class SyncHeld(MemoryPersistence):
        def held(self, session_ids: Sequence[str]) -> dict[str, bool]:  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride] - the mistake under test
            return {}

    with pytest.raises(ConfigurationError, match=r"held\(\) is not async"):
        validate_backend(SyncHeld())


@pytest.mark.asyncio
async def test_host_sessions_stored_lists_with_liveness() -> None:
    async with Host(Config(persistence="memory", plugins="none")) as host:
        backend = host.require_persistence()
        assert isinstance(backend, MemoryPersistence)
        other = MemoryPersistence(backend.storage)
        await store(other, "crashed", "active")
        await store(other, "running", "active")
        die(backend.storage, "crashed")
        page = await host.sessions.stored(limit=10)
        assert statuses(page) == {"crashed": "interrupted", "running": "active"}
        await other.aclose()
