"""No trapped sessions: taken-over, refused and failing sessions always close.

Two hosts over one `MemoryStorage` stand for two processes. A takeover
(`steal=True`) fences the old holder: it can still close its session (a
report says what stayed unsaved), resume it afresh, or abandon it, and its
host shuts down without an error. Creating an id that is already stored is
refused before any model call; `open` resumes or creates.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from tests.loop.support import (
    GatedPlugin,
    SharedMemory,
    gated_host,
    inner_factory,
    shared_host,
    stored_events,
)

from turnkeep import AgentLoop, hookimpl
from turnkeep.errors import (
    FlushError,
    FlushSessionDeletedError,
    SessionDeletedError,
    SessionExistsError,
    SessionHeldError,
    SessionLockedError,
    SessionNotFoundError,
    StorageError,
)
from turnkeep.events import UserMessageData
from turnkeep.memory import MemoryPersistence
from turnkeep.testing import EchoModel, ScriptedModel


@pytest.mark.asyncio
async def test_a_fenced_session_closes_with_a_report_of_what_stayed_unsaved() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as first, shared_host(shared) as second:
        old = AgentLoop.create("a", host=first, model=EchoModel(), session_id="s")
        await old.run_turn("one")
        new = await AgentLoop.resume(
            "a", "s", host=second, model=EchoModel(), steal=True
        )
        await new.run_turn("two, from the new owner")
        with pytest.raises(FlushError, match="took it over"):
            await old.run_turn("three, from the old owner")
        session = first.sessions.get("s")
        unsaved = first.unsaved(session)
        assert unsaved > 0
        report = await old.close()
        assert report is not None
        assert (report.outcome, report.unsaved) == ("fenced", unsaved)
        assert report.first_unsaved_seq == len(session.events) - unsaved
        assert "took it over" in report.reason
        assert first.sessions.list() == []
        assert [e.seq for e in await stored_events(second, "s")] == list(
            range(len(second.sessions.get("s").events))
        )
    assert first.close_reports == []  # closed already: nothing left at shutdown


@pytest.mark.asyncio
async def test_a_holder_is_told_its_session_was_deleted_by_a_forced_delete() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as first, shared_host(shared) as second:
        loop = AgentLoop.create("a", host=first, model=EchoModel(), session_id="s")
        await loop.run_turn("one")
        other = second.require_persistence()
        with pytest.raises(SessionHeldError, match="force"):
            await other.delete("s")
        await loop.run_turn("two: still held, still stored")
        await other.delete("s", force=True)
        with pytest.raises(FlushSessionDeletedError, match="deleted") as told:
            await loop.run_turn("three: after the forced delete")
        assert isinstance(told.value.__cause__, SessionDeletedError)
        report = await loop.close()
        assert report is not None
        assert report.outcome == "fenced"
        assert "deleted" in report.reason
        assert not await other.has("s")  # the holder brought nothing back
    assert first.close_reports == []


@pytest.mark.asyncio
async def test_shutdown_never_crashes_on_a_fenced_session(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shared = SharedMemory()
    first = shared_host(shared)
    async with shared_host(shared) as second:
        await first.start()
        session = first.sessions.create("s")
        session.append(UserMessageData(text="kept"))
        await session.flush()
        await second.sessions.resume("s", steal=True)
        session.append(UserMessageData(text="lost to the takeover"))
        with caplog.at_level(logging.ERROR, logger="turnkeep"):
            reports = await first.aclose()  # no FlushError
        assert [(r.session_id, r.outcome, r.unsaved) for r in reports] == [
            ("s", "fenced", 1)
        ]
        assert first.close_reports == reports
        assert "session 's': fenced; 1 event(s)" in caplog.text
        assert [e.data.text for e in await stored_events(second, "s")] == ["kept"]


@attrs.define(eq=False)
class _ReleaseFails(MemoryPersistence):
    """A backend whose first `release` of each session fails.

    As a connection lost while letting go would: the writer role is still
    held, and the backend's own `aclose` lets it go later.
    """

    failed: set[str] = attrs.field(init=False, factory=set[str])

    async def release(self, session_id: str) -> None:
        if session_id not in self.failed:
            self.failed.add(session_id)
            raise StorageError(f"session {session_id!r}: the connection was lost")
        await super().release(session_id)


@attrs.define(eq=False)
class _SharedReleaseFails(SharedMemory):
    """Backend `shared` over the same storage, with `release` failing."""

    @hookimpl
    def register_persistence(self, register: Callable[..., None]) -> None:
        register("shared", lambda _config: _ReleaseFails(self.storage))  # pyright: ignore[reportUnknownLambdaType]


@pytest.mark.asyncio
async def test_a_fenced_session_closes_even_when_its_release_fails() -> None:
    shared = SharedMemory()
    failing = _SharedReleaseFails(shared.storage)
    first = shared_host(failing)
    async with shared_host(shared) as second:
        await first.start()
        for session_id in ("closed", "at-shutdown"):
            session = first.sessions.create(session_id)
            session.append(UserMessageData(text="kept"))
            await session.flush()
            await second.sessions.resume(session_id, steal=True)
            session.append(UserMessageData(text="lost to the takeover"))
        report = await first.sessions.close("closed")  # no FlushError
        assert (report.outcome, report.unsaved, report.first_unsaved_seq) == (
            "fenced",
            1,
            1,
        )
        assert "took it over" in report.reason
        backend = first.require_persistence()
        assert isinstance(backend, _ReleaseFails)
        assert backend.failed == {"closed"}  # the close did meet the failure
        assert [s.id for s in first.sessions.list()] == ["at-shutdown"]
        reports = await first.aclose()  # neither does shutdown fail on it
        assert [(r.session_id, r.outcome, r.unsaved) for r in reports] == [
            ("at-shutdown", "fenced", 1)
        ]
        assert backend.failed == {"closed", "at-shutdown"}
        for session_id in ("closed", "at-shutdown"):
            stored = await stored_events(second, session_id)
            assert [e.data.text for e in stored] == ["kept"]


@pytest.mark.asyncio
async def test_a_fenced_session_is_resumed_afresh_with_what_the_new_owner_wrote() -> (
    None
):
    shared = SharedMemory()
    async with shared_host(shared) as first, shared_host(shared) as second:
        old = AgentLoop.create("a", host=first, model=EchoModel(), session_id="s")
        await old.run_turn("one")
        stale = first.sessions.get("s")
        new = await AgentLoop.resume(
            "a", "s", host=second, model=EchoModel(), steal=True
        )
        await new.run_turn("two")
        with pytest.raises(FlushError):
            await old.run_turn("lost")
        back = await AgentLoop.resume(
            "a", "s", host=first, model=EchoModel(), steal=True
        )
        fresh = first.sessions.get("s")
        assert fresh is not stale
        assert stale.closed
        assert [e.seq for e in fresh.events] == [
            e.seq for e in second.sessions.get("s").events
        ]
        result = await back.run_turn("three")
        assert result.turn == 3  # numbering continues after the new owner's turn
        with pytest.raises(FlushError, match="took it over"):
            await new.run_turn("fenced in its turn")
        texts = [
            e.data.text
            for e in await stored_events(first, "s")
            if e.type == "user/message"
        ]
        assert texts == ["one", "two", "three"]


@pytest.mark.asyncio
async def test_a_session_whose_backend_keeps_failing_can_be_abandoned(
    tmp_path: Path,
) -> None:
    failing = [False]
    plugin = GatedPlugin(
        inner_factory("memory", tmp_path), fail=lambda _s, _e: failing[0]
    )
    async with gated_host(plugin) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="stored"))
        await session.flush()
        failing[0] = True
        session.append(UserMessageData(text="cannot be stored"))
        with pytest.raises(FlushError):
            await host.sessions.close("s")
        assert host.sessions.get("s") is session  # still live: nothing lost yet
        report = await host.sessions.abandon("s", reason="giving up")
        assert (report.outcome, report.unsaved, report.first_unsaved_seq) == (
            "abandoned",
            1,
            1,
        )
        assert report.reason == "giving up"
        with pytest.raises(SessionNotFoundError):
            host.sessions.get("s")
    assert host.close_reports == []


@pytest.mark.asyncio
async def test_a_loop_closes_with_a_report_when_its_backend_keeps_failing(
    tmp_path: Path,
) -> None:
    # A full disk, say: the loop's owner can still end it, told what was lost.
    failing = [False]
    plugin = GatedPlugin(
        inner_factory("memory", tmp_path), fail=lambda _s, _e: failing[0]
    )
    async with gated_host(plugin) as host:
        loop = AgentLoop.create("a", host=host, model=EchoModel(), session_id="s")
        await loop.run_turn("stored")
        stored = len(host.sessions.get("s").events)
        failing[0] = True
        host.sessions.get("s").append(UserMessageData(text="cannot be stored"))
        report = await loop.close()
        assert report is not None
        assert (report.outcome, report.unsaved, report.first_unsaved_seq) == (
            "abandoned",
            1,
            stored,
        )
        assert report.reason
        with pytest.raises(SessionNotFoundError):
            host.sessions.get("s")
    assert host.close_reports == []


@pytest.mark.asyncio
async def test_shutdown_abandons_a_session_whose_backend_keeps_failing(
    tmp_path: Path,
) -> None:
    plugin = GatedPlugin(inner_factory("memory", tmp_path), fail=lambda _s, _e: True)
    host = gated_host(plugin)
    await host.start()
    host.sessions.create("s").append(UserMessageData(text="cannot be stored"))
    reports = await host.aclose()
    assert [(r.outcome, r.unsaved) for r in reports] == [("abandoned", 1)]
    assert "could not be stored" in reports[0].reason


@pytest.mark.asyncio
async def test_creating_a_stored_id_is_refused_before_any_model_call() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as host:
        first = AgentLoop.create("a", host=host, model=EchoModel(), session_id="s")
        await first.run_turn("one")
        await first.close()
    before = None
    async with shared_host(shared) as host:
        before = await stored_events(host, "s")
        model = ScriptedModel(["never said"])
        again = AgentLoop.create("a", host=host, model=model, session_id="s")
        with pytest.raises(SessionExistsError, match=r"AgentLoop\.resume"):
            await again.run_turn("two")
        assert model.requests == []  # refused before any model call
        assert host.sessions.list() == []  # dropped, not trapped
    assert host.close_reports == []
    async with shared_host(shared) as host:
        assert await stored_events(host, "s") == before


@pytest.mark.asyncio
async def test_a_new_session_that_is_never_used_leaves_nothing_stored() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as host:
        AgentLoop.create("a", host=host, model=EchoModel(), session_id="empty")
    assert shared.storage.sessions == {}


@pytest.mark.asyncio
async def test_open_creates_a_new_session_and_resumes_a_stored_one() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as host:
        loop = await AgentLoop.open("a", "s", host=host, model=EchoModel())
        assert loop.resumed_from is None
        assert (await loop.run_turn("one")).turn == 1
        await loop.close()
    async with shared_host(shared) as host:
        loop = await AgentLoop.open("a", "s", host=host, model=EchoModel())
        assert loop.resumed_from == "s"
        assert loop.recovery is not None
        assert not loop.recovery.recovered
        assert (await loop.run_turn("two")).turn == 2


@pytest.mark.asyncio
async def test_two_processes_opening_one_new_id_never_both_create_it() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as first, shared_host(shared) as second:
        results = await asyncio.gather(
            first.sessions.open("s"), second.sessions.open("s"), return_exceptions=True
        )
        opened = [r for r in results if not isinstance(r, BaseException)]
        refused = [r for r in results if isinstance(r, BaseException)]
        assert len(opened) == 1
        assert [type(r) for r in refused] == [SessionLockedError]
        opened[0].append(UserMessageData(text="one"))
        await opened[0].flush()
        winner = first if opened[0] in first.sessions.list() else second
        await winner.sessions.close("s")
        loser = second if winner is first else first
        again = await loser.sessions.open("s")
        assert again.origin == "resumed"
        assert [e.data.text for e in again.events] == ["one"]
