"""Contracts checked through the host: the write-behind plugin over the backend.

These run a real `Host` whose only persistence plugin contributes the backend
under test, so they check what users see: resume appends only new events,
a fork stores its inherited events once, summaries land with flushes, and a
takeover by another process fences the old one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio

from turnkeep.config import Config
from turnkeep.errors import FlushError, SessionLockedError
from turnkeep.events import (
    AssistantChunkData,
    AssistantMessageData,
    ToolCallData,
    ToolResultData,
    TurnEndData,
    TurnStartData,
    UserMessageData,
)
from turnkeep.hookspecs import hookimpl
from turnkeep.host import Host
from turnkeep.packs import expand_all
from turnkeep.session import Session

from ._harness import BackendHarness, MakeBackend

__all__ = ["SessionsContract"]

UNDER_TEST = "under-test"


class _BackendPlugin:
    """Contributes the backend under test to a host."""

    def __init__(self, make_backend: MakeBackend) -> None:
        self.make_backend = make_backend

    @hookimpl
    def register_persistence(self, register: Callable[..., None]) -> None:
        register(UNDER_TEST, lambda _config: self.make_backend())  # pyright: ignore[reportUnknownLambdaType]


def _turn(session: Session, turn: int, text: str) -> None:
    session.append(TurnStartData(turn=turn))
    session.append(UserMessageData(text=text))
    for piece in ("thinking ", "about ", text):
        session.append(AssistantChunkData(text=piece))
    session.append(AssistantMessageData(text=f"about {text}"))
    call = f"call-{turn}"
    session.append(ToolCallData(call_id=call, name="lookup", arguments={"q": text}))
    session.append(ToolResultData(call_id=call, output=f"found {text}"))
    session.append(TurnEndData(turn=turn, status="completed"))


class SessionsContract(BackendHarness):
    """What users see through the host, over this backend."""

    @pytest_asyncio.fixture
    async def make_host(
        self, make_backend: MakeBackend
    ) -> AsyncIterator[Callable[[], Any]]:
        """Start hosts over this test's storage (closed afterwards)."""
        hosts: list[Host] = []

        async def start() -> Host:
            host = Host(
                Config(persistence=UNDER_TEST, plugins="none"),
                plugins=[_BackendPlugin(make_backend)],
            )
            hosts.append(host)
            return await host.start()

        yield start
        for host in reversed(hosts):
            # A fenced host cannot drain; that is what some tests check.
            with contextlib.suppress(FlushError):
                await host.aclose()

    @pytest.mark.asyncio
    async def test_a_conversation_round_trips(
        self, make_host: Callable[[], Any]
    ) -> None:
        host: Host = await make_host()
        session = host.sessions.create()
        for turn in range(1, 4):
            _turn(session, turn, f"question {turn}")
            await session.flush()
        loaded = await host.require_persistence().load(session.id)
        events = host.codec.decode_log(loaded.events, session_id=session.id)
        assert events == list(session.events)
        # Byte for byte: the stored bytes are what the codec makes of the live
        # events, so anything derived from them (the model's history) is too.
        # (A streamed reply may be stored as one pack: its events, expanded.)
        expanded = expand_all(loaded.events)
        assert expanded == [host.codec.encode(e) for e in session.events]

    @pytest.mark.asyncio
    async def test_resume_appends_only_new_events(
        self, make_host: Callable[[], Any]
    ) -> None:
        self.need("supports_reopen")
        first: Host = await make_host()
        session = first.sessions.create()
        _turn(session, 1, "one")
        await session.flush()
        expected = list(session.events)
        await first.aclose()

        second: Host = await make_host()
        resumed = await second.sessions.resume(session.id)
        assert list(resumed.events) == expected
        _turn(resumed, 2, "two")
        await resumed.flush()
        loaded = await second.require_persistence().load(session.id)
        events = second.codec.decode_log(loaded.events, session_id=session.id)
        assert events == list(resumed.events)
        assert len(events) == 2 * len(expected)

    @pytest.mark.asyncio
    async def test_a_fork_stores_its_inherited_events_once(
        self, make_host: Callable[[], Any]
    ) -> None:
        host: Host = await make_host()
        source = host.sessions.create()
        _turn(source, 1, "one")
        _turn(source, 2, "two")
        await source.flush()
        cut = len(source.events) // 2
        fork = host.sessions.fork(source.id, cut)
        _turn(fork, 2, "other two")
        await fork.flush()
        await fork.flush()
        backend = host.require_persistence()
        stored_fork = await backend.load(fork.id)
        assert stored_fork.meta.header.parent is not None
        assert stored_fork.meta.header.parent.session_id == source.id
        assert stored_fork.meta.header.parent.seq == cut
        events = host.codec.decode_log(stored_fork.events, session_id=fork.id)
        assert events == list(fork.events)
        assert events[:cut] == list(source.events[:cut])
        stored_source = await backend.load(source.id)
        assert len(expand_all(stored_source.events)) == len(source.events)

    @pytest.mark.asyncio
    async def test_summary_changes_land_with_the_flush(
        self, make_host: Callable[[], Any]
    ) -> None:
        host: Host = await make_host()
        session = host.sessions.create()
        session.set_summary(title="Plan the trip", first_prompt="plan a trip")
        _turn(session, 1, "plan a trip")
        await session.flush()
        loaded = await host.require_persistence().load(session.id)
        assert loaded.meta.summary.title == "Plan the trip"
        # A change with no events to ride along is stored on its own.
        session.set_summary(title="Trip to Rome", status="active")
        await session.flush()
        loaded = await host.require_persistence().load(session.id)
        assert loaded.meta.summary.title == "Trip to Rome"
        assert loaded.meta.summary.status == "active"
        page = await host.require_persistence().list()
        assert [m.summary.title for m in page.items] == ["Trip to Rome"]

    @pytest.mark.asyncio
    async def test_another_process_is_refused_then_takes_over(
        self, make_host: Callable[[], Any]
    ) -> None:
        self.need("supports_multiple_processes")
        owner: Host = await make_host()
        session = owner.sessions.create()
        _turn(session, 1, "one")
        await session.flush()
        other: Host = await make_host()
        with pytest.raises(SessionLockedError):
            await other.sessions.resume(session.id)
        taken = await other.sessions.resume(session.id, steal=True)
        _turn(taken, 2, "two")
        await taken.flush()
        _turn(session, 2, "stale two")
        with pytest.raises(FlushError):
            await session.flush()
        loaded = await other.require_persistence().load(session.id)
        assert other.codec.decode_log(loaded.events, session_id=session.id) == list(
            taken.events
        )
