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

Consumed by `turnkeep ls` and `turnkeep show`, `host.sessions.stored`, and
`recover_interrupted`.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from turnkeep.meta import SessionMeta
from turnkeep.persistence import SessionPage, SessionPersistence, probe_held

__all__ = ["active_holds", "list_sessions", "with_liveness"]


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


async def list_sessions(
    backend: SessionPersistence, *, limit: int = 100, cursor: str | None = None
) -> SessionPage:
    """One page of `backend.list`, with crashed turns shown `interrupted`."""
    page = await backend.list(limit=limit, cursor=cursor)
    return SessionPage(
        items=await with_liveness(backend, page.items), next_cursor=page.next_cursor
    )


def _interrupted(meta: SessionMeta) -> SessionMeta:
    summary = msgspec.structs.replace(meta.summary, status="interrupted")
    return msgspec.structs.replace(meta, summary=summary)
