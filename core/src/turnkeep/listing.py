"""Stored sessions as they stand: a turn a crash cut off shows as `interrupted`.

A session's summary says `active` while one of its turns runs (the loop
writes it at `turn/start` and replaces it at `turn/end`), and keeps saying
so when the process running the turn dies. `list_sessions` pages through
the backend's `list` and asks the backend's `held` about the page's
`active` sessions only, in one batch: one that no live owner holds is
reported `interrupted`. Listing stays as cheap as `list` plus one look per
running session of the page, never one per session of the store, and
nothing is written (the stored status changes when recovery settles the
turn). A backend without `held` cannot tell a crashed owner from a live
one: its sessions keep their stored status.

Filters (`ListFilter`) go to the backend's `list(where=...)`, which applies
them natively (`list_where` filters pages in core for a backend whose `list`
takes no `where`). A filter on the statuses a listing shows is a filter on
stored statuses (`interrupted` and `active` both ask for stored `active`)
followed by the liveness probe, which can drop sessions from a page: such a
page is topped up from the following ones, a bounded number of times, so a
page may come back short, its `next_cursor` still right. `search_titles`
looks for text in the titles of one such page, never more.

Consumed by `turnkeep ls` and `turnkeep show`, `host.sessions.stored`, and
`recover_interrupted`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeAlias

import attrs
import msgspec

from turnkeep.capabilities import filters_natively, probe_held
from turnkeep.listfilter import ListFilter
from turnkeep.meta import SessionMeta, SessionStatus
from turnkeep.persistence import (
    SessionPage,
    SessionPersistence,
)

__all__ = [
    "MAX_TOP_UPS",
    "active_holds",
    "list_sessions",
    "list_where",
    "search_titles",
    "with_liveness",
]

MAX_TOP_UPS: Final = 8
"""How many more `list` calls fill a page that filtering left short."""

_Fetch: TypeAlias = Callable[[int, "str | None"], Awaitable[SessionPage]]
_Keep: TypeAlias = Callable[[SessionMeta], bool]


async def active_holds(
    backend: SessionPersistence, metas: Sequence[SessionMeta]
) -> dict[str, bool] | None:
    """Whether a live owner holds each of `metas` whose status is `active`.

    One `held` call for them all (none when no session is `active`);
    `None` when the backend has no `held` (liveness unknown).
    """
    running = [m.id for m in metas if m.summary.status == "active"]
    return await probe_held(backend, running)


async def with_liveness(
    backend: SessionPersistence, metas: Sequence[SessionMeta]
) -> list[SessionMeta]:
    """`metas`, with each `active` one that no live owner holds `interrupted`."""
    holds = await active_holds(backend, metas)
    if not holds:
        return list(metas)
    return [
        _interrupted(m)
        if m.summary.status == "active" and not holds.get(m.id, True)
        else m
        for m in metas
    ]


async def list_where(
    backend: SessionPersistence,
    *,
    limit: int = 100,
    cursor: str | None = None,
    where: ListFilter | None = None,
) -> SessionPage:
    """`backend.list(where=where)`, also for a backend whose `list` takes no `where`.

    Statuses are stored ones. Such a backend's pages are filtered here,
    topped up from the following pages at most `MAX_TOP_UPS` times (so a
    page may be short while `next_cursor` says more may follow).

    Raises:
        ValueError: `limit` < 1.
        InvalidCursorError: as `list`.
    """
    if where is None or where.is_empty:
        return await backend.list(limit=limit, cursor=cursor)
    if filters_natively(backend):
        return await backend.list(limit=limit, cursor=cursor, where=where)

    async def fetch(count: int, after: str | None) -> SessionPage:
        return await backend.list(limit=count, cursor=after)

    return await _filled(fetch, limit, cursor, where.matches)


async def list_sessions(
    backend: SessionPersistence,
    *,
    limit: int = 100,
    cursor: str | None = None,
    where: ListFilter | None = None,
) -> SessionPage:
    """One page of `backend.list`, with crashed turns shown `interrupted`.

    `where.statuses` are the statuses shown (`interrupted` included); the
    rest of `where` goes to the backend as it is.

    Raises:
        ValueError: `limit` < 1.
        InvalidCursorError: as `list`.
    """
    if where is None or where.statuses is None:
        page = await list_where(backend, limit=limit, cursor=cursor, where=where)
        return SessionPage(
            items=await with_liveness(backend, page.items),
            next_cursor=page.next_cursor,
        )
    shown = where.statuses
    stored = attrs.evolve(where, statuses=_stored_statuses(shown))

    async def fetch(count: int, after: str | None) -> SessionPage:
        page = await list_where(backend, limit=count, cursor=after, where=stored)
        items = await with_liveness(backend, page.items)
        return SessionPage(items=items, next_cursor=page.next_cursor)

    return await _filled(fetch, limit, cursor, lambda m: m.summary.status in shown)


async def search_titles(
    backend: SessionPersistence,
    text: str,
    *,
    limit: int = 100,
    cursor: str | None = None,
    where: ListFilter | None = None,
) -> SessionPage:
    """The sessions of one `list_sessions` page whose title holds `text`.

    Case is ignored, and a session without a title is searched by its first
    prompt. Only the summaries of that one page are looked at, so the cost
    stays one page's whatever the store holds; `next_cursor` continues
    the search after it (a page may hold no match while more may follow).

    Raises:
        ValueError: `limit` < 1.
        InvalidCursorError: as `list`.
    """
    page = await list_sessions(backend, limit=limit, cursor=cursor, where=where)
    needle = text.casefold()
    found = [m for m in page.items if needle in _title(m).casefold()]
    return SessionPage(items=found, next_cursor=page.next_cursor)


async def _filled(
    fetch: _Fetch, limit: int, cursor: str | None, keep: _Keep
) -> SessionPage:
    """Pages from `fetch`, kept by `keep`, up to `limit` sessions.

    Each call asks for the sessions still missing, so no session is read
    past the position the returned cursor stands for.
    """
    if limit <= 0:
        raise ValueError("limit must be positive")
    items: list[SessionMeta] = []
    for _ in range(1 + MAX_TOP_UPS):
        page = await fetch(limit - len(items), cursor)
        items.extend(m for m in page.items if keep(m))
        cursor = page.next_cursor
        if cursor is None or len(items) >= limit:
            break
    return SessionPage(items=items, next_cursor=cursor)


def _stored_statuses(shown: frozenset[SessionStatus]) -> frozenset[SessionStatus]:
    # `interrupted` is shown for stored `active` sessions nobody holds (and
    # for those stored so); `active` only for stored `active` ones.
    if "interrupted" in shown:
        active: frozenset[SessionStatus] = frozenset(("active",))
        return shown | active
    return shown


def _title(meta: SessionMeta) -> str:
    return meta.summary.title or meta.summary.first_prompt or ""


def _interrupted(meta: SessionMeta) -> SessionMeta:
    summary = msgspec.structs.replace(meta.summary, status="interrupted")
    return msgspec.structs.replace(meta, summary=summary)
