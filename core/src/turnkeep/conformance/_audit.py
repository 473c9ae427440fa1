"""Contracts of the audit trail: numbered, durable, apart from the log."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import msgspec
import pytest

from turnkeep.audit import (
    MAX_REASON_CHARS,
    AuditLog,
    AuditRecord,
    audit_record,
    has_audit_log,
)
from turnkeep.auditing import delete_recorded, read_trail
from turnkeep.errors import InvalidSessionIdError, SessionNotFoundError
from turnkeep.persistence import SessionPersistence

from ._harness import BackendHarness

__all__ = ["AuditContract"]


def _trail(backend: SessionPersistence) -> AuditLog:
    assert has_audit_log(backend), (
        "the backend declares supports_audit but has no record_audit() and "
        "audit_records()"
    )
    return backend  # pyright: ignore[reportReturnType] - checked just above


def _record(session_id: str | None, reason: str = "why — ✓") -> AuditRecord:
    return audit_record(
        "repair", session_id, reason, detail={"first_seq": 4, "call": "c-1"}
    )


class AuditContract(BackendHarness):
    """[audit]."""

    @pytest.fixture
    def audit_peer(
        self, open_backend: Callable[[], SessionPersistence]
    ) -> SessionPersistence:
        """Another instance over the same storage: another process."""
        return self.another_instance(open_backend, "supports_audit")

    @pytest.mark.asyncio
    async def test_records_are_numbered_per_scope_and_seen_by_another_instance(
        self, backend: SessionPersistence, audit_peer: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4,))
        other, _ = await self.stored(backend, flushes=(4,))
        mine = _trail(backend)
        assert await mine.audit_records(meta.id, 0, 10) == []
        sent = [_record(meta.id, f"r{n}") for n in range(3)]
        got = [await _trail(audit_peer).record_audit(meta.id, r) for r in sent]
        assert [r.number for r in got] == [1, 2, 3]
        assert got == [
            msgspec.structs.replace(r, number=n + 1) for n, r in enumerate(sent)
        ]
        assert await mine.audit_records(meta.id, 0, 10) == got
        assert await mine.audit_records(meta.id, 1, 1) == got[1:2]
        assert await mine.audit_records(meta.id, 3, 10) == []
        assert await mine.audit_records(other.id, 0, 10) == []
        store = await _trail(audit_peer).record_audit(None, _record(None))
        assert store.number == 1
        assert await mine.audit_records(None, 0, 10) == [store]
        assert (
            await _trail(audit_peer).record_audit(other.id, _record(other.id))
        ).number == 1

    @pytest.mark.asyncio
    async def test_racing_recorders_each_get_their_own_number(
        self, backend: SessionPersistence, audit_peer: SessionPersistence
    ) -> None:
        meta, _ = await self.stored(backend, flushes=(4,))
        for scope in (meta.id, None):
            got = await asyncio.gather(
                *(
                    _trail(b).record_audit(scope, _record(scope, f"r{n}.{i}"))
                    for n in range(6)
                    for i, b in enumerate((backend, audit_peer))
                )
            )
            assert sorted(r.number for r in got) == list(range(1, 13))
            stored = await _trail(backend).audit_records(scope, 0, 100)
            assert sorted(stored, key=lambda r: r.reason) == sorted(
                got, key=lambda r: r.reason
            )

    @pytest.mark.asyncio
    async def test_a_record_leaves_the_log_and_the_holder_undisturbed(
        self, backend: SessionPersistence, audit_peer: SessionPersistence
    ) -> None:
        meta, written = await self.stored(backend, flushes=(4,))
        before = await audit_peer.load(meta.id)
        await _trail(audit_peer).record_audit(meta.id, _record(meta.id))
        after = await audit_peer.load(meta.id)
        assert after.events == before.events == self.raws(written)
        assert after.meta == before.meta
        more = self.records(4, 4)
        await backend.append(meta.id, more)  # the holder writes on
        assert (await audit_peer.load(meta.id)).events == self.raws(written + more)
        assert len(await _trail(backend).audit_records(meta.id, 0, 10)) == 1

    @pytest.mark.asyncio
    async def test_records_survive_a_reopen_and_go_with_a_delete(
        self,
        backend: SessionPersistence,
        audit_peer: SessionPersistence,
        open_backend: Callable[[], SessionPersistence],
    ) -> None:
        self.need("supports_reopen")
        meta, _ = await self.stored(backend, flushes=(4,))
        kept = await _trail(audit_peer).record_audit(meta.id, _record(meta.id))
        store = await _trail(audit_peer).record_audit(None, _record(None))
        assert await _trail(open_backend()).audit_records(meta.id, 0, 5) == [kept]
        await backend.delete(meta.id)
        with pytest.raises(SessionNotFoundError):
            await _trail(audit_peer).audit_records(meta.id, 0, 5)
        with pytest.raises(SessionNotFoundError):
            await _trail(audit_peer).record_audit(meta.id, _record(meta.id))
        again = open_backend()
        await self.stored(again, flushes=(4,), session_id=meta.id)
        assert await _trail(audit_peer).audit_records(meta.id, 0, 5) == []
        assert (await _trail(audit_peer).record_audit(meta.id, kept)).number == 1
        assert await _trail(again).audit_records(None, 0, 5) == [store]

    @pytest.mark.asyncio
    async def test_a_recorded_deletion_keeps_the_id_and_reason_not_the_content(
        self, backend: SessionPersistence
    ) -> None:
        self.need("supports_audit")
        marker = f"zq{uuid.uuid4().hex}"
        meta, _ = await self.stored(backend, flushes=(4,), title=f"t {marker}")
        await _trail(backend).record_audit(meta.id, _record(meta.id, marker))
        await backend.release(meta.id)
        record = await delete_recorded(backend, meta.id, "asked by ops")
        assert record is not None
        assert (record.action, record.session_id, record.reason) == (
            "deletion",
            meta.id,
            "asked by ops",
        )
        assert await read_trail(backend, None) == [record]
        assert not await backend.has(meta.id)
        if self.supports_byte_scan:
            found = [
                name
                for name, data in (await self.stored_bytes()).items()
                if marker.encode() in data
            ]
            assert found == [], f"the deleted session's text is still in {found}"

    @pytest.mark.asyncio
    async def test_unknown_and_invalid_scopes_and_bad_records_are_refused(
        self, backend: SessionPersistence
    ) -> None:
        self.need("supports_audit")
        trail = _trail(backend)
        with pytest.raises(SessionNotFoundError):
            await trail.record_audit("never-stored", _record("never-stored"))
        with pytest.raises(SessionNotFoundError):
            await trail.audit_records("never-stored", 0, 5)
        with pytest.raises(InvalidSessionIdError):
            await trail.record_audit("../bad\x00", _record(None))
        with pytest.raises(InvalidSessionIdError):
            await trail.audit_records("../bad\x00", 0, 5)
        meta, _ = await self.stored(backend, flushes=(4,))
        good = _record(meta.id)
        bad = [
            msgspec.structs.replace(good, action="reboot"),
            msgspec.structs.replace(good, reason="x" * (MAX_REASON_CHARS + 1)),
            msgspec.structs.replace(good, detail={"text": "x" * 1000}),
            msgspec.structs.replace(good, detail={f"k{n}": n for n in range(40)}),
        ]
        for record in bad:
            with pytest.raises(ValueError, match="audit"):
                await trail.record_audit(meta.id, record)
        for after, limit in ((-1, 5), (0, 0)):
            with pytest.raises(ValueError, match="must be"):
                await trail.audit_records(meta.id, after, limit)
        assert await trail.audit_records(meta.id, 0, 5) == []
        assert await trail.audit_records(None, 0, 5) == []
