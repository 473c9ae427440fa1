"""Plan item 9: every power-loss state of small workloads, enumerated.

A workload of 4 turns with a creation (a titled session: its sidecar too),
a release, a torn tail written and fsynced, a claim that repairs it into
quarantine, and a release at the end, runs through `RecordingFileOps`. For
every recorded operation, `CrashModel.all_states` enumerates every state a
power loss right before it may legally leave (each pending directory
operation applied or not; every size and every fate of every sector the
unfinished writes touched), not a sample. Each state must load (never
`SessionCorruptError`) exactly the events of flush F with `acked <= F <=
acked + 1`, with a title that was set, and list the same (`check_state`
of item 7); the first state of each point is also repaired and extended.
CI: 3 seeds; soak: 40. Each point must enumerate within `LIMIT` states.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from plugins.jsonl.helpers import log_file, meta, seeded, turns
from plugins.jsonl.test_power_loss import check_state, lock_like, torn_tail
from support.crashstates import (
    CrashModel,
    RecordingFileOps,
    Trace,
    check_trace,
    materialise,
)
from support.faultyops import NoSyncFileOps
from turnkeep.codec import EventRecord
from turnkeep.errors import TurnkeepError
from turnkeep_jsonl import JsonlPersistence

pytestmark = [pytest.mark.crash, pytest.mark.asyncio]

LIMIT = 4096
"""The most states one crash point may have (the workload keeps under it)."""


async def record(base: Path, seed: int) -> tuple[Trace, list[list[EventRecord]]]:
    ops = RecordingFileOps(NoSyncFileOps(), base)
    batches = turns(4, seed=seed, span=40)
    backend = JsonlPersistence(base / "store", ops=ops)
    await backend.create(meta("s", title="t0"))
    for index, batch in enumerate(batches):
        await backend.append("s", batch)
        ops.trace.mark("ack")
        if index == 1:
            await backend.release("s")
            torn_tail(ops, log_file(base / "store"))
            await backend.claim("s")  # the first append repairs the tail (R5)
    await backend.aclose()
    return ops.trace, batches


async def enumerate_all(root: Path, seed: int) -> tuple[int, int]:
    base = root / f"recorded-{seed}"
    base.mkdir()
    trace, batches = await record(base, seed)
    assert check_trace(trace, ignore=lock_like) == []
    model = CrashModel(trace)
    states = points = 0
    for point in trace.points():
        acked = trace.marks_before(point, "ack")
        found = model.all_states(point, LIMIT)
        assert found is not None, f"seed {seed}: point {point} has over {LIMIT} states"
        for index, state in enumerate(found):
            where = root / f"s-{seed}-{point}-{index}"
            where.mkdir()
            materialise(state, where)
            try:
                check_state(where, acked, batches, [None, "t0"], repair=index == 0)
            except AssertionError as exc:
                raise AssertionError(
                    f"seed {seed}: crash point {point}, state {index} of "
                    f"{len(found)}: {exc}"
                ) from exc
            finally:
                shutil.rmtree(where)
        states += len(found)
        points += 1
    shutil.rmtree(base)
    return points, states


def small_seed(rng: random.Random) -> int:
    """A workload seed whose events are all small (no 1-6 KiB one)."""
    while True:
        seed = rng.randrange(2**32)
        if all(
            len(r.raw) < 200 for batch in turns(4, seed=seed, span=40) for r in batch
        ):
            return seed


async def test_item_9_every_crash_state_of_small_workloads(
    scratch: Path, request: pytest.FixtureRequest
) -> None:
    rng = seeded(request)
    total = 0
    for _ in range(3):
        seed = small_seed(rng)
        points, states = await enumerate_all(scratch, seed)
        print(f"item 9: seed {seed}: {points} points, {states} states")
        assert states > points  # some point has more than one legal state
        total += states
    assert total <= 50_000


@pytest.mark.soak
async def test_item_9_soak(scratch: Path, request: pytest.FixtureRequest) -> None:
    rng = seeded(request, "soak")
    for _ in range(40):
        await enumerate_all(scratch, small_seed(rng))


async def test_enumeration_finds_every_state_a_broken_protocol_loses(
    scratch: Path,
) -> None:
    """The enumeration has teeth: without the log's fsyncs, every point after
    the first acknowledgement that enumerates within `LIMIT` (the unsynced
    log soon has too many states) has a state that loses it, and it is
    found."""
    base = scratch / "recorded"
    base.mkdir()
    trace, batches = await record(base, small_seed(random.Random(9)))
    logs = {
        op.inode
        for op in trace.ops
        if op.kind == "rename" and op.dst.endswith(".jsonl")
    }
    broken = Trace(
        [op for op in trace.ops if not (op.kind == "fsync" and op.inode in logs)]
    )
    model = CrashModel(broken)
    missed: list[int] = []
    checked = 0
    for point in broken.points():
        acked = broken.marks_before(point, "ack")
        if acked == 0:
            continue
        found = model.all_states(point, LIMIT)
        if found is None:
            continue
        checked += 1
        lost = False
        for index, state in enumerate(found):
            root = scratch / f"b-{point}-{index}"
            root.mkdir()
            materialise(state, root)
            try:
                check_state(root, acked, batches, [None, "t0"], repair=False)
            except (AssertionError, TurnkeepError):
                lost = True
            finally:
                shutil.rmtree(root)
            if lost:
                break
        if not lost:
            missed.append(point)
    assert missed == []
    assert checked >= 2
