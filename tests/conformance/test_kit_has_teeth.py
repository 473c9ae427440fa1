"""The kit fails deliberately broken backends (run in a child pytest)."""

from __future__ import annotations

import textwrap

import pytest

BROKEN = textwrap.dedent(
    '''
    import msgspec
    import pytest

    from turnkeep.conformance import (
        AppendContract, CrashTailContract, DeleteContract, ListContract,
        MetadataContract,
    )
    from turnkeep.memory import MemoryPersistence, MemoryStorage
    from turnkeep.persistence import SessionPage


    class MergesReappends(MemoryPersistence):
        """Drops records it already has instead of refusing the append."""

        async def append(self, session_id, events):
            stored = self.storage.sessions.get(session_id)
            have = len(stored.events) if stored else 0
            events = [r for r in events if r.seq >= have]
            await super().append(session_id, events)


    class ShortensOnDamage(MemoryPersistence):
        """Returns the readable prefix when acknowledged data is damaged."""

        damaged: set = set()

        async def load(self, session_id):
            loaded = await super().load(session_id)
            if session_id in self.damaged:
                return msgspec.structs.replace(loaded, events=loaded.events[:4])
            return loaded


    class ForgetsPagination(MemoryPersistence):
        """Lists everything in one page, whatever the limit and cursor."""

        async def list(self, *, limit=100, cursor=None):
            page = await super().list(limit=10_000)
            return SessionPage(items=page.items, next_cursor=None)


    class LosesSummaryOnAppend(MemoryPersistence):
        """Rewrites the summary from scratch on every append."""

        async def append(self, session_id, events):
            await super().append(session_id, events)
            stored = self.storage.sessions.get(session_id)
            if stored is not None:
                fresh = msgspec.structs.replace(
                    stored.meta.summary, title=None, status="active", first_prompt=None
                )
                stored.meta = msgspec.structs.replace(stored.meta, summary=fresh)


    class TakesCallersNumbers(MemoryPersistence):
        """Keeps the turns and size `update` is given instead of the log's."""

        async def update(self, session_id, summary):
            await super().update(session_id, summary)
            stored = self.storage.sessions.get(session_id)
            if stored is not None:
                fresh = msgspec.structs.replace(
                    stored.meta.summary, turns=summary.turns, size=summary.size
                )
                stored.meta = msgspec.structs.replace(stored.meta, summary=fresh)


    class ListsWithoutNumbers(MemoryPersistence):
        """Lists from an index that has no turns or size columns."""

        async def list(self, *, limit=100, cursor=None):
            page = await super().list(limit=limit, cursor=cursor)
            items = [
                msgspec.structs.replace(
                    m, summary=msgspec.structs.replace(m.summary, turns=0, size=0)
                )
                for m in page.items
            ]
            return SessionPage(items=items, next_cursor=page.next_cursor)


    class DeletesUnderAHolder(MemoryPersistence):
        """Deletes a session another owner holds, as if always forced."""

        async def delete(self, session_id, *, force=False):
            await super().delete(session_id, force=True)


    class FencesTheDeletedHolderGenerically(MemoryPersistence):
        """A forced-out holder hears only that it was fenced, not why."""

        async def delete(self, session_id, *, force=False):
            await super().delete(session_id, force=force)
            self.storage.deleted.clear()


    class KeepsDeletedText(MemoryPersistence):
        """Drops a deleted session from its index but keeps its record around."""

        trash = []

        async def delete(self, session_id, *, force=False):
            kept = self.storage.sessions.get(session_id)
            await super().delete(session_id, force=force)
            KeepsDeletedText.trash.append(kept)


    class TestKeepsDeletedText(DeleteContract):
        supports_byte_scan = True

        @pytest.fixture
        def make_backend(self):
            self.storage = MemoryStorage()
            return lambda: KeepsDeletedText(self.storage)

        async def stored_bytes(self):
            return {
                "sessions": msgspec.json.encode(self.storage),
                "trash": msgspec.json.encode(KeepsDeletedText.trash),
            }


    class TestDeletesUnderAHolder(DeleteContract):
        @pytest.fixture
        def make_backend(self):
            storage = MemoryStorage()
            return lambda: DeletesUnderAHolder(storage)


    class TestFencesTheDeletedHolderGenerically(DeleteContract):
        @pytest.fixture
        def make_backend(self):
            storage = MemoryStorage()
            return lambda: FencesTheDeletedHolderGenerically(storage)


    class TestMergesReappends(AppendContract):
        @pytest.fixture
        def make_backend(self):
            storage = MemoryStorage()
            return lambda: MergesReappends(storage)


    class TestShortensOnDamage(CrashTailContract):
        supports_committed_damage = True

        @pytest.fixture
        def make_backend(self):
            storage = MemoryStorage()
            return lambda: ShortensOnDamage(storage)

        async def damage_committed(self, session_id):
            ShortensOnDamage.damaged.add(session_id)


    class TestForgetsPagination(ListContract):
        @pytest.fixture
        def make_backend(self):
            storage = MemoryStorage()
            return lambda: ForgetsPagination(storage)


    class TestLosesSummaryOnAppend(MetadataContract):
        @pytest.fixture
        def make_backend(self):
            storage = MemoryStorage()
            return lambda: LosesSummaryOnAppend(storage)


    class TestTakesCallersNumbers(MetadataContract):
        @pytest.fixture
        def make_backend(self):
            storage = MemoryStorage()
            return lambda: TakesCallersNumbers(storage)


    class TestListsWithoutNumbers(ListContract):
        @pytest.fixture
        def make_backend(self):
            storage = MemoryStorage()
            return lambda: ListsWithoutNumbers(storage)
    '''
)

EXPECTED_FAILURES = {
    "TestMergesReappends": {
        "test_reappend_of_a_stored_seq_is_refused_and_writes_nothing",
        "test_full_reappend_is_refused",
    },
    "TestShortensOnDamage": {
        "test_damage_inside_acknowledged_data_is_an_error_not_a_shorter_log",
        "test_append_is_refused_on_a_corrupt_session",
    },
    "TestForgetsPagination": {
        "test_limit_is_respected",
        "test_paging_covers_every_session_once",
        "test_foreign_cursor_is_refused",
        "test_listing_reports_turns_and_size",
    },
    "TestLosesSummaryOnAppend": {
        "test_summary_survives_later_appends",
        "test_update_before_the_first_flush_lands_with_it",
        "test_turns_and_size_are_the_backends_not_the_callers",
    },
    "TestTakesCallersNumbers": {
        "test_turns_and_size_are_the_backends_not_the_callers",
        "test_turns_and_size_survive_a_reopen",
    },
    "TestListsWithoutNumbers": {
        "test_listing_reports_turns_and_size",
    },
    "TestKeepsDeletedText": {
        "test_delete_leaves_nothing_of_the_session_in_the_store",
    },
    "TestDeletesUnderAHolder": {
        "test_delete_of_a_session_another_owner_holds_is_refused",
    },
    "TestFencesTheDeletedHolderGenerically": {
        "test_forced_delete_tells_the_holder_it_was_deleted",
    },
}


@pytest.mark.slow
def test_the_kit_fails_each_broken_backend(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        "[pytest]\nasyncio_mode = strict\n"
        "asyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(test_broken=BROKEN)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-rf")
    output = result.stdout.str()
    failed = {
        line.split("::")[1] + "::" + line.split("::")[2].split(" ")[0].split("[")[0]
        for line in output.splitlines()
        if line.startswith("FAILED ")
    }
    expected = {f"{c}::{t}" for c, tests in EXPECTED_FAILURES.items() for t in tests}
    assert not expected - failed, f"should fail: {expected - failed}\n{output}"
    # Each broken backend fails where it is broken (and what follows from
    # that), and nowhere else: its other tests pass.
    assert not failed - expected, f"failed unexpectedly: {failed - expected}"
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 15
