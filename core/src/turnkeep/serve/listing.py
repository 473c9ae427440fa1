"""One page of stored sessions, filtered: the one place that knows how.

`list_page` is what every listing of the service goes through. Status and
update-time filters go to the seam (`turnkeep.listing.list_sessions` with a
`ListFilter`): the backend applies them natively, on its index, and a
status asked for is the one shown (`interrupted`: an `active` session no
live process holds). The title search scans the summaries of the one page
it reads (`turnkeep.listing.search_titles`), never the whole store, so a
page of matches may be short, even empty, while `next_cursor` says more
follow.
"""

from __future__ import annotations

import attrs

from turnkeep.listfilter import ListFilter
from turnkeep.listing import list_sessions, search_titles
from turnkeep.meta import SessionStatus
from turnkeep.persistence import SessionPage, SessionPersistence

__all__ = ["SessionQuery", "list_page"]


@attrs.frozen
class SessionQuery:
    """What a listing asks for.

    Attributes:
        statuses: the statuses to keep (`None`: all), as shown.
        updated_after: keep sessions updated after this (epoch ms).
        updated_before: keep sessions updated before this (epoch ms).
        text: keep sessions whose title (or, untitled, first prompt)
            contains this, ignoring case, among one page's summaries.
    """

    statuses: frozenset[SessionStatus] | None = None
    updated_after: int | None = None
    updated_before: int | None = None
    text: str | None = None

    def where(self) -> ListFilter:
        """The seam's filter for everything but the title search.

        Raises:
            InvalidListFilterError: a status or time the seam refuses.
        """
        return ListFilter(
            statuses=self.statuses,
            updated_after=self.updated_after,
            updated_before=self.updated_before,
        )


async def list_page(
    backend: SessionPersistence,
    query: SessionQuery,
    *,
    limit: int,
    cursor: str | None = None,
) -> SessionPage:
    """One page of the sessions `query` keeps, newest first.

    Raises:
        InvalidCursorError: `cursor` is not one this backend gave out.
        InvalidListFilterError: see `SessionQuery.where`.
    """
    where = query.where()
    if query.text:
        return await search_titles(
            backend, query.text, limit=limit, cursor=cursor, where=where
        )
    return await list_sessions(backend, limit=limit, cursor=cursor, where=where)
