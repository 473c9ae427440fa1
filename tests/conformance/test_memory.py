"""The kit's self-test: the reference backend passes every contract."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import msgspec
import pytest

from turnkeep.backendkit import outcome_unknown
from turnkeep.codec import EventRecord
from turnkeep.conformance import ListFilterContract, MakeBackend, PersistenceContract
from turnkeep.memory import MemoryPersistence, MemoryStorage
from turnkeep.meta import FORMAT_VERSION, SessionSummary
from turnkeep.persistence import SessionPage, SessionPersistence


@attrs.define(eq=False)
class LosesReplies(MemoryPersistence):
    """The reference backend, whose next append to a session can lose its reply.

    What a durable backend must do when a commit's acknowledgement is lost:
    say the outcome is unknown, whether or not the flush landed.
    """

    losing: dict[str, bool] = attrs.field(factory=dict[str, bool])

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        lands = self.losing.pop(session_id, None)
        if lands is None:
            return await super().append(session_id, events, summary=summary)
        if lands:
            await super().append(session_id, events, summary=summary)
        raise outcome_unknown(session_id, events, "the test lost the reply")


class TestMemoryBackend(PersistenceContract):
    supports_reopen = True
    supports_multiple_processes = True
    supports_format_aging = True
    supports_byte_scan = True
    supports_lost_acknowledgement = True
    supports_held = True
    supports_load_after = True
    supports_owner_death = True
    supports_wait_for_commit = True
    supports_cancel_requests = True
    supports_audit = True

    @pytest.fixture
    def make_backend(self) -> MakeBackend:
        self.storage = MemoryStorage()
        return lambda: LosesReplies(self.storage)

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

    async def lose_next_commit_reply(
        self, backend: SessionPersistence, session_id: str, *, lands: bool
    ) -> None:
        assert isinstance(backend, LosesReplies)
        backend.losing[session_id] = lands


class ListsWithoutFilters(MemoryPersistence):
    """The reference backend as written before `list` took `where`."""

    async def list(  # pyright: ignore[reportIncompatibleMethodOverride] - the old signature under test
        self, *, limit: int = 100, cursor: str | None = None
    ) -> SessionPage:
        return await super().list(limit=limit, cursor=cursor)


class TestFiltersInCore(ListFilterContract):
    """A backend without filters is served by core's fallback, as correctly."""

    supports_list_filter = False

    @pytest.fixture
    def make_backend(self) -> MakeBackend:
        storage = MemoryStorage()
        return lambda: ListsWithoutFilters(storage)
