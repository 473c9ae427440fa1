"""Plan items 21 and 22 with real processes against one schema.

21. Two processes race to take one session (an existing one by `claim`, a
    new one by `create`): exactly one wins, the other gets
    `SessionLockedError` within 1 s and cannot write; the rows hold only the
    winner's writes. CI 250 races (half the plan's 500); soak 10,000.
22. Owner A is SIGSTOPped; B takes over (`steal=True`) and writes 5 turns;
    A is continued and flushes: `SessionFencedError`, nothing written, B's
    turns intact. CI 100 trials: 70 with A stopped between flushes, 30 with A
    stopped at a random moment of a write loop. If A was stopped inside a
    transaction it holds the session's row lock, and B's takeover fails with
    a typed `StorageError` after `lock_timeout_ms` (also later: a statement A
    sent before it stopped may still lock the row after B took over); B then
    ends A's connections with `pg_terminate_backend` (what an operator does)
    and retries. Soak 5,000.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql
from tests.support.worker_client import SpawnWorker, Worker
from tests.support.workload import POSTGRES_WORKLOAD, meta

from turnkeep.errors import StorageError
from turnkeep_postgres import SCHEMA_VERSION, PostgresConfig, PostgresPersistence

from .conftest import DSN

pytestmark = pytest.mark.postgres

SEED = 77


def _raws(tag: str, start: int, count: int, seq0: int) -> list[bytes]:
    return [
        r.raw
        for records in POSTGRES_WORKLOAD.turns(
            count, seed=SEED, tag=tag, start=start, seq0=seq0
        )
        for r in records
    ]


def _race(workers: list[Worker], **cmd: Any) -> list[dict[str, Any]]:
    for w in workers:
        w.send(**cmd)  # both commands are in flight before either answer is read
    return [w.recv() for w in workers]


async def _races(count: int, config: PostgresConfig, spawn_worker: SpawnWorker) -> None:
    workers = [spawn_worker(), spawn_worker()]
    for w in workers:
        w.call(op="open", dsn=config.dsn, schema=config.schema)
        w.call(op="load", id="warm-up")  # connects and migrates before the races
    setup = PostgresPersistence(config)
    try:
        for race in range(count):
            sid = f"race-{race}"
            by_create = race % 2 == 1
            if by_create:
                replies = _race(workers, op="create", id=sid)
            else:
                await setup.create(meta(sid))
                await setup.append(
                    sid, POSTGRES_WORKLOAD.turn(0, 0, seed=SEED, tag="setup")
                )
                await setup.release(sid)
                replies = _race(workers, op="claim", id=sid)
            winners = [i for i, r in enumerate(replies) if "error" not in r]
            assert len(winners) == 1, f"race {race}: {replies}"
            (winner,) = winners
            loser = 1 - winner
            assert replies[loser]["error"] == "SessionLockedError", replies
            assert replies[loser]["elapsed"] < 1.0
            seq0 = 0 if by_create else len(_raws("setup", 0, 1, 0))
            refused = workers[loser].call(
                op="append", id=sid, seq0=seq0, turn=1, seed=SEED, tag=f"w{loser}"
            )
            # A session still being created is not stored: nothing to write to.
            wanted = "SessionNotFoundError" if by_create else "SessionLockedError"
            assert refused.get("error") == wanted, refused
            done = workers[winner].call(
                op="append", id=sid, seq0=seq0, turn=1, seed=SEED, tag=f"w{winner}"
            )
            assert "error" not in done, done
            assert "error" not in workers[winner].call(op="release", id=sid)
            loaded = (await setup.load(sid)).events
            expected = ([] if by_create else _raws("setup", 0, 1, 0)) + _raws(
                f"w{winner}", 1, 1, seq0
            )
            assert loaded == expected, f"race {race}: rows are not only the winner's"
    finally:
        await setup.aclose()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_exclusive_open_race(
    pg_config: Callable[..., PostgresConfig], spawn_worker: SpawnWorker
) -> None:
    await _races(250, pg_config(), spawn_worker)


@pytest.mark.soak
@pytest.mark.asyncio
async def test_exclusive_open_race_soak(
    pg_config: Callable[..., PostgresConfig], spawn_worker: SpawnWorker
) -> None:
    await _races(10_000, pg_config(), spawn_worker)


@pytest.mark.asyncio
async def test_two_processes_migrating_one_schema_migrate_once(
    schema: str, spawn_worker: SpawnWorker
) -> None:
    """Plan item 33 with real processes (the connection-level races of
    test_schema.py run 100 more): both open a fresh schema at once."""
    workers = [spawn_worker(), spawn_worker()]
    for race in range(10):
        name = f"{schema}_p{race}"
        for w in workers:
            w.call(op="open", dsn=DSN, schema=name)
        replies = _race(workers, op="load", id="nothing-here")
        assert [r.get("error") for r in replies] == ["SessionNotFoundError"] * 2
        with psycopg.connect(DSN, autocommit=True) as conn:
            rows = conn.execute(
                sql.SQL(
                    "SELECT version FROM {}.schema_migrations ORDER BY version"
                ).format(sql.Identifier(name))
            ).fetchall()
            want = [(v,) for v in range(1, SCHEMA_VERSION + 1)]
            assert rows == want, f"race {race}: {rows}"
        for w in workers:
            w.call(op="close")
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def _terminate(app: str) -> int:
    with psycopg.connect(DSN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (app,),
        ).fetchall()
    return len(rows)


async def _fencing(
    trials: int,
    random_pause: int,
    config: PostgresConfig,
    rng: random.Random,
    spawn_worker: SpawnWorker,
) -> None:
    owner = spawn_worker()
    app = owner.call(op="open", dsn=config.dsn, schema=config.schema)["app"]
    thief = PostgresPersistence(
        PostgresConfig(dsn=config.dsn, schema=config.schema, lock_timeout_ms=300)
    )
    terminated = 0
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
            in_loop = trial >= trials
            if in_loop:
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
            try:

                async def as_operator(step: Callable[[], Awaitable[None]]) -> None:
                    nonlocal terminated
                    try:
                        await step()
                    except StorageError:
                        # A holds the row lock inside a transaction: end it.
                        terminated += 1
                        assert _terminate(app) >= 1
                        await step()

                await as_operator(lambda: thief.claim(sid, steal=True))  # noqa: B023 - awaited at once
                b_start = len((await thief.load(sid)).events)
                seq_b = b_start
                for n in range(5):
                    records = POSTGRES_WORKLOAD.turn(
                        seq_b, 1000 + n, seed=SEED, tag="B"
                    )
                    await as_operator(lambda: thief.append(sid, records))  # noqa: B023 - awaited at once
                    seq_b += len(records)
            finally:
                os.kill(owner.pid, signal.SIGCONT)
            if in_loop:
                result = owner.recv()["result"]
                acked_a = first + result["acked"]
                # Fenced, or its connection was ended under its transaction
                # (or under a lone append's statement: outcome unknown).
                assert result["error"] in (
                    "SessionFencedError",
                    "StorageError",
                    "FlushOutcomeUnknownError",
                ), result
                in_doubt = result["error"] == "FlushOutcomeUnknownError"
            else:
                stale = owner.call(
                    op="append", id=sid, seq0=seq_a, turn=first, seed=SEED, tag="A"
                )
                assert stale.get("error") == "SessionFencedError", (trial, stale)
                acked_a = first
                in_doubt = False
            a_part = _raws("A", 0, acked_a, 0)
            # The flush in flight when A stopped may have committed unacknowledged.
            landed = [a_part, _raws("A", 0, acked_a + 1, 0)]
            final = (await thief.load(sid)).events
            a_seen = final[:b_start]
            assert a_seen in landed, f"trial {trial}: A's part is not whole flushes"
            assert final == a_seen + _raws("B", 1000, 5, b_start), (
                f"trial {trial}: stale or lost writes"
            )
            # A's next flush is fenced too, and writes nothing (while a flush
            # of A's is undecided, it is told that flush is, not "not written").
            late = owner.call(
                op="append", id=sid, seq0=len(final), turn=999, seed=SEED, tag="A"
            )
            fenced = "FlushOutcomeUnknownError" if in_doubt else "SessionFencedError"
            assert late.get("error") == fenced, late
            await thief.release(sid)
    finally:
        await thief.aclose()
    print(f"fencing: {terminated} of {random_pause} random pauses held the row lock")


@pytest.mark.slow
@pytest.mark.asyncio
async def test_paused_owner_is_fenced(
    pg_config: Callable[..., PostgresConfig],
    rng: random.Random,
    spawn_worker: SpawnWorker,
) -> None:
    await _fencing(70, 30, pg_config(), rng, spawn_worker)


@pytest.mark.soak
@pytest.mark.asyncio
async def test_paused_owner_is_fenced_soak(
    pg_config: Callable[..., PostgresConfig],
    rng: random.Random,
    spawn_worker: SpawnWorker,
) -> None:
    await _fencing(4000, 1000, pg_config(), rng, spawn_worker)


@pytest.mark.asyncio
async def test_a_follower_hears_each_commit_of_another_process(
    pg_config: Callable[..., PostgresConfig], spawn_worker: SpawnWorker
) -> None:
    config = pg_config()
    writer = spawn_worker()
    writer.call(op="open", dsn=config.dsn, schema=config.schema)
    assert "error" not in writer.call(op="create", id="followed")
    last = writer.call(op="append", id="followed", seq0=0, turn=0, seed=SEED)["result"]
    last -= 1
    follower = PostgresPersistence(config)
    try:
        for turn in range(1, 4):
            waiting = asyncio.ensure_future(
                follower.wait_for_commit("followed", last, 30.0)
            )
            await asyncio.sleep(0.2)
            assert not waiting.done()
            reply = writer.call(
                op="append", id="followed", seq0=last + 1, turn=turn, seed=SEED
            )
            last += reply["result"]
            assert await asyncio.wait_for(waiting, 10.0) == last
    finally:
        await follower.aclose()
        writer.stop()
