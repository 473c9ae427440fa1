"""Plan items 7 and 8: power-loss states of recorded traces; the trace rules.

A workload runs against the real backend through `RecordingFileOps`; then,
for every recorded operation k, seeded legal power-loss states are
materialised and checked (`docs/reliability.md`, item 7): the session loads
(never `SessionCorruptError`: no legal state is unloadable), holds exactly
the events of flush F with `acked <= F <= acked + 1`, its title is one that
was set (the sidecar old, new or absent, never partial), `list` agrees with
`load`; and, for the first state of every point, a claim (which repairs)
plus 10 more flushes reload exactly.

Workload shapes: `mixed` (3-8 events, 0-300 B, one in twenty 1-6 KiB),
`cycles` (the same with a release and claim every 40 turns: owner and
release lines, repairs in place; its session is created untitled and
active, so its first flush writes no sidecar and the new log's directory
fsync is its own, and once a torn tail a crash left is claimed, moved to
quarantine and cut), `big` (0 B-64 KiB events, fewer turns),
`tiny` (one-event flushes). CI: mixed and cycles (200 turns, 3 states per
point), big (70 turns, 4 per point): over 5,000 states. Soak: 4 shapes x 13
seeds x 200 turns (60 for big), 12 states per point (over 200,000 states).
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from plugins.jsonl.helpers import log_file, meta, raws, seeded, turn, turns
from support.crashstates import (
    CrashModel,
    RecordingFileOps,
    Trace,
    check_trace,
    materialise,
)
from support.faultyops import NoSyncFileOps
from turnkeep.codec import EventRecord
from turnkeep.errors import SessionNotFoundError, TurnkeepError
from turnkeep.meta import SessionSummary
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.listing import page
from turnkeep_jsonl.names import QUARANTINE_DIR
from turnkeep_jsonl.operations import Operations

pytestmark = pytest.mark.crash


def lock_like(name: str) -> bool:
    """Lock files carry no data: their entries need no durability."""
    return name.endswith((".lock", ".lock.tmp"))


async def record(
    base: Path, shape: str, seed: int, count: int
) -> tuple[Trace, list[list[EventRecord]], list[str | None]]:
    """Run a workload shape through a recording backend."""
    ops = RecordingFileOps(NoSyncFileOps(), base)
    if shape == "tiny":
        batches = [[r] for t in turns(count // 4, seed=seed) for r in t][:count]
    else:
        batches = turns(
            count, seed=seed, big=shape == "big", streamed=shape == "streamed"
        )
    # A titled session's first flush writes a sidecar, whose rename fsyncs
    # the directory too; an untitled, active one must fsync it on its own.
    first = None if shape == "cycles" else "t0"
    titles: list[str | None] = [None, first]
    backend = JsonlPersistence(base / "store", ops=ops)
    await backend.create(meta("s", title=first))
    for index, batch in enumerate(batches):
        await backend.append("s", batch)
        ops.trace.mark("ack")
        if index % 50 == 25:
            titles.append(f"t{index}")
            await backend.update("s", SessionSummary(title=titles[-1]))
        if shape == "cycles" and index % 40 == 39:
            await backend.release("s")
            if index == 39:
                torn_tail(ops, log_file(base / "store"))
            await backend.claim("s")  # cuts a torn tail into quarantine (R5)
            if index == 39:
                moved = [op for op in ops.trace.ops if QUARANTINE_DIR in op.dir]
                assert moved, "the torn tail was not moved to quarantine"
    await backend.aclose()
    return ops.trace, batches, titles


def torn_tail(ops: RecordingFileOps, log: Path) -> None:
    """Half a line after the log's last flush, on disk: a crash in a write."""
    created = sum(op.kind == "create" for op in ops.trace.ops)
    fd = ops.open(str(log), os.O_WRONLY | os.O_NOFOLLOW)
    try:
        ops.pwrite(fd, b'{"type":"user/message","seq":', os.fstat(fd).st_size)
        ops.fsync(fd)
    finally:
        ops.close(fd)
    assert sum(op.kind == "create" for op in ops.trace.ops) == created


def check_state(
    root: Path,
    acked: int,
    batches: list[list[EventRecord]],
    titles: list[str | None],
    *,
    repair: bool = True,
) -> None:
    """One crash state: load, list, then (`repair`) claim + 10 flushes + reload.

    Drives the backend's blocking layer (`JsonlPersistence._impl`: the code
    each async method runs on a worker thread) directly, so thousands of
    states fit the CI budget without a thread hop per call.
    """
    written = raws(batches)
    bounds = [0]
    for batch in batches:
        bounds.append(bounds[-1] + len(batch))
    backend = JsonlPersistence(root / "store", ops=NoSyncFileOps())._impl
    try:
        try:
            loaded = backend.load("s")
        except SessionNotFoundError:
            assert acked == 0, "an acknowledged session vanished"
            assert _listed(backend) == []
            return
        n = len(loaded.events)
        assert n in bounds, f"{n} events is not a whole number of flushes"
        flush = bounds.index(n)
        assert acked <= flush <= acked + 1, (acked, flush)
        assert loaded.events == written[:n]
        # (A packed record stands for several events.)
        events = sum(r.span for r in [r for b in batches for r in b][:n])
        assert loaded.meta.summary.event_count == events
        assert loaded.meta.summary.title in titles
        assert _listed(backend) == ["s"]
        if not repair:
            return
        added: list[EventRecord] = []
        for index in range(10):
            batch = turn(events + len(added), 1000 + index, seed="after")
            backend.append("s", batch)
            added += batch
        again = backend.load("s")
        assert again.events == written[:n] + [r.raw for r in added]
    finally:
        for session_id in backend.session_ids():
            backend.release(session_id)
        backend.close()


def _listed(backend: Operations) -> list[str]:
    return [m.id for m in page(backend.ordered(), limit=10, after=None).items]


async def sweep(
    tmp: Path, shape: str, seed: int, count: int, per_point: int, rng: random.Random
) -> int:
    base = tmp / "recorded"
    base.mkdir()
    trace, batches, titles = await record(base, shape, seed, count)
    assert check_trace(trace, ignore=lock_like) == []
    model = CrashModel(trace)
    checked = 0
    for point in trace.points():
        acked = trace.marks_before(point, "ack")
        for index, state in enumerate(model.states(point, rng, per_point)):
            root = tmp / f"state-{point}-{index}"
            root.mkdir()
            materialise(state, root)
            try:
                # Every state is loaded and listed; the first of each point
                # is also repaired and extended (the costly part).
                check_state(root, acked, batches, titles, repair=index == 0)
            except AssertionError as exc:
                raise AssertionError(
                    f"{shape} seed {seed}: crash point {point} state {index}: {exc}"
                ) from exc
            finally:
                shutil.rmtree(root)
            checked += 1
    return checked


@pytest.mark.parametrize(
    ("shape", "count", "per_point"),
    [("mixed", 200, 3), ("cycles", 200, 3), ("big", 70, 4), ("streamed", 120, 3)],
)
@pytest.mark.asyncio
async def test_every_crash_point_loads_a_valid_acknowledged_prefix(
    scratch: Path,
    request: pytest.FixtureRequest,
    shape: str,
    count: int,
    per_point: int,
) -> None:
    rng = seeded(request, shape)
    seed = rng.randrange(2**32)
    checked = await sweep(scratch, shape, seed, count, per_point, rng)
    assert checked >= per_point * count


@pytest.mark.soak
@pytest.mark.parametrize("shape", ["mixed", "cycles", "big", "tiny"])
@pytest.mark.parametrize("round_", range(13))
@pytest.mark.asyncio
async def test_every_crash_point_soak(
    scratch: Path, request: pytest.FixtureRequest, shape: str, round_: int
) -> None:
    rng = seeded(request, f"{shape}:{round_}")
    seed = rng.randrange(2**32)
    count = 60 if shape == "big" else 200
    await sweep(scratch, shape, seed, count, 12, rng)


@pytest.mark.asyncio
async def test_the_model_finds_what_a_broken_protocol_loses(scratch: Path) -> None:
    """The harness has teeth: without fsync before the ACK, states lose data."""
    base = scratch / "recorded"
    base.mkdir()
    trace, batches, titles = await record(base, "mixed", 5, 6)
    # Drop every fsync of the log file: acknowledged flushes are now volatile.
    logs = {
        op.inode
        for op in trace.ops
        if op.kind == "rename" and op.dst.endswith(".jsonl")
    }
    broken = Trace(
        [op for op in trace.ops if not (op.kind == "fsync" and op.inode in logs)]
    )
    assert check_trace(broken, ignore=lock_like) != []
    model = CrashModel(broken)
    rng = random.Random(5)
    lost = 0
    for point in broken.points():
        acked = broken.marks_before(point, "ack")
        for index, state in enumerate(model.states(point, rng, 3)):
            root = scratch / f"state-{point}-{index}"
            root.mkdir()
            materialise(state, root)
            try:
                check_state(root, acked, batches, titles)
            except (AssertionError, TurnkeepError):
                lost += 1
            finally:
                shutil.rmtree(root)
    assert lost > 0
