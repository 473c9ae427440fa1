"""Plan items 21 and 22 with real processes, and the crashed-owner rule.

21. Two processes race to take one session (an existing one by `claim`, a
    new one by `create`): exactly one wins, the other gets
    `SessionLockedError` within 1 s and cannot write; the rows hold only the
    winner's writes. CI 500 races (250 + 250); soak 10,000.
22. Owner A is SIGSTOPped; B takes over (`steal=True`), writes 5 turns; A is
    continued and flushes: `SessionFencedError`, nothing written, B's turns
    intact. CI 200 trials: 150 with A stopped between flushes, 50 with A
    stopped at a random moment of a write loop (if it was stopped holding the
    SQLite write lock, B cannot steal within its busy timeout and gets a
    typed `StorageError`; that is counted, not a violation). Soak 5,000.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path

import pytest
from tests.support.worker_client import SpawnWorker, Worker
from tests.support.workload import SQLITE_WORKLOAD

from turnkeep.errors import SessionFencedError, StorageError
from turnkeep_sqlite import SqliteConfig, SqlitePersistence

from .conftest import meta

SEED = 99


def _raws(tag: str, start: int, count: int, seq0: int) -> list[bytes]:
    return [
        r.raw
        for records in SQLITE_WORKLOAD.turns(
            count, seed=SEED, tag=tag, start=start, seq0=seq0
        )
        for r in records
    ]


def _race(workers: list[Worker], **cmd: object) -> list[dict[str, object]]:
    for w in workers:
        w.send(**cmd)  # both commands are in flight before either answer is read
    return [w.recv() for w in workers]


async def _races(count: int, path: Path, spawn_worker: SpawnWorker) -> None:
    workers = [spawn_worker(), spawn_worker()]
    for w in workers:
        w.call(op="open", path=str(path))
        assert "error" not in w.call(op="has", id="warm-up")
    setup = SqlitePersistence(SqliteConfig(path=path))
    try:
        for race in range(count):
            sid = f"race-{race}"
            by_create = race % 2 == 1
            if by_create:
                replies = _race(workers, op="create", id=sid)
            else:
                await setup.create(meta(sid))
                await setup.append(
                    sid, SQLITE_WORKLOAD.turn(0, 0, seed=SEED, tag="setup")
                )
                await setup.release(sid)
                replies = _race(workers, op="claim", id=sid)
            winners = [i for i, r in enumerate(replies) if "error" not in r]
            assert len(winners) == 1, f"race {race}: {replies}"
            (winner,) = winners
            loser = 1 - winner
            assert replies[loser]["error"] == "SessionLockedError", replies
            elapsed = replies[loser]["elapsed"]
            assert isinstance(elapsed, float)
            assert elapsed < 1.0
            seq0 = 0 if by_create else len(_raws("setup", 0, 1, 0))
            tag = f"w{winner}"
            refused = workers[loser].call(
                op="append", id=sid, seq0=seq0, turn=1, seed=SEED, tag=f"w{loser}"
            )
            # A session still being created is not stored: nothing to write to.
            wanted = "SessionNotFoundError" if by_create else "SessionLockedError"
            assert refused.get("error") == wanted, refused
            done = workers[winner].call(
                op="append", id=sid, seq0=seq0, turn=1, seed=SEED, tag=tag
            )
            assert "error" not in done, done
            released = workers[winner].call(op="release", id=sid)
            assert "error" not in released, released
            loaded = (await setup.load(sid)).events
            expected = ([] if by_create else _raws("setup", 0, 1, 0)) + _raws(
                tag, 1, 1, seq0
            )
            assert loaded == expected, f"race {race}: rows are not only the winner's"
    finally:
        await setup.aclose()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_exclusive_open_race(tmp_path: Path, spawn_worker: SpawnWorker) -> None:
    await _races(500, tmp_path / "db" / "s.sqlite3", spawn_worker)


@pytest.mark.soak
@pytest.mark.asyncio
async def test_exclusive_open_race_soak(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    await _races(10_000, tmp_path / "db" / "s.sqlite3", spawn_worker)


async def _fencing(
    trials: int,
    random_pause: int,
    path: Path,
    rng: random.Random,
    spawn_worker: SpawnWorker,
) -> None:
    owner = spawn_worker()
    owner.call(op="open", path=str(path))
    thief = SqlitePersistence(SqliteConfig(path=path, busy_timeout_ms=100))
    busy = 0
    try:
        for trial in range(trials + random_pause):
            sid = f"fence-{trial}"
            assert "error" not in owner.call(op="create", id=sid)
            first = rng.randint(1, 3)
            reply = owner.call(
                op="append_many",
                id=sid,
                seq0=0,
                start=0,
                count=first,
                seed=SEED,
                tag="A",
            )["result"]
            assert reply["acked"] == first, reply
            seq_a = reply["seq"]
            loop = trial >= trials
            if loop:
                # A keeps flushing; stop it wherever it is (maybe mid-commit).
                owner.send(
                    op="append_many",
                    id=sid,
                    seq0=seq_a,
                    start=first,
                    count=400,
                    seed=SEED,
                    tag="A",
                )
                await asyncio.sleep(rng.uniform(0, 0.05))  # the random pause point
            os.kill(owner.pid, signal.SIGSTOP)
            stole = False
            b_start = 0
            try:
                try:
                    await thief.claim(sid, steal=True)
                    stole = True
                except StorageError:
                    busy += 1  # A was stopped holding SQLite's write lock
                if stole:
                    seq_b = len((await thief.load(sid)).events)
                    b_start = seq_b
                    for n in range(5):
                        records = SQLITE_WORKLOAD.turn(
                            seq_b, 1000 + n, seed=SEED, tag="B"
                        )
                        await thief.append(sid, records)
                        seq_b += len(records)
            finally:
                os.kill(owner.pid, signal.SIGCONT)
            if loop:
                result = owner.recv()["result"]
                acked_a = first + result["acked"]
                if stole:
                    assert result["error"] == "SessionFencedError", (trial, result)
            else:
                stale = owner.call(
                    op="append", id=sid, seq0=seq_a, turn=first, seed=SEED, tag="A"
                )
                assert stale.get("error") == "SessionFencedError", (trial, stale)
                acked_a = first
            expected = _raws("A", 0, acked_a, 0)
            if stole:
                assert len(expected) == b_start, f"trial {trial}: B saw another log"
                expected += _raws("B", 1000, 5, b_start)
            final = (await thief.load(sid)).events
            assert final == expected, f"trial {trial}: stale or lost writes"
            if stole:
                await thief.release(sid)
    finally:
        await thief.aclose()
    print(f"fencing: {busy} of {random_pause} random pauses held the write lock")


@pytest.mark.slow
@pytest.mark.asyncio
async def test_paused_owner_is_fenced(
    tmp_path: Path, rng: random.Random, spawn_worker: SpawnWorker
) -> None:
    await _fencing(150, 50, tmp_path / "db" / "s.sqlite3", rng, spawn_worker)


@pytest.mark.soak
@pytest.mark.asyncio
async def test_paused_owner_is_fenced_soak(
    tmp_path: Path, rng: random.Random, spawn_worker: SpawnWorker
) -> None:
    await _fencing(4000, 1000, tmp_path / "db" / "s.sqlite3", rng, spawn_worker)


@pytest.mark.crash
@pytest.mark.asyncio
async def test_a_killed_owner_frees_its_sessions_at_once(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    path = tmp_path / "db" / "s.sqlite3"
    owner = spawn_worker()
    owner.call(op="open", path=str(path))
    for n in range(3):
        assert "error" not in owner.call(op="create", id=f"s{n}")
        owner.call(op="append", id=f"s{n}", seq0=0, turn=0, seed=SEED, tag="A")
    other = SqlitePersistence(SqliteConfig(path=path))
    try:
        with pytest.raises(Exception, match="another live owner"):
            await other.claim("s0")
        os.kill(owner.pid, signal.SIGKILL)
        owner.proc.wait()
        started = time.monotonic()
        for n in range(3):
            await other.claim(f"s{n}")  # no steal needed: the owner is dead
        assert time.monotonic() - started < 1.0
        # ...and ownership moved: an instance that still believed it held
        # generation 1 (the dead owner's) is fenced.
        zombie = SqlitePersistence(SqliteConfig(path=path))
        try:
            zombie._state.held["s0"] = 1
            with pytest.raises(SessionFencedError):
                await zombie.append("s0", SQLITE_WORKLOAD.turn(4, 1, seed=SEED))
        finally:
            await zombie.aclose()
    finally:
        await other.aclose()


@pytest.mark.asyncio
async def test_a_follower_wakes_at_each_commit_of_another_process(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    path = tmp_path / "store" / "s.sqlite3"
    writer = spawn_worker()
    writer.call(op="open", path=str(path))
    assert "error" not in writer.call(op="create", id="followed")
    last = writer.call(op="append", id="followed", seq0=0, turn=0, seed=SEED)["result"]
    last -= 1
    follower = SqlitePersistence(SqliteConfig(path=path))
    try:
        for turn in range(1, 4):
            waiting = asyncio.ensure_future(
                follower.wait_for_commit("followed", last, 30.0)
            )
            await asyncio.sleep(0.1)
            assert not waiting.done()
            reply = writer.call(
                op="append", id="followed", seq0=last + 1, turn=turn, seed=SEED
            )
            last += reply["result"]
            assert await asyncio.wait_for(waiting, 10.0) == last
        assert await follower.wait_for_commit("followed", last, 0.2) == last
    finally:
        await follower.aclose()
        writer.stop()
