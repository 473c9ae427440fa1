"""Contracts of `held`: a live owner is told from a gone one, read-only."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from turnkeep.errors import InvalidSessionIdError, SessionLockedError
from turnkeep.persistence import HoldProbe, SessionPersistence

from ._harness import BackendHarness

__all__ = ["HeldContract"]


def _probe(backend: SessionPersistence) -> HoldProbe:
    assert callable(getattr(backend, "held", None)), (
        "the backend declares supports_held but has no held() method"
    )
    return backend  # pyright: ignore[reportReturnType] - checked just above


class HeldContract(BackendHarness):
    """[held]."""

    @pytest.fixture
    def held_peer(
        self, open_backend: Callable[[], SessionPersistence]
    ) -> SessionPersistence:
        """Another instance over the same storage: another process."""
        return self.another_instance(open_backend, "supports_held")

    @pytest.mark.asyncio
    async def test_a_live_hold_is_seen_by_its_owner_and_by_others(
        self, backend: SessionPersistence, held_peer: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4,))
        assert await _probe(backend).held([meta.id]) == {meta.id: True}
        assert await _probe(held_peer).held([meta.id]) == {meta.id: True}

    @pytest.mark.asyncio
    async def test_released_unknown_and_deleted_sessions_are_not_held(
        self, backend: SessionPersistence, held_peer: SessionPersistence
    ) -> None:
        released, _ = await self.stored(backend, flushes=(4,))
        await backend.release(released.id)
        deleted, _ = await self.stored(backend, flushes=(2,))
        await backend.delete(deleted.id)
        ids = [released.id, deleted.id, "never-stored"]
        expected = dict.fromkeys(ids, False)
        assert await _probe(held_peer).held(ids) == expected
        assert await _probe(backend).held(ids) == expected

    @pytest.mark.asyncio
    async def test_a_closed_owner_holds_nothing(
        self, backend: SessionPersistence, held_peer: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4,))
        await backend.aclose()
        assert await _probe(held_peer).held([meta.id]) == {meta.id: False}

    @pytest.mark.asyncio
    async def test_each_id_is_answered_once_in_one_batch(
        self, backend: SessionPersistence, held_peer: SessionPersistence
    ) -> None:
        mine = [(await self.stored(backend, flushes=(2,)))[0].id for _ in range(3)]
        theirs = [(await self.stored(held_peer, flushes=(2,)))[0].id for _ in range(2)]
        await held_peer.release(theirs[0])
        asked = [*mine, *theirs, mine[0], "missing"]
        answer = await _probe(backend).held(asked)
        assert answer == {
            **dict.fromkeys(mine, True),
            theirs[0]: False,
            theirs[1]: True,
            "missing": False,
        }

    @pytest.mark.asyncio
    async def test_probing_takes_and_disturbs_no_hold(
        self,
        backend: SessionPersistence,
        held_peer: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        held, written = await self.stored(backend, flushes=(4,))
        free, _ = await self.stored(backend, flushes=(2,))
        await backend.release(free.id)
        for _ in range(3):
            await _probe(held_peer).held([held.id, free.id])
        # The owner writes on; a third process is still refused...
        more = self.records(4, 2)
        await backend.append(held.id, more)
        third = open_backend()
        with pytest.raises(SessionLockedError):
            await third.claim(held.id)
        # ...and the probe left no hold behind on the free session.
        await third.claim(free.id)
        assert (await held_peer.load(held.id)).events == self.raws([*written, *more])

    @pytest.mark.asyncio
    async def test_a_takeover_moves_the_hold(
        self, backend: SessionPersistence, held_peer: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4,))
        await held_peer.claim(meta.id, steal=True)
        assert await _probe(backend).held([meta.id]) == {meta.id: True}
        await held_peer.release(meta.id)
        # The fenced first owner holds nothing, though it never released.
        assert await _probe(backend).held([meta.id]) == {meta.id: False}

    @pytest.mark.asyncio
    async def test_a_dead_owner_holds_nothing_and_a_live_one_still_does(
        self,
        backend: SessionPersistence,
        held_peer: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        self.need("supports_owner_death")
        dead, _ = await self.stored(backend, flushes=(4,))
        alive, _ = await self.stored(held_peer, flushes=(4,))
        await self.kill_owner(backend)
        reader = open_backend()
        answer = await _probe(reader).held([dead.id, alive.id])
        assert answer == {dead.id: False, alive.id: True}
        await reader.claim(dead.id)  # and no steal is needed to take it

    @pytest.mark.asyncio
    async def test_an_invalid_id_is_refused(
        self, backend: SessionPersistence, held_peer: SessionPersistence
    ) -> None:
        with pytest.raises(InvalidSessionIdError):
            await _probe(held_peer).held(["fine", "../bad\x00"])
