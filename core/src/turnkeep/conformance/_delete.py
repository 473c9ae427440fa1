"""Contracts of `delete`: a session and everything it owns go away.

[delete]: deletion is complete and precise, refuses a session another live
owner holds unless forced, and tells a forced-out holder why it was fenced.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import msgspec
import pytest

from turnkeep.errors import (
    SessionDeletedError,
    SessionFencedError,
    SessionHeldError,
    SessionNotFoundError,
)
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["DeleteContract"]


class DeleteContract(BackendHarness):
    """[delete]."""

    @pytest.fixture
    def other(
        self, open_backend: Callable[[], SessionPersistence]
    ) -> SessionPersistence:
        """Another instance over the same storage: another process."""
        self.need("supports_multiple_processes")
        return open_backend()

    @pytest.mark.asyncio
    async def test_deleted_session_is_gone(self, backend: SessionPersistence) -> None:
        meta, _ = await self.stored(backend, flushes=(4, 4))
        await backend.delete(meta.id)
        assert not await backend.has(meta.id)
        with pytest.raises(SessionNotFoundError):
            await backend.load(meta.id)
        assert meta.id not in {m.id for m in (await backend.list()).items}

    @pytest.mark.asyncio
    async def test_delete_touches_no_other_session(
        self, backend: SessionPersistence
    ) -> None:
        a, _ = await self.stored(backend, flushes=(2,))
        b, wb = await self.stored(backend, flushes=(3,))
        await backend.delete(a.id)
        assert (await backend.load(b.id)).events == self.raws(wb)

    @pytest.mark.asyncio
    async def test_delete_of_an_unknown_session_is_not_found(
        self, backend: SessionPersistence
    ) -> None:
        with pytest.raises(SessionNotFoundError):
            await backend.delete("missing")
        with pytest.raises(SessionNotFoundError):
            await backend.delete("missing", force=True)

    @pytest.mark.asyncio
    async def test_an_id_can_be_reused_after_delete(
        self, backend: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4,))
        await backend.delete(meta.id)
        again, written = await self.stored(backend, flushes=(2,), session_id=meta.id)
        assert (await backend.load(again.id)).events == self.raws(written)

    # -- nothing recoverable -------------------------------------------------

    async def places_holding(self, marker: str) -> list[str]:
        """Where in the store (`stored_bytes`) the text `marker` lies."""
        needle = marker.encode()
        return sorted(
            name for name, data in (await self.stored_bytes()).items() if needle in data
        )

    @pytest.mark.asyncio
    async def test_delete_leaves_nothing_of_the_session_in_the_store(
        self,
        backend: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        self.need("supports_byte_scan")
        marker = f"zq{uuid.uuid4().hex}"  # ASCII: the same bytes in any encoding
        kept, kept_written = await self.stored(backend, flushes=(4,))
        # Its id, cwd and creation time are its own too: a catalog that
        # keeps a deleted session's header (a tombstone instead of a
        # rewrite) shows them.
        sid, cwd = f"del-{uuid.uuid4().hex}", f"/work/{uuid.uuid4().hex}"
        meta = self.meta(sid, title=f"title {marker}", cwd=cwd)
        created = meta.header.created_at + 777  # no clock tick ends in 777
        header = msgspec.structs.replace(meta.header, created_at=created)
        meta = msgspec.structs.replace(meta, header=header)
        await backend.create(meta)
        first = msgspec.structs.replace(
            meta.summary, first_prompt=f"prompt {marker}", status="idle"
        )
        await backend.update(meta.id, first)
        written = self.records(0, 4, text=f"event {marker}")
        await backend.append(meta.id, written)
        # A later title: the first one's bytes are what a store keeps freed.
        await backend.update(
            meta.id, msgspec.structs.replace(first, title=f"again {marker}")
        )
        if self.supports_multiple_processes:
            # Let another instance own it for a while (more rows, lines, files).
            await backend.release(meta.id)
            other = open_backend()
            await other.claim(meta.id)
            more = self.records(4, 4, text=f"later {marker}")
            await other.append(meta.id, more)
            await other.release(meta.id)
            await backend.claim(meta.id)
        for needle in (marker, sid, cwd):
            assert await self.places_holding(needle), (
                f"stored_bytes() does not show {needle!r} even before the "
                "delete, so it cannot prove the delete removed it"
            )
        # A plain delete records nothing (`turnkeep.auditing.delete_recorded`
        # would keep the id in the store's deletion log, by design): nothing
        # of the session may stay anywhere.
        await backend.delete(meta.id)
        left = await self.places_holding(marker)
        assert left == [], (
            f"the deleted session's title, first prompt or events are still "
            f"in the store, in: {', '.join(left)}"
        )
        for what, needle in (
            ("id", sid),
            ("cwd", cwd),
            ("created_at", str(created)),
        ):
            left = await self.places_holding(needle)
            assert left == [], (
                f"the deleted session's {what} ({needle}) is still in the "
                f"store, in: {', '.join(left)}"
            )
        assert (await backend.load(kept.id)).events == self.raws(kept_written)
        assert [m.id for m in (await backend.list()).items] == [kept.id]

    # -- a session another owner holds ---------------------------------------

    @pytest.mark.asyncio
    async def test_delete_of_a_session_another_owner_holds_is_refused(
        self, backend: SessionPersistence, other: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        with pytest.raises(SessionHeldError) as refused:
            await other.delete(meta.id)
        assert refused.value.session_id == meta.id
        assert repr(meta.id) in str(refused.value)
        assert "force" in str(refused.value)
        # Nothing changed: the holder keeps writing, everyone still reads it.
        more = self.records(4, 2)
        await backend.append(meta.id, more)
        assert (await other.load(meta.id)).events == self.raws([*written, *more])

    @pytest.mark.asyncio
    async def test_delete_of_a_released_session_needs_no_force(
        self, backend: SessionPersistence, other: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4,))
        await backend.release(meta.id)
        await other.delete(meta.id)
        assert not await backend.has(meta.id)

    @pytest.mark.asyncio
    async def test_forced_delete_tells_the_holder_it_was_deleted(
        self, backend: SessionPersistence, other: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4,))
        await other.delete(meta.id, force=True)
        assert not await other.has(meta.id)
        with pytest.raises(SessionDeletedError) as told:
            await backend.append(meta.id, self.records(4, 2, text="stale holder"))
        assert told.value.session_id == meta.id
        assert "deleted" in str(told.value)
        summary = msgspec.structs.replace(meta.summary, title="stale title")
        with pytest.raises(SessionDeletedError):
            await backend.update(meta.id, summary)
        await backend.release(meta.id)
        # The fenced holder brought nothing back.
        assert not await other.has(meta.id)
        assert meta.id not in {m.id for m in (await other.list()).items}

    @pytest.mark.asyncio
    async def test_a_forced_out_holder_cannot_write_into_a_new_session_of_the_id(
        self, backend: SessionPersistence, other: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4,))
        await other.delete(meta.id, force=True)
        again, written = await self.stored(other, flushes=(4,), session_id=meta.id)
        with pytest.raises(SessionFencedError):
            await backend.append(meta.id, self.records(4, 2, text="stale holder"))
        assert (await other.load(again.id)).events == self.raws(written)
