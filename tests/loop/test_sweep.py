"""Recovery from inside a program: `recover_interrupted` settles crashed turns.

Hosts over one `MemoryStorage` stand for processes. A process that dies
mid-tool leaves its session `active` with the tool's call durable and its
writer role behind; here its death is the loss of that role (as a `flock`
vanishes with its process). The sweep settles such a session without ever
running an unsafe tool again, leaves a session whose owner is alive alone,
and leaves what it settled resumable.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest
from tests.loop.support import SharedMemory, SpyTool, shared_host, stored_events

from turnkeep import AgentLoop, Config, Host, hookimpl
from turnkeep.agent.recovery import open_turn, pairing_problems
from turnkeep.agent.sweep import recover_interrupted
from turnkeep.events import (
    ToolCallData,
    ToolResult,
    TurnCheckpointData,
    TurnEnd,
    TurnStartData,
    UserMessageData,
)
from turnkeep.listfilter import ListFilter
from turnkeep.persistence import SessionPage
from turnkeep.testing import MemoryPersistence, Reply, ScriptedCall, ScriptedModel


def acting_model(tool: str) -> ScriptedModel:
    return ScriptedModel([Reply("on it", (ScriptedCall(tool),)), Reply("done")])


async def mid_tool(host: Host, session_id: str, tool: SpyTool) -> asyncio.Task[object]:
    """Start a turn that is inside `tool` (its call durable) when this returns."""
    loop = AgentLoop.create(
        "a",
        host=host,
        model=acting_model(tool.name),
        tools=[tool],
        session_id=session_id,
    )
    running: asyncio.Task[object] = asyncio.create_task(loop.run_turn("go"))
    await tool.started.wait()
    return running


def die(shared: SharedMemory, session_id: str) -> None:
    """The owner's process is gone: its writer role goes with it."""
    del shared.storage.owners[session_id]


@pytest.mark.asyncio
async def test_a_crashed_turn_is_settled_and_a_live_owner_is_left_alone() -> None:
    shared = SharedMemory()
    async with (
        shared_host(shared) as crashed,
        shared_host(shared) as alive,
        shared_host(shared) as service,
    ):
        act = SpyTool("act", block=True)
        busy = SpyTool("busy", block=True)
        dead_turn = await mid_tool(crashed, "crashed", act)
        live_turn = await mid_tool(alive, "alive", busy)
        clean = AgentLoop.create(
            "a", host=service, model=ScriptedModel(["hi"]), session_id="clean"
        )
        await clean.run_turn("hello")
        await clean.close()
        die(shared, "crashed")

        results = await recover_interrupted(service)

        by_id = {r.session_id: r for r in results}
        assert set(by_id) == {"crashed", "alive"}  # "clean" is not even looked at
        assert by_id["alive"].action == "held"
        done = by_id["crashed"]
        assert done.action == "recovered"
        assert done.report is not None
        assert done.report.interrupted == (act.call_ids[0],)
        assert len(act.calls) == 1  # never run again
        assert service.sessions.list() == []  # released: it stays resumable
        stored = await stored_events(service, "crashed")
        assert open_turn(stored) is None
        assert pairing_problems(stored) == []
        answer = next(e for e in stored if isinstance(e, ToolResult))
        assert answer.data.status == "interrupted"
        end = stored[-1]
        assert isinstance(end, TurnEnd)
        assert end.data.status == "interrupted"
        assert open_turn(await stored_events(service, "alive")) is not None

        again = await AgentLoop.resume(
            "a",
            "crashed",
            host=service,
            model=ScriptedModel(["x", "y", "back"]),
            tools=[act],
        )
        assert again.recovery is not None
        assert not again.recovery.recovered
        assert (await again.run_turn("still there?")).turn == 2

        busy.release.set()
        assert (await live_turn).status == "completed"  # pyright: ignore[reportAttributeAccessIssue]
        dead_turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await dead_turn


@pytest.mark.asyncio
async def test_a_second_sweep_finds_nothing_left_to_do() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as crashed, shared_host(shared) as service:
        act = SpyTool("act", block=True)
        dead_turn = await mid_tool(crashed, "s", act)
        die(shared, "s")
        first = await recover_interrupted(service)
        assert [r.action for r in first] == ["recovered"]
        assert await recover_interrupted(service) == []  # no longer `active`
        dead_turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await dead_turn


@pytest.mark.asyncio
async def test_safe_calls_run_again_only_when_their_tool_is_given() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as crashed, shared_host(shared) as service:
        # A log as a crash leaves it: a safe call made durable, no result.
        session = crashed.sessions.create("s")
        session.set_summary(status="active")
        session.append(TurnStartData(turn=1))
        session.append(UserMessageData(text="look around"))
        session.append(
            ToolCallData(call_id="c1", name="look", arguments={}, replay="safe")
        )
        session.append(TurnCheckpointData(turn=1, reason="unsafe-tool"))
        await session.flush()
        await crashed.sessions.abandon("s")  # the process is gone
        look = SpyTool("look", replay="safe")
        (result,) = await recover_interrupted(service, tools=[look])
        assert result.action == "recovered", result.error
        assert result.report is not None
        assert result.report.rerun == ("c1",)
        assert look.call_ids == ["c1"]


@pytest.mark.asyncio
async def test_a_named_session_that_is_not_stored_is_reported() -> None:
    async with shared_host(SharedMemory()) as service:
        (result,) = await recover_interrupted(service, session_ids=["nowhere"])
        assert result.action == "failed"
        assert result.error is not None
        assert "nowhere" in result.error


class _Paging(MemoryPersistence):
    """The memory backend, counting the summaries its `list` pages hand out."""

    listed = 0

    async def list(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        where: ListFilter | None = None,
    ) -> SessionPage:
        page = await super().list(limit=limit, cursor=cursor, where=where)
        type(self).listed += len(page.items)
        return page


@pytest.mark.asyncio
async def test_the_sweep_reads_only_the_running_sessions_summaries() -> None:
    shared = SharedMemory()
    async with shared_host(shared) as writer:
        for n in range(12):
            done = AgentLoop.create(
                "a", host=writer, model=ScriptedModel(["hi"]), session_id=f"idle-{n}"
            )
            await done.run_turn("hello")
            await done.close()
        act = SpyTool("act", block=True)
        dead_turn = await mid_tool(writer, "crashed", act)
        die(shared, "crashed")

        class Plugin:
            @hookimpl
            def register_persistence(self, register: Callable[..., None]) -> None:
                register("paging", lambda _config: _Paging(shared.storage))  # pyright: ignore[reportUnknownLambdaType]

        _Paging.listed = 0
        sweeper = Host(Config(persistence="paging", plugins="none"), plugins=[Plugin()])
        async with sweeper:
            results = await recover_interrupted(sweeper, page_size=5)
        dead_turn.cancel()
        with contextlib.suppress(BaseException):
            await dead_turn

    assert [(r.session_id, r.action) for r in results] == [("crashed", "recovered")]
    assert _Paging.listed == 1  # the twelve idle sessions were never paged through
