"""Contracts of `wait_for_commit`: a follower wakes at the next commit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from turnkeep.errors import InvalidSessionIdError, SessionNotFoundError
from turnkeep.follow import CommitWaiter, has_commit_waiter
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["FollowContract"]

_WAIT = 5.0
"""How long a follower waits when a commit should wake it much sooner."""
_PROMPT = 4.0
"""A follower a commit woke returns within this (far more than any poll)."""
_SETTLE = 0.2
"""How long a follower is left waiting before the commit it must hear."""


def _native(backend: SessionPersistence) -> CommitWaiter:
    # The backend's own method, never the polling fallback.
    assert has_commit_waiter(backend), (
        "the backend declares supports_wait_for_commit but has no wait_for_commit()"
    )
    return backend  # pyright: ignore[reportReturnType] - checked just above


class FollowContract(BackendHarness):
    """[wait-for-commit]."""

    @pytest.fixture
    def follower(self, backend: SessionPersistence) -> CommitWaiter:
        """The backend's `wait_for_commit` (skipped for a backend without it)."""
        self.need("supports_wait_for_commit")
        return _native(backend)

    async def _woken(
        self,
        waiter: CommitWaiter,
        session_id: str,
        after: int,
        commit: Callable[[], Awaitable[None]],
    ) -> tuple[int, float]:
        """`waiter`'s answer when `commit` runs while it waits, and how soon."""
        task = asyncio.ensure_future(waiter.wait_for_commit(session_id, after, _WAIT))
        await asyncio.sleep(_SETTLE)
        assert not task.done(), "the follower returned before any commit"
        await commit()
        committed = time.monotonic()
        last = await task
        return last, time.monotonic() - committed

    @pytest.mark.asyncio
    async def test_a_seq_already_past_returns_at_once(
        self, backend: SessionPersistence, follower: CommitWaiter
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4, 3))
        started = time.monotonic()
        assert await follower.wait_for_commit(meta.id, 2, _WAIT) == 6
        assert await follower.wait_for_commit(meta.id, -1, _WAIT) == 6
        assert time.monotonic() - started < _PROMPT

    @pytest.mark.asyncio
    async def test_a_commit_by_another_instance_wakes_the_follower(
        self,
        backend: SessionPersistence,
        follower: CommitWaiter,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        self.need("supports_multiple_processes")
        writer = open_backend()  # another process: the follower owns nothing
        meta, _ = await self.stored(writer, flushes=(4,))
        more = self.records(4, 3)
        last, delay = await self._woken(
            follower, meta.id, 3, lambda: writer.append(meta.id, more)
        )
        assert last == 6, "the follower must answer the flush's last seq"
        assert delay < _PROMPT, f"the follower woke {delay:.2f} s after the commit"

    @pytest.mark.asyncio
    async def test_a_commit_by_the_same_instance_wakes_the_follower(
        self, backend: SessionPersistence, follower: CommitWaiter
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4,))
        more = self.records(4, 1)
        last, delay = await self._woken(
            follower, meta.id, 3, lambda: backend.append(meta.id, more)
        )
        assert last == 4
        assert delay < _PROMPT

    @pytest.mark.asyncio
    async def test_without_a_commit_the_wait_ends_with_the_unchanged_seq(
        self, backend: SessionPersistence, follower: CommitWaiter
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4,))
        for after in (3, 10):
            started = time.monotonic()
            assert await follower.wait_for_commit(meta.id, after, 0.3) == 3
            assert time.monotonic() - started >= 0.25
        assert await follower.wait_for_commit(meta.id, 3, 0) == 3

    @pytest.mark.asyncio
    async def test_a_deleted_session_ends_the_wait(
        self,
        backend: SessionPersistence,
        follower: CommitWaiter,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        writer = open_backend() if self.supports_multiple_processes else backend
        meta, _ = await self.stored(writer, flushes=(4,))
        task = asyncio.ensure_future(follower.wait_for_commit(meta.id, 3, _WAIT))
        await asyncio.sleep(_SETTLE)
        await writer.delete(meta.id)
        deleted = time.monotonic()
        with pytest.raises(SessionNotFoundError):
            await task
        assert time.monotonic() - deleted < _PROMPT

    @pytest.mark.asyncio
    async def test_unknown_and_invalid_ids_and_bad_arguments_are_refused(
        self, backend: SessionPersistence, follower: CommitWaiter
    ) -> None:
        with pytest.raises(SessionNotFoundError):
            await follower.wait_for_commit("never-stored", -1, 0.1)
        with pytest.raises(InvalidSessionIdError):
            await follower.wait_for_commit("../bad\x00", -1, 0.1)
        meta, _ = await self.stored(backend, flushes=(2,))
        for after, within in ((-2, 1.0), (0, -1.0), (0, float("nan"))):
            with pytest.raises(ValueError, match=r"after_seq|within"):
                await follower.wait_for_commit(meta.id, after, within)
