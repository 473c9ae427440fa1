"""Plan items 1 and 4: writer processes killed at random and at every call.

Children are forked by a fork server (`_zygote.py`), which imports
everything once. Children acknowledge each flush in an ack file after
`append` returned; a check never trusts more than those acknowledgements.

- 1: a writer of 200 turns (3-8 events; 0 B-64 KiB in one trial in four)
  dies at a uniformly random instant (its own `ITIMER_REAL`: the default
  SIGALRM action ends the process at once, in whichever thread runs). Then:
  a valid load with at least the acknowledged flushes (and at most one
  more), claim + 10 more turns, reload; the post-repair file is the loaded
  prefix plus the new turns; a quarantine file exists iff a tail was cut,
  holding exactly the cut bytes. CI 500 trials (half the plan's 1,000, as
  `docs/reliability.md` allows, in 5 chunks that xdist spreads); soak 20,000.
  Children skip fsync: a process kill cannot lose what reached the page
  cache, so fsync only slows the run (power loss is items 7 and 8).
- 4: the writer stops itself (SIGSTOP) before or after each of its
  file-system calls in a workload that repairs a torn tail, opens an owner
  epoch, flushes, replaces the sidecar, creates a session and releases; the
  zygote then kills it. Every point is hit; each state loads validly, the
  sidecar is old or new, and a claim + flush + reload works. CI: every point
  once (the points are deterministic); soak: x 20.
"""

from __future__ import annotations

import random
import shutil
import signal
import stat
import time
from pathlib import Path

import pytest

from plugins.jsonl.helpers import meta, seeded, turn
from plugins.jsonl.zygote_client import (
    Zygote,
    acks,
    flushes_in,
    workload,
)
from support.faultyops import NoSyncFileOps
from turnkeep.codec import EventRecord
from turnkeep.errors import SessionNotFoundError
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.names import QUARANTINE_DIR

pytestmark = [pytest.mark.crash, pytest.mark.asyncio]


# -- 1: kill -9 during a 200-turn write --------------------------------------------


async def kill_trial(
    zygote: Zygote, root: Path, rng: random.Random, trial: int, duration: float
) -> None:
    store, ack_file = root / f"s{trial}", root / f"a{trial}"
    # Every third trial streams its replies (stored as packed records).
    seed, big, streamed = rng.randrange(2**32), trial % 3 == 0, trial % 3 == 1
    status = zygote.call(
        op="run",
        role="writer",
        store=str(store),
        session="s",
        turns=200,
        seed=seed,
        big=big,
        streamed=streamed,
        acks=str(ack_file),
        alarm_us=int(rng.uniform(1, duration * 1e6)),
    )
    assert status["state"] in ("exited", "signaled"), status
    acked = len(acks(ack_file))
    batches = workload(200, seed=seed, big=big, streamed=streamed)
    backend = JsonlPersistence(store)
    try:
        try:
            loaded = await backend.load("s")
        except SessionNotFoundError:
            assert acked == 0
            return
        count = flushes_in(loaded.events, batches)
        assert acked <= count <= acked + 1, (trial, acked, count)
        log = next(store.glob("g-*/*.jsonl"))
        before = log.read_bytes()
        added: list[bytes] = []
        stored = sum(r.span for b in batches[:count] for r in b)
        for index in range(10):
            batch = turn(stored + len(added), 500 + index, seed=seed)
            await backend.append("s", batch)
            added += [r.raw for r in batch]
        assert (await backend.load("s")).events == loaded.events + added
        after = log.read_bytes()
        owner = after.rfind(b'\n{"mark":"owner"') + 1
        assert after[:owner] == before[:owner], "repair touched the kept prefix"
        cut = before[owner:]
        quarantined = list((store / QUARANTINE_DIR).glob("*.broken"))
        if cut:
            (only,) = quarantined
            assert only.read_bytes() == cut
            assert stat.S_IMODE(only.stat().st_mode) == 0o600
        else:
            assert quarantined == []
    finally:
        await backend.aclose()
        shutil.rmtree(store, ignore_errors=True)
        ack_file.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def run_duration(zygote: Zygote, tmp_path_factory: pytest.TempPathFactory) -> float:
    """How long an uninterrupted 200-turn writer runs here (kills are uniform in it)."""
    root = tmp_path_factory.mktemp("calibrate")
    started = time.monotonic()
    for big in (True, False):
        status = zygote.call(
            op="run",
            role="writer",
            store=str(root / str(big)),
            session="s",
            turns=200,
            seed=1,
            big=big,
            acks=str(root / f"a{big}"),
        )
        assert status == {"pid": status["pid"], "state": "exited", "code": 0}
    return (time.monotonic() - started) / 2


@pytest.mark.parametrize("chunk", range(5))
async def test_kill_9_during_a_200_turn_write(
    zygote: Zygote,
    scratch: Path,
    run_duration: float,
    request: pytest.FixtureRequest,
    chunk: int,
) -> None:
    rng = seeded(request)
    for trial in range(chunk * 100, chunk * 100 + 100):
        await kill_trial(zygote, scratch, rng, trial, run_duration)


@pytest.mark.soak
async def test_kill_9_soak(
    zygote: Zygote, scratch: Path, run_duration: float, request: pytest.FixtureRequest
) -> None:
    rng = seeded(request)
    for trial in range(20_000):
        await kill_trial(zygote, scratch, rng, trial, run_duration)


# -- 4: protocol-point sweep ---------------------------------------------------


def prepare(base: Path, *, released: bool) -> tuple[Path, list[list[EventRecord]]]:
    """A store whose session `s` has 3 flushes, a sidecar and a torn tail.

    `released`: its writer let it go cleanly (the claim appends in place);
    otherwise the writer is this still-running test process, so the claim
    must assume a live owner and rewrite the log into a new file.
    """
    batches = workload(3, seed=4)
    store = base / "store"
    backend = JsonlPersistence(store, ops=NoSyncFileOps())._impl
    backend.create(meta("s", title="old"))
    for batch in batches:
        backend.append("s", batch)
    if released:
        backend.release("s")
    backend.close()
    log = next(store.glob("g-*/*.jsonl"))
    with log.open("ab") as f:
        f.write(b'{"type":"user/message","seq":12,"time":1,"data":{"text":"to')
    return store, batches


async def check_protocol_state(store: Path, acked: list[int], seq0: int) -> None:
    new = [turn(seq0, 100, seed=9)]
    new.append(turn(seq0 + len(new[0]), 101, seed=9))
    base = [r.raw for b in workload(3, seed=4) for r in b]
    backend = JsonlPersistence(store, ops=NoSyncFileOps())
    try:
        loaded = await backend.load("s")
        done = sum(1 for a in acked if a in (1, 2))
        count = flushes_in(loaded.events[len(base) :], new)
        assert loaded.events[: len(base)] == base
        assert done <= count <= done + 1, (acked, count)
        assert loaded.meta.summary.title in ("old", "new0", "new1")
        assert loaded.meta.summary.event_count == len(loaded.events)
        try:
            n = await backend.load("n")
            assert n.events == [r.raw for r in turn(0, 0, seed=9, tag="n")]
            has_n = True
        except SessionNotFoundError:
            assert 10 not in acked
            has_n = False
        listed = {m.id for m in (await backend.list()).items}
        assert listed == ({"s", "n"} if has_n else {"s"})
        more = turn(len(loaded.events), 200, seed=9)
        await backend.append("s", more)
        again = await backend.load("s")
        assert again.events == loaded.events + [r.raw for r in more]
    finally:
        await backend.aclose()


async def sweep_protocol(
    zygote: Zygote, scratch: Path, *, released: bool, rounds: int
) -> int:
    template, batches = prepare(scratch / "template", released=released)
    seq0 = sum(len(b) for b in batches)
    common = {
        "role": "protocol",
        "seed": 9,
        "seq0": seq0,
        "calls": str(scratch / "calls"),
    }
    dry = scratch / "dry"
    shutil.copytree(template, dry / "store")
    status = zygote.call(
        op="run",
        store=str(dry / "store"),
        acks=str(dry / "acks"),
        pause_at=10**9,
        **common,
    )
    assert status["state"] == "exited", status
    assert status["code"] == 0, status
    total = int((scratch / "calls").read_text())
    points = 0
    for _ in range(rounds):
        for at in range(1, total + 1):
            for when in ("before", "after"):
                case = scratch / f"{at}-{when}"
                shutil.copytree(template, case / "store")
                status = zygote.call(
                    op="run",
                    store=str(case / "store"),
                    acks=str(case / "acks"),
                    pause_at=at,
                    pause_when=when,
                    **common,
                )
                assert status["state"] == "stopped", (at, when, status)
                killed = zygote.call(
                    op="signal", pid=status["pid"], signal=signal.SIGKILL
                )
                assert killed["state"] == "signaled"
                acked = [a[0] for a in acks(case / "acks")]
                try:
                    await check_protocol_state(case / "store", acked, seq0)
                except AssertionError as exc:
                    raise AssertionError(f"paused {when} call {at}: {exc}") from exc
                shutil.rmtree(case)
                points += 1
    return points


@pytest.mark.parametrize("released", [True, False], ids=["in-place", "rewrite"])
async def test_sigkill_at_every_protocol_point(
    zygote: Zygote, scratch: Path, released: bool
) -> None:
    points = await sweep_protocol(zygote, scratch, released=released, rounds=1)
    assert points > 100


@pytest.mark.soak
@pytest.mark.parametrize("released", [True, False], ids=["in-place", "rewrite"])
async def test_sigkill_at_every_protocol_point_soak(
    zygote: Zygote, scratch: Path, released: bool
) -> None:
    await sweep_protocol(zygote, scratch, released=released, rounds=20)
