"""Contracts of cancel requests: another process asks, the owner sees it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from turnkeep.cancelrequest import (
    MAX_REASON_CHARS,
    CancelRequests,
    ask_to_cancel,
    has_cancel_requests,
)
from turnkeep.errors import InvalidSessionIdError, SessionNotFoundError
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["CancelRequestContract"]


def _requests(backend: SessionPersistence) -> CancelRequests:
    assert has_cancel_requests(backend), (
        "the backend declares supports_cancel_requests but has no "
        "request_cancel() and cancel_requested()"
    )
    return backend  # pyright: ignore[reportReturnType] - checked just above


class CancelRequestContract(BackendHarness):
    """[cancel-request]."""

    @pytest.fixture
    def cancel_peer(
        self, open_backend: Callable[[], SessionPersistence]
    ) -> SessionPersistence:
        """Another instance over the same storage: another process."""
        return self.another_instance(open_backend, "supports_cancel_requests")

    @pytest.mark.asyncio
    async def test_a_request_by_another_instance_is_seen_by_the_owner(
        self, backend: SessionPersistence, cancel_peer: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4,))
        owner = _requests(backend)
        assert await owner.cancel_requested(meta.id, 0) is None
        first = await _requests(cancel_peer).request_cancel(meta.id, "stop — ✓")
        assert (first.number, first.reason) == (1, "stop — ✓")
        assert await owner.cancel_requested(meta.id, 0) == first
        assert await owner.cancel_requested(meta.id, 1) is None
        second = await _requests(cancel_peer).request_cancel(meta.id, "")
        assert second.number == 2
        assert await owner.cancel_requested(meta.id, 0) == second
        assert await owner.cancel_requested(meta.id, 1) == second
        assert await owner.cancel_requested(meta.id, 2) is None
        assert await _requests(cancel_peer).cancel_requested(meta.id, 1) == second

    @pytest.mark.asyncio
    async def test_a_request_leaves_the_log_and_the_owner_undisturbed(
        self, backend: SessionPersistence, cancel_peer: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        before = await cancel_peer.load(meta.id)
        await _requests(cancel_peer).request_cancel(meta.id, "stop")
        after = await cancel_peer.load(meta.id)
        assert after.events == before.events == self.raws(written)
        more = self.records(4, 4)
        await backend.append(meta.id, more)  # the owner writes on
        assert (await cancel_peer.load(meta.id)).events == self.raws(written + more)
        assert (await _requests(backend).cancel_requested(meta.id, 0)) is not None

    @pytest.mark.asyncio
    async def test_requests_survive_a_reopen_and_go_with_a_delete(
        self,
        backend: SessionPersistence,
        cancel_peer: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        self.need("supports_reopen")
        meta, _ = await self.stored(backend, flushes=(4,))
        request = await _requests(cancel_peer).request_cancel(meta.id, "stop")
        assert await _requests(open_backend()).cancel_requested(meta.id, 0) == request
        await backend.delete(meta.id)
        with pytest.raises(SessionNotFoundError):
            await _requests(cancel_peer).cancel_requested(meta.id, 0)
        again = open_backend()
        await self.stored(again, flushes=(4,), session_id=meta.id)
        assert await _requests(cancel_peer).cancel_requested(meta.id, 0) is None
        assert (await _requests(cancel_peer).request_cancel(meta.id, "x")).number == 1

    @pytest.mark.asyncio
    async def test_without_a_live_owner_the_answer_says_so_and_nothing_is_kept(
        self, backend: SessionPersistence, cancel_peer: SessionPersistence
    ) -> None:
        self.need("supports_held")
        meta, _ = await self.stored(backend, flushes=(4,))
        answer = await ask_to_cancel(cancel_peer, meta.id, "stop")
        assert answer.owner_alive
        assert answer.request is not None
        assert await _requests(backend).cancel_requested(meta.id, 0) == answer.request
        await backend.release(meta.id)
        answer = await ask_to_cancel(cancel_peer, meta.id, "stop again")
        assert not answer.owner_alive
        assert answer.request is None
        latest = await _requests(cancel_peer).cancel_requested(meta.id, 0)
        assert latest is not None
        assert latest.number == 1

    @pytest.mark.asyncio
    async def test_unknown_and_invalid_ids_and_bad_reasons_are_refused(
        self, backend: SessionPersistence, cancel_peer: SessionPersistence
    ) -> None:
        requests = _requests(cancel_peer)
        with pytest.raises(SessionNotFoundError):
            await requests.request_cancel("never-stored", "stop")
        with pytest.raises(SessionNotFoundError):
            await requests.cancel_requested("never-stored", 0)
        with pytest.raises(SessionNotFoundError):
            await ask_to_cancel(cancel_peer, "never-stored", "stop")
        with pytest.raises(InvalidSessionIdError):
            await requests.request_cancel("../bad\x00", "stop")
        with pytest.raises(InvalidSessionIdError):
            await requests.cancel_requested("../bad\x00", 0)
        meta, _ = await self.stored(backend, flushes=(4,))
        for reason in ("x" * (MAX_REASON_CHARS + 1), 42):
            with pytest.raises(ValueError, match="reason"):
                await requests.request_cancel(meta.id, reason)  # pyright: ignore[reportArgumentType]
        assert await requests.cancel_requested(meta.id, 0) is None
