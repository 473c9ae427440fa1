"""Plan item 5: a writer killed while a record of 1 to 8 MiB is being written.

Children (forked by `_zygote.py`) write turns whose reply is 1 to 8 MiB and
acknowledge each flush. Two kinds of trial, half each:

- torn: the child writes a random prefix of one of its large writes (what
  a kernel had copied when the kill came: some pages of the record, not
  all) and kills itself with SIGKILL there, so the log always ends inside a
  large record;
- random: the test sends SIGKILL at a uniformly random instant of the run.

Then: a load holding exactly the acknowledged flushes (at most one more for
a random kill), never part of a flush; a claim and two more turns; a reload
equal to the loaded prefix plus them; the kept prefix untouched by the
repair; a 0600 quarantine file exactly when a tail was cut, holding the cut
bytes. CI 20 trials (the plan asks 200: each writes and reads back up to
16 MiB, so CI runs a tenth), soak 2,000 (`make soak`).
"""

from __future__ import annotations

import asyncio
import random
import shutil
import stat
import time
from pathlib import Path

import pytest

from plugins.jsonl.helpers import huge_turn, seeded, turn
from plugins.jsonl.zygote_client import Zygote, acks, flushes_in
from turnkeep.codec import EventRecord
from turnkeep.errors import SessionNotFoundError
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.names import QUARANTINE_DIR

pytestmark = [pytest.mark.crash, pytest.mark.asyncio]

TURNS = 2


def huge_workload(seed: int) -> list[list[EventRecord]]:
    out: list[list[EventRecord]] = []
    seq = 0
    for index in range(TURNS):
        out.append(huge_turn(seq, index, seed=seed))
        seq += len(out[-1])
    return out


@pytest.fixture(scope="module")
def huge_run(zygote: Zygote, tmp_path_factory: pytest.TempPathFactory) -> float:
    """How long an uninterrupted writer of the workload runs here."""
    root = tmp_path_factory.mktemp("calibrate-huge")
    started = time.monotonic()
    status = zygote.call(
        op="run",
        role="huge_writer",
        store=str(root / "s"),
        turns=TURNS,
        seed=1,
        acks=str(root / "a"),
    )
    assert status["state"] == "exited", status
    assert status["code"] == 0, status
    return time.monotonic() - started


async def huge_trial(
    zygote: Zygote, root: Path, rng: random.Random, trial: int, duration: float
) -> None:
    store, ack_file = root / f"h{trial}", root / f"ha{trial}"
    seed, torn, keep = rng.randrange(2**32), trial % 2 == 0, 0
    batches = huge_workload(seed)
    where = f"trial {trial} seed {seed} {'torn' if torn else 'random'}"
    command = {
        "role": "huge_writer",
        "store": str(store),
        "turns": TURNS,
        "seed": seed,
        "acks": str(ack_file),
    }
    if torn:
        # The large write of flush `at` (one per turn), cut at a page boundary.
        at = rng.randint(1, TURNS)
        size = sum(len(r.raw) for r in batches[at - 1])
        keep = rng.randrange(0, size, 4096)
        status = zygote.call(op="run", tear_at=at, keep=keep, **command)
        assert status["state"] == "signaled", status
        assert status["signal"] == 9, status
    else:
        pid = zygote.call(op="start", **command)["pid"]
        await asyncio.sleep(rng.uniform(0, duration))  # a uniformly random kill
        status = zygote.call(op="signal", pid=pid, signal=9)
        assert status["state"] in ("exited", "signaled"), status
    acked = len(acks(ack_file))
    backend = JsonlPersistence(store)
    try:
        try:
            loaded = await backend.load("s")
        except SessionNotFoundError:
            assert acked == 0, where
            return
        count = flushes_in(loaded.events, batches)
        if torn:
            assert count == acked, (where, acked, count)
        else:
            assert acked <= count <= acked + 1, (where, acked, count)
        log = next(store.glob("g-*/*.jsonl"))
        before = log.read_bytes()
        added: list[bytes] = []
        for index in range(2):
            batch = turn(len(loaded.events) + len(added), 900 + index, seed=seed)
            await backend.append("s", batch)
            added += [r.raw for r in batch]
        assert (await backend.load("s")).events == loaded.events + added, where
        after = log.read_bytes()
        owner = after.rfind(b'\n{"mark":"owner"') + 1
        assert after[:owner] == before[:owner], f"{where}: repair touched the prefix"
        cut = before[owner:]
        quarantined = list((store / QUARANTINE_DIR).glob("*.broken"))
        if torn and count < TURNS and keep:
            # The log ended inside the flush of the large record: its start
            # was cut off (and kept aside), nothing before it.
            first = b'{"type":"user/message","seq":%d,' % len(loaded.events)
            assert cut.startswith(first), where
        if cut:
            (only,) = quarantined
            assert only.read_bytes() == cut, where
            assert stat.S_IMODE(only.stat().st_mode) == 0o600
        else:
            assert quarantined == [], where
    finally:
        await backend.aclose()
        shutil.rmtree(store, ignore_errors=True)
        ack_file.unlink(missing_ok=True)


@pytest.mark.parametrize("chunk", range(2))
async def test_item_5_kill_while_a_large_record_is_written(
    zygote: Zygote,
    scratch: Path,
    huge_run: float,
    request: pytest.FixtureRequest,
    chunk: int,
) -> None:
    rng = seeded(request, chunk)
    for trial in range(chunk * 10, chunk * 10 + 10):
        await huge_trial(zygote, scratch, rng, trial, huge_run)


@pytest.mark.soak
async def test_item_5_soak(
    zygote: Zygote, scratch: Path, huge_run: float, request: pytest.FixtureRequest
) -> None:
    rng = seeded(request, "soak")
    for trial in range(2000):
        await huge_trial(zygote, scratch, rng, trial, huge_run)
