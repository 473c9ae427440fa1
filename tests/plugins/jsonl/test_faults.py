"""Plan items 12 and 13: injected I/O errors, and short writes.

- 12: a 50-turn run (with a summary update, a release and claim halfway,
  and a final release) is repeated with
  the k-th call of one kind failing, for every k the run makes, once
  (transient) and from then on (persistent): `fsync`, `pwrite` (EIO and
  ENOSPC), `replace`, `fsync_dir`. Each time: the error is a
  `StorageError`, or `FlushOutcomeUnknownError` with the flush's seq range
  where the flush was written before the failure (R17), and a flush that
  turns out to be in the log was never reported as a plain `StorageError`;
  the failing flush is not acknowledged; a handle that
  existed is poisoned (the next append raises, and the recorded trace shows
  no write or fsync on that descriptor after its failed fsync); a new
  instance loads a valid prefix holding every acknowledged flush, then takes
  the session over and appends. CI: every k, both modes, all five kinds.
- 13: every `pwrite` writes a random prefix of what it was given (1..n
  bytes); over 1,000 flushes every file of the store comes out identical,
  byte for byte, to a run without short writes.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from plugins.jsonl.helpers import meta, raws, seeded, turn, turns
from support.crashstates import RecordingFileOps, check_trace
from support.faultyops import CountedTokens, FaultyFileOps, NoSyncFileOps
from turnkeep.errors import (
    FlushOutcomeUnknownError,
    SessionNotFoundError,
    StorageError,
    TurnkeepError,
)
from turnkeep.meta import SessionSummary
from turnkeep_jsonl import FileOps, JsonlPersistence

KINDS = [
    ("fsync", errno.EIO),
    ("pwrite", errno.EIO),
    ("pwrite", errno.ENOSPC),
    ("replace", errno.EIO),
    ("fsync_dir", errno.EIO),
]
BATCHES = turns(50, seed="faults")


def lock_like(name: str) -> bool:
    return name.endswith((".lock", ".lock.tmp"))


Failure = StorageError | FlushOutcomeUnknownError


def errno_of(error: BaseException) -> int | None:
    """The errno of the I/O error behind `error` (itself, or a cause)."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno is not None:
            return cause.errno
        cause = cause.__cause__
    return None


def run(store: Path, ops: FileOps) -> tuple[int, Failure | None, bool]:
    """The workload; returns (flushes acknowledged, the error, handle existed)."""
    backend = JsonlPersistence(store, ops=ops)._impl
    acked = 0
    try:
        backend.create(meta("s", title="t"))
        for index, batch in enumerate(BATCHES):
            backend.append("s", batch)
            acked += 1
            if index == 25:
                backend.update("s", SessionSummary(title="t25"))
            if index == 40:  # a release and a claim: owner lines, in place
                backend.release("s")
                backend.claim("s", False)
        backend.release("s")
    except TurnkeepError as exc:
        failure: TurnkeepError | None = exc
    else:
        failure = None
    try:
        if failure is None:
            return acked, None, False
        assert isinstance(failure, Failure), repr(failure)
        if isinstance(failure, FlushOutcomeUnknownError):
            batch = BATCHES[acked]
            assert (failure.first_seq, failure.last_seq) == (
                batch[0].seq,
                batch[-1].seq,
            )
        held = backend._held.get("s") is not None
        if held:  # poisoned: every later write raises, nothing is retried
            with pytest.raises(type(failure)):
                backend.append("s", BATCHES[min(acked, 49)])
        return acked, failure, held
    finally:
        backend.close()


def recover(store: Path, acked: int, error: Failure | None = None) -> None:
    """A new instance: valid load, then takeover and one more flush.

    A failed flush found in the log must have been reported as of unknown
    outcome, never as a plain storage error (that says "not written").
    """
    backend = JsonlPersistence(store, ops=NoSyncFileOps())._impl
    try:
        try:
            loaded = backend.load("s")
        except SessionNotFoundError:
            assert acked == 0
            return
        n = len(loaded.events)
        bounds = [sum(len(b) for b in BATCHES[:i]) for i in range(51)]
        assert n in bounds
        assert acked <= bounds.index(n) <= acked + 1
        if bounds.index(n) == acked + 1 and error is not None:
            assert isinstance(error, FlushOutcomeUnknownError), repr(error)
        assert loaded.events == raws(BATCHES)[:n]
        more = turn(n, 900, seed="after")
        backend.append("s", more)
        assert backend.load("s").events == loaded.events + [r.raw for r in more]
    finally:
        for session_id in backend.session_ids():
            backend.release(session_id)
        backend.close()


@pytest.fixture(scope="module")
def counts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """How many calls of each kind the fault-free workload makes."""
    counter = FaultyFileOps(NoSyncFileOps())
    acked, error, _ = run(tmp_path_factory.mktemp("count") / "store", counter)
    assert (acked, error) == (50, None)
    print(f"\ncalls of the fault-free workload: {counter.counts}")
    return dict(counter.counts)


@pytest.mark.parametrize(("call", "code"), KINDS, ids=[f"{c}-{e}" for c, e in KINDS])
@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
def test_every_failing_call_is_a_typed_unacknowledged_poisoning_error(
    scratch: Path, counts: dict[str, int], call: str, code: int, persistent: bool
) -> None:
    total = counts[call]
    assert total >= 3
    for at in range(1, total + 1):
        base = scratch / f"{at}"
        base.mkdir()
        faulty = FaultyFileOps(
            NoSyncFileOps(), call=call, at=at, code=code, persistent=persistent
        )
        recording = RecordingFileOps(faulty, base)
        acked, error, _ = run(base / "store", recording)
        where = f"{call} #{at} ({'persistent' if persistent else 'transient'})"
        assert faulty.fired >= 1, where
        assert error is not None, f"{where}: the failure was swallowed"
        assert errno_of(error) == code, where
        assert check_trace(recording.trace, ignore=lock_like) == [], where
        recover(base / "store", acked, error)


def test_short_writes_leave_byte_identical_files(
    scratch: Path, request: pytest.FixtureRequest
) -> None:
    rng = seeded(request)
    batches = [turn(0, 0, seed="short")]
    for index in range(1, 1000):
        seq = batches[-1][-1].seq + 1
        batches.append(turn(seq, index, seed="short"))

    def write(store: Path, ops: FileOps) -> dict[str, bytes]:
        backend = JsonlPersistence(store, ops=ops)._impl
        backend.create(meta("s", title="short"))
        for index, batch in enumerate(batches):
            backend.append("s", batch)
            if index % 100 == 0:
                backend.update("s", SessionSummary(title=f"t{index}"))
        backend.release("s")
        backend.close()
        return {
            str(p.relative_to(store)): p.read_bytes()
            for p in sorted(store.rglob("*"))
            if p.is_file()
        }

    plain = write(scratch / "plain", CountedTokens())
    short = FaultyFileOps(CountedTokens(), short=rng)
    assert write(scratch / "short", short) == plain
    assert short.counts["pwrite"] > 2 * len(batches)  # writes really came up short
