"""The worker pool: 4 processes share 64 sessions; one is killed mid-run.

Each worker (`tests/support/worker.py postgres pool`) runs a real `Host`
with the `postgres` backend loaded by its entry point, and loops: pick a
session that needs more turns, `resume` it (claim + load;
`SessionLockedError` means another worker drives it), drive one turn
through `Session.append`, `flush`, then `close` it (release). So every turn
of a session may go to any worker.
After a random number of acknowledged turns, the test SIGKILLs worker 0 the
moment it reports holding a session: that session stays locked until its
lease (3 s here) runs out, and then the others finish it.

At the end: every session's log decodes and is contiguous, each turn is
whole and driven by one worker, every acknowledged turn is in the log as
acknowledged, and no two workers ever held one session at the same time
(each worker reports, per turn, when it held the session and when its flush
returned; on one machine those monotonic times are comparable).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import signal
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from tests.support.worker_client import worker_argv
from tests.support.workload import pool_turn

from turnkeep.codec import EventCodec
from turnkeep.config import Config
from turnkeep.events import TurnEnd, UserMessage
from turnkeep.host import Host
from turnkeep_postgres import PostgresConfig

pytestmark = pytest.mark.postgres

SESSIONS = 64
WORKERS = 4
TURNS = 5  # per session, the coordinator's turn 0 included
PER_TURN = 5
# Long enough that a worker starved by a loaded machine keeps its lease
# (renewed every second); the killed worker's session waits this long.
LEASE_MS = 3000


async def _seed(options: dict[str, Any]) -> None:
    """Store the 64 sessions, each with its first turn (worker -1)."""
    config = Config(
        persistence="postgres", plugins=("postgres",), backends={"postgres": options}
    )
    async with Host(config) as host:
        for n in range(SESSIONS):
            session = host.sessions.create(f"pool-{n:02d}")
            pool_turn(session, -1, 0)
            await host.sessions.close(session.id)


async def _verify(options: dict[str, Any], acks: list[tuple[int, str, int]]) -> None:
    config = Config(
        persistence="postgres", plugins=("postgres",), backends={"postgres": options}
    )
    codec = EventCodec()
    async with Host(config) as host:
        backend = host.require_persistence()
        drivers: dict[tuple[str, int], int] = {}
        for n in range(SESSIONS):
            sid = f"pool-{n:02d}"
            loaded = await backend.load(sid)
            events = codec.decode_log(loaded.events, session_id=sid)  # contiguous
            assert len(events) == TURNS * PER_TURN, f"{sid}: {len(events)} events"
            for number in range(TURNS):
                chunk = events[number * PER_TURN : (number + 1) * PER_TURN]
                first, last = chunk[0], chunk[-1]
                assert isinstance(first, UserMessage)
                assert isinstance(last, TurnEnd)
                owner, says_turn, worker = first.data.text.split("|")
                assert owner == sid
                assert says_turn == f"turn {number}", f"{sid}: turns out of order"
                assert last.data.turn == number
                driver = int(worker.removeprefix("worker "))
                for event in chunk[1:-1]:
                    text: str = event.data.text  # type: ignore[attr-defined]
                    assert text.startswith(f"{sid}|turn {number}|worker {driver}|")
                drivers[(sid, number)] = driver
        for worker, sid, number in acks:
            assert drivers.get((sid, number)) == worker, (
                f"ACKed turn {number} of {sid} by worker {worker} is not in the log"
            )


def _no_overlap(held: dict[str, list[tuple[float, float, int]]]) -> None:
    for sid, spans in held.items():
        spans.sort()
        for (start_a, end_a, w_a), (start_b, end_b, w_b) in itertools.pairwise(spans):
            assert end_a <= start_b, (
                f"{sid}: worker {w_a} held it {start_a:.4f}-{end_a:.4f} while worker "
                f"{w_b} held it {start_b:.4f}-{end_b:.4f}"
            )


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.asyncio
async def test_four_workers_share_sixty_four_sessions_and_one_dies(
    pg_config: Callable[..., PostgresConfig], rng: random.Random
) -> None:
    base = pg_config()
    options: dict[str, Any] = {"dsn": base.dsn, "schema": base.schema}
    await _seed(options)
    total = SESSIONS * (TURNS - 1)
    kill_after = rng.randint(total // 6, total // 2)
    procs: list[asyncio.subprocess.Process] = []
    for worker in range(WORKERS):
        cmd = {
            **options,
            "worker": worker,
            "turns": TURNS,
            "seed": rng.randrange(2**31),
            "options": {"lease_ms": LEASE_MS},
        }
        procs.append(
            await asyncio.create_subprocess_exec(
                *worker_argv("postgres", "pool", msgspec.json.encode(cmd).decode()),
                stdout=asyncio.subprocess.PIPE,
            )
        )
    acks: list[tuple[int, str, int]] = []
    held: dict[str, list[tuple[float, float, int]]] = {}
    killed_holding: list[str] = []

    async def read(worker: int, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            words = line.decode().split()
            if words[0] == "ack":
                sid, number = words[1], int(words[2])
                acks.append((worker, sid, number))
                held.setdefault(sid, []).append(
                    (float(words[3]), float(words[4]), worker)
                )
            elif (
                words[0] == "claimed"
                and worker == 0
                and not killed_holding
                and len(acks) >= kill_after
            ):
                proc.send_signal(signal.SIGKILL)
                killed_holding.append(words[1])

    async with asyncio.timeout(150):
        await asyncio.gather(*(read(w, p) for w, p in enumerate(procs)))
        codes = [await p.wait() for p in procs]
    assert killed_holding, "worker 0 finished before the kill point"
    assert codes[0] == -signal.SIGKILL
    assert codes[1:] == [0] * (WORKERS - 1), codes
    _no_overlap(held)
    await _verify(options, acks)
    by_worker = {w: sum(1 for a in acks if a[0] == w) for w in range(WORKERS)}
    print(f"turns per worker: {by_worker}; worker 0 killed holding {killed_holding}")
