"""`session_committed`: each flush's newly durable events, once, in order."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from tests.conftest import make_config

from turnkeep import Host, hookimpl
from turnkeep.errors import FlushError, StorageError
from turnkeep.events import UserMessageData
from turnkeep.memory import MemoryPersistence, MemoryStorage
from turnkeep.meta import SessionSummary


class Recorder:
    def __init__(self) -> None:
        self.ranges: list[tuple[str, int, int]] = []

    @hookimpl
    def session_committed(self, session: Any, first_seq: int, last_seq: int) -> None:
        self.ranges.append((session.id, first_seq, last_seq))


class Flaky(MemoryPersistence):
    failures: int = 0

    async def append(
        self,
        session_id: str,
        events: Any,
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        if self.failures:
            self.failures -= 1
            raise StorageError("disk unplugged")
        await super().append(session_id, events, summary=summary)


def with_backend(backend: MemoryPersistence, *plugins: object) -> Host:
    class Plugin:
        @hookimpl
        def register_persistence(self, register: Any) -> None:
            register("test", lambda _config: backend)

    return Host(make_config(persistence="test"), plugins=[Plugin(), *plugins])


def say(session: Any, *texts: str) -> None:
    for text in texts:
        session.append(UserMessageData(text=text))


@pytest.mark.asyncio
async def test_each_flush_reports_what_it_made_durable() -> None:
    recorder = Recorder()
    async with with_backend(MemoryPersistence(), recorder) as host:
        session = host.sessions.create("s")
        say(session, "a", "b", "c")
        await session.flush()
        await session.flush()  # nothing new: nothing reported
        say(session, "d", "e")
        await session.flush()
        assert recorder.ranges == [("s", 0, 2), ("s", 3, 4)]


@pytest.mark.asyncio
async def test_a_failed_flush_reports_nothing_and_its_retry_reports_once() -> None:
    recorder = Recorder()
    backend = Flaky()
    async with with_backend(backend, recorder) as host:
        session = host.sessions.create("s")
        say(session, "a")
        await session.flush()
        backend.failures = 1
        say(session, "b", "c")
        with pytest.raises(FlushError):
            await session.flush()
        assert recorder.ranges == [("s", 0, 0)]
        say(session, "d")
        await session.flush()
        assert recorder.ranges == [("s", 0, 0), ("s", 1, 3)]


@pytest.mark.asyncio
async def test_loaded_events_are_not_reported_again() -> None:
    storage = MemoryStorage()
    async with with_backend(MemoryPersistence(storage)) as host:
        session = host.sessions.create("s")
        say(session, "a", "b")
        await host.sessions.close(session.id)
    recorder = Recorder()
    async with with_backend(MemoryPersistence(storage), recorder) as host:
        session = await host.sessions.resume("s")
        say(session, "c")
        await session.flush()
        assert recorder.ranges == [("s", 2, 2)]


@pytest.mark.asyncio
async def test_a_failing_observer_does_not_fail_the_flush(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Failing:
        @hookimpl
        def session_committed(
            self, session: Any, first_seq: int, last_seq: int
        ) -> None:
            raise RuntimeError("observer bug")

    async with with_backend(MemoryPersistence(), Failing()) as host:
        session = host.sessions.create("s")
        say(session, "a")
        with caplog.at_level(logging.ERROR, logger="turnkeep"):
            await session.flush()
        assert host.is_settled(session)
        assert "session_committed implementation failed" in caplog.text


@pytest.mark.asyncio
async def test_nothing_is_reported_without_persistence() -> None:
    recorder = Recorder()
    config = make_config(persistence="none")
    async with Host(config, plugins=[recorder]) as host:
        session = host.sessions.create("s")
        say(session, "a")
        await session.flush()
        assert recorder.ranges == []
