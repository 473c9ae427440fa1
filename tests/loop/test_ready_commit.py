"""The ready commit: only a completed turn's manifest is the baseline.

A failed, cancelled or interrupted turn records the world it observed in its
own `turn/end`, but a later continuation compares the world with the last
completed turn's manifest (or a later `run/drift`). A difference that the
session's own unfinished turn explains (it left the world at that version)
is recorded as a `run/drift` naming that turn, never refused; cold (a new
process resumes) and warm (the live loop's next turn) record the same one.
Run on JSONL and SQLite, each resume in a fresh host.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.loop.support import (
    BACKENDS,
    SpyTool,
    backend_host_config,
    backend_ready_async,
    stored_events,
)
from tests.loop.test_manifest import World, turn_ends

from turnkeep import AgentLoop, Host, SessionEvent
from turnkeep.agent.manifest import DriftPolicy
from turnkeep.agent.recovery import pairing_problems
from turnkeep.errors import ManifestDriftError
from turnkeep.events import (
    ManifestDifference,
    RunDrift,
    RunDriftData,
    TurnEnd,
    TurnEndData,
    TurnStart,
    TurnStatus,
)
from turnkeep.manifests import (
    drift_from,
    last_manifest,
    needs_reconciling,
    unfinished_after,
)
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel


def script(replies: int = 5) -> ScriptedModel:
    """Turn 1 answers; turn 2 calls `act` and then ends; later turns answer.

    With `replies=2` the model has nothing to say after the tool: turn 2 fails.
    """
    replies_ = ["first", Reply("acting", (ScriptedCall("act"),)), "done", "more", "x"]
    return ScriptedModel(replies_[:replies])


async def leave_unfinished(
    host: Host, world: World, how: str, session_id: str = "s"
) -> AgentLoop:
    """Turn 1 completes at `v1`; turn 2 moves the world, then fails or is cancelled."""
    moved = {"workspace": "half-written"}
    act = SpyTool(
        "act",
        replay="safe",
        block=how == "cancelled",
        on_call=lambda _c: world.versions.update(moved),
    )
    model = script() if how == "cancelled" else script(replies=2)
    loop = AgentLoop.create(
        "a", host=host, model=model, tools=[act], session_id=session_id
    )
    assert (await loop.run_turn("one")).status == "completed"
    if how == "cancelled":
        running = asyncio.create_task(loop.run_turn("two"))
        await act.started.wait()
        await loop.cancel()
        result = await running
    else:  # the model has no reply after the tool: the turn fails
        result = await loop.run_turn("two")
    assert result.status == how
    return loop


async def resume(
    host: Host, session_id: str = "s", drift: DriftPolicy = "refuse"
) -> AgentLoop:
    """Resume with the recorded context (the same model and `act` tool)."""
    act = SpyTool("act", replay="safe")
    return await AgentLoop.resume(
        "a", session_id, host=host, model=script(), tools=[act], drift=drift
    )


def ends_of(events: list[SessionEvent]) -> tuple[TurnEnd, TurnEnd]:
    completed, unfinished = turn_ends(events)[:2]
    return completed, unfinished


@pytest.mark.parametrize("how", ["cancelled", "failed"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_a_later_resume_compares_with_the_last_completed_turn(
    backend: str, how: str, tmp_path: Path
) -> None:
    await backend_ready_async(backend, tmp_path)
    world = World()
    config = backend_host_config(backend, tmp_path)
    async with Host(config) as host, host.plugin(world):
        loop = await leave_unfinished(host, world, how)
        await loop.close()
        before = await stored_events(host, "s")
    completed, unfinished = ends_of(before)
    # The unfinished turn records what it observed, as such.
    assert unfinished.data.status == how
    assert unfinished.data.manifest == {"workspace": "half-written"}
    assert last_manifest(before) == (completed.seq, {"workspace": "v1"})

    # Cold, with the default policy (refuse): the session's own turn explains
    # the difference, so it is recorded (not refused), naming that turn.
    async with Host(config) as host, host.plugin(world):
        loop = await resume(host)
        stored = await stored_events(host, "s")
        [drift] = stored[len(before) :]
        assert isinstance(drift, RunDrift)
        assert drift.data == RunDriftData(
            since_seq=completed.seq,
            differences=[
                ManifestDifference(
                    name="workspace",
                    recorded="v1",
                    current="half-written",
                    explained_by=unfinished.seq,
                )
            ],
            manifest={"workspace": "half-written"},
        )
        result = await loop.run_turn("go on")
        await loop.close()
        after = await stored_events(host, "s")
    assert result.status == "completed"
    assert last_manifest(after) == (turn_ends(after)[-1].seq, world.versions)
    assert pairing_problems(after) == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_cold_and_warm_continuation_record_the_same_boundary(
    backend: str, tmp_path: Path
) -> None:
    await backend_ready_async(backend, tmp_path)
    world = World()
    config = backend_host_config(backend, tmp_path)
    async with Host(config) as host, host.plugin(world):
        cold = await leave_unfinished(host, world, "cancelled", "cold")
        await cold.close()
        world.versions["workspace"] = "v1"
        warm = await leave_unfinished(host, world, "cancelled", "warm")
        # Warm: the live loop's next turn records the drift before it starts.
        assert (await warm.run_turn("go on")).status == "completed"
        await warm.close()
    async with Host(config) as host, host.plugin(world):
        loop = await resume(host, "cold")
        assert (await loop.run_turn("go on")).status == "completed"
        await loop.close()
        logs = {sid: await stored_events(host, sid) for sid in ("cold", "warm")}
    drifts: list[RunDrift] = []
    for events in logs.values():
        [drift] = [e for e in events if isinstance(e, RunDrift)]
        # Before the next turn, after the unfinished one.
        assert isinstance(events[drift.seq + 1], TurnStart)
        assert isinstance(events[drift.seq - 1], TurnEnd)
        drifts.append(drift)
        assert pairing_problems(events) == []
    assert drifts[0].seq == drifts[1].seq
    assert drifts[0].data == drifts[1].data
    assert drifts[0].data.differences[0].explained_by == drifts[0].seq - 1
    # A warm loop whose turns all complete records nothing between them.
    async with Host(config) as host, host.plugin(world):
        model = ScriptedModel(["one", "two"])
        plain = AgentLoop.create("a", host=host, model=model, session_id="p")
        await plain.run_turn("one")
        world.versions["workspace"] = "changed by hand"
        await plain.run_turn("two")
        await plain.close()
        assert not any(isinstance(e, RunDrift) for e in await stored_events(host, "p"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_a_difference_nothing_explains_is_drift_as_before(
    backend: str, tmp_path: Path
) -> None:
    await backend_ready_async(backend, tmp_path)
    world = World({"workspace": "v1", "db": "d1"})
    config = backend_host_config(backend, tmp_path)
    async with Host(config) as host, host.plugin(world):
        loop = await leave_unfinished(host, world, "cancelled")
        await loop.close()
        before = await stored_events(host, "s")
    completed, unfinished = ends_of(before)
    # Since the cancel, someone else moved the database.
    world.versions["db"] = "d2"
    async with Host(config) as host, host.plugin(world):
        with pytest.raises(ManifestDriftError) as refused:
            await resume(host)
        assert refused.value.since_seq == completed.seq
        assert refused.value.differences == (
            ManifestDifference(name="db", recorded="d1", current="d2"),
            ManifestDifference(
                name="workspace",
                recorded="v1",
                current="half-written",
                explained_by=unfinished.seq,
            ),
        )
        message = str(refused.value)
        assert "db: recorded d1, now d2\n" in message
        assert f"ending at seq {unfinished.seq}" in message
        assert await stored_events(host, "s") == before
        loop = await resume(host, drift="record")
        await loop.close()
        [drift] = (await stored_events(host, "s"))[len(before) :]
    assert isinstance(drift, RunDrift)
    assert drift.data.since_seq == completed.seq
    assert [d.explained_by for d in drift.data.differences] == [None, unfinished.seq]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_a_world_back_at_the_ready_commit_resumes_without_a_trace(
    backend: str, tmp_path: Path
) -> None:
    await backend_ready_async(backend, tmp_path)
    world = World()
    config = backend_host_config(backend, tmp_path)
    async with Host(config) as host, host.plugin(world):
        loop = await leave_unfinished(host, world, "failed")
        await loop.close()
        before = await stored_events(host, "s")
    world.versions["workspace"] = "v1"  # the half-written change was undone
    async with Host(config) as host, host.plugin(world):
        loop = await resume(host)
        await loop.close()
        assert await stored_events(host, "s") == before


def end(seq: int, status: TurnStatus, manifest: dict[str, str] | None) -> TurnEnd:
    data = TurnEndData(turn=seq, status=status)
    if manifest is not None:
        data = TurnEndData(turn=seq, status=status, manifest=manifest)
    return TurnEnd(seq=seq, time=0, data=data)


def test_the_pieces_skip_unfinished_turns() -> None:
    done = end(1, "completed", {"w": "1"})
    cancelled = end(3, "cancelled", {"w": "2"})
    timed_out = end(5, "timed_out", {"w": "3"})
    bare = end(7, "failed", None)
    drift = RunDrift(
        seq=4,
        time=0,
        data=RunDriftData(since_seq=1, differences=[], manifest={"w": "2"}),
    )
    assert last_manifest([done, cancelled]) == (1, {"w": "1"})
    assert last_manifest([cancelled]) is None
    assert last_manifest([done, cancelled, drift, timed_out]) == (4, {"w": "2"})
    assert unfinished_after([done, cancelled, timed_out], 1) == (5, {"w": "3"})
    assert unfinished_after([done, cancelled, drift], 4) is None
    assert needs_reconciling([done, cancelled])
    assert not needs_reconciling([done])
    assert not needs_reconciling([done, cancelled, drift])
    assert not needs_reconciling([done, bare])
    assert drift_from([cancelled], {"w": "9"}) is None  # no ready commit
    assert drift_from([done, cancelled], {"w": "1"}) is None
    found = drift_from([done, cancelled], {"w": "2", "x": "1"})
    assert found is not None
    assert found.differences == [
        ManifestDifference(name="w", recorded="1", current="2", explained_by=3),
        ManifestDifference(name="x", recorded=None, current="1"),
    ]
