"""Plan items 1, 4, 21, 22 and 23: real processes, killed, paused, racing.

Children are forked by a fork server (`_zygote.py`), which imports
everything once. Children acknowledge each flush in an ack file after
`append` returned; a check never trusts more than those acknowledgements.

- 1: a writer of 200 turns (3-8 events; 0 B-64 KiB in one trial in four)
  dies at a uniformly random instant (its own `ITIMER_REAL`: the default
  SIGALRM action ends the process at once, in whichever thread runs). Then:
  a valid load with at least the acknowledged flushes (and at most one
  more), claim + 10 more turns, reload; the post-repair file is the loaded
  prefix plus the new turns; a quarantine file exists iff a tail was cut,
  holding exactly the cut bytes. CI 150 trials; soak 20,000. Children skip
  fsync: a process kill cannot lose what reached the page cache, so fsync
  only slows the run (power loss is items 7 and 8).
- 4: the writer stops itself (SIGSTOP) before or after each of its
  file-system calls in a workload that repairs a torn tail, opens an owner
  epoch, flushes, replaces the sidecar, creates a session and releases; the
  zygote then kills it. Every point is hit; each state loads validly, the
  sidecar is old or new, and a claim + flush + reload works. CI: every point
  once (the points are deterministic); soak: x 20.
- 21: two processes race for one session behind a barrier: exactly one
  wins, the other is refused at once (the winner holds on until the loser
  tried). CI 200 races (100 creating, 100 claiming); soak 10,000.
- 22: owner A stops at a random file-system call; B takes over (steal, or
  by removing the lock file) and writes 5 turns; A continues: it is fenced,
  nothing it writes after the takeover lands, the log is A's acknowledged
  prefix then B's turns. CI 200; soak 5,000.
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
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from plugins.jsonl.helpers import meta, seeded, turn
from support.faultyops import NoSyncFileOps
from turnkeep.codec import EventRecord
from turnkeep.errors import SessionLockedError, SessionNotFoundError
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.names import QUARANTINE_DIR

pytestmark = [pytest.mark.crash, pytest.mark.asyncio]

ZYGOTE = Path(__file__).with_name("_zygote.py")
LOCKED, FENCED = 3, 4


class Zygote:
    """The fork server, driven by JSON lines."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ZYGOTE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def call(self, **cmd: Any) -> Any:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(msgspec.json.encode(cmd) + b"\n")
        self.proc.stdin.flush()
        reply = msgspec.json.decode(self.proc.stdout.readline())
        assert "error" not in reply, reply
        return reply["ok"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b'{"op":"exit"}\n')
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    server = Zygote()
    yield server
    server.close()


def acks(path: Path) -> list[list[int]]:
    """The numbers on each `ACK` line of an ack file."""
    if not path.exists():
        return []
    return [
        [int(x) for x in line.split()[1:]]
        for line in path.read_text().splitlines()
        if line.startswith("ACK")
    ]


def workload(
    turns: int, *, seed: int, big: bool = False, tag: str = ""
) -> list[list[EventRecord]]:
    out: list[list[EventRecord]] = []
    seq = 0
    for index in range(turns):
        out.append(turn(seq, index, seed=seed, big=big, tag=tag))
        seq += len(out[-1])
    return out


def flushes_in(events: list[bytes], batches: list[list[EventRecord]]) -> int:
    """How many whole flushes of `batches` `events` are (asserting it is a prefix)."""
    count = 0
    total = 0
    for batch in batches:
        if total == len(events):
            break
        total += len(batch)
        count += 1
    assert total == len(events), "not a whole number of flushes"
    assert events == [r.raw for b in batches[:count] for r in b]
    return count


# -- 1: kill -9 during a 200-turn write --------------------------------------------


async def kill_trial(
    zygote: Zygote, root: Path, rng: random.Random, trial: int, duration: float
) -> None:
    store, ack_file = root / f"s{trial}", root / f"a{trial}"
    seed, big = rng.randrange(2**32), trial % 2 == 0
    status = zygote.call(
        op="run",
        role="writer",
        store=str(store),
        session="s",
        turns=200,
        seed=seed,
        big=big,
        acks=str(ack_file),
        alarm_us=int(rng.uniform(1, duration * 1e6)),
    )
    assert status["state"] in ("exited", "signaled"), status
    acked = len(acks(ack_file))
    batches = workload(200, seed=seed, big=big)
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
        for index in range(10):
            batch = turn(len(loaded.events) + len(added), 500 + index, seed=seed)
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


async def test_kill_9_during_a_200_turn_write(
    zygote: Zygote, scratch: Path, run_duration: float, request: pytest.FixtureRequest
) -> None:
    rng = seeded(request)
    for trial in range(150):
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
        assert done["code"] == FENCED, (trial, done)
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
    b_batches: list[list[EventRecord]] = []
    seq = base
    for index in range(5):
        b_batches.append(turn(seq, index, seed=seed, tag="B"))
        seq += len(b_batches[-1])
    assert loaded.events[base:] == [r.raw for b in b_batches for r in b]
    shutil.rmtree(store)
    for path in (a_acks, b_acks, root / "b.base"):
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
