"""What a turn costs the backend: one durable write when nothing forces more."""

from __future__ import annotations

from typing import Any

import pytest

from turnkeep import AgentLoop, Host, function_tool
from turnkeep.hookspecs import hookimpl
from turnkeep.memory import MemoryPersistence
from turnkeep.meta import SessionSummary
from turnkeep.testing import ScriptedModel


@function_tool(replay="safe")
async def clock(arguments: Any, context: Any) -> str:
    return "12:00"


@function_tool(replay="unsafe")
async def send(arguments: Any, context: Any) -> str:
    return "sent"


class Counting(MemoryPersistence):
    """The memory backend, counting its durable writes."""

    appends: int = 0
    updates: int = 0

    async def append(
        self, session_id: str, events: Any, *, summary: SessionSummary | None = None
    ) -> None:
        self.appends += 1
        await super().append(session_id, events, summary=summary)

    async def update(self, session_id: str, summary: SessionSummary) -> None:
        self.updates += 1
        await super().update(session_id, summary)


def _host(backend: MemoryPersistence) -> Host:
    class Plugin:
        @hookimpl
        def register_persistence(self, register: Any) -> None:
            register("counting", lambda _config: backend)

    return Host({"persistence": "counting", "plugins": "none"}, plugins=[Plugin()])


@pytest.mark.asyncio
async def test_a_turn_with_a_safe_tool_is_one_append_and_no_summary_write() -> None:
    script = [ScriptedModel.calling("clock"), "Noon."] * 3
    backend = Counting()
    async with _host(backend) as host:
        model = ScriptedModel(script)
        loop = AgentLoop.create("a", host=host, model=model, tools=[clock])
        await loop.run_turn("What time is it?")  # the first turn names the session
        backend.appends = backend.updates = 0
        for _ in range(2):
            result = await loop.run_turn("And now?")
            assert result.status == "completed"
        assert (backend.appends, backend.updates) == (2, 0)
        stored = await backend.load(loop.session_id)
        assert stored.meta.summary.status == "idle"
        assert stored.meta.summary.turns == 3
        await loop.close()


@pytest.mark.asyncio
async def test_a_status_that_really_changed_is_stored() -> None:
    script = [ScriptedModel.calling("send"), "Sent."]
    backend = Counting()
    async with _host(backend) as host:
        model = ScriptedModel(script)
        loop = AgentLoop.create("a", host=host, model=model, tools=[send])
        await loop.run_turn("Send it")
        # The unsafe call makes the turn durable before it runs, with the
        # session marked active; the end of the turn stores it idle again,
        # in its own flush: one backend call per flush, no `update`.
        assert (backend.appends, backend.updates) == (2, 0)
        stored = await backend.load(loop.session_id)
        assert stored.meta.summary.status == "idle"
        assert stored.meta.summary.title is not None
        await loop.close()


class OldCounting(MemoryPersistence):
    """A backend written before `append` took a summary."""

    appends: int = 0
    updates: int = 0

    async def append(self, session_id: str, events: Any) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
        self.appends += 1
        await super().append(session_id, events)

    async def update(self, session_id: str, summary: SessionSummary) -> None:
        self.updates += 1
        await super().update(session_id, summary)


@pytest.mark.asyncio
async def test_a_backend_without_summary_appends_gets_an_update() -> None:
    script = [ScriptedModel.calling("send"), "Sent."]
    backend = OldCounting()
    host = _host(backend)
    async with host:
        model = ScriptedModel(script)
        loop = AgentLoop.create("a", host=host, model=model, tools=[send])
        await loop.run_turn("Send it")
        assert backend.appends == 2
        assert backend.updates >= 1
        stored = await backend.load(loop.session_id)
        assert stored.meta.summary.status == "idle"
        await loop.close()
