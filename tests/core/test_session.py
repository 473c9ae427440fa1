from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Sequence
from typing import Any

import pytest
from tests.conftest import make_config
from tests.support.writes import summary_unsaved, write_state

from turnkeep import Host, define_event_type, hookimpl
from turnkeep.errors import (
    EventNotSerializableError,
    EventTooLargeError,
    FlushError,
    InvalidForkPointError,
    InvalidSeedError,
    InvalidSessionIdError,
    PersistenceNotConfiguredError,
    SessionClosedError,
    SessionExistsError,
    SessionNotFoundError,
    StorageError,
)
from turnkeep.events import (
    ToolCallData,
    TurnEndData,
    UserMessage,
    UserMessageData,
)
from turnkeep.meta import SessionSummary
from turnkeep.persistence import EventRecord
from turnkeep.testing import MemoryPersistence, RecordingPlugin


async def stored(host: Host, session_id: str) -> list[Any]:
    loaded = await host.require_persistence().load(session_id)
    return host.codec.decode_log(loaded.events, session_id=session_id)


@pytest.mark.asyncio
async def test_append_numbers_and_timestamps_from_the_store_clock() -> None:
    ticks = itertools.count(1000)
    async with Host(make_config(), clock=lambda: next(ticks)) as host:
        session = host.sessions.create("s")
        a = session.append(UserMessageData(text="a"))
        b = session.append(UserMessageData(text="b"))
        assert (a.seq, b.seq) == (0, 1)
        assert b.time > a.time >= 1000
        assert list(session.events) == [a, b]
        assert session.next_seq == 2


@pytest.mark.parametrize("bad", ["", "a\x00b", "x" * 257, "\udcff"])
@pytest.mark.asyncio
async def test_invalid_ids_are_refused(host: Host, bad: str) -> None:
    with pytest.raises(InvalidSessionIdError):
        host.sessions.create(bad)
    assert host.sessions.list() == []


@pytest.mark.asyncio
async def test_generated_ids_are_unique_and_sort_by_time(host: Host) -> None:
    ids = [host.sessions.create().id for _ in range(50)]
    assert len(set(ids)) == 50
    assert all(len(i) == 26 for i in ids)


@pytest.mark.asyncio
async def test_the_id_and_header_cannot_be_reassigned(host: Host) -> None:
    session = host.sessions.create("fixed")
    other = host.sessions.create("other")
    with pytest.raises(AttributeError):
        session.header = other.header  # type: ignore[misc]  # the refusal is the test
    with pytest.raises(AttributeError):
        session.id = "other"  # type: ignore[misc]  # the refusal is the test
    assert session.id == session.header.id == session.meta.id == "fixed"
    session.append(UserMessageData(text="hi"))
    await session.flush()
    assert (await host.require_persistence().load("fixed")).meta.id == "fixed"


@pytest.mark.asyncio
async def test_a_live_id_cannot_be_created_twice(host: Host) -> None:
    host.sessions.create("dup")
    with pytest.raises(SessionExistsError):
        host.sessions.create("dup")


@pytest.mark.asyncio
async def test_oversized_event_is_refused_and_nothing_is_buffered() -> None:
    async with Host(make_config(max_event_bytes=200)) as host:
        session = host.sessions.create()
        session.append(UserMessageData(text="small"))
        with pytest.raises(EventTooLargeError, match="user/message"):
            session.append(UserMessageData(text="x" * 500))
        assert len(session.events) == 1
        assert write_state(host, session).snapshotted == 1
        again = session.append(UserMessageData(text="fits"))
        assert again.seq == 1
        await session.flush()
        assert [e.data.text for e in await stored(host, session.id)] == [
            "small",
            "fits",
        ]


@pytest.mark.asyncio
async def test_non_serialisable_event_is_refused_at_its_source(host: Host) -> None:
    recorder = RecordingPlugin()
    async with host.plugin(recorder):
        session = host.sessions.create()
        with pytest.raises(EventNotSerializableError, match="tool/call"):
            session.append(
                ToolCallData(call_id="c", name="n", arguments={"f": object()})
            )
        assert list(session.events) == []
        assert recorder.events(session.id) == []
        assert write_state(host, session).pending == []


@pytest.mark.asyncio
async def test_a_host_without_persistence_refuses_the_same_events() -> None:
    # The rule does not depend on a backend being configured: a log kept only
    # in memory never holds an event that no backend could store.
    config = make_config(persistence="none", max_event_bytes=200)
    async with Host(config) as host:
        assert host.persistence_name is None
        recorder = RecordingPlugin()
        async with host.plugin(recorder):
            session = host.sessions.create()
            session.append(UserMessageData(text="small"))
            with pytest.raises(EventTooLargeError, match="user/message"):
                session.append(UserMessageData(text="x" * 500))
            with pytest.raises(EventNotSerializableError, match="tool/call"):
                session.append(
                    ToolCallData(call_id="c", name="n", arguments={"f": object()}),
                )
            assert [e.seq for e in session.events] == [0]
            assert [e.seq for e in recorder.events(session.id)] == [0]
            assert session.append(UserMessageData(text="fits")).seq == 1


@pytest.mark.asyncio
async def test_mutating_an_event_after_append_does_not_change_what_is_stored(
    host: Host,
) -> None:
    session = host.sessions.create()
    arguments: dict[str, Any] = {"path": "a.txt", "lines": [1, 2]}
    session.append(ToolCallData(call_id="c", name="read", arguments=arguments))
    arguments["path"] = "MUTATED"
    arguments["lines"].append(3)
    await session.flush()
    (event,) = await stored(host, session.id)
    assert event.data.arguments == {"path": "a.txt", "lines": [1, 2]}


@pytest.mark.asyncio
async def test_seed_is_installed_without_session_event_and_stored_once(
    host: Host,
) -> None:
    recorder = RecordingPlugin()
    async with host.plugin(recorder):
        source = host.sessions.create("src")
        for n in range(4):
            source.append(UserMessageData(text=str(n)))
        seeded = host.sessions.create("copy", seed=source.events)
        assert seeded.origin == "seeded"
        assert recorder.events("copy") == []
        seeded.append(UserMessageData(text="after"))
        await seeded.flush()
        await seeded.flush()
        assert [e.data.text for e in await stored(host, "copy")] == [
            "0",
            "1",
            "2",
            "3",
            "after",
        ]


@pytest.mark.asyncio
async def test_a_seed_with_gaps_is_refused(host: Host) -> None:
    event = UserMessage(seq=3, time=1, data=UserMessageData(text="x"))
    with pytest.raises(InvalidSeedError):
        host.sessions.create(seed=[event])


@pytest.mark.asyncio
async def test_fork_points_are_checked(host: Host) -> None:
    source = host.sessions.create("src")
    source.append(UserMessageData(text="x"))
    for bad in (-1, 2):
        with pytest.raises(InvalidForkPointError):
            host.sessions.fork("src", bad)
    with pytest.raises(SessionNotFoundError):
        host.sessions.fork("missing", 0)
    fork = host.sessions.fork("src", 1, "child")
    assert fork.header.parent is not None
    assert (fork.header.parent.session_id, fork.header.parent.seq) == ("src", 1)
    assert fork.origin == "forked"


@pytest.mark.asyncio
async def test_closed_session_takes_no_events(host: Host) -> None:
    session = host.sessions.create()
    await host.sessions.close(session.id)
    assert session.closed
    with pytest.raises(SessionClosedError):
        session.append(UserMessageData(text="late"))
    with pytest.raises(SessionNotFoundError):
        host.sessions.get(session.id)


@pytest.mark.asyncio
async def test_resume_without_persistence_is_a_typed_error() -> None:
    async with Host(make_config(persistence="none")) as host:
        with pytest.raises(PersistenceNotConfiguredError, match="memory"):
            await host.sessions.resume("anything")
        # Sessions still work in memory; flush is a no-op.
        session = host.sessions.create()
        session.append(UserMessageData(text="x"))
        await session.flush()


@pytest.mark.asyncio
async def test_resume_of_an_unknown_session_is_not_found(host: Host) -> None:
    with pytest.raises(SessionNotFoundError):
        await host.sessions.resume("never-stored")


@pytest.mark.asyncio
async def test_resume_returns_the_live_session_when_it_is_live(host: Host) -> None:
    session = host.sessions.create()
    assert await host.sessions.resume(session.id) is session


class Flaky(MemoryPersistence):
    """Fails the next `failures` appends (after writing them, if `lands`)."""

    failures: int = 0
    lands: bool = False

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        if self.failures > 0:
            self.failures -= 1
            if self.lands:
                await super().append(session_id, events, summary=summary)
            raise StorageError(f"injected failure for {session_id}")
        await super().append(session_id, events, summary=summary)


class FlakyPlugin:
    def __init__(self) -> None:
        self.backend = Flaky()

    @hookimpl
    def register_persistence(self, register: Any) -> None:
        register("flaky", lambda _config: self.backend)


@pytest.mark.parametrize(
    "lands", [False, True], ids=["nothing-landed", "landed-then-failed"]
)
@pytest.mark.asyncio
async def test_a_failed_flush_keeps_events_in_order_and_the_next_flush_retries(
    lands: bool,
) -> None:
    plugin = FlakyPlugin()
    async with Host(make_config(persistence="flaky"), plugins=[plugin]) as host:
        session = host.sessions.create()
        session.append(UserMessageData(text="one"))
        await session.flush()
        plugin.backend.failures, plugin.backend.lands = 2, lands
        session.append(UserMessageData(text="two"))
        with pytest.raises(FlushError) as info:
            await session.flush()
        assert info.value.session_id == session.id
        assert isinstance(info.value.__cause__, StorageError)
        assert not session.settled
        session.append(UserMessageData(text="three"))
        if not lands:
            with pytest.raises(FlushError):
                await session.flush()
        else:
            plugin.backend.failures = 0
        await session.flush()
        assert session.settled
        texts = [e.data.text for e in await stored(host, session.id)]
        assert texts == ["one", "two", "three"]


@pytest.mark.asyncio
async def test_concurrent_sessions_never_cross_buffers(host: Host) -> None:
    rnd = random.Random(7)
    sessions = [host.sessions.create(f"s{n}") for n in range(12)]

    async def talk(index: int) -> None:
        session = sessions[index]
        for turn in range(20):
            for part in range(rnd.randint(1, 5)):
                session.append(UserMessageData(text=f"{index}:{turn}:{part}"))
                if rnd.random() < 0.3:
                    await asyncio.sleep(0)
            session.append(TurnEndData(turn=turn, status="completed"))
            await session.flush()

    await asyncio.gather(*(talk(i) for i in range(len(sessions))))
    for index, session in enumerate(sessions):
        events = await stored(host, session.id)
        assert events == list(session.events)
        texts = [e.data.text for e in events if isinstance(e, UserMessage)]
        assert all(t.startswith(f"{index}:") for t in texts)


@pytest.mark.asyncio
async def test_summary_changes_land_with_the_next_flush(host: Host) -> None:
    session = host.sessions.create()
    session.set_summary(title="A title", first_prompt="hello", status="idle")
    session.set_summary(title="A title")  # unchanged: not dirty again
    session.append(UserMessageData(text="hello"))
    await session.flush()
    assert not summary_unsaved(host, session)
    loaded = await host.require_persistence().load(session.id)
    assert loaded.meta.summary.title == "A title"
    assert loaded.meta.summary.status == "idle"


@pytest.mark.asyncio
async def test_plugin_event_types_are_stored_and_decoded(host: Host) -> None:
    note = define_event_type("plug/note")

    class Types:
        @hookimpl
        def register_event_types(self, register: Any) -> None:
            register(note)

    async with host.plugin(Types()):
        session = host.sessions.create()
        session.append(note, {"k": [1, 2]})
        await session.flush()
        (event,) = await stored(host, session.id)
        assert isinstance(event, note)
        assert event.data == {"k": [1, 2]}
