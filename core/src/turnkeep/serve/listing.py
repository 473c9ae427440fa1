"""One page of stored sessions, filtered: the only place that knows how.

`list_page` is what every listing of the service goes through. The seam's
`list` takes no filters yet, so it reads one backend page of `limit`
summaries (with crashed turns shown `interrupted`, `turnkeep.listing`) and
keeps those that match here. A filtered page can therefore hold fewer
than `limit` sessions, even none, while `next_cursor` says more follow; a
client keeps paging. Pages are newest first, so a page reaching back past
`updated_after` is the last one. When the seam's `list` filters natively,
this function hands `status` and the time bounds to it and keeps the title
search, which scans the summaries of the one page it read, here.
"""

from __future__ import annotations

import attrs

from turnkeep.listing import with_liveness
from turnkeep.meta import SessionMeta
from turnkeep.persistence import SessionPage, SessionPersistence

__all__ = ["ListFilter", "Listed", "list_page"]


@attrs.frozen
class ListFilter:
    """What a listing keeps.

    Attributes:
        statuses: the statuses to keep (`None`: all), as shown: a turn no
            live process holds counts as `interrupted`.
        updated_after: keep sessions updated at or after this (epoch ms).
        updated_before: keep sessions updated before this (epoch ms).
        text: keep sessions whose title (or, untitled, first prompt)
            contains this, ignoring case.
    """

    statuses: frozenset[str] | None = None
    updated_after: int | None = None
    updated_before: int | None = None
    text: str | None = None

    def matches(self, meta: SessionMeta) -> bool:
        """Whether `meta` is kept."""
        summary = meta.summary
        if self.statuses is not None and summary.status not in self.statuses:
            return False
        if self.updated_after is not None and summary.updated_at < self.updated_after:
            return False
        if (
            self.updated_before is not None
            and summary.updated_at >= self.updated_before
        ):
            return False
        if self.text:
            shown = summary.title or summary.first_prompt or ""
            if self.text.casefold() not in shown.casefold():
                return False
        return True


@attrs.frozen
class Listed:
    """A filtered page and how many summaries were read for it."""

    page: SessionPage
    scanned: int


async def list_page(
    backend: SessionPersistence,
    where: ListFilter,
    *,
    limit: int,
    cursor: str | None = None,
) -> Listed:
    """One page of the sessions `where` keeps, newest first.

    Raises:
        InvalidCursorError: `cursor` is not one this backend gave out.
    """
    page = await backend.list(limit=limit, cursor=cursor)
    items = await with_liveness(backend, page.items)
    next_cursor = page.next_cursor
    if (
        where.updated_after is not None
        and items
        and items[-1].summary.updated_at < where.updated_after
    ):
        next_cursor = None  # newest first: every later page is older still
    kept = [m for m in items if where.matches(m)]
    return Listed(SessionPage(items=kept, next_cursor=next_cursor), len(items))
