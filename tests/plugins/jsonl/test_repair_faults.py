"""Plan item 15: an I/O error while the first write repairs a torn tail.

The crash states: a writer made 11 flushes and was cut off inside its 12th,
so the page cache kept only its first bytes (a random prefix of the very
bytes that flush writes, the store otherwise as the 11th flush left it:
what a kill or a power cut mid-write leaves). A new writer then claims the
session and appends, which cuts the tail, copies it to a quarantine file,
fsyncs and goes on; one call of that (a `pwrite`, `fsync`, `fsync_dir`,
`ftruncate`, `replace` or `open`, the k-th of its kind, for every k the
fault-free repair makes) fails with EIO. Afterwards the log is byte for
byte what it was, or the repair finished (the kept prefix intact, the torn
bytes gone from after it); every quarantine file holds exactly the torn
bytes; a writer without faults then loads the 11 flushes (and the new one
only if it was written before the failure), appends and reloads exactly.
CI: 3 torn states x every call of every kind (the plan asks 300 states;
soak: 60 torn states).
"""

from __future__ import annotations

import errno
import random
import shutil
from pathlib import Path

import pytest

from plugins.jsonl.helpers import log_file, meta, raws, seeded, turn, turns
from support.faultyops import FaultyFileOps, NoSyncFileOps
from turnkeep.errors import TurnkeepError
from turnkeep_jsonl import FileOps, JsonlPersistence
from turnkeep_jsonl.names import QUARANTINE_DIR, QUARANTINE_SUFFIX

pytestmark = pytest.mark.crash

BATCHES = turns(12, seed="repair")
KEPT = raws(BATCHES[:11])
KINDS = ("pwrite", "fsync", "fsync_dir", "ftruncate", "replace", "open")


class Tap(NoSyncFileOps):
    """Keeps the data of every `pwrite` while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.writes: list[bytes] = []

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        """Write, and keep a copy while tapping."""
        if self.on:
            self.writes.append(bytes(data))
        return super().pwrite(fd, data, offset)


def make_origin(root: Path) -> tuple[Path, bytes]:
    """The store after 11 flushes, and the bytes the 12th flush writes."""
    tap = Tap()
    backend = JsonlPersistence(root / "run", ops=tap)._impl
    backend.create(meta("s"))
    for batch in BATCHES[:11]:
        backend.append("s", batch)
    shutil.copytree(root / "run", root / "origin")
    tap.on = True
    backend.append("s", BATCHES[11])
    backend.close()
    flush = max(tap.writes, key=len)  # the unit: its events and commit line
    assert BATCHES[11][0].raw.split(b'"seq"')[0] in flush
    return root / "origin", flush


def torn_state(origin: Path, flush: bytes, keep: int, where: Path) -> bytes:
    """`origin` with the first `keep` bytes of `flush` after its log; the tail."""
    shutil.copytree(origin, where)
    torn = flush[:keep]
    with log_file(where).open("ab") as log:
        log.write(torn)
    return torn


def attempt(store: Path, ops: FileOps) -> bool:
    """Claim the session and append one turn; whether it worked."""
    backend = JsonlPersistence(store, ops=ops)._impl
    try:
        backend.claim("s", False)
        loaded = backend.load("s")
        backend.append("s", turn(len(loaded.events), 900, seed="new"))
    except TurnkeepError:
        return False
    finally:
        try:
            for session_id in backend.session_ids():
                backend.release(session_id)
        except TurnkeepError:
            pass  # a poisoned handle: the process would end here
        backend.close()
    return True


def quarantined(store: Path) -> list[bytes]:
    folder = store / QUARANTINE_DIR
    if not folder.exists():
        return []
    return [
        p.read_bytes() for p in folder.iterdir() if p.name.endswith(QUARANTINE_SUFFIX)
    ]


def check_case(store: Path, torn: bytes, prefix: bytes, where: str) -> None:
    """After a failed repair: unchanged or finished; then a clean retry works."""
    after = log_file(store).read_bytes()
    unchanged = after == prefix + torn
    finished = after.startswith(prefix) and not after[len(prefix) :].startswith(torn)
    assert unchanged or finished, f"{where}: the log was left half repaired"
    for copy in quarantined(store):
        assert copy == torn, f"{where}: a quarantine file holds other bytes"
    if finished:
        assert torn in quarantined(store), f"{where}: the cut bytes were not kept"
    # Trying again later works.
    backend = JsonlPersistence(store, ops=NoSyncFileOps())._impl
    try:
        backend.claim("s", False)
        loaded = backend.load("s").events
        new = [r.raw for r in turn(len(KEPT), 900, seed="new")]
        assert loaded in (KEPT, KEPT + new), where
        more = turn(len(loaded), 901, seed="more")
        backend.append("s", more)
        assert backend.load("s").events == loaded + [r.raw for r in more], where
        backend.release("s")
    finally:
        backend.close()
    assert torn in quarantined(store), f"{where}: the cut bytes were not kept"
    for copy in quarantined(store):
        assert copy == torn, where


def repair_counts(origin: Path, flush: bytes, root: Path) -> dict[str, int]:
    counter = FaultyFileOps(NoSyncFileOps())
    store = root / "count"
    torn_state(origin, flush, len(flush) // 2, store)
    assert attempt(store, counter)
    shutil.rmtree(store)
    return dict(counter.counts)


def run_item_15(root: Path, rng: random.Random, states: int) -> int:
    origin, flush = make_origin(root)
    counts = repair_counts(origin, flush, root)
    assert all(counts.get(kind, 0) >= 1 for kind in ("pwrite", "fsync", "open")), counts
    prefix = log_file(origin).read_bytes()
    cases = 0
    outcomes: dict[bool, int] = {}
    for state in range(states):
        keep = rng.randrange(1, len(flush))
        for kind in KINDS:
            for at in range(1, counts.get(kind, 0) + 1):
                store = root / f"{state}-{kind}-{at}"
                torn = torn_state(origin, flush, keep, store)
                faulty = FaultyFileOps(
                    NoSyncFileOps(), call=kind, at=at, code=errno.EIO
                )
                worked = attempt(store, faulty)
                where = f"{kind} #{at}, {keep} of {len(flush)} bytes torn"
                assert faulty.fired == 1, where
                outcomes[worked] = outcomes.get(worked, 0) + 1
                check_case(store, torn, prefix, where)
                shutil.rmtree(store)
                cases += 1
    print(f"item 15: calls per repair {counts}; attempts that still worked: {outcomes}")
    return cases


def test_item_15_a_failure_during_repair(
    scratch: Path, request: pytest.FixtureRequest
) -> None:
    cases = run_item_15(scratch, seeded(request), 3)
    print(f"item 15: {cases} failing repairs")
    assert cases >= 3 * 6


@pytest.mark.soak
def test_item_15_soak(scratch: Path, request: pytest.FixtureRequest) -> None:
    run_item_15(scratch, seeded(request, "soak"), 60)
