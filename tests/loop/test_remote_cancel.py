"""Cancel from another process: a request in the store ends the running turn.

The loop's host and the requester are two backend instances over one
`MemoryStorage` (two processes over one store, as the conformance kit
models them); `turnkeep cancel` with a real second process is in
`tests/cli/test_cancel.py`.
"""

from __future__ import annotations

import asyncio
import logging
import time

import attrs
import pytest
from tests.loop.support import SharedMemory, SpyTool, shared_host
from tests.support.waiting import eventually

from turnkeep import AgentLoop
from turnkeep.agent import remotecancel
from turnkeep.agent.turns import (
    CANCELLED_SAFE_OUTPUT,
    CANCELLED_UNSAFE_OUTPUT,
    Running,
)
from turnkeep.cancelrequest import CancelRequest, ask_to_cancel
from turnkeep.errors import PersistenceNotConfiguredError, StorageError
from turnkeep.events import ToolResult, TurnEnd
from turnkeep.memory import MemoryPersistence
from turnkeep.testing import EchoModel, Reply, ScriptedCall, ScriptedModel

_BOUND = remotecancel.POLL_SECONDS * 10
"""A request is acted on within a poll; this leaves room for a busy machine."""


@pytest.mark.parametrize(
    ("replay", "output"),
    [("unsafe", CANCELLED_UNSAFE_OUTPUT), ("safe", CANCELLED_SAFE_OUTPUT)],
)
@pytest.mark.asyncio
async def test_a_request_from_elsewhere_cancels_a_running_tool(
    replay: str, output: str
) -> None:
    plugin = SharedMemory()
    async with shared_host(plugin) as host:
        tool = SpyTool("work", replay=replay, block=True)  # type: ignore[arg-type]
        model = ScriptedModel([Reply("hi"), Reply("on it", (ScriptedCall("work"),))])
        loop = AgentLoop.create("a", host=host, model=model, tools=[tool])
        sid = loop.session_id
        assert (await loop.run_turn("first")).status == "completed"  # stored
        running = asyncio.create_task(loop.run_turn("go"))
        await tool.started.wait()
        other = MemoryPersistence(plugin.storage)  # another process
        answer = await ask_to_cancel(other, sid, "stop it")
        assert answer.owner_alive
        asked = time.monotonic()
        result = await asyncio.wait_for(running, _BOUND)
        assert time.monotonic() - asked < _BOUND
        assert result.status == "cancelled"
        assert tool.cancelled == 1
        events = host.sessions.get(sid).events
        (tool_result,) = [e for e in events[-4:] if isinstance(e, ToolResult)]
        assert tool_result.data.output == output
        end = events[-1]
        assert isinstance(end, TurnEnd)
        assert end.data.status == "cancelled"
        # The session goes on, and the request it acted on is spent.
        loop.model = EchoModel()
        assert (await loop.run_turn("again")).status == "completed"


@pytest.mark.asyncio
async def test_a_request_older_than_the_turn_cancels_nothing() -> None:
    plugin = SharedMemory()
    async with shared_host(plugin) as host:
        tool = SpyTool("work", replay="safe", block=True)
        model = ScriptedModel(
            [Reply("hi"), Reply("on it", (ScriptedCall("work"),)), Reply("done")]
        )
        loop = AgentLoop.create("a", host=host, model=model, tools=[tool])
        sid = loop.session_id
        assert (await loop.run_turn("first")).status == "completed"
        other = MemoryPersistence(plugin.storage)
        assert (await other.request_cancel(sid, "too early")).number == 1
        # Older by the clock: a request in the admission's own millisecond
        # would count (see test_requests_are_ordered_by_their_time).
        await asyncio.sleep(0.002)
        running = asyncio.create_task(loop.run_turn("go"))
        await tool.started.wait()
        await asyncio.sleep(remotecancel.POLL_SECONDS * 3)  # several polls
        assert not running.done()
        tool.release.set()
        assert (await running).status == "completed"


@pytest.mark.asyncio
async def test_no_watcher_outlives_its_turn() -> None:
    plugin = SharedMemory()
    async with shared_host(plugin) as host:
        loop = AgentLoop.create("a", host=host, model=EchoModel())
        for text in ("one", "two", "three"):
            assert (await loop.run_turn(text)).status == "completed"
        await asyncio.sleep(0)  # the done callbacks have run
        names = [t.get_name() for t in asyncio.all_tasks()]
        assert not [n for n in names if n.startswith("turnkeep cancel watch")]


class _FailingProbe(MemoryPersistence):
    """A store whose cancel probe fails (a server gone for a moment)."""

    async def cancel_requested(self, session_id: str, after: int) -> None:
        raise StorageError("the server went away")


@attrs.define(eq=False)
class _FakeSession:
    id: str = "s"


@attrs.define
class _FakeHost:
    backend: object | None

    def require_persistence(self) -> object:
        if self.backend is None:
            raise PersistenceNotConfiguredError("none")
        return self.backend


@pytest.mark.asyncio
async def test_a_failing_probe_is_logged_and_never_fails_the_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    turn = asyncio.create_task(asyncio.sleep(5))
    running = Running(session=_FakeSession(), task=turn)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="turnkeep.agent"):
        remotecancel.watch(_FakeHost(_FailingProbe()), running, interval=0.01)  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
    assert not running.cancel_requested
    assert not turn.done()
    assert "could not look for cancel requests of 's'" in caplog.text
    turn.cancel()
    # Without a store, or with one that cannot carry requests, nothing watches.
    before = len(asyncio.all_tasks())
    other = Running(session=running.session, task=asyncio.create_task(asyncio.sleep(5)))
    remotecancel.watch(_FakeHost(None), other)  # type: ignore[arg-type]
    remotecancel.watch(_FakeHost(object()), other)  # type: ignore[arg-type]
    assert len(asyncio.all_tasks()) == before + 1  # only `other`'s own task
    assert other.task is not None
    other.task.cancel()


class _CountingProbe(MemoryPersistence):
    """A store that counts its cancel probes."""

    probes: int = 0

    async def cancel_requested(
        self, session_id: str, after: int
    ) -> CancelRequest | None:
        type(self).probes += 1
        return await super().cancel_requested(session_id, after)


@pytest.mark.asyncio
async def test_a_turn_shorter_than_a_poll_asks_the_store_nothing() -> None:
    _CountingProbe.probes = 0
    backend = _CountingProbe()
    for _ in range(3):
        turn = asyncio.create_task(asyncio.sleep(0))
        running = Running(session=_FakeSession(), task=turn)  # type: ignore[arg-type]
        remotecancel.watch(_FakeHost(backend), running, interval=0.05)  # type: ignore[arg-type]
        await turn
    await asyncio.sleep(0.15)  # past the timers the turns armed
    assert _CountingProbe.probes == 0
    # A turn that outlives a poll is probed, every poll: this one runs until
    # its third probe (a busy machine may be slow to get there, never fast).
    loop = asyncio.get_running_loop()
    started = loop.time()
    turn = asyncio.create_task(_probed(3))
    running = Running(session=_FakeSession(), task=turn)  # type: ignore[arg-type]
    remotecancel.watch(_FakeHost(backend), running, interval=0.05)  # type: ignore[arg-type]
    await turn
    assert loop.time() - started >= 0.14  # a poll apart each, not a busy loop


async def _probed(times: int) -> None:
    """A turn that runs until probed `times` times, or fails after 10 s."""
    await eventually(
        lambda: _CountingProbe.probes >= times, what=f"{times} probes", within=10.0
    )


@attrs.define
class _OneRequest:
    """A store whose latest cancel request is `request`."""

    request: CancelRequest

    async def request_cancel(self, session_id: str, reason: str) -> CancelRequest:
        raise NotImplementedError  # never called: the watcher only probes

    async def cancel_requested(
        self, session_id: str, after: int
    ) -> CancelRequest | None:
        return self.request if self.request.number > after else None


async def _watched(backend: object, session: object, admitted_ms: int) -> bool:
    """Whether a turn admitted at `admitted_ms` is cancelled within a poll."""
    turn = asyncio.create_task(asyncio.sleep(1))
    running = Running(session=session, task=turn)  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(remotecancel, "now_ms", lambda: admitted_ms)
        remotecancel.watch(_FakeHost(backend), running, interval=0.01)  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    turn.cancel()
    return running.cancel_requested


@pytest.mark.asyncio
async def test_requests_are_ordered_by_their_time() -> None:
    request = CancelRequest(number=1, reason="stop", requested_at=5_000)
    # Recorded before the turn was admitted: it cancels nothing, even when
    # first seen while the turn runs.
    assert not await _watched(_OneRequest(request), _FakeSession("a"), 5_001)
    # Recorded in the admission's millisecond, or after: it cancels.
    assert await _watched(_OneRequest(request), _FakeSession("b"), 5_000)
    assert await _watched(_OneRequest(request), _FakeSession("c"), 4_000)


@pytest.mark.asyncio
async def test_a_request_cancels_one_turn_only() -> None:
    # A clock running ahead on the requester's side makes the request look
    # newer than every later turn; the number it was seen under still
    # keeps it from cancelling another turn of the same session.
    request = CancelRequest(number=7, reason="stop", requested_at=9_000)
    session = _FakeSession("s")
    assert await _watched(_OneRequest(request), session, 1_000)
    assert not await _watched(_OneRequest(request), session, 2_000)
    newer = CancelRequest(number=8, reason="again", requested_at=9_000)
    assert await _watched(_OneRequest(newer), session, 3_000)
