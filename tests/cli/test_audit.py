"""`turnkeep audit [ID] [--json]`, and what the commands that act record.

- `rm` records a deletion in the store's log (id, time, reason; not the
  content), which `turnkeep audit` and `turnkeep audit ID` list.
- `repair` records the quarantine (by the backend) and the repair; `recover`
  the recovery.
- Read-only commands (`ls`, `show`, `verify`, `export`, `tail`, `audit`)
  record nothing: the store is byte for byte as it was.
"""

from __future__ import annotations

import asyncio
import os

import msgspec
import pytest
from tests.cli.support import Store, cli, converse, crash_in_turn, tear

from turnkeep.audit import AuditRecord
from turnkeep.auditing import read_trail


def trail(store: Store, scope: str | None) -> list[AuditRecord]:
    async def read() -> list[AuditRecord]:
        async with store.host() as host:
            return await read_trail(host.require_persistence(), scope)

    return asyncio.run(read())


def test_rm_records_a_deletion_that_audit_lists(store: Store) -> None:
    asyncio.run(converse(store, "s"))
    asyncio.run(converse(store, "t"))
    assert cli("rm", "s", "--yes", store=store).exit_code == 0
    (record,) = trail(store, None)
    assert (record.action, record.session_id, record.reason) == (
        "deletion",
        "s",
        "`turnkeep rm`",
    )
    assert (record.pid, record.number) == (os.getpid(), 1)
    listed = cli("audit", "--json", store=store)
    assert listed.exit_code == 0, listed.stderr
    assert msgspec.json.decode(listed.stdout, type=list[AuditRecord]) == [record]
    text = cli("audit", store=store)
    assert "deletion" in text.stdout
    assert " s " in text.stdout
    assert "`turnkeep rm`" in text.stdout
    one = cli("audit", "s", "--json", store=store)
    assert msgspec.json.decode(one.stdout, type=list[AuditRecord]) == [record]
    assert cli("audit", "t", store=store).stdout.strip() == "no audit records"
    unknown = cli("audit", "never", store=store)
    assert unknown.exit_code == 1
    assert "never" in unknown.stderr


def test_rm_force_records_that_the_deletion_was_forced(store: Store) -> None:
    asyncio.run(converse(store, "s"))
    assert cli("rm", "s", "--yes", "--force", store=store).exit_code == 0
    (record,) = trail(store, None)
    assert (record.action, record.session_id, record.reason) == (
        "deletion",
        "s",
        "`turnkeep rm --force`",
    )
    assert record.detail == {"forced": "yes"}
    listed = cli("audit", "--json", store=store)
    assert msgspec.json.decode(listed.stdout, type=list[AuditRecord]) == [record]


def test_read_only_commands_record_nothing(store: Store) -> None:
    asyncio.run(converse(store, "s"))
    asyncio.run(converse(store, "gone"))
    assert cli("rm", "gone", "--yes", store=store).exit_code == 0
    before = store.digest()
    for args in (
        ["ls"],
        ["show", "s"],
        ["verify", "s"],
        ["export", "s"],
        ["tail", "s"],
        ["audit"],
        ["audit", "s"],
        ["audit", "gone", "--json"],
    ):
        done = cli(*args, store=store)
        assert done.exit_code == 0, (args, done.stderr)
    assert store.digest() == before
    assert trail(store, "s") == []
    assert [r.session_id for r in trail(store, None)] == ["gone"]


def test_recover_records_the_recovery(store: Store) -> None:
    asyncio.run(crash_in_turn(store, "s"))
    assert cli("recover", "s", store=store).exit_code == 0
    (record,) = trail(store, "s")
    assert record.action == "recovery"
    assert record.detail["turn"] == 1
    assert record.detail["interrupted"] == 2  # `recover` has neither tool


def test_repair_records_the_quarantine_and_the_repair(jsonl_store: Store) -> None:
    asyncio.run(converse(jsonl_store, "s"))
    start = tear(jsonl_store, "s")
    done = cli("repair", "s", "--yes", store=jsonl_store)
    assert done.exit_code == 0, done.stderr
    quarantine, repair = trail(jsonl_store, "s")
    assert (quarantine.action, repair.action) == ("quarantine", "repair")
    assert quarantine.detail["offset"] == repair.detail["offset"] == start
    assert str(quarantine.detail["file"]).endswith(".broken")
    assert set(quarantine.detail) == {"offset", "length", "file"}  # no bytes


@pytest.mark.parametrize("args", [["audit"], ["audit", "s"]], ids=" ".join)
def test_a_backend_without_the_capability_is_said_so(
    store: Store, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import turnkeep.cli.audit as command

    monkeypatch.setattr(command, "has_audit_log", lambda backend: False)
    done = cli(*args, store=store)
    assert done.exit_code == 1
    assert "keeps no audit trail" in done.stderr
