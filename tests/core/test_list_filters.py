"""Listing filters: `ListFilter`, shown statuses over stored ones, the fallback,
title search over one page, and the Python API.

Instances over one `MemoryStorage` stand for processes; a process's death
is the loss of its owner records (as its `flock`s would vanish).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from tests.support.delegating import Delegating

from turnkeep import Config, Host
from turnkeep.capabilities import filters_natively
from turnkeep.conformance import BackendHarness
from turnkeep.errors import InvalidListFilterError
from turnkeep.listfilter import (
    ListFilter,
    as_epoch_ms,
    list_filter,
    parse_statuses,
    parse_time,
)
from turnkeep.listing import MAX_TOP_UPS, list_sessions, list_where, search_titles
from turnkeep.meta import SessionHeader, SessionMeta, SessionStatus, SessionSummary
from turnkeep.persistence import (
    EventRecord,
    ListFilter as SeamListFilter,
    SessionPage,
)
from turnkeep.testing import MemoryPersistence, MemoryStorage


@attrs.define(eq=False)
class Counting(MemoryPersistence):
    """Counts `list` calls and the limit each asked for."""

    limits: list[int] = attrs.field(factory=list[int])

    async def list(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        where: ListFilter | None = None,
    ) -> SessionPage:
        self.limits.append(limit)
        return await super().list(limit=limit, cursor=cursor, where=where)


@attrs.define(eq=False)
class OldBackend(Delegating):
    """A backend written before filters: its `list` takes no `where`."""

    async def list(  # pyright: ignore[reportIncompatibleMethodOverride] - the old signature under test
        self, *, limit: int = 100, cursor: str | None = None
    ) -> SessionPage:
        return await super().list(limit=limit, cursor=cursor)

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        await self.inner.append(session_id, events, summary=summary)


_time = iter(range(1_000, 10_000_000, 10))


async def store(
    backend: Any,
    session_id: str,
    status: SessionStatus,
    *,
    keep: bool = True,
    title: str | None = None,
    prompt: str | None = None,
) -> int:
    """A stored session with `status`, held by `backend` unless not `keep`."""
    now = next(_time)
    meta = SessionMeta(
        header=SessionHeader(id=session_id, created_at=now),
        summary=SessionSummary(
            updated_at=now, status=status, title=title, first_prompt=prompt
        ),
    )
    await backend.create(meta)
    await backend.append(session_id, BackendHarness.records(0, 4))
    if not keep:
        await backend.release(session_id)
    return (await backend.load(session_id)).meta.summary.updated_at


def ids(page: SessionPage) -> list[str]:
    return [m.id for m in page.items]


async def everything(
    backend: Any, where: ListFilter | None, limit: int, *, fallback: bool = False
) -> list[SessionMeta]:
    items: list[SessionMeta] = []
    cursor: str | None = None
    for _ in range(1000):
        if fallback:
            page = await list_where(backend, limit=limit, cursor=cursor, where=where)
        else:
            page = await list_sessions(backend, limit=limit, cursor=cursor, where=where)
        assert len(page.items) <= limit
        items.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return items
    raise AssertionError("paging did not terminate")


# -- ListFilter and parsing ------------------------------------------------------


def test_the_filter_is_the_seams() -> None:
    assert SeamListFilter is ListFilter
    assert ListFilter().is_empty
    assert list_filter() is None
    assert ListFilter(statuses="idle").statuses == {"idle"}  # pyright: ignore[reportArgumentType]
    assert ListFilter(statuses=set()).statuses == frozenset()


@pytest.mark.parametrize(
    "bad",
    [
        {"statuses": {"idle", "sleeping"}},
        {"statuses": {"Idle"}},
        {"updated_after": -1},
        {"updated_before": 1.5},
        {"updated_before": True},
        {"updated_after": "2026-12-01"},
        {"updated_after": 2**63},
    ],
)
def test_a_bad_filter_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidListFilterError) as info:
        ListFilter(**bad)
    assert info.value.code == "invalid-list-filter"
    assert isinstance(info.value, ValueError)


def test_bounds_are_exclusive() -> None:
    def at(ms: int) -> SessionMeta:
        return SessionMeta(
            header=SessionHeader(id="x"), summary=SessionSummary(updated_at=ms)
        )

    window = ListFilter(updated_after=10, updated_before=20)
    assert [ms for ms in (9, 10, 11, 19, 20, 21) if window.matches(at(ms))] == [11, 19]
    assert (window.lower, window.upper) == (11, 19)


def test_statuses_and_times_are_parsed_or_refused() -> None:
    assert parse_statuses("idle") == {"idle"}
    assert parse_statuses(" active , interrupted") == {"active", "interrupted"}
    for bad in ("", "idle,", "nope", "idle;failed"):
        with pytest.raises(InvalidListFilterError):
            parse_statuses(bad)
    utc = parse_time("2026-12-01T18:30:00Z")
    assert utc == 1_796_149_800_000
    assert parse_time("2026-12-01T18:30:00+01:00") == utc - 3_600_000
    assert parse_time(str(utc)) == utc
    local = datetime(2026, 12, 1, 18, 30)  # naive: local time
    assert parse_time("2026-12-01T18:30") == as_epoch_ms(local)
    assert parse_time("2026-12-01") == as_epoch_ms(datetime(2026, 12, 1))
    for bad in ("yesterday", "2026-13-01", "", "1e9", "-5", "2026-12-01T25:00"):
        with pytest.raises(InvalidListFilterError):
            parse_time(bad)
    with pytest.raises(InvalidListFilterError, match="out of range"):
        as_epoch_ms(datetime(1960, 1, 1, tzinfo=UTC))
    made = list_filter(
        status=["idle", "failed"],
        updated_after=datetime(2026, 12, 1, tzinfo=UTC),
        updated_before=utc,
    )
    assert made == ListFilter(
        statuses={"idle", "failed"}, updated_after=1_796_083_200_000, updated_before=utc
    )


# -- shown statuses over stored ones -----------------------------------------


@pytest.mark.asyncio
async def test_interrupted_and_active_are_told_apart_by_liveness() -> None:
    storage = MemoryStorage()
    crashed, alive, reader = (MemoryPersistence(storage) for _ in range(3))
    await store(crashed, "crashed", "active")
    await store(alive, "running", "active")
    await store(alive, "settled", "interrupted", keep=False)  # stored so
    await store(alive, "idle", "idle", keep=False)
    del storage.owners["crashed"]

    async def shown(*statuses: SessionStatus) -> list[str]:
        return ids(await list_sessions(reader, where=ListFilter(statuses=statuses)))

    assert await shown("interrupted") == ["settled", "crashed"]
    assert await shown("active") == ["running"]
    assert await shown("active", "idle") == ["idle", "running"]
    assert await shown("idle") == ["idle"]
    # The stored filter behind them: `active` for both.
    stored = await list_where(reader, where=ListFilter(statuses={"active"}))
    assert ids(stored) == ["running", "crashed"]
    assert {m.summary.status for m in stored.items} == {"active"}


@pytest.mark.asyncio
async def test_a_page_the_liveness_thinned_is_topped_up_and_stays_complete() -> None:
    storage = MemoryStorage()
    writer, reader = MemoryPersistence(storage), Counting(storage)
    crashed: list[str] = []
    for n in range(30):
        await store(writer, f"s{n:02}", "active")
        if n % 3 == 0:
            del storage.owners[f"s{n:02}"]
            crashed.append(f"s{n:02}")
    where = ListFilter(statuses={"interrupted"})
    first = await list_sessions(reader, limit=4, where=where)
    assert ids(first) == sorted(crashed, reverse=True)[:4]
    # Each call asked for what was still missing, never more.
    assert reader.limits[0] == 4
    assert all(b <= a for a, b in zip(reader.limits, reader.limits[1:], strict=False))
    assert len(reader.limits) <= 1 + MAX_TOP_UPS
    listed = await everything(reader, where, 4)
    assert [m.id for m in listed] == sorted(crashed, reverse=True)
    running = await everything(reader, ListFilter(statuses={"active"}), 7)
    assert [m.id for m in running] == sorted(
        (f"s{n:02}" for n in range(30) if n % 3), reverse=True
    )


@pytest.mark.asyncio
async def test_topping_up_is_bounded_and_the_cursor_goes_on() -> None:
    storage = MemoryStorage()
    writer, reader = MemoryPersistence(storage), Counting(storage)
    for n in range(40):
        await store(writer, f"live{n:02}", "active")
    await store(writer, "crashed", "active")
    del storage.owners["crashed"]
    where = ListFilter(statuses={"interrupted"})
    # The crashed session is the newest: then 40 live ones, none to show.
    first = await list_sessions(reader, limit=1, where=where)
    assert ids(first) == ["crashed"]
    reader.limits.clear()
    rest = await list_sessions(reader, limit=2, cursor=first.next_cursor, where=where)
    assert rest.items == []  # nothing more to show in the pages it looked at...
    assert rest.next_cursor is not None  # ...and it says where to go on
    assert reader.limits == [2] * (1 + MAX_TOP_UPS)
    assert await everything(reader, where, 2) == first.items


# -- backends without `where` -------------------------------------------------


@pytest.mark.asyncio
async def test_a_backend_without_filters_is_filtered_in_core() -> None:
    storage = MemoryStorage()
    old: Any = OldBackend(MemoryPersistence(storage))  # not a SessionPersistence now
    assert not filters_natively(old)
    assert filters_natively(MemoryPersistence(storage))
    stamps: dict[str, int] = {}
    for n, status in enumerate(("idle", "failed", "idle", "closed", "idle", "failed")):
        stamps[f"s{n}"] = await store(old, f"s{n}", status, keep=False)
    for where in (
        ListFilter(statuses={"idle"}),
        ListFilter(statuses={"failed", "closed"}, updated_after=stamps["s1"]),
        ListFilter(updated_before=stamps["s4"]),
        ListFilter(statuses=set()),
    ):
        want = [m for m in await everything(old, None, 100) if where.matches(m)]
        for limit in (1, 2, 5):
            assert await everything(old, where, limit, fallback=True) == want
            assert await everything(old, where, limit) == want


# -- title search ------------------------------------------------------------


@pytest.mark.asyncio
async def test_title_search_reads_one_page_only() -> None:
    storage = MemoryStorage()
    writer, reader = MemoryPersistence(storage), Counting(storage)
    await store(writer, "a", "idle", keep=False, title="Plan the TRIP")
    await store(writer, "b", "idle", keep=False, prompt="what about the trip?")
    await store(writer, "c", "failed", keep=False, title="Taxes")
    await store(writer, "d", "idle", keep=False, title="Trip, part two")
    await store(writer, "e", "idle", keep=False)

    page = await search_titles(reader, "trip", limit=3)
    assert ids(page) == ["d"]  # of the newest three (e, d, c), d matches
    assert reader.limits == [3]
    rest = await search_titles(reader, "TRIP", limit=3, cursor=page.next_cursor)
    assert ids(rest) == ["b", "a"]
    assert rest.next_cursor is None
    idle = await search_titles(reader, "t", where=ListFilter(statuses={"idle"}))
    assert ids(idle) == ["d", "b", "a"]
    assert (await search_titles(reader, "nothing like it")).items == []


# -- the Python API ----------------------------------------------------------


@pytest.mark.asyncio
async def test_host_sessions_stored_and_search_take_filters() -> None:
    async with Host(Config(persistence="memory", plugins="none")) as host:
        backend = host.require_persistence()
        assert isinstance(backend, MemoryPersistence)
        other = MemoryPersistence(backend.storage)
        first = await store(other, "crashed", "active", title="Crashed run")
        await store(other, "running", "active", title="Running")
        await store(other, "done", "idle", keep=False, title="Done run")
        del backend.storage.owners["crashed"]
        sessions = host.sessions

        async def listed(**filters: Any) -> list[str]:
            return ids(await sessions.stored(limit=10, **filters))

        assert await listed(status="interrupted") == ["crashed"]
        assert await listed(status=["active", "idle"]) == ["done", "running"]
        assert await listed(updated_after=first) == ["done", "running"]
        assert await listed(updated_before=first + 1, status="interrupted") == [
            "crashed"
        ]
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        assert await listed(updated_after=epoch + timedelta(milliseconds=first)) == [
            "done",
            "running",
        ]
        found = await sessions.search("run", limit=10, status="idle")
        assert ids(found) == ["done"]
        with pytest.raises(InvalidListFilterError):
            await sessions.stored(status="asleep")  # pyright: ignore[reportArgumentType]
        with pytest.raises(InvalidListFilterError):
            await sessions.stored(updated_after=-5)
        await other.aclose()
