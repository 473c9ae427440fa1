"""Contracts of `update` and the summary: mutable metadata beside the log."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from turnkeep.codec import EventRecord
from turnkeep.errors import SessionNotFoundError
from turnkeep.meta import SessionSummary
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["MetadataContract"]


class MetadataContract(BackendHarness):
    """Summary updates never touch the log, and the log never drops the summary."""

    @pytest.mark.asyncio
    async def test_update_is_visible_to_load_and_list(
        self, backend: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        summary = SessionSummary(
            updated_at=meta.summary.updated_at + 5,
            title="renamed",
            first_prompt="hello 1",
            status="idle",
        )
        await backend.update(meta.id, summary)
        loaded = await backend.load(meta.id)
        assert loaded.events == self.raws(written)
        assert loaded.meta.summary.title == "renamed"
        assert loaded.meta.summary.first_prompt == "hello 1"
        assert loaded.meta.summary.status == "idle"
        assert loaded.meta.header == meta.header
        (listed,) = (await backend.list()).items
        assert listed.summary.title == "renamed"

    @pytest.mark.asyncio
    async def test_summary_survives_later_appends(
        self, backend: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(2,))
        await backend.update(meta.id, SessionSummary(title="keep me", status="idle"))
        await backend.append(meta.id, self.records(2, 4))
        loaded = await backend.load(meta.id)
        assert loaded.meta.summary.title == "keep me"
        assert loaded.meta.summary.status == "idle"
        assert loaded.meta.summary.event_count == 6

    @pytest.mark.asyncio
    async def test_update_before_the_first_flush_lands_with_it(
        self, backend: SessionPersistence
    ) -> None:
        meta = self.meta()
        await backend.create(meta)
        await backend.update(meta.id, SessionSummary(title="early"))
        assert not await backend.has(meta.id)
        await backend.append(meta.id, self.records(0, 2))
        assert (await backend.load(meta.id)).meta.summary.title == "early"

    @pytest.mark.asyncio
    async def test_updated_at_never_goes_back(
        self, backend: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(2,))
        before = (await backend.load(meta.id)).meta.summary.updated_at
        await backend.update(meta.id, SessionSummary(title="t", updated_at=1))
        after = (await backend.load(meta.id)).meta.summary.updated_at
        assert after >= before

    @pytest.mark.asyncio
    async def test_event_count_is_the_backends_not_the_callers(
        self, backend: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(3,))
        await backend.update(meta.id, SessionSummary(title="t", event_count=999))
        assert (await backend.load(meta.id)).meta.summary.event_count == 3

    # -- the log's numbers: event_count, turns, size ---------------------------

    async def _check_numbers(
        self,
        backend: SessionPersistence,
        session_id: str,
        written: list[EventRecord],
    ) -> None:
        """`load` and `list` report the numbers of exactly `written`."""
        want = self.numbers(written)
        loaded = await backend.load(session_id)
        assert loaded.events == self.raws(written)
        assert self.numbers_of(loaded.meta.summary) == want, "load"
        listed = [m for m in (await backend.list()).items if m.id == session_id]
        assert [self.numbers_of(m.summary) for m in listed] == [want], "list"

    @pytest.mark.asyncio
    async def test_turns_and_size_follow_every_append(
        self, backend: SessionPersistence
    ) -> None:
        meta = self.meta()
        await backend.create(meta)
        written: list[EventRecord] = []
        for count in (4, 3, 5, 1):  # the flush of 3 ends no turn
            batch = self.records(len(written), count)
            await backend.append(meta.id, batch)
            written.extend(batch)
            await self._check_numbers(backend, meta.id, written)
        assert self.numbers(written)[1] == 3

    @pytest.mark.asyncio
    async def test_turns_and_size_are_the_backends_not_the_callers(
        self, backend: SessionPersistence
    ) -> None:
        bogus = SessionSummary(event_count=99, turns=77, size=123_456)
        meta = self.meta()
        meta = msgspec.structs.replace(
            meta,
            summary=msgspec.structs.replace(bogus, updated_at=meta.summary.updated_at),
        )
        await backend.create(meta)
        await backend.update(meta.id, msgspec.structs.replace(bogus, title="early"))
        written = self.records(0, 4)
        await backend.append(meta.id, written)
        await self._check_numbers(backend, meta.id, written)
        await backend.update(meta.id, msgspec.structs.replace(bogus, title="late"))
        await self._check_numbers(backend, meta.id, written)
        more = self.records(4, 4)
        await backend.append(meta.id, more)
        await self._check_numbers(backend, meta.id, [*written, *more])
        assert (await backend.load(meta.id)).meta.summary.title == "late"

    @pytest.mark.asyncio
    async def test_turns_and_size_survive_a_reopen(
        self,
        backend: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        self.need("supports_reopen")
        meta, written = await self.stored(backend, flushes=(4, 3))
        await backend.update(meta.id, SessionSummary(title="kept", turns=5, size=1))
        await backend.aclose()
        reopened = open_backend()
        await self._check_numbers(reopened, meta.id, written)
        await reopened.claim(meta.id)
        more = self.records(7, 5)
        await reopened.append(meta.id, more)
        await self._check_numbers(reopened, meta.id, [*written, *more])
        await reopened.aclose()
        await self._check_numbers(open_backend(), meta.id, [*written, *more])

    @pytest.mark.asyncio
    async def test_turns_and_size_survive_a_takeover(
        self,
        backend: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        self.need("supports_multiple_processes")
        meta, written = await self.stored(backend, flushes=(4, 2))
        second = open_backend()
        await self._check_numbers(second, meta.id, written)  # a live owner's
        await second.claim(meta.id, steal=True)
        theirs = self.records(6, 6, text="new owner")
        await second.append(meta.id, theirs)
        everything = [*written, *theirs]
        await self._check_numbers(second, meta.id, everything)
        await self._check_numbers(open_backend(), meta.id, everything)
        loaded = await backend.load(meta.id)  # the fenced owner reads them too
        assert self.numbers_of(loaded.meta.summary) == self.numbers(everything)

    @pytest.mark.asyncio
    async def test_turns_and_size_leave_a_torn_tail_out(
        self,
        backend: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        self.need("supports_tail_damage")
        meta, written = await self.stored(backend, flushes=(4, 4))
        await self.tear_tail(meta.id)
        await self._check_numbers(backend, meta.id, written)
        more = self.records(8, 3)
        await backend.append(meta.id, more)  # cuts the tail
        await self._check_numbers(backend, meta.id, [*written, *more])
        if self.supports_reopen:
            await backend.aclose()
            await self._check_numbers(open_backend(), meta.id, [*written, *more])

    @pytest.mark.asyncio
    async def test_update_of_an_unknown_session_is_not_found(
        self, backend: SessionPersistence
    ) -> None:
        with pytest.raises(SessionNotFoundError):
            await backend.update("missing", SessionSummary(title="x"))

    @pytest.mark.asyncio
    async def test_update_leaves_the_header_alone(
        self, backend: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(1,))
        await backend.update(
            meta.id, msgspec.structs.replace(meta.summary, title="only the summary")
        )
        assert (await backend.load(meta.id)).meta.header == meta.header
