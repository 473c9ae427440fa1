"""A summary given to `append` rides in the flush's commit line.

The flush costs what a flush without it costs (one write and one fsync of
the log; no sidecar, no rename), and every reader sees the newest summary,
from the sidecar or from the log: a bystander while the owner writes on
(its later lines point back at the one that said it), a new owner that took
the session over from one that never released it, and listings.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from plugins.jsonl.helpers import meta, turn
from support.recording import Op, RecordingFileOps
from turnkeep.codec import EventRecord
from turnkeep.meta import SessionStatus, SessionSummary
from turnkeep_jsonl import JsonlPersistence, OsFileOps
from turnkeep_jsonl.names import LOG_SUFFIX, SIDECAR_SUFFIX

pytestmark = pytest.mark.asyncio
Open = Callable[..., JsonlPersistence]


def batch(seq: int, index: int) -> list[EventRecord]:
    return turn(seq, index, seed="said")


def titled(title: str, status: SessionStatus = "idle") -> SessionSummary:
    return SessionSummary(
        updated_at=1, title=title, first_prompt=f"about {title}", status=status
    )


async def seen(backend: JsonlPersistence, session_id: str = "s") -> list[str | None]:
    """The title `load` and `list` show."""
    loaded = await backend.load(session_id)
    listed = [m for m in (await backend.list()).items if m.id == session_id]
    return [loaded.meta.summary.title, *(m.summary.title for m in listed)]


async def test_a_flush_with_a_summary_costs_one_fsync_and_no_rename(
    tmp_path: Path,
) -> None:
    ops = RecordingFileOps(inner=OsFileOps(), base=tmp_path)
    backend = JsonlPersistence(tmp_path / "store", ops=ops)
    try:
        await backend.create(meta("s"))
        records = batch(0, 0)
        ops.trace.mark("start")
        await backend.append("s", records, summary=titled("first", "active"))
        first = _since(ops, "start")
        # The new log is renamed in (as without a summary); no sidecar.
        renamed = [o.dst for o in first if o.kind == "rename"]
        assert any(name.endswith(LOG_SUFFIX) for name in renamed), renamed
        touched = [o.name + o.dst for o in first]
        assert not [n for n in touched if SIDECAR_SUFFIX in n], touched
        assert not [o for o in first if o.name.endswith(".summary")]
        seq = len(records)
        for index in range(1, 4):
            records = batch(seq, index)
            ops.trace.mark("flush")
            await backend.append("s", records, summary=titled(f"t{index}"))
            seq += len(records)
            done = _since(ops, "flush")
            assert [o.kind for o in done] == ["write", "fsync"], done
            assert done[0].inode == done[1].inode, done  # the log's
        assert await seen(backend) == ["t3", "t3"]
    finally:
        await backend.aclose()


def _since(ops: RecordingFileOps, label: str) -> list[Op]:
    trace = ops.trace.ops
    last = max(i for i, o in enumerate(trace) if o.kind == "mark" and o.label == label)
    return [o for o in trace[last + 1 :] if o.kind != "mark"]


async def test_a_bystander_sees_the_newest_summary_while_the_owner_writes_on(
    open_backend: Open,
) -> None:
    owner = open_backend()
    await owner.create(meta("s", title="created"))
    seq = 0
    plan: list[SessionSummary | str | None] = [
        None,
        titled("said"),
        None,  # these two point back at the line that said it
        None,
        "updated",  # an update: the sidecar is newer than that line
        None,
        titled("said again"),
        None,
    ]
    want = "created"
    for index, step in enumerate(plan):
        if isinstance(step, str):
            await owner.update("s", titled(step))
            want = step
        else:
            records = batch(seq, index)
            await owner.append("s", records, summary=step)
            seq += len(records)
            if step is not None:
                want = step.title or ""
        assert await seen(open_backend()) == [want, want], index
    await owner.aclose()
    assert await seen(open_backend()) == ["said again", "said again"]


async def test_a_takeover_keeps_what_the_old_owners_log_said(
    open_backend: Open,
) -> None:
    owner = open_backend()
    await owner.create(meta("s", title="created"))
    first = batch(0, 0)
    await owner.append("s", first)
    await owner.update("s", titled("in the sidecar"))
    second = batch(len(first), 1)
    await owner.append("s", second, summary=titled("in the log"))
    # The owner never releases it (a crash, as far as the files tell).
    heir = open_backend()
    await heir.claim("s", steal=True)
    assert (await heir.load("s")).meta.summary.title == "in the log"
    seq = len(first) + len(second)
    for index in (2, 3):
        records = batch(seq, index)
        await heir.append("s", records)
        seq += len(records)
    assert await seen(open_backend()) == ["in the log", "in the log"]
    await heir.aclose()
    assert await seen(open_backend()) == ["in the log", "in the log"]


async def test_a_bystanders_update_wins_over_what_the_log_said_before_it(
    open_backend: Open,
) -> None:
    owner = open_backend()
    await owner.create(meta("s"))
    first = batch(0, 0)
    await owner.append("s", first, summary=titled("said by the owner"))
    await open_backend().update("s", titled("bystander"))
    assert await seen(open_backend()) == ["bystander", "bystander"]
    await owner.append("s", batch(len(first), 1))  # points back at the old line
    assert await seen(open_backend()) == ["bystander", "bystander"]
    await owner.release("s")
    assert await seen(open_backend()) == ["bystander", "bystander"]


async def test_salvage_reads_what_the_log_said(open_backend: Open) -> None:
    owner = open_backend()
    await owner.create(meta("s", title="created"))
    await owner.append("s", batch(0, 0), summary=titled("said"))
    intact = await open_backend().read_intact("s")
    assert intact.meta.summary.title == "said"
