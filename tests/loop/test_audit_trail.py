"""What the loop and the session store record in the audit trail, and when.

Each action is recorded by the process that acts, after it happened: the
new owner records a takeover (and stealing a session nobody holds is no
takeover), the fenced-out owner the write it was refused, the loop a
recovery, a turn refused by a blocking unknown effect or by a changed run
context, and a resolution. A record that cannot be written is logged and
never fails the action. Two hosts over one `MemoryStorage` act as two
processes.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

import attrs
import pytest
from tests.loop.support import SharedMemory, SpyTool, shared_host
from tests.loop.test_effects import BlockingTool, blocked_log, model_for_turn_3

from turnkeep import AgentLoop, Config, Host, hookimpl
from turnkeep.audit import MAX_REASON_CHARS, AuditRecord
from turnkeep.auditing import delete_recorded, note, read_trail
from turnkeep.errors import (
    ContextMismatchError,
    EffectBlockedError,
    FlushError,
    SessionHeldError,
    StorageError,
)
from turnkeep.events import UserMessageData
from turnkeep.memory import MemoryPersistence
from turnkeep.testing import ScriptedModel


async def trail(host: Host, scope: str | None = "s") -> list[AuditRecord]:
    return await read_trail(host.require_persistence(), scope)


@pytest.mark.asyncio
async def test_recovery_a_blocked_turn_and_the_resolution_are_recorded() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as host:
        _, cut = await blocked_log(host)
    async with shared_host(shared) as host:
        loop = await AgentLoop.resume(
            "agent",
            "s",
            host=host,
            model=model_for_turn_3(),
            tools=[BlockingTool("act")],
        )
        with pytest.raises(EffectBlockedError):
            await loop.run_turn("go on")
        await loop.resolve(cut, done=True, by="ana", reason="checked it")
        await loop.run_turn("go on")  # accepted: nothing more is recorded
        await loop.close()
        recovery, refusal, resolution = await trail(host)
    assert [r.number for r in (recovery, refusal, resolution)] == [1, 2, 3]
    assert recovery.action == "recovery"
    assert recovery.detail == {
        "turn": 2,
        "interrupted": 1,
        "rerun": 0,
        "continued": "no",
    }
    assert (refusal.action, refusal.detail) == ("refusal", {"why": "effect blocked"})
    assert cut in refusal.reason
    assert (resolution.action, resolution.reason) == ("resolution", "checked it")
    assert resolution.detail == {"call": cut, "outcome": "done"}
    for record in (recovery, refusal, resolution):
        assert (record.pid, record.session_id) == (os.getpid(), "s")
        assert record.host


@pytest.mark.asyncio
async def test_a_changed_run_context_is_a_recorded_refusal() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as host:
        loop = AgentLoop.create(
            "a", host=host, model=ScriptedModel(["x"]), session_id="s"
        )
        await loop.run_turn("hello")
        await loop.close()
    async with shared_host(shared) as host:
        with pytest.raises(ContextMismatchError):
            await AgentLoop.resume(
                "a", "s", host=host, model=ScriptedModel(["x"]), tools=[SpyTool("t")]
            )
        (refusal,) = await trail(host)
    assert (refusal.action, refusal.detail) == ("refusal", {"why": "context mismatch"})
    assert "tool 't'" in refusal.reason


@pytest.mark.asyncio
async def test_the_new_owner_records_the_takeover_the_old_one_its_refused_write() -> (
    None
):
    shared = SharedMemory()
    async with shared_host(shared) as old, shared_host(shared) as new:
        session = old.sessions.create("s")
        session.append(UserMessageData(text="one"))
        await session.flush()
        taken = await new.sessions.resume("s", steal=True)
        (takeover,) = await trail(new)
        assert (takeover.action, takeover.detail) == ("takeover", {"holder": "live"})
        session.append(UserMessageData(text="two"))
        with pytest.raises(FlushError):
            await session.flush()
        with pytest.raises(FlushError):
            await session.flush()  # refused again: recorded once
        records = await trail(new)
        assert [r.action for r in records] == ["takeover", "fenced_write"]
        assert records[1].detail == {"first_seq": 1, "events": 1}
        await old.sessions.abandon("s")
        await new.sessions.close(taken.id)
        # Stealing a session nobody holds fences nobody: no takeover.
        await new.sessions.resume("s", steal=True)
        assert len(await trail(new)) == 2


@pytest.mark.asyncio
async def test_a_deletion_outlives_its_session_in_the_store_log() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="secret"))
        await host.sessions.close("s")
        backend = host.require_persistence()
        await note(backend, "repair", "s", "a note that goes with the session")
        deleted = await delete_recorded(backend, "s", "asked by ops")
        assert deleted is not None
        assert await trail(host, None) == [deleted]
        assert (deleted.session_id, deleted.reason, deleted.detail) == (
            "s",
            "asked by ops",
            {},
        )


@pytest.mark.asyncio
async def test_a_forced_deletion_is_recorded_as_forced() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as holder, shared_host(shared) as other:
        session = holder.sessions.create("s")
        session.append(UserMessageData(text="held"))
        await session.flush()
        backend = other.require_persistence()
        with pytest.raises(SessionHeldError):
            await delete_recorded(backend, "s", "asked by ops")
        assert await trail(other, None) == []  # refused: nothing recorded
        forced = await delete_recorded(backend, "s", "asked by ops", force=True)
        assert forced is not None
        assert (forced.action, forced.session_id, forced.reason) == (
            "deletion",
            "s",
            "asked by ops",
        )
        assert forced.detail == {"forced": "yes"}
        assert await trail(other, None) == [forced]
        assert not await backend.has("s")
        await holder.sessions.abandon("s")


class _FailingTrail(MemoryPersistence):
    async def record_audit(self, scope: str | None, record: AuditRecord) -> AuditRecord:
        raise StorageError("the audit store is full")


@pytest.mark.asyncio
async def test_a_failed_record_is_logged_and_the_action_stands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = _FailingTrail()
    shared = SharedMemory(storage=backend.storage)
    async with shared_host(shared) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="x"))
        await host.sessions.close("s")
    with caplog.at_level(logging.WARNING, logger="turnkeep.audit"):
        assert await delete_recorded(backend, "s", "ops") is None
    assert not await backend.has("s")
    assert "could not be written" in caplog.text
    assert "the audit store is full" in caplog.text


class _BrokenDriver(MemoryPersistence):
    """Its audit store fails with an error of its own (not turnkeep's)."""

    async def record_audit(self, scope: str | None, record: AuditRecord) -> AuditRecord:
        raise RuntimeError("driver lost its connection")


@attrs.define(eq=False)
class _SlowTrail(MemoryPersistence):
    """Its audit store never answers (a caller gives up and cancels)."""

    recording: asyncio.Event = attrs.field(factory=asyncio.Event)

    async def record_audit(self, scope: str | None, record: AuditRecord) -> AuditRecord:
        self.recording.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


@attrs.define
class _Only:
    """A plugin: backend `only`, this very instance."""

    backend: MemoryPersistence

    @hookimpl
    def register_persistence(self, register: Callable[..., None]) -> None:
        register("only", lambda _config: self.backend)  # pyright: ignore[reportUnknownLambdaType]


def _host_on(backend: MemoryPersistence) -> Host:
    return Host(Config(persistence="only", plugins="none"), plugins=[_Only(backend)])


@pytest.mark.asyncio
async def test_a_takeover_stands_whatever_its_record_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shared = SharedMemory()
    async with shared_host(shared) as old:
        session = old.sessions.create("s")
        session.append(UserMessageData(text="x"))
        await session.flush()
        async with _host_on(_BrokenDriver(shared.storage)) as new:
            with caplog.at_level(logging.WARNING, logger="turnkeep.audit"):
                taken = await new.sessions.resume("s", steal=True)
            assert taken.events == session.events
        await old.sessions.abandon("s")
    assert "driver lost its connection" in caplog.text


@pytest.mark.asyncio
async def test_a_record_cancelled_after_the_takeover_leaves_the_session_live() -> None:
    # The record comes once the session is installed: cancelling a resume
    # while its takeover is recorded leaves a live session, never a claim
    # without one.
    shared = SharedMemory()
    async with shared_host(shared) as old:
        session = old.sessions.create("s")
        session.append(UserMessageData(text="x"))
        await session.flush()
        trail = _SlowTrail(shared.storage)
        async with _host_on(trail) as new:
            resuming = asyncio.ensure_future(new.sessions.resume("s", steal=True))
            # Cancelled while it records the takeover, however long it took
            # to get there.
            await asyncio.wait_for(trail.recording.wait(), 30)
            resuming.cancel()
            with pytest.raises(asyncio.CancelledError):
                await resuming
            assert new.sessions.get("s").events == session.events
        await old.sessions.abandon("s")


@pytest.mark.asyncio
async def test_a_long_reason_is_cut_to_fit_not_refused() -> None:
    async with shared_host(SharedMemory()) as host:
        session = host.sessions.create("s")
        session.append(UserMessageData(text="x"))
        await session.flush()
        stored = await note(host.require_persistence(), "repair", "s", "why " * 500)
    assert stored is not None
    assert len(stored.reason) == MAX_REASON_CHARS
    assert stored.reason.endswith("…")
