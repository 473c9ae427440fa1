"""The kit's self-test: the reference backend passes every contract."""

from __future__ import annotations

import msgspec
import pytest

from turnkeep.conformance import MakeBackend, PersistenceContract
from turnkeep.memory import MemoryPersistence, MemoryStorage
from turnkeep.meta import FORMAT_VERSION
from turnkeep.persistence import SessionPersistence


class TestMemoryBackend(PersistenceContract):
    supports_reopen = True
    supports_multiple_processes = True
    supports_format_aging = True
    supports_byte_scan = True
    supports_held = True
    supports_owner_death = True

    @pytest.fixture
    def make_backend(self) -> MakeBackend:
        self.storage = MemoryStorage()
        return lambda: MemoryPersistence(self.storage)

    async def write_newer_format(self, session_id: str) -> None:
        stored = self.storage.sessions[session_id]
        header = msgspec.structs.replace(
            stored.meta.header, format_version=FORMAT_VERSION + 1
        )
        stored.meta = msgspec.structs.replace(stored.meta, header=header)

    async def storage_digest(self) -> bytes:
        return msgspec.json.encode(
            {k: (s.meta, s.events) for k, s in self.storage.sessions.items()}
        )

    async def kill_owner(self, backend: SessionPersistence) -> None:
        # In memory the owner record is the liveness: a dead process's
        # records vanish, as its `flock`s would.
        token = backend._token  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
        for session_id, owner in list(self.storage.owners.items()):
            if owner.owner == token:
                del self.storage.owners[session_id]

    async def stored_bytes(self) -> dict[str, bytes]:
        return {"storage": msgspec.json.encode(self.storage)}
