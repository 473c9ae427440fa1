"""The commit manifest: what a turn leaves behind, checked on resume by policy.

Each `turn/end` names the versions of outside state that `turn_manifest`
implementations give (absent when none does). `AgentLoop.resume` and
`open` ask them again before recovery and compare with the last committed
manifest: `drift="refuse"` (the default) raises `ManifestDriftError` with
each difference and appends nothing; `drift="record"` appends a durable
`run/drift` and goes on. The crash sweep (`test_crash_sweep.py`) checks the
same at every durability point with a kill and a power cut.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import attrs
import pytest
from tests.loop.support import (
    BACKENDS,
    SharedMemory,
    SpyTool,
    backend_host_config,
    backend_ready_async,
    shared_host,
    stored_events,
)

from turnkeep import AgentLoop, Host, SessionEvent, hookimpl
from turnkeep.agent.partial import tail_text
from turnkeep.agent.recovery import pairing_problems
from turnkeep.errors import (
    ConfigurationError,
    ManifestDriftError,
    ManifestHookError,
    SessionLockedError,
)
from turnkeep.events import (
    AssistantChunk,
    AssistantChunkData,
    Manifest,
    ManifestDifference,
    RunDrift,
    RunDriftData,
    ToolResult,
    TurnEnd,
    TurnEndData,
)
from turnkeep.manifests import differences, incomplete_name, last_manifest
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel


@attrs.define(eq=False)
class World:
    """Outside state by name; its `turn_manifest` names the versions."""

    versions: dict[str, str] = attrs.field(factory=lambda: {"workspace": "v1"})
    asked: int = 0

    @hookimpl
    def turn_manifest(self) -> Manifest | None:
        self.asked += 1
        return dict(self.versions) or None


@attrs.define(eq=False)
class AsyncWorld:
    """An `async def` implementation (it would hash off the event loop)."""

    versions: dict[str, str] = attrs.field(factory=lambda: {"db": "row-7"})

    @hookimpl
    async def turn_manifest(self) -> Manifest:
        await asyncio.sleep(0)
        return dict(self.versions)


@attrs.define(eq=False)
class Broken:
    answer: object = None
    fail: bool = False

    @hookimpl
    def turn_manifest(self) -> object:
        if self.fail:
            raise RuntimeError("the disk is gone")
        return self.answer


def turn_ends(events: list[SessionEvent]) -> list[TurnEnd]:
    return [e for e in events if isinstance(e, TurnEnd)]


def echo(n: int) -> ScriptedModel:
    return ScriptedModel([f"reply {i}" for i in range(n)])


# -- recorded in turn/end ---------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_turn_end_names_the_manifest_only_when_a_plugin_does(
    backend: str, tmp_path: Path
) -> None:
    await backend_ready_async(backend, tmp_path)
    world = World()
    async with Host(backend_host_config(backend, tmp_path)) as host:
        async with host.plugin(world):
            loop = AgentLoop.create("a", host=host, model=echo(2), session_id="named")
            await loop.run_turn("hello")
            world.versions["workspace"] = "v2"
            await loop.run_turn("again")
            await loop.close()
        plain = AgentLoop.create("a", host=host, model=echo(1), session_id="plain")
        await plain.run_turn("hello")
        await plain.close()
        named = await host.require_persistence().load("named")
        unnamed = await host.require_persistence().load("plain")
    ends = [r for r in named.events if r.startswith(b'{"type":"turn/end"')]
    assert [b'"manifest":{"workspace":"v1"}' in r for r in ends] == [True, False]
    assert b'"manifest":{"workspace":"v2"}' in ends[1]
    # No plugin names anything: the field is absent, as in older logs.
    assert all(b"manifest" not in r for r in unnamed.events)

    # Cold: a new host resumes with the world unchanged; nothing is recorded.
    async with Host(backend_host_config(backend, tmp_path)) as host, host.plugin(world):
        loop = await AgentLoop.resume("a", "named", host=host, model=echo(3))
        assert (await loop.run_turn("third")).status == "completed"
        await loop.close()
        events = await stored_events(host, "named")
    assert not any(isinstance(e, RunDrift) for e in events)
    assert [e.data.manifest for e in turn_ends(events)] == [
        {"workspace": "v1"},
        {"workspace": "v2"},
        {"workspace": "v2"},
    ]


@pytest.mark.asyncio
async def test_answers_are_merged_by_name_and_async_ones_awaited(host: Host) -> None:
    async with host.plugin(World()), host.plugin(AsyncWorld()):
        loop = AgentLoop.create("a", host=host, model=echo(1))
        await loop.run_turn("hello")
    [end] = turn_ends(await stored_events(host, loop.session_id))
    assert end.data.manifest == {"db": "row-7", "workspace": "v1"}


@pytest.mark.asyncio
async def test_a_cancelled_turn_names_the_world_it_leaves(host: Host) -> None:
    world = World()
    act = SpyTool("act", block=True)
    model = ScriptedModel([Reply("acting", (ScriptedCall("act"),))])
    async with host.plugin(world):
        loop = AgentLoop.create("a", host=host, model=model, tools=[act])
        running = asyncio.create_task(loop.run_turn("go"))
        await act.started.wait()
        world.versions["workspace"] = "half-written"
        await loop.cancel()
        result = await running
    assert result.status == "cancelled"
    [end] = turn_ends(await stored_events(host, loop.session_id))
    assert end.data.manifest == {"workspace": "half-written"}


@pytest.mark.asyncio
async def test_a_failing_implementation_at_turn_end_is_logged_and_left_out(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    async with host.plugin(World()), host.plugin(Broken(fail=True), name="broken"):
        loop = AgentLoop.create("a", host=host, model=echo(1))
        with caplog.at_level(logging.WARNING, logger="turnkeep"):
            result = await loop.run_turn("hello")
    assert result.status == "completed"
    [end] = turn_ends(await stored_events(host, loop.session_id))
    manifest = end.data.manifest
    assert isinstance(manifest, dict)
    assert "the disk is gone" in manifest.pop(incomplete_name("broken"))
    assert manifest == {"workspace": "v1"}
    assert "plugin 'broken'" in caplog.text
    assert "the disk is gone" in caplog.text


@pytest.mark.asyncio
async def test_a_turn_whose_manifest_failed_is_what_a_resume_compares_with() -> None:
    # Turn 2 changes the world itself, and its manifest fails to say so: the
    # resume compares with turn 2's incomplete manifest (the gap is named),
    # never with turn 1's, which would blame the turn's own change on the
    # outside world.
    shared, world, flaky = SharedMemory(), World(), Broken(answer={"db": "row-1"})
    async with (
        shared_host(shared) as host,
        host.plugin(world),
        host.plugin(flaky, name="flaky"),
    ):
        loop = AgentLoop.create("a", host=host, model=echo(2), session_id="s")
        await loop.run_turn("one")
        world.versions["workspace"] = "v2"  # the turn's own change
        flaky.fail = True
        await loop.run_turn("two")
        await loop.close()
    flaky.fail = False
    async with (
        shared_host(shared) as host,
        host.plugin(world),
        host.plugin(flaky, name="flaky"),
    ):
        with pytest.raises(ManifestDriftError) as refused:
            await AgentLoop.resume("a", "s", host=host, model=echo(1))
    found = {d.name: (d.recorded, d.current) for d in refused.value.differences}
    assert set(found) == {incomplete_name("flaky"), "db"}
    assert found["db"] == (None, "row-1")  # its names were missing, not changed
    assert "workspace" not in found  # the same as turn 2 left it


# -- checked on resume ------------------------------------------------------------


async def stored_session(shared: SharedMemory, world: World) -> list[SessionEvent]:
    """Session `s`, one turn ended with `world` named; returns its events."""
    async with shared_host(shared) as host, host.plugin(world):
        loop = AgentLoop.create("a", host=host, model=echo(1), session_id="s")
        await loop.run_turn("hello")
        await loop.close()
        return await stored_events(host, "s")


@pytest.mark.asyncio
async def test_an_unchanged_world_resumes_without_a_trace() -> None:
    shared, world = SharedMemory(), World()
    before = await stored_session(shared, world)
    async with shared_host(shared) as host, host.plugin(world):
        loop = await AgentLoop.resume("a", "s", host=host, model=echo(1))
        await loop.close()
        assert await stored_events(host, "s") == before


@pytest.mark.asyncio
async def test_a_changed_world_is_refused_by_default_with_what_differs() -> None:
    shared, world = SharedMemory(), World({"workspace": "v1", "gone": "g1"})
    before = await stored_session(shared, world)
    world.versions = {"workspace": "v2", "new": "n1"}
    async with shared_host(shared) as host, host.plugin(world):
        with pytest.raises(ManifestDriftError) as refused:
            await AgentLoop.resume("a", "s", host=host, model=echo(1))
        error = refused.value
        assert error.code == "manifest-drift"
        assert error.session_id == "s"
        assert error.since_seq == turn_ends(before)[-1].seq
        assert error.differences == (
            ManifestDifference(name="gone", recorded="g1", current=None),
            ManifestDifference(name="new", recorded=None, current="n1"),
            ManifestDifference(name="workspace", recorded="v1", current="v2"),
        )
        message = str(error)
        assert "workspace: recorded v1, now v2" in message
        assert "gone: recorded g1, now not named" in message
        assert "new: not recorded, now n1" in message
        assert 'drift="record"' in message
        # Nothing was appended, and the session was let go: it can be taken.
        assert await stored_events(host, "s") == before
        assert host.sessions.list() == []
        loop = await AgentLoop.resume(
            "a", "s", host=host, model=echo(1), drift="record"
        )
        await loop.close()


@pytest.mark.asyncio
async def test_record_appends_a_durable_drift_and_goes_on() -> None:
    shared, world = SharedMemory(), World()
    before = await stored_session(shared, world)
    world.versions["workspace"] = "v2"
    seen: list[SessionEvent] = []
    async with shared_host(shared) as host, host.plugin(world):
        loop = await AgentLoop.resume(
            "a", "s", host=host, model=echo(1), drift="record", on_event=seen.append
        )
        # Durable before resume returns (a cold read sees it).
        stored = await stored_events(host, "s")
        assert stored[: len(before)] == before
        [drift] = stored[len(before) :]
        assert isinstance(drift, RunDrift)
        assert drift.data == RunDriftData(
            since_seq=turn_ends(before)[-1].seq,
            differences=[
                ManifestDifference(name="workspace", recorded="v1", current="v2")
            ],
            manifest={"workspace": "v2"},
        )
        assert seen == [drift]
        await loop.close()
    # The drift is now the manifest to compare with: no second drift.
    async with shared_host(shared) as host, host.plugin(world):
        loop = await AgentLoop.resume("a", "s", host=host, model=echo(2))
        result = await loop.run_turn("go on")
        await loop.close()
        after = await stored_events(host, "s")
    assert result.status == "completed"
    assert sum(isinstance(e, RunDrift) for e in after) == 1
    assert turn_ends(after)[-1].data.manifest == {"workspace": "v2"}
    assert pairing_problems(after) == []


@pytest.mark.asyncio
async def test_open_checks_a_stored_session_like_resume() -> None:
    shared, world = SharedMemory(), World()
    await stored_session(shared, world)
    world.versions["workspace"] = "v2"
    async with shared_host(shared) as host, host.plugin(world):
        with pytest.raises(ManifestDriftError):
            await AgentLoop.open("a", "s", host=host, model=echo(1))
        fresh = await AgentLoop.open("a", "new", host=host, model=echo(1))
        await fresh.close()


@pytest.mark.asyncio
async def test_nothing_to_compare_checks_nothing() -> None:
    shared, world = SharedMemory(), World()
    # A log that names no manifest (written without the plugin) ...
    async with shared_host(shared) as host:
        loop = AgentLoop.create("a", host=host, model=echo(1), session_id="s")
        await loop.run_turn("hello")
        await loop.close()
    async with shared_host(shared) as host, host.plugin(world):
        loop = await AgentLoop.resume("a", "s", host=host, model=echo(2))
        await loop.run_turn("now named")
        await loop.close()
        assert turn_ends(await stored_events(host, "s"))[-1].data.manifest == {
            "workspace": "v1"
        }
    # ... and a process in which no plugin names anything.
    world.versions["workspace"] = "v2"
    async with shared_host(shared) as host:
        loop = await AgentLoop.resume("a", "s", host=host, model=echo(1))
        await loop.close()


@pytest.mark.asyncio
async def test_a_failing_implementation_refuses_the_resume() -> None:
    shared, world = SharedMemory(), World()
    before = await stored_session(shared, world)
    cases: list[tuple[Broken, str, str]] = [
        (Broken(fail=True), "broken", "RuntimeError: the disk is gone"),
        (Broken(answer=["v1"]), "broken", "answered list, not a mapping"),
        (Broken(answer={"workspace": 3}), "broken", "versions must be text"),
        # Asked after `broken` (hook order), `world` is the one that conflicts.
        (
            Broken(answer={"workspace": "other"}),
            "world",
            "gives 'workspace' version 'v1', plugin 'broken' gives 'other'",
        ),
    ]
    for broken, culprit, why in cases:
        async with shared_host(shared) as host, host.plugin(world, name="world"):
            async with host.plugin(broken, name="broken"):
                with pytest.raises(ManifestHookError, match=why) as refused:
                    await AgentLoop.resume("a", "s", host=host, model=echo(1))
                assert refused.value.plugin == culprit
                assert host.sessions.list() == []
            assert await stored_events(host, "s") == before


@pytest.mark.asyncio
async def test_an_unknown_policy_is_a_configuration_error() -> None:
    shared, world = SharedMemory(), World()
    await stored_session(shared, world)
    async with shared_host(shared) as host, host.plugin(world):
        with pytest.raises(ConfigurationError, match="drift must be"):
            await AgentLoop.resume("a", "s", host=host, model=echo(1), drift="warn")  # pyright: ignore[reportArgumentType]
        assert host.sessions.list() == []


@pytest.mark.asyncio
async def test_a_crash_mid_turn_is_checked_before_recovery() -> None:
    """The cut-off turn's own call changed the world: a person decides."""
    shared, world = SharedMemory(), World()
    act = SpyTool("act", block=True, on_call=lambda _c: world.versions.update(w="2"))
    world.versions = {"w": "1"}
    model = ScriptedModel(["first", Reply("acting", (ScriptedCall("act"),)), "done"])
    async with shared_host(shared) as crashed:
        crashed.register(world)
        first = AgentLoop.create(
            "a", host=crashed, model=model, tools=[act], session_id="s"
        )
        await first.run_turn("one")
        running = asyncio.create_task(first.run_turn("two"))
        await act.started.wait()  # its intent is durable; the process "dies"
        del shared.storage.owners["s"]
        async with shared_host(shared) as later, later.plugin(world):
            with pytest.raises(ManifestDriftError, match="w: recorded 1, now 2"):
                await AgentLoop.resume("a", "s", host=later, model=model, tools=[act])
            loop = await AgentLoop.resume(
                "a", "s", host=later, model=model, tools=[act], drift="record"
            )
            assert loop.recovery is not None
            assert loop.recovery.interrupted == (act.call_ids[0],)
            stored = await stored_events(later, "s")
            drift = next(e for e in stored if isinstance(e, RunDrift))
            answer = next(e for e in stored if isinstance(e, ToolResult))
            # Recorded before recovery appended anything.
            assert drift.seq < answer.seq
            assert drift.data.since_seq == turn_ends(stored)[0].seq
            assert turn_ends(stored)[-1].data.manifest == {"w": "2"}
            assert pairing_problems(stored) == []
            await loop.close()
        running.cancel()
        with pytest.raises((asyncio.CancelledError, SessionLockedError)):
            await running


# -- the pieces -------------------------------------------------------------------


def test_differences_cover_every_name_on_either_side() -> None:
    assert differences({"a": "1", "b": "2"}, {"a": "1", "b": "2"}) == []
    assert differences({"a": "1"}, {}) == [
        ManifestDifference(name="a", recorded="1", current=None)
    ]


def test_the_last_manifest_is_the_latest_turn_end_naming_one_or_a_drift() -> None:
    end = TurnEnd(seq=3, time=0, data=turn_end_data({"w": "1"}))
    bare = TurnEnd(seq=5, time=0, data=turn_end_data(None))
    drift = RunDrift(
        seq=4,
        time=0,
        data=RunDriftData(since_seq=3, differences=[], manifest={"w": "2"}),
    )
    assert last_manifest([]) is None
    assert last_manifest([bare]) is None
    assert last_manifest([end, bare]) == (3, {"w": "1"})
    assert last_manifest([end, drift, bare]) == (4, {"w": "2"})


def test_a_drift_after_streamed_chunks_does_not_hide_the_cut_reply() -> None:
    chunk = AssistantChunk(seq=1, time=0, data=AssistantChunkData(text="half a re"))
    drift = RunDrift(
        seq=2, time=0, data=RunDriftData(since_seq=0, differences=[], manifest={})
    )
    assert tail_text([chunk, drift]) == "half a re"
    assert tail_text([drift]) is None


def turn_end_data(manifest: Manifest | None) -> TurnEndData:
    if manifest is None:
        return TurnEndData(turn=1, status="completed")
    return TurnEndData(turn=1, status="completed", manifest=manifest)
