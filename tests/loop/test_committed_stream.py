"""`stream_turn(text, committed=True)`: events only once durable, in seq order.

The crash-sweep half (a killed child never reported a seq its successor
reuses) is `test_committed_crash.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from tests.conftest import make_config
from tests.loop.support import SpyTool

from turnkeep import AgentLoop, Host, SessionEvent, TurnStream, hookimpl
from turnkeep.errors import FlushError, StorageError, TurnNotDurableError
from turnkeep.events import ToolCall, TurnCheckpoint, TurnEnd
from turnkeep.meta import SessionSummary
from turnkeep.persistence import EventRecord
from turnkeep.session import Session
from turnkeep.testing import (
    EchoModel,
    MemoryPersistence,
    Reply,
    ScriptedCall,
    ScriptedModel,
)


class FailingAppends(MemoryPersistence):
    """Memory persistence whose next `failures` appends fail."""

    failures = 0
    appends = 0
    waiting: asyncio.Event | None = None
    hold: asyncio.Event | None = None

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        if self.failures:
            self.failures -= 1
            raise StorageError("disk unplugged")
        if self.waiting is not None and self.hold is not None:
            self.waiting.set()
            await self.hold.wait()
        self.appends += 1
        await super().append(session_id, events, summary=summary)


def failing_host(backend: FailingAppends) -> Host:
    class Plugin:
        @hookimpl
        def register_persistence(self, register: Any) -> None:
            register("failing", lambda _config: backend)

    return Host(make_config(persistence="failing"), plugins=[Plugin()])


def durable(host: Host, session: Session) -> int:
    return len(session.events) - host.unsaved(session)


async def drain(stream: TurnStream, into: list[SessionEvent]) -> None:
    async for event in stream:
        into.append(event)


def model_calling(*names: str) -> ScriptedModel:
    steps = [Reply(f"calling {name}", (ScriptedCall(name, {}),)) for name in names]
    return ScriptedModel([*steps, Reply("done")])


@pytest.mark.asyncio
async def test_committed_events_come_in_seq_order_each_already_durable(
    host: Host,
) -> None:
    look = SpyTool("look", replay="safe", block=True)
    act = SpyTool("act")
    loop = AgentLoop.create(
        "a", host=host, model=model_calling("act", "look"), tools=[look, act]
    )
    session = host.sessions.get(loop.session_id)
    seen: list[SessionEvent] = []

    async def consume() -> None:
        async for event in loop.stream_turn("go", committed=True):
            assert event.seq < durable(host, session)
            assert session.events[event.seq] is event
            seen.append(event)

    consumer = asyncio.create_task(consume())
    await look.started.wait()  # the safe call runs unflushed
    for _ in range(5):
        await asyncio.sleep(0)
    # Up to the unsafe call's checkpoint (flushed before `act` ran) only:
    # the safe call appended after it is not durable, so not yielded.
    assert isinstance(seen[-1], TurnCheckpoint)
    assert seen == session.events[: seen[-1].seq + 1]
    assert isinstance(session.events[-1], ToolCall)
    assert session.events[-1].data.name == "look"
    look.release.set()
    await consumer
    assert seen == list(session.events)
    assert isinstance(seen[-1], TurnEnd)


@pytest.mark.asyncio
async def test_the_default_stream_still_yields_events_before_they_are_durable(
    host: Host,
) -> None:
    look = SpyTool("look", replay="safe", block=True)
    loop = AgentLoop.create("a", host=host, model=model_calling("look"), tools=[look])
    session = host.sessions.get(loop.session_id)
    stream = loop.stream_turn("hi")
    assert not stream.committed
    seen: list[SessionEvent] = []

    async def consume() -> None:
        async for event in stream:
            seen.append(event)

    consumer = asyncio.create_task(consume())
    await look.started.wait()
    for _ in range(5):
        await asyncio.sleep(0)
    assert seen == list(session.events)  # the safe call included, unflushed
    assert durable(host, session) == 0
    look.release.set()
    await consumer


@pytest.mark.asyncio
async def test_a_failed_flush_delays_its_events_until_a_later_flush_lands() -> None:
    backend = FailingAppends()
    act = SpyTool("act")
    async with failing_host(backend) as host:
        loop = AgentLoop.create("a", host=host, model=model_calling("act"), tools=[act])
        session = host.sessions.get(loop.session_id)
        backend.failures = 1  # the unsafe call's intent flush fails
        backend.waiting, backend.hold = asyncio.Event(), asyncio.Event()
        stream = loop.stream_turn("go", committed=True)
        seen: list[SessionEvent] = []

        async def consume() -> None:
            async for event in stream:
                seen.append(event)

        consumer = asyncio.create_task(consume())
        try:
            await backend.waiting.wait()  # the turn's final flush is under way
            for _ in range(5):
                await asyncio.sleep(0)
            assert isinstance(session.events[-1], TurnEnd)
            assert seen == []  # the intent's flush failed: nothing durable yet
        finally:
            backend.hold.set()
            await consumer
        assert seen == list(session.events)
        assert (await stream.result()).status == "failed"  # the tool did not run
        assert act.calls == []
        assert backend.appends == 1


@pytest.mark.asyncio
async def test_a_turn_ending_unsaved_yields_the_durable_events_then_its_error() -> None:
    backend = FailingAppends()
    act = SpyTool("act")
    act.on_call = lambda _context: setattr(backend, "failures", 5)
    async with failing_host(backend) as host:
        loop = AgentLoop.create("a", host=host, model=model_calling("act"), tools=[act])
        session = host.sessions.get(loop.session_id)
        seen: list[SessionEvent] = []
        with pytest.raises(FlushError):
            await drain(loop.stream_turn("go", committed=True), seen)
        assert isinstance(seen[-1], TurnCheckpoint)  # the last durable event
        assert seen == session.events[: len(seen)]
        assert len(session.events) > len(seen)
        assert durable(host, session) == len(seen)
        backend.failures = 0


@pytest.mark.asyncio
async def test_a_turn_that_ends_without_error_but_unsaved_raises_not_durable(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cannot happen with a correct backend (the final flush either lands or
    # raises); the stream still never passes undurable events off as ended.
    monkeypatch.setattr(Host, "unsaved", lambda _self, s: len(s.events))
    loop = AgentLoop.create("a", host=host, model=EchoModel())
    stream = loop.stream_turn("hi", committed=True)
    assert stream.committed
    seen: list[SessionEvent] = []
    with pytest.raises(TurnNotDurableError, match=r"seq 0\.\.\d+ not durable"):
        await drain(stream, seen)
    assert seen == []  # none of them was durable
    assert (await stream.result()).status == "completed"


@pytest.mark.asyncio
async def test_without_persistence_each_flush_releases_everything() -> None:
    async with Host(make_config(persistence="none")) as host:
        loop = AgentLoop.create("a", host=host, model=EchoModel())
        events = [e async for e in loop.stream_turn("hi", committed=True)]
        assert events == list(host.sessions.get(loop.session_id).events)
        assert isinstance(events[-1], TurnEnd)
