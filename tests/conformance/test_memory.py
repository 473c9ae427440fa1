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


def test_each_contract_skips_for_its_own_capability_only(
    pytester: pytest.Pytester,
) -> None:
    # The contracts are mixed into one class: a fixture one of them names
    # `peer` would serve the others too, and their tests would skip for a
    # capability that is not theirs. A backend that declares cancel
    # requests and an audit trail but no `held` runs those tests.
    pytester.makepyfile(
        """
        import pytest
        from turnkeep.conformance import MakeBackend, PersistenceContract
        from turnkeep.memory import MemoryPersistence, MemoryStorage

        class TestNoHeldDeclared(PersistenceContract):
            supports_held = False
            supports_cancel_requests = True
            supports_audit = True

            @pytest.fixture
            def make_backend(self) -> MakeBackend:
                storage = MemoryStorage()
                return lambda: MemoryPersistence(storage)
        """
    )
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    result = pytester.runpytest_inprocess(
        "-p", "no:randomly", "-p", "no:xdist", "-k", "record or request", "-rs",
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0, result.stdout.str()
    assert outcomes.get("passed", 0) >= 10, result.stdout.str()
    skips = [line for line in result.outlines if line.startswith("SKIPPED")]
    assert not [s for s in skips if "supports_held" in s], skips
