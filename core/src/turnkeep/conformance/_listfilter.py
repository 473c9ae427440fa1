"""Contracts of `list(where=...)`: every filter against a reference, paged."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from turnkeep.capabilities import filters_natively
from turnkeep.listfilter import STATUSES, ListFilter
from turnkeep.listing import list_where
from turnkeep.meta import SessionMeta, SessionSummary
from turnkeep.persistence import SessionPage, SessionPersistence

from ._harness import BackendHarness

__all__ = ["ListFilterContract"]

_BASE = 1_900_000_000_000
"""Later than any record's time, so `update` moves `updated_at` there."""
_SESSIONS = 10
_LIMITS = (1, 2, 3, 4, 100)


def _filters() -> list[ListFilter]:
    at = [_BASE + n * 1000 for n in range(_SESSIONS // 2)]
    found = [ListFilter(statuses={s}) for s in STATUSES]
    found += [
        ListFilter(statuses={"active", "failed"}),
        ListFilter(statuses=set()),
        ListFilter(updated_after=at[2]),  # ties on at[2] are excluded
        ListFilter(updated_before=at[2]),
        ListFilter(updated_after=at[1], updated_before=at[3]),
        ListFilter(updated_after=at[1], updated_before=at[2]),  # nothing between
        ListFilter(updated_after=at[2], updated_before=at[1]),  # an empty window
        ListFilter(updated_after=0, updated_before=at[4] + 1),  # everything
        ListFilter(statuses={"idle", "closed"}, updated_after=at[0]),
        ListFilter(statuses={"interrupted"}, updated_before=at[4]),
    ]
    return found


class ListFilterContract(BackendHarness):
    """[list-filter]."""

    async def _populate(self, backend: SessionPersistence) -> list[SessionMeta]:
        """Sessions of every status; each `updated_at` shared by two of them."""
        for n in range(_SESSIONS):
            meta, _ = await self.stored(backend, flushes=(2,), title=f"title {n}")
            summary = SessionSummary(
                title=f"title {n}",
                status=STATUSES[n % len(STATUSES)],
                updated_at=_BASE + (n // 2) * 1000,
            )
            await backend.update(meta.id, summary)
        everything = await self._pages(backend, None, 100)
        assert len(everything) == 1
        assert len(everything[0].items) == _SESSIONS
        return everything[0].items

    async def _list(
        self,
        backend: SessionPersistence,
        where: ListFilter | None,
        limit: int,
        cursor: str | None,
    ) -> SessionPage:
        if not self.supports_list_filter:  # served by core's fallback
            return await list_where(backend, limit=limit, cursor=cursor, where=where)
        assert filters_natively(backend), (
            "the backend declares supports_list_filter but its list() takes no `where`"
        )
        return await backend.list(limit=limit, cursor=cursor, where=where)

    async def _pages(
        self, backend: SessionPersistence, where: ListFilter | None, limit: int
    ) -> list[SessionPage]:
        pages: list[SessionPage] = []
        cursor: str | None = None
        for _ in range(1000):
            page = await self._list(backend, where, limit, cursor)
            assert len(page.items) <= limit, "a page holds at most `limit` sessions"
            pages.append(page)
            cursor = page.next_cursor
            if cursor is None:
                return pages
        raise AssertionError("paging did not terminate")

    @staticmethod
    def _view(items: list[SessionMeta]) -> list[tuple[str, str, int]]:
        return [(m.id, m.summary.status, m.summary.updated_at) for m in items]

    @pytest.mark.asyncio
    async def test_each_filter_keeps_exactly_the_matching_sessions(
        self, backend: SessionPersistence
    ) -> None:
        everything = await self._populate(backend)
        for where in _filters():
            want = [m for m in everything if where.matches(m)]
            for limit in _LIMITS:
                pages = await self._pages(backend, where, limit)
                got = [m for p in pages for m in p.items]
                assert self._view(got) == self._view(want), (where, limit)
                assert got == want, (where, limit)  # whole summaries, as listed

    @pytest.mark.asyncio
    async def test_filtered_pages_are_full_until_the_last(
        self, backend: SessionPersistence
    ) -> None:
        self.need("supports_list_filter")  # core's fallback may return short pages
        everything = await self._populate(backend)
        for where in _filters():
            count = sum(where.matches(m) for m in everything)
            for limit in _LIMITS:
                sizes = [len(p.items) for p in await self._pages(backend, where, limit)]
                full, rest = divmod(count, limit)
                want = [limit] * full + ([rest] if rest or not full else [])
                assert sizes == want, (where, limit)

    @pytest.mark.asyncio
    async def test_filters_see_a_changed_status_at_once(
        self,
        backend: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        everything = await self._populate(backend)
        idle = next(m for m in everything if m.summary.status == "idle")
        changed = SessionSummary(
            title=idle.summary.title,
            status="failed",
            updated_at=idle.summary.updated_at + 1,
        )
        await backend.update(idle.id, changed)
        readers = [backend]
        if self.supports_multiple_processes:
            readers.append(open_backend())
        for reader in readers:
            failed = await self._list(
                reader, ListFilter(statuses={"failed"}), 100, None
            )
            assert idle.id in [m.id for m in failed.items]
            still = await self._list(reader, ListFilter(statuses={"idle"}), 100, None)
            assert idle.id not in [m.id for m in still.items]
            after = ListFilter(updated_after=idle.summary.updated_at)
            newer = await self._list(reader, after, 100, None)
            assert idle.id in [m.id for m in newer.items]

    @pytest.mark.asyncio
    async def test_a_filter_on_an_empty_store_and_a_bad_limit(
        self, backend: SessionPersistence
    ) -> None:
        page = await self._list(backend, ListFilter(statuses={"idle"}), 10, None)
        assert page.items == []
        assert page.next_cursor is None
        with pytest.raises(ValueError, match="limit"):
            await self._list(backend, ListFilter(statuses={"idle"}), 0, None)
