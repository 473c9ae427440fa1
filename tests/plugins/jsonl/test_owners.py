"""Plan items 21, 22 and 23: owners racing, paused, killed and forked.

Children are forked by a fork server (`_zygote.py`); see `test_kill.py`.

- 21: two processes race for one session behind a barrier: exactly one
  wins, the other is refused at once (the winner holds on until the loser
  tried). CI 200 races (100 creating, 100 claiming); soak 10,000.
- 22: owner A stops at a random file-system call; B takes over (steal, or
  by removing the lock file) and writes 5 turns; A continues: it is fenced,
  nothing it writes after the takeover lands, the log is A's acknowledged
  prefix then B's turns. A flush of A's that B's takeover copied in (it
  was written, not yet acknowledged) was reported by A as of unknown
  outcome with its seq range, never as fenced (R17, issue 12.3).
  CI 200; soak 5,000.
- 23: (a) reads in the owner's process keep its lock; (b) a forked child
  cannot write through its parent's backend, and the parent's release frees
  the session while the child lives; (c) killing the owner frees the lock at
  once. CI 50 each.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from pathlib import Path

import pytest

from plugins.jsonl.helpers import meta, seeded, turn
from plugins.jsonl.zygote_client import (
    FENCED,
    LOCKED,
    UNKNOWN,
    Zygote,
    acks,
    flushes_in,
    workload,
)
from support.faultyops import NoSyncFileOps
from turnkeep.codec import EventRecord
from turnkeep.errors import SessionLockedError
from turnkeep_jsonl import JsonlPersistence

pytestmark = [pytest.mark.crash, pytest.mark.asyncio]


# -- 21: exclusive open race ---------------------------------------------------


def race(zygote: Zygote, root: Path, index: int, mode: str) -> None:
    store = root / "store"
    session = f"{mode}-{index}"
    racers = [
        {
            "role": "racer",
            "store": str(store),
            "session": session,
            "mode": mode,
            "tag": tag,
            "result": str(root / f"{session}.{tag}"),
        }
        for tag in ("A", "B")
    ]
    statuses = zygote.call(op="race", racers=racers)
    codes = sorted(s["code"] for s in statuses)
    assert codes == [0, LOCKED], (session, statuses)
    winner = "AB"[[s["code"] for s in statuses].index(0)]
    loser = "AB".replace(winner, "")
    assert float((root / f"{session}.{loser}").read_text()) < 1.0
    log = next(store.glob(f"g-*/{_stem(session)}.jsonl")).read_bytes()
    assert f"{winner}#0".encode() in log
    assert f"{loser}#0".encode() not in log


def _stem(session_id: str) -> str:
    from turnkeep_jsonl.names import session_name

    return session_name(session_id)


async def run_races(zygote: Zygote, root: Path, count: int) -> None:
    store = root / "store"
    for index in range(count // 2):
        backend = JsonlPersistence(store, ops=NoSyncFileOps())._impl
        backend.create(meta(f"claim-{index}"))
        backend.append(f"claim-{index}", turn(0, 0, seed=1, tag="seed"))
        backend.release(f"claim-{index}")
        backend.close()
    for index in range(count // 2):
        race(zygote, root, index, "create")
        race(zygote, root, index, "claim")


async def test_exclusive_open_race(zygote: Zygote, scratch: Path) -> None:
    await run_races(zygote, scratch, 200)


@pytest.mark.soak
async def test_exclusive_open_race_soak(zygote: Zygote, scratch: Path) -> None:
    await run_races(zygote, scratch, 10_000)


# -- 22: a paused owner is fenced ---------------------------------------------


@pytest.fixture(scope="module")
def owner_calls(zygote: Zygote, tmp_path_factory: pytest.TempPathFactory) -> list[int]:
    """File-system calls a 20-turn writer has made at each of its ACKs."""
    root = tmp_path_factory.mktemp("owner")
    status = zygote.call(
        op="run",
        role="writer",
        store=str(root / "store"),
        session="s",
        turns=20,
        seed=3,
        acks=str(root / "acks"),
        pause_at=10**9,
        release=False,
        count_calls=True,
    )
    assert status["state"] == "exited", status
    assert status["code"] == 0, status
    return [a[1] for a in acks(root / "acks")]


async def fence_trial(
    zygote: Zygote, root: Path, rng: random.Random, calls: list[int], trial: int
) -> None:
    store, a_acks, b_acks = root / "store", root / "a", root / "b"
    seed = rng.randrange(2**32)
    pause_at = rng.randint(calls[0] + 1, calls[-1])  # after its first flush
    a = zygote.call(
        op="run",
        role="writer",
        store=str(store),
        session="s",
        turns=20,
        seed=seed,
        acks=str(a_acks),
        pause_at=pause_at,
        pause_when=rng.choice(("before", "after")),
    )
    assert a["state"] == "stopped", a
    acked_a = len(acks(a_acks))
    unlink = trial % 2 == 1
    b = zygote.call(
        op="run",
        role="stealer",
        store=str(store),
        session="s",
        turns=5,
        seed=seed,
        acks=str(b_acks),
        unlink_lock=unlink,
    )
    assert b["state"] == "exited", b
    assert b["code"] == 0, b
    done = zygote.call(op="signal", pid=a["pid"], signal=signal.SIGCONT)
    assert done["state"] == "exited", done
    after = len(acks(a_acks))
    if after < 20:
        assert done["code"] in (FENCED, UNKNOWN), (trial, done)
    assert after <= acked_a + 1, "the old owner acknowledged a write after takeover"
    base = int((root / "b.base").read_text())
    a_batches = workload(20, seed=seed)
    backend = JsonlPersistence(store)
    try:
        loaded = await backend.load("s")
    finally:
        await backend.aclose()
    count = flushes_in(loaded.events[:base], a_batches)
    assert acked_a <= count <= acked_a + 1, (trial, acked_a, count)
    if count > after:
        # A flush of A's is in the log that A never acknowledged: A must
        # have said its outcome was unknown (naming it), never "not written".
        assert done["code"] == UNKNOWN, (trial, after, count, done)
        unknown = a_acks.with_name(a_acks.name + ".unknown").read_text().split()
        first = sum(len(b) for b in a_batches[:after])
        assert [int(x) for x in unknown] == [
            first,
            first + len(a_batches[after]) - 1,
        ], (trial, unknown)
    b_batches: list[list[EventRecord]] = []
    seq = base
    for index in range(5):
        b_batches.append(turn(seq, index, seed=seed, tag="B"))
        seq += len(b_batches[-1])
    assert loaded.events[base:] == [r.raw for b in b_batches for r in b]
    shutil.rmtree(store)
    for path in (a_acks, b_acks, root / "b.base", root / "a.unknown"):
        path.unlink(missing_ok=True)


async def test_a_paused_owner_is_fenced(
    zygote: Zygote,
    scratch: Path,
    owner_calls: list[int],
    request: pytest.FixtureRequest,
) -> None:
    rng = seeded(request)
    for trial in range(200):
        await fence_trial(zygote, scratch, rng, owner_calls, trial)


@pytest.mark.soak
async def test_a_paused_owner_is_fenced_soak(
    zygote: Zygote,
    scratch: Path,
    owner_calls: list[int],
    request: pytest.FixtureRequest,
) -> None:
    rng = seeded(request)
    for trial in range(5_000):
        await fence_trial(zygote, scratch, rng, owner_calls, trial)


# -- 23: lock hygiene ----------------------------------------------------------


async def test_reads_in_the_owners_process_keep_its_lock(
    zygote: Zygote, scratch: Path
) -> None:
    store = scratch / "store"
    owner = JsonlPersistence(store)
    reader = JsonlPersistence(store)
    try:
        await owner.create(meta("s"))
        await owner.append("s", turn(0, 0, seed=1))
        for trial in range(50):
            # Another instance in the owner's process opens and closes the
            # log and the lock directory: an flock must survive that.
            assert await reader.has("s")
            await reader.load("s")
            await reader.list()
            with pytest.raises(SessionLockedError):
                await reader.claim("s")
            status = zygote.call(
                op="run",
                role="writer",
                store=str(store),
                session="s",
                turns=1,
                seed=trial,
                acks=str(scratch / "acks"),
                claim=True,
            )
            assert status["code"] == LOCKED, status
    finally:
        await reader.aclose()
        await owner.aclose()


async def test_a_forked_child_cannot_write_and_does_not_keep_the_lock(
    zygote: Zygote, scratch: Path
) -> None:
    store = scratch / "store"
    backend = JsonlPersistence(store, ops=NoSyncFileOps())._impl
    backend.create(meta("s"))
    backend.append("s", turn(0, 0, seed=1))
    backend.release("s")
    backend.close()
    for trial in range(50):
        fifo = scratch / f"fifo{trial}"
        os.mkfifo(fifo)
        ack_file = scratch / f"acks{trial}"
        parent = zygote.call(
            op="run",
            role="forker",
            store=str(store),
            session="s",
            acks=str(ack_file),
            fifo=str(fifo),
        )
        assert parent["state"] == "stopped", parent  # released, child alive
        assert sorted(a[0] for a in acks(ack_file)) == [LOCKED, 100]
        other = zygote.call(
            op="run",
            role="writer",
            store=str(store),
            session="s",
            turns=trial + 2,
            first=trial + 1,
            seq0=0,
            seed=1,
            acks=str(scratch / "other"),
            claim=True,
            fresh_seq=True,
        )
        assert other["code"] == 0, other
        fifo.write_bytes(b"x")  # lets the child finish
        done = zygote.call(op="signal", pid=parent["pid"], signal=signal.SIGCONT)
        assert done["state"] == "exited", done
        assert done["code"] == 0, done


async def test_killing_the_owner_frees_the_lock_at_once(
    zygote: Zygote, scratch: Path
) -> None:
    for trial in range(50):
        store = scratch / f"store{trial}"
        owner = zygote.call(
            op="run",
            role="writer",
            store=str(store),
            session="s",
            turns=3,
            seed=1,
            acks=str(scratch / "acks"),
            pause_at=10**9,
            stop_after_acks=2,
        )
        assert owner["state"] == "stopped", owner
        killed_at = time.monotonic()
        zygote.call(op="signal", pid=owner["pid"], signal=signal.SIGKILL)
        status = zygote.call(
            op="run",
            role="writer",
            store=str(store),
            session="s",
            turns=3,
            first=2,
            seed=1,
            acks=str(scratch / "next"),
            claim=True,
            fresh_seq=True,
        )
        assert status["code"] == 0, status
        assert time.monotonic() - killed_at < 1.0
