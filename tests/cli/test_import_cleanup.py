"""An import that fails after part of it was stored leaves nothing behind.

`turnkeep import` stores the session in one go; when that fails after the
backend took some of it, the half-imported session is removed, and the
removal is a deletion in the store's audit log like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import msgspec
import pytest
from tests.support.delegating import Delegating

from turnkeep import Host, hookimpl
from turnkeep.audit import AuditRecord
from turnkeep.cli import exchange
from turnkeep.cli.runtime import Opened
from turnkeep.errors import StorageError, TurnkeepError
from turnkeep.persistence import EventRecord
from turnkeep_jsonl import JsonlPersistence


@attrs.define(eq=False)
class DiesAfterStoring(Delegating):
    """Stores each flush, then reports the disk gone (the flush landed)."""

    async def append(self, session_id: str, events: Sequence[EventRecord]) -> None:
        await self.inner.append(session_id, events)
        raise StorageError("the disk went away after the write")

    async def record_audit(self, scope: str | None, record: AuditRecord) -> AuditRecord:
        return await self.inner.record_audit(scope, record)  # type: ignore[attr-defined]

    async def audit_records(
        self, scope: str | None, after: int, limit: int
    ) -> list[AuditRecord]:
        return await self.inner.audit_records(scope, after, limit)  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_a_half_imported_session_is_removed_and_the_removal_recorded(
    tmp_path: Path,
) -> None:
    inner = JsonlPersistence(tmp_path / "store")

    class Plugin:
        @hookimpl
        def register_persistence(self, register: Any) -> None:
            register("dies", lambda _config: DiesAfterStoring(inner))

    messages = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
    ]
    async with Host(
        {"persistence": "dies", "plugins": "none"}, plugins=[Plugin()]
    ) as host:
        plan, meta = exchange._plan(
            msgspec.json.encode(messages), "chat.json", host.codec
        )
        opened = Opened(host, host.require_persistence(), "dies")
        with pytest.raises(TurnkeepError):
            await exchange._store(
                opened, "imported", plan, meta, None, exchange._ReplayClock()
            )
        assert not await inner.has("imported")
        [record] = await inner.audit_records(None, 0, 10)
    assert (record.action, record.session_id) == ("deletion", "imported")
    assert "import failed" in record.reason
