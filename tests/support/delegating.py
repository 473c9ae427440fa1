"""A backend that forwards every required `SessionPersistence` method to another.

Test wrappers subclass it and override only what they observe or break. It
has none of the optional methods (`held`, `load_after`, `last_seq`), so a
wrapper is an old-style backend unless it adds them; its `append` takes no
`summary`, so the write-behind stores summaries with `update` through it.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from turnkeep.meta import SessionMeta, SessionSummary
from turnkeep.persistence import (
    EventRecord,
    ListFilter,
    LoadedSession,
    SessionPage,
    SessionPersistence,
)


@attrs.define(eq=False)
class Delegating:
    """Forwards to `inner`."""

    inner: SessionPersistence

    async def create(self, meta: SessionMeta) -> None:
        await self.inner.create(meta)

    async def append(self, session_id: str, events: Sequence[EventRecord]) -> None:
        await self.inner.append(session_id, events)

    async def load(self, session_id: str) -> LoadedSession:
        return await self.inner.load(session_id)

    async def list(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        where: ListFilter | None = None,
    ) -> SessionPage:
        return await self.inner.list(limit=limit, cursor=cursor, where=where)

    async def has(self, session_id: str) -> bool:
        return await self.inner.has(session_id)

    async def delete(self, session_id: str, *, force: bool = False) -> None:
        await self.inner.delete(session_id, force=force)

    async def update(self, session_id: str, summary: SessionSummary) -> None:
        await self.inner.update(session_id, summary)

    async def claim(self, session_id: str, *, steal: bool = False) -> None:
        await self.inner.claim(session_id, steal=steal)

    async def release(self, session_id: str) -> None:
        await self.inner.release(session_id)

    async def aclose(self) -> None:
        await self.inner.aclose()
