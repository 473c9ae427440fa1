"""`turnkeep prune` (issue 12, point 8) on JSONL, SQLite and PostgreSQL.

Sessions are written through a host whose clock is set back, so their
stored `updated_at` is as old as the test needs; ages are measured from
the real clock, as the command does.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.cli.conftest import make_store
from tests.cli.support import Store, cli, one_line_error

from turnkeep import Host
from turnkeep.audit import AuditRecord
from turnkeep.auditing import read_trail
from turnkeep.clock import now_ms
from turnkeep.events import TurnEndData, TurnStartData, UserMessageData
from turnkeep.meta import SessionStatus

DAY = 86_400_000


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """An empty store of every backend this repository ships."""
    if request.param == "postgres":
        return request.getfixturevalue("pg_store")
    return make_store(request.param, tmp_path)


async def aged(
    store: Store, session_id: str, *, days: float, status: SessionStatus = "idle"
) -> None:
    """A one-turn session last updated `days` ago, with this summary status."""
    at = now_ms() - int(days * DAY)
    async with Host(store.config(), clock=lambda: at) as host:
        session = host.sessions.create(session_id)
        session.append(TurnStartData(turn=1))
        session.append(UserMessageData(text=f"about {session_id}"))
        session.append(TurnEndData(turn=1, status="completed"))
        session.set_summary(title=f"title of {session_id}", status=status)
        await session.flush()
        await host.sessions.close(session_id)


def populate(store: Store) -> None:
    async def write() -> None:
        await aged(store, "old-ended", days=40)
        await aged(store, "old-failed", days=35, status="failed")
        await aged(store, "old-interrupted", days=45, status="interrupted")
        await aged(store, "old-active", days=50, status="active")
        await aged(store, "new-ended", days=2)
        await aged(store, "new-interrupted", days=1, status="interrupted")

    asyncio.run(write())


def trail(store: Store) -> list[AuditRecord]:
    async def read() -> list[AuditRecord]:
        async with store.host() as host:
            return await read_trail(host.require_persistence(), None)

    return asyncio.run(read())


def ids(store: Store) -> set[str]:
    return set(asyncio.run(store.ids()))


ALL = {
    "old-ended",
    "old-failed",
    "old-interrupted",
    "old-active",
    "new-ended",
    "new-interrupted",
}


def test_dry_run_prints_what_would_go_and_deletes_nothing(any_store: Store) -> None:
    populate(any_store)
    result = cli("prune", "--older-than", "30d", "--dry-run", store=any_store)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for sid in ("old-ended", "old-failed"):
        assert sid in out
        assert f"title of {sid}" in out
    assert "40d" in out  # the age
    assert "35d" in out
    assert "failed" in out  # the status
    for sid in ("old-interrupted", "old-active", "new-ended", "new-interrupted"):
        assert sid not in out
    assert "2 of 2 ended sessions not updated for 30d would be deleted" in (
        result.stderr
    )
    assert ids(any_store) == ALL


def test_asks_first_and_deletes_only_when_told(any_store: Store) -> None:
    populate(any_store)
    declined = cli("prune", "--older-than", "30d", input="n\n", store=any_store)
    assert declined.exit_code == 1
    assert "nothing was deleted" in declined.stderr
    no_terminal = cli("prune", "--older-than", "30d", store=any_store)
    assert no_terminal.exit_code == 1
    assert ids(any_store) == ALL
    accepted = cli("prune", "--older-than", "30d", input="y\n", store=any_store)
    assert accepted.exit_code == 0, accepted.stderr
    assert "Delete these 2 session(s)?" in accepted.stderr
    assert "deleted  old-ended" in accepted.stdout
    assert "2 deleted, 0 skipped (held), 0 failed" in accepted.stdout
    assert ids(any_store) == ALL - {"old-ended", "old-failed"}
    # Only the pass that deleted recorded, one deletion each, in the store's log.
    records = trail(any_store)
    assert sorted(r.session_id or "" for r in records) == ["old-ended", "old-failed"]
    assert {r.action for r in records} == {"deletion"}
    assert all(r.reason.startswith("retention: ") for r in records)


@pytest.mark.parametrize(
    ("status", "gone"),
    [
        ("ended", {"old-ended", "old-failed"}),
        ("interrupted", {"old-interrupted"}),
        ("any", {"old-ended", "old-failed", "old-interrupted", "old-active"}),
    ],
)
def test_status_selects_by_the_summary_status(
    any_store: Store, status: str, gone: set[str]
) -> None:
    populate(any_store)
    result = cli(
        "prune", "--older-than", "30d", "--status", status, "--yes", store=any_store
    )
    assert result.exit_code == 0, result.stderr
    assert ids(any_store) == ALL - gone


def test_units_of_older_than(any_store: Store) -> None:
    populate(any_store)
    result = cli(
        "prune", "--older-than", "36h", "--status", "interrupted", "--dry-run",
        "--json", store=any_store,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    report: dict[str, Any] = msgspec.json.decode(result.stdout)
    assert {i["session_id"] for i in report["items"]} == {"old-interrupted"}
    result = cli(
        "prune", "--older-than", "1200m", "--status", "interrupted", "--dry-run",
        "--json", store=any_store,
    )  # fmt: skip
    report = msgspec.json.decode(result.stdout)
    assert {i["session_id"] for i in report["items"]} == {
        "old-interrupted",
        "new-interrupted",
    }
    assert ids(any_store) == ALL


def test_a_held_session_is_skipped_and_kept(
    any_store: Store, hold: Callable[..., subprocess.Popen[bytes]]
) -> None:
    populate(any_store)
    hold(any_store, "old-ended")
    result = cli("prune", "--older-than", "30d", "--yes", store=any_store)
    assert result.exit_code == 0, result.stderr
    assert "skipped  old-ended: held by another live process" in result.stdout
    assert "deleted  old-failed" in result.stdout
    assert "1 deleted, 1 skipped (held), 0 failed" in result.stdout
    assert ids(any_store) == ALL - {"old-failed"}


def test_json_report_of_a_prune(any_store: Store) -> None:
    populate(any_store)
    result = cli(
        "prune", "--older-than", "30d", "--status", "interrupted", "--yes", "--json",
        store=any_store,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    report: dict[str, Any] = msgspec.json.decode(result.stdout)
    assert report["dry_run"] is False
    (item,) = report["items"]
    assert item["session_id"] == "old-interrupted"
    assert item["outcome"] == "deleted"
    assert item["status"] == "interrupted"
    assert item["title"] == "title of old-interrupted"
    assert 44 * DAY < item["age_ms"] < 46 * DAY


def test_nothing_to_prune(any_store: Store) -> None:
    asyncio.run(aged(any_store, "fresh", days=1))
    result = cli("prune", "--older-than", "30d", store=any_store)
    assert result.exit_code == 0, result.stderr
    assert "nothing to prune" in result.stdout
    assert ids(any_store) == {"fresh"}


def test_the_configured_policy_applies_without_flags(
    any_store: Store, isolated: Path
) -> None:
    populate(any_store)
    (isolated / "turnkeep.toml").write_text(
        '[retention]\nolder_than = "30d"\nstatus = "interrupted"\n'
    )
    result = cli("prune", "--yes", store=any_store)
    assert result.exit_code == 0, result.stderr
    assert ids(any_store) == ALL - {"old-interrupted"}
    # Flags override the configured policy, field by field.
    result = cli("prune", "--status", "ended", "--yes", store=any_store)
    assert result.exit_code == 0, result.stderr
    assert ids(any_store) == ALL - {"old-interrupted", "old-ended", "old-failed"}
    result = cli("prune", "--older-than", "12h", "--yes", store=any_store)
    assert result.exit_code == 0, result.stderr
    assert ids(any_store) == {"new-ended", "old-active"}


def test_without_flags_or_policy_it_says_what_to_give(store: Store) -> None:
    asyncio.run(aged(store, "s", days=40))
    result = cli("prune", "--yes", store=store)
    assert result.exit_code == 2
    assert "--older-than 30d" in result.stderr
    assert "[retention]" in result.stderr
    assert ids(store) == {"s"}


@pytest.mark.parametrize("bad", ["30", "30x", "d30", "-1d", "0d", "thirty days"])
def test_a_bad_duration_is_a_usage_error(store: Store, bad: str) -> None:
    asyncio.run(aged(store, "s", days=40))
    result = cli("prune", "--older-than", bad, "--yes", store=store)
    assert result.exit_code == 2
    assert "--older-than" in result.stderr
    assert "duration" in result.stderr
    assert ids(store) == {"s"}


def test_a_bad_configured_policy_is_one_line_naming_the_file(
    store: Store, isolated: Path
) -> None:
    asyncio.run(aged(store, "s", days=40))
    (isolated / "turnkeep.toml").write_text('[retention]\nolder_than = "30 days"\n')
    result = cli("prune", "--yes", store=store)
    assert result.exit_code == 1
    line = one_line_error(result)
    assert "turnkeep.toml" in line
    assert "retention.older_than" in line
    assert "not a duration" in line
    assert ids(store) == {"s"}


def test_a_bad_status_is_a_usage_error(store: Store) -> None:
    result = cli("prune", "--older-than", "1d", "--status", "old", store=store)
    assert result.exit_code == 2
    assert "'old' is not one of" in result.stderr
