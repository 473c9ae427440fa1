"""Contracts of a flush whose acknowledgement was lost: [unknown-outcome]."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from turnkeep.errors import FlushOutcomeUnknownError, SequenceError, TurnkeepError
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["UnknownOutcomeContract"]

_LANDS = pytest.mark.parametrize("lands", [True, False], ids=["landed", "not-landed"])


class UnknownOutcomeContract(BackendHarness):
    """[unknown-outcome]: undecided is reported as undecided, and settles.

    Needs `supports_lost_acknowledgement` (and `lose_next_commit_reply`).
    """

    @_LANDS
    @pytest.mark.asyncio
    async def test_a_lost_acknowledgement_is_an_unknown_outcome(
        self, backend: SessionPersistence, lands: bool
    ) -> None:
        self.need("supports_lost_acknowledgement")
        meta, _ = await self.stored(backend, flushes=(4,))
        await self.lose_next_commit_reply(backend, meta.id, lands=lands)
        # Never "not written" (a caller would store the events elsewhere),
        # even when it was not: the backend could not tell.
        with pytest.raises(FlushOutcomeUnknownError) as info:
            await backend.append(meta.id, self.records(4, 3))
        assert info.value.session_id == meta.id
        assert (info.value.first_seq, info.value.last_seq) == (4, 6)

    @_LANDS
    @pytest.mark.asyncio
    async def test_an_unknown_outcome_is_settled_by_a_later_append(
        self,
        backend: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
        lands: bool,
    ) -> None:
        self.need("supports_lost_acknowledgement")
        self.need("supports_multiple_processes")
        meta, written = await self.stored(backend, flushes=(4,))
        batch = self.records(4, 3)
        await self.lose_next_commit_reply(backend, meta.id, lands=lands)
        with pytest.raises(TurnkeepError):  # which error: the test above
            await backend.append(meta.id, batch)
        # The same instance's retry lands, says it had landed, or refuses
        # (a writer that stops after such a failure): never stores it twice.
        retry: BaseException | None = None
        try:
            await backend.append(meta.id, batch)
        except TurnkeepError as exc:
            retry = exc
        if isinstance(retry, SequenceError):
            assert lands, "a retry said a flush had landed that had not"
            assert retry.expected == 7
        elif retry is None:
            assert not lands, "a retry stored a flush that had landed once more"
        stored = lands or retry is None
        # A new owner (a resume elsewhere) finds it once or not at all, and
        # the same records settle it there.
        other = open_backend()
        await other.claim(meta.id, steal=True)
        expected = [*written, *batch] if stored else written
        assert (await other.load(meta.id)).events == self.raws(expected)
        if stored:
            with pytest.raises(SequenceError) as info:
                await other.append(meta.id, batch)
            assert info.value.expected == 7
        else:
            await other.append(meta.id, batch)
        assert (await other.load(meta.id)).events == self.raws([*written, *batch])
