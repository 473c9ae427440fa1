"""Takeovers and logs changed under their owner.

A claim appends in place only when the last owner is provably gone, and
rewrites the log into a new file otherwise; a holder whose log grew by valid
units, was cut short, or was renamed over between its write and its
acknowledgement is fenced; a torn tail under a live holder is repaired.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from plugins.jsonl.helpers import log_file, meta, raws, turn, write_session
from support.faultyops import NoSyncFileOps
from turnkeep.codec import EventRecord
from turnkeep.errors import (
    FlushOutcomeUnknownError,
    SessionFencedError,
)
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.format import Owner, encode_owner
from turnkeep_jsonl.names import (
    QUARANTINE_DIR,
)

pytestmark = pytest.mark.asyncio
Open = Callable[..., JsonlPersistence]


def batch(seq: int, index: int = 0, tag: str = "") -> list[EventRecord]:
    return turn(seq, index, seed="backend", tag=tag)


def log_size(root: Path) -> int:
    return log_file(root).stat().st_size


def file_names(root: Path) -> set[str]:
    return {p.name for p in root.rglob("*") if p.is_file()}


def first_group(root: Path) -> Path:
    return next(root.glob("g-*"))


# -- takeover paths ------------------------------------------------------------


def stamp_owner(log: Path, **changes: object) -> None:
    """Append an owner line for a made-up previous owner (as if it wrote last)."""
    data = log.read_bytes()
    from turnkeep_jsonl.scan import scan

    state = scan(
        lambda offset, n: data[offset : offset + n],
        len(data),
        session_id="s",
        collect=False,
        max_line=1 << 20,
    ).state
    fields: dict[str, object] = {
        "flush": state.flush + 1,
        "epoch": state.epoch + 1,
        "seq": state.seq,
        "time": state.time,
        "pid": os.getpid(),
        "host": "",
        "boot": "",
    }
    fields.update(changes)
    log.write_bytes(data + encode_owner(Owner(**fields)))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("owner", "rewrites"),
    [
        ({"host": "elsewhere"}, True),  # cannot tell: assume alive
        ({"pid": 1}, True),  # alive (init), here
        ({"pid": 2**22 + 12345}, False),  # no such process: gone
    ],
    ids=["other-host", "live-pid", "dead-pid"],
)
async def test_a_claim_rewrites_when_the_last_owner_may_live(
    store: Path, open_backend: Open, owner: dict[str, object], rewrites: bool
) -> None:
    from turnkeep_jsonl.handle import BOOT, HOST

    log = write_session(store, [batch(0)])
    stamp_owner(log, **{"host": HOST, "boot": BOOT, **owner})
    inode = log.stat().st_ino
    backend = open_backend()
    await backend.append("s", batch(len(batch(0)), 1))
    assert (log.stat().st_ino != inode) == rewrites
    assert (await backend.load("s")).events == raws([batch(0), batch(len(batch(0)), 1)])


async def test_a_log_grown_by_valid_units_fences_its_holder(
    store: Path, open_backend: Open
) -> None:
    holder = open_backend()
    await holder.create(meta("s"))
    await holder.append("s", batch(0))
    log = log_file(store)
    # Someone else appends a whole valid unit behind the holder's back.
    stamp_owner(log, pid=2**22 + 1)
    with pytest.raises(SessionFencedError):
        await holder.append("s", batch(len(batch(0)), 1))
    with pytest.raises(SessionFencedError):
        await holder.append("s", batch(len(batch(0)), 1))  # stays fenced


async def test_a_log_cut_short_fences_its_holder(
    store: Path, open_backend: Open
) -> None:
    holder = open_backend()
    await holder.create(meta("s"))
    await holder.append("s", batch(0))
    await holder.append("s", batch(len(batch(0)), 1))
    log = log_file(store)
    log.write_bytes(log.read_bytes()[:-10])
    with pytest.raises(SessionFencedError):
        await holder.append("s", batch(999))


async def test_a_torn_tail_under_a_live_holder_is_repaired_and_kept(
    store: Path, open_backend: Open
) -> None:
    holder = open_backend()
    await holder.create(meta("s"))
    await holder.append("s", batch(0))
    log = log_file(store)
    with log.open("ab") as f:
        f.write(b'{"type":"user/message","seq":')
    await holder.append("s", batch(len(batch(0)), 1))
    (kept,) = (store / QUARANTINE_DIR).iterdir()
    assert kept.read_bytes() == b'{"type":"user/message","seq":'
    assert (await holder.load("s")).events == raws([batch(0), batch(len(batch(0)), 1)])


class StealDuringFsync(NoSyncFileOps):
    """Lets another owner take the log over while our flush is being fsynced."""

    def __init__(self, on_fsync: Callable[[], None]) -> None:
        self.on_fsync = on_fsync
        self.armed = False

    def fsync(self, fd: int) -> None:
        if self.armed:
            self.armed = False
            self.on_fsync()


async def test_a_takeover_between_write_and_acknowledgement_is_not_acknowledged(
    store: Path, open_backend: Open
) -> None:
    copied = 0

    def rename_over() -> None:
        # What a takeover's rewrite does: the log as it was before our write
        # goes to a new file renamed onto the name.
        log = log_file(store)
        new = log.with_suffix(".new")
        new.write_bytes(log.read_bytes()[:copied])
        new.chmod(0o600)
        os.replace(new, log)

    ops = StealDuringFsync(rename_over)
    holder = open_backend(ops)
    await holder.create(meta("s"))
    await holder.append("s", batch(0))
    copied = log_size(store)
    ops.armed = True
    flush = batch(len(batch(0)), 1)
    # The holder cannot tell whether the takeover copied its flush: unknown.
    with pytest.raises(FlushOutcomeUnknownError) as failed:
        await holder.append("s", flush)
    assert failed.value.fenced
    assert (failed.value.first_seq, failed.value.last_seq) == (
        flush[0].seq,
        flush[-1].seq,
    )
    # Here the flush went to the orphaned file: the log has only the first one.
    assert (await open_backend().load("s")).events == raws([batch(0)])


async def test_a_takeover_that_copies_a_flush_in_flight_never_says_not_written(
    store: Path, open_backend: Open
) -> None:
    """Issue 12.3: the old owner's flush is in the new owner's log (R17).

    A real takeover (`claim(steal=True)` of another instance) runs between
    the holder's write and its identity check, copying the log with the
    written flush in it. The holder must report the flush's outcome as
    unknown with its seq range, not as fenced-and-not-written: a caller that
    believed the latter would store the turn twice.
    """
    loop = asyncio.get_running_loop()
    stealer = open_backend()

    def take_over() -> None:
        # Runs on the holder's I/O thread; the takeover runs on the loop.
        asyncio.run_coroutine_threadsafe(stealer.claim("s", steal=True), loop).result(
            timeout=30
        )

    ops = StealDuringFsync(take_over)
    holder = open_backend(ops)
    await holder.create(meta("s"))
    await holder.append("s", batch(0))
    flush = batch(len(batch(0)), 1)
    ops.armed = True
    with pytest.raises(FlushOutcomeUnknownError) as failed:
        await holder.append("s", flush)
    assert failed.value.fenced
    assert failed.value.session_id == "s"
    assert (failed.value.first_seq, failed.value.last_seq) == (
        flush[0].seq,
        flush[-1].seq,
    )
    # The new owner continues from a log that holds the flush.
    assert (await stealer.load("s")).events == raws([batch(0), flush])
    after = batch(flush[-1].seq + 1, 2)
    await stealer.append("s", after)
    assert (await stealer.load("s")).events == raws([batch(0), flush, after])
    # The old holder keeps saying so, and writes nothing more.
    with pytest.raises(FlushOutcomeUnknownError) as again:
        await holder.append("s", flush)
    assert (again.value.first_seq, again.value.last_seq) == (
        flush[0].seq,
        flush[-1].seq,
    )
    assert (await stealer.load("s")).events == raws([batch(0), flush, after])
