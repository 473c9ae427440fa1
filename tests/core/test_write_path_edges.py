"""Edges of the write path: rejections, cancellations, close, reload, shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from tests.conftest import make_config
from tests.support.writes import summary_unsaved

from turnkeep import Host, SessionMeta, SessionSummary, hookimpl
from turnkeep.errors import (
    EventRejectedError,
    FlushError,
    HookContractError,
    InvalidSummaryError,
    PluginDisposeError,
    SequenceError,
    SessionClosedError,
    StorageError,
)
from turnkeep.events import UserMessage, UserMessageData
from turnkeep.persistence import EventRecord
from turnkeep.testing import MemoryPersistence, MemoryStorage


class Controlled(MemoryPersistence):
    """A memory backend with knobs: slow create, failing or lying appends."""

    create_delay: float = 0.0
    fail_updates: int = 0
    lose_acks: int = 0  # append lands, then reports failure
    hole_refusals: int = 0  # refuse a batch at its second record, writing none

    async def create(self, meta: SessionMeta) -> None:
        if self.create_delay:
            await asyncio.sleep(self.create_delay)
        await super().create(meta)

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        if self.hole_refusals and len(events) > 1:
            self.hole_refusals -= 1
            at = events[1].seq
            raise SequenceError(
                f"batch not contiguous at seq {at}",
                session_id=session_id,
                expected=at,
                got=at,
            )
        await super().append(session_id, events, summary=summary)
        if self.lose_acks:
            self.lose_acks -= 1
            raise StorageError("connection reset after commit")

    async def update(self, session_id: str, summary: SessionSummary) -> None:
        if self.fail_updates:
            self.fail_updates -= 1
            raise StorageError("update failed")
        await super().update(session_id, summary)


class ControlledPlugin:
    def __init__(self) -> None:
        self.storage = MemoryStorage()
        self.knobs: dict[str, Any] = {}
        self.instances: list[Controlled] = []

    @hookimpl
    def register_persistence(self, register: Any) -> None:
        register("controlled", self.make)

    def make(self, _config: object) -> Controlled:
        backend = Controlled(self.storage)
        for key, value in self.knobs.items():
            setattr(backend, key, value)
        self.instances.append(backend)
        return backend


def texts(host: Host, storage: MemoryStorage, session_id: str) -> list[str]:
    events = host.codec.decode_log(
        storage.sessions[session_id].events, session_id=session_id
    )
    return [e.data.text for e in events]  # type: ignore[attr-defined]


class NoSwearing:
    @hookimpl(tryfirst=True)
    def session_event(self, event: Any) -> None:
        if isinstance(event, UserMessage) and "darn" in event.data.text:
            raise EventRejectedError("no swearing", event_type=event.type)


@pytest.mark.asyncio
async def test_an_event_rejected_after_the_snapshot_is_not_stored() -> None:
    plugin = ControlledPlugin()
    # Registered before the write-behind, so the write-behind snapshots first.
    config = make_config(persistence="controlled")
    async with Host(config, plugins=[plugin, NoSwearing()]) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="hello"))
        with pytest.raises(EventRejectedError):
            session.append(UserMessageData(text="darn it"))
        session.append(UserMessageData(text="sorry"))
        await session.flush()
        assert texts(host, plugin.storage, "s") == ["hello", "sorry"]
        other = host.sessions.create("t")
        other.append(UserMessageData(text="hi"))
        with pytest.raises(EventRejectedError):
            other.append(UserMessageData(text="darn"))
        await other.flush()
        assert texts(host, plugin.storage, "t") == ["hi"]


@pytest.mark.asyncio
async def test_close_takes_no_events_while_it_flushes(host: Host) -> None:
    session = host.sessions.create("s")
    session.append(UserMessageData(text="one"))
    closing = asyncio.ensure_future(host.sessions.close("s"))
    await asyncio.sleep(0)
    with pytest.raises(SessionClosedError):
        session.append(UserMessageData(text="two"))
    await closing
    loaded = await host.require_persistence().load("s")
    assert len(loaded.events) == 1


@pytest.mark.asyncio
async def test_a_failed_close_leaves_the_session_open() -> None:
    plugin = ControlledPlugin()
    async with Host(make_config(persistence="controlled"), plugins=[plugin]) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="one"))
        await session.flush()  # registered: a later title needs an update
        session.set_summary(title="t")
        plugin.instances[0].fail_updates = 1
        with pytest.raises(FlushError):
            await host.sessions.close("s")
        assert not session.closed
        session.append(UserMessageData(text="two"))
        await host.sessions.close("s")
        assert texts(host, plugin.storage, "s") == ["one", "two"]


@pytest.mark.asyncio
async def test_cancelling_a_flush_during_registration_does_not_poison_later_ones() -> (
    None
):
    plugin = ControlledPlugin()
    plugin.knobs["create_delay"] = 0.05
    async with Host(make_config(persistence="controlled"), plugins=[plugin]) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="hello"))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(session.flush(), 0.001)
        await session.flush()
        await session.flush()
        assert texts(host, plugin.storage, "s") == ["hello"]


@pytest.mark.asyncio
async def test_a_summary_whose_store_was_interrupted_is_stored_later() -> None:
    plugin = ControlledPlugin()
    async with Host(make_config(persistence="controlled"), plugins=[plugin]) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="x"))
        await session.flush()
        session.set_summary(title="Quarterly report")
        plugin.instances[0].fail_updates = 1
        with pytest.raises(FlushError):
            await session.flush()
        assert summary_unsaved(host, session)
        await session.flush()
        assert plugin.storage.sessions["s"].meta.summary.title == "Quarterly report"


@pytest.mark.asyncio
async def test_summary_text_that_cannot_be_stored_is_refused_up_front(
    host: Host,
) -> None:
    session = host.sessions.create("s")
    with pytest.raises(InvalidSummaryError):
        session.set_summary(title="bad \udce9 paste")
    assert session.summary.title is None
    assert not summary_unsaved(host, session)


@pytest.mark.asyncio
async def test_a_lost_acknowledgement_of_the_first_flush_is_settled() -> None:
    plugin = ControlledPlugin()
    async with Host(make_config(persistence="controlled"), plugins=[plugin]) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="one"))
        plugin.instances[0].lose_acks = 1
        with pytest.raises(FlushError):
            await session.flush()
        session.append(UserMessageData(text="two"))
        await session.flush()
        assert texts(host, plugin.storage, "s") == ["one", "two"]


@pytest.mark.asyncio
async def test_a_summary_whose_flush_had_landed_unacknowledged_is_stored_apart() -> (
    None
):
    plugin = ControlledPlugin()
    async with Host(make_config(persistence="controlled"), plugins=[plugin]) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="one"))
        await session.flush()
        session.set_summary(title="first")
        session.append(UserMessageData(text="two"))
        plugin.instances[0].lose_acks = 1  # lands with "first", reports failure
        with pytest.raises(FlushError):
            await session.flush()
        # The retry learns the whole batch had landed: nothing is left for
        # the newer summary to ride along with, so it is stored on its own.
        session.set_summary(title="second")
        await session.flush()
        stored = plugin.storage.sessions["s"].meta.summary
        assert stored.title == "second"
        assert texts(host, plugin.storage, "s") == ["one", "two"]


@pytest.mark.asyncio
async def test_after_aclose_nothing_pretends_to_be_durable() -> None:
    plugin = ControlledPlugin()
    host = Host(make_config(persistence="controlled"), plugins=[plugin])
    await host.start()
    session = host.sessions.create("s")
    session.append(UserMessageData(text="one"))
    await host.aclose()
    assert host.persistence_name is None
    with pytest.raises(SessionClosedError):
        session.append(UserMessageData(text="two"))
    with pytest.raises(FlushError, match="closed"):
        await session.flush()
    assert texts(host, plugin.storage, "s") == ["one"]


class FailsDispose:
    def __init__(self) -> None:
        self.disposed = False

    @hookimpl
    def plugin_dispose(self) -> None:
        self.disposed = True
        raise RuntimeError("boom")


class Tidy:
    def __init__(self) -> None:
        self.disposed = False

    @hookimpl
    def plugin_dispose(self) -> None:
        self.disposed = True


@pytest.mark.asyncio
async def test_aclose_disposes_every_plugin_and_raises_a_typed_error() -> None:
    tidy, failing = Tidy(), FailsDispose()
    host = Host(make_config(), plugins=[tidy, failing])
    await host.start()
    with pytest.raises(PluginDisposeError, match="boom"):
        await host.aclose()
    assert tidy.disposed
    assert failing.disposed
    assert host.plugin_names() == []


@pytest.mark.asyncio
async def test_two_concurrent_resumes_return_one_session() -> None:
    plugin = ControlledPlugin()
    async with Host(make_config(persistence="controlled"), plugins=[plugin]) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="one"))
        await host.sessions.close("s")
        first, second = await asyncio.gather(
            host.sessions.resume("s"), host.sessions.resume("s")
        )
        assert first is second


class Bad:
    @hookimpl
    def session_event(self, wrong_argument: Any) -> None: ...


@pytest.mark.asyncio
async def test_a_plugin_with_a_wrong_hook_signature_is_a_typed_error(
    host: Host,
) -> None:
    with pytest.raises(HookContractError, match="wrong_argument"):
        host.register(Bad(), "bad")
    assert host.pm.get_plugin("bad") is None


@pytest.mark.asyncio
async def test_a_refusal_inside_a_batch_is_not_taken_for_records_that_landed() -> None:
    plugin = ControlledPlugin()
    plugin.knobs["hole_refusals"] = 1
    async with Host(make_config(persistence="controlled"), plugins=[plugin]) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="one"))
        session.append(UserMessageData(text="two"))
        with pytest.raises(FlushError, match="disagree"):
            await session.flush()
        assert host.unsaved(session) == 2  # nothing acknowledged that never landed
        await session.flush()  # the refusal passed: both land now
        assert texts(host, plugin.storage, "s") == ["one", "two"]
