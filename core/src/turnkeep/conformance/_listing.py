"""Contracts of `list`: metadata only, newest first, complete keyset paging."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from turnkeep.codec import EventRecord
from turnkeep.errors import InvalidCursorError
from turnkeep.meta import SessionMeta, SessionSummary
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["ListContract"]


class ListContract(BackendHarness):
    """[list-metadata-only] (paging and order)."""

    async def _all(self, backend: SessionPersistence, limit: int) -> list[SessionMeta]:
        items: list[SessionMeta] = []
        cursor: str | None = None
        for _ in range(1000):
            page = await backend.list(limit=limit, cursor=cursor)
            assert len(page.items) <= limit, "a page holds at most `limit` sessions"
            items.extend(page.items)
            cursor = page.next_cursor
            if cursor is None:
                return items
        raise AssertionError("paging did not terminate")

    @pytest.mark.asyncio
    async def test_empty_store_lists_nothing(self, backend: SessionPersistence) -> None:
        page = await backend.list()
        assert page.items == []
        assert page.next_cursor is None

    @pytest.mark.asyncio
    async def test_newest_first_with_titles(self, backend: SessionPersistence) -> None:
        ids: list[str] = []
        for n in range(5):
            meta, _ = await self.stored(backend, flushes=(2,), title=f"title {n}")
            ids.append(meta.id)
        # Touch the oldest last: it becomes the newest.
        await backend.append(ids[0], self.records(2, 2))
        page = await backend.list(limit=10)
        listed = [m.id for m in page.items]
        assert set(listed) == set(ids)
        assert listed[0] == ids[0]
        stamps = [m.summary.updated_at for m in page.items]
        assert stamps == sorted(stamps, reverse=True)
        titles = {m.id: m.summary.title for m in page.items}
        assert titles == {i: f"title {n}" for n, i in enumerate(ids)}

    @pytest.mark.parametrize("limit", [1, 2, 3, 7])
    @pytest.mark.asyncio
    async def test_paging_covers_every_session_once(
        self, backend: SessionPersistence, limit: int
    ) -> None:
        ids: set[str] = set()
        for _ in range(7):
            meta, _ = await self.stored(backend, flushes=(1,))
            ids.add(meta.id)
        items = await self._all(backend, limit)
        assert [m.id for m in items].count(next(iter(ids))) == 1
        assert sorted(m.id for m in items) == sorted(ids)
        keys = [(-m.summary.updated_at, m.id) for m in items]
        assert keys == sorted(keys)

    @pytest.mark.asyncio
    async def test_limit_is_respected(self, backend: SessionPersistence) -> None:
        for _ in range(4):
            await self.stored(backend, flushes=(1,))
        page = await backend.list(limit=3)
        assert len(page.items) == 3
        assert page.next_cursor is not None
        rest = await backend.list(limit=3, cursor=page.next_cursor)
        assert len(rest.items) == 1
        assert rest.next_cursor is None

    @pytest.mark.asyncio
    async def test_foreign_cursor_is_refused(self, backend: SessionPersistence) -> None:
        await self.stored(backend, flushes=(1,))
        with pytest.raises(InvalidCursorError):
            await backend.list(cursor="not a cursor ☹")

    @pytest.mark.asyncio
    async def test_listing_reports_durable_event_counts(
        self, backend: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4, 3))
        (item,) = (await backend.list()).items
        assert item.id == meta.id
        assert item.summary.event_count == 7
        assert item.header == meta.header

    @pytest.mark.asyncio
    async def test_listing_reports_turns_and_size(
        self,
        backend: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        logs: dict[str, list[EventRecord]] = {}
        for flushes in ((4, 4), (3,), (4, 1, 6), (2, 2)):
            meta, written = await self.stored(backend, flushes=flushes)
            logs[meta.id] = written
        first, second, *_ = logs
        more = self.records(8, 4)
        await backend.append(first, more)  # listed from the append, not a cache
        logs[first].extend(more)
        await backend.update(second, SessionSummary(title="t", turns=40, size=4))
        want = {sid: self.numbers(written) for sid, written in logs.items()}
        assert len({turns for _, turns, _ in want.values()}) > 1

        def numbers(items: list[SessionMeta]) -> dict[str, tuple[int, int, int]]:
            return {m.id: self.numbers_of(m.summary) for m in items}

        assert numbers(await self._all(backend, 3)) == want
        if self.supports_multiple_processes:  # while the owner holds them
            assert numbers(await self._all(open_backend(), 2)) == want
        if self.supports_reopen:  # once it let them go
            await backend.aclose()
            assert numbers(await self._all(open_backend(), 100)) == want
