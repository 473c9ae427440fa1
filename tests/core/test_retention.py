"""Retention: the `[retention]` policy, durations, and `turnkeep.retention`.

The API runs on the memory backend here (the CLI tests run the same passes
on JSONL, SQLite and PostgreSQL): paging through `list` without reading a
log, the status selection, never touching a session open in the host or
held elsewhere, dry runs, and the timer a service runs.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from turnkeep import Host, hookimpl
from turnkeep.config import Config, RetentionPolicy, load_config, parse_duration
from turnkeep.errors import ConfigurationError, SessionHeldError
from turnkeep.events import TurnEndData, TurnStartData, UserMessageData
from turnkeep.maintenance import PruneReport, prune, run_retention
from turnkeep.meta import SessionStatus
from turnkeep.persistence import ListFilter, LoadedSession, SessionPage
from turnkeep.retention import find_prunable
from turnkeep.testing import MemoryPersistence

DAY = 86_400_000
NOW = 1_000 * DAY


# -- durations and the configured policy ----------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30d", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("90m", timedelta(minutes=90)),
        ("2w", timedelta(weeks=2)),
        ("45s", timedelta(seconds=45)),
        ("1d12h", timedelta(days=1, hours=12)),
        (" 7D ", timedelta(days=7)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("bad", ["", "30", "d", "30x", "1.5d", "-1d", "0d", "30 days"])
def test_bad_durations_are_configuration_errors(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="duration"):
        parse_duration(bad)


def test_the_policy_from_turnkeep_toml(tmp_path: Path) -> None:
    (tmp_path / "turnkeep.toml").write_text(
        '[retention]\nolder_than = "30d"\nstatus = "interrupted"\n'
    )
    config = load_config(tmp_path, env={})
    assert config.retention == RetentionPolicy(
        older_than=timedelta(days=30), status="interrupted"
    )
    assert Config().retention is None


def test_the_policy_is_merged_across_sources(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.turnkeep.retention]\nstatus = "any"\n'
    )
    env = {"TURNKEEP_RETENTION__OLDER_THAN": "12h"}
    config = load_config(tmp_path, env=env)
    assert config.retention == RetentionPolicy(older_than="12h", status="any")
    assert "retention" not in config.backends


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('older_than = "30x"', "'30x' is not a duration"),
        ("older_than = 30", 'expected a duration such as "30d"'),
        ('older_than = "0d"', "longer than zero"),
        ('older_than = "1d"\nstatus = "old"', "status"),
        ('older_than = "1d"\nevery = "1h"', "unknown key(s) every"),
        ('status = "ended"', "required key missing @ $.retention.older_than"),
    ],
)
def test_a_bad_policy_is_a_configuration_error_naming_it(
    tmp_path: Path, table: str, message: str
) -> None:
    (tmp_path / "turnkeep.toml").write_text(f"[retention]\n{table}\n")
    with pytest.raises(ConfigurationError) as caught:
        load_config(tmp_path, env={})
    assert message in str(caught.value)
    assert "retention" in str(caught.value)


def test_a_bad_policy_in_code_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="not a duration"):
        RetentionPolicy(older_than="soon")
    with pytest.raises(ConfigurationError, match="retention status"):
        RetentionPolicy(older_than="1d", status="old")  # pyright: ignore[reportArgumentType]


# -- the API ---------------------------------------------------------------------


class Clock:
    """A clock the test sets."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


async def write(
    host: Host, clock: Clock, session_id: str, at: int, status: SessionStatus
) -> None:
    clock.now = at
    session = host.sessions.create(session_id)
    session.append(TurnStartData(turn=1))
    session.append(UserMessageData(text=session_id))
    session.append(TurnEndData(turn=1, status="completed"))
    session.set_summary(status=status)
    await session.flush()
    await host.sessions.close(session_id)


SESSIONS: dict[str, tuple[int, SessionStatus]] = {
    "old-idle": (NOW - 40 * DAY, "idle"),
    "old-closed": (NOW - 41 * DAY, "closed"),
    "old-failed": (NOW - 42 * DAY, "failed"),
    "old-interrupted": (NOW - 43 * DAY, "interrupted"),
    "old-active": (NOW - 44 * DAY, "active"),
    "new-idle": (NOW - DAY, "idle"),
}


class Spy(MemoryPersistence):
    """The memory backend, counting `list` pages and `load` calls."""

    def __init__(self) -> None:
        super().__init__()
        self.pages: list[int] = []
        self.loads = 0
        self.refuse: set[str] = set()

    async def list(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        where: ListFilter | None = None,
    ) -> SessionPage:
        page = await super().list(limit=limit, cursor=cursor, where=where)
        self.pages.append(len(page.items))
        return page

    async def load(self, session_id: str) -> LoadedSession:
        self.loads += 1
        return await super().load(session_id)

    async def delete(self, session_id: str, *, force: bool = False) -> None:
        if session_id in self.refuse:  # as if another process held it
            raise SessionHeldError(session_id)
        await super().delete(session_id, force=force)


class Registers:
    def __init__(self, backend: Spy) -> None:
        self.backend = backend

    @hookimpl
    def register_persistence(self, register: Any) -> None:
        register("spy", lambda _config: self.backend, None)


async def stocked() -> tuple[Host, Spy]:
    spy = Spy()
    clock = Clock()
    host = Host(
        Config(persistence="spy", plugins="none"), plugins=[Registers(spy)], clock=clock
    )
    await host.start()
    for session_id, (at, status) in SESSIONS.items():
        await write(host, clock, session_id, at, status)
    clock.now = NOW
    spy.pages.clear()
    return host, spy


async def stored(host: Host) -> set[str]:
    page = await host.require_persistence().list(limit=1000)
    return {m.id for m in page.items}


@pytest.mark.parametrize(
    ("status", "gone"),
    [
        ("ended", {"old-idle", "old-closed", "old-failed"}),
        ("interrupted", {"old-interrupted"}),
        (
            "any",
            {"old-idle", "old-closed", "old-failed", "old-interrupted", "old-active"},
        ),
    ],
)
@pytest.mark.asyncio
async def test_prune_pages_through_list_and_deletes_what_the_policy_picks(
    status: Any, gone: set[str]
) -> None:
    host, spy = await stocked()
    try:
        policy = RetentionPolicy(older_than="30d", status=status)
        report = await prune(host, policy, now=NOW, page_size=2)
        assert {i.session_id for i in report.deleted} == gone
        assert not report.dry_run
        assert spy.pages == [2, 2, 2]  # page by page, never the whole store
        assert spy.loads == 0  # summaries only
        assert await stored(host) == set(SESSIONS) - gone
        assert report.cutoff == NOW - 30 * DAY
    finally:
        await host.aclose()


@pytest.mark.asyncio
async def test_a_dry_run_deletes_nothing() -> None:
    host, _spy = await stocked()
    try:
        report = await prune(host, RetentionPolicy(older_than="30d"), dry_run=True)
        assert report.dry_run
        assert report.deleted == []
        assert {i.outcome for i in report.items} == {"would-delete"}
        assert {i.session_id for i in report.items} == {
            "old-idle",
            "old-closed",
            "old-failed",
        }
        assert await stored(host) == set(SESSIONS)
    finally:
        await host.aclose()


@pytest.mark.asyncio
async def test_ages_come_from_the_host_clock() -> None:
    host, _spy = await stocked()
    try:
        report = await prune(host, RetentionPolicy(older_than="40d"), dry_run=True)
        assert {i.session_id: i.age_ms for i in report.items} == {
            "old-closed": 41 * DAY,
            "old-failed": 42 * DAY,
        }
    finally:
        await host.aclose()


@pytest.mark.asyncio
async def test_a_session_open_in_the_host_is_never_deleted() -> None:
    host, _spy = await stocked()
    try:
        session = await host.sessions.resume("old-idle")
        report = await prune(host, RetentionPolicy(older_than="30d"), now=NOW)
        (held,) = report.skipped
        assert held.session_id == "old-idle"
        assert held.error == "open in this process"
        assert "old-idle" in await stored(host)
        assert not session.closed
    finally:
        await host.aclose()


@pytest.mark.asyncio
async def test_a_session_the_backend_refuses_as_held_is_skipped() -> None:
    host, spy = await stocked()
    try:
        spy.refuse.add("old-closed")
        report = await prune(host, RetentionPolicy(older_than="30d"), now=NOW)
        assert [i.session_id for i in report.skipped] == ["old-closed"]
        assert "held by another live owner" in (report.skipped[0].error or "")
        assert {i.session_id for i in report.deleted} == {"old-idle", "old-failed"}
        assert "old-closed" in await stored(host)
    finally:
        await host.aclose()


@pytest.mark.asyncio
async def test_run_retention_applies_the_policy_on_a_timer() -> None:
    host, _spy = await stocked()
    reports: list[PruneReport] = []
    two = asyncio.Event()

    def seen(report: PruneReport) -> None:
        reports.append(report)
        if len(reports) == 2:
            two.set()

    try:
        task = asyncio.create_task(
            run_retention(
                host,
                RetentionPolicy(older_than="30d"),
                every=timedelta(milliseconds=5),
                on_report=seen,
            )
        )
        await asyncio.wait_for(two.wait(), timeout=30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(reports[0].deleted) == 3
        assert reports[1].items == []  # the second pass found nothing left
        assert await stored(host) == set(SESSIONS) - {
            "old-idle",
            "old-closed",
            "old-failed",
        }
    finally:
        await host.aclose()


@pytest.mark.asyncio
async def test_run_retention_refuses_a_bad_interval() -> None:
    host = Host(Config(persistence="memory", plugins="none"))
    with pytest.raises(ConfigurationError, match="duration"):
        await run_retention(host, RetentionPolicy(older_than="1d"), every="soon")


@pytest.mark.asyncio
async def test_find_prunable_refuses_a_bad_page_size() -> None:
    host, _spy = await stocked()
    try:
        with pytest.raises(ValueError, match="page_size"):
            await find_prunable(host, RetentionPolicy(older_than="1d"), page_size=0)
    finally:
        await host.aclose()
