"""The catalog and listing: rebuilt when missing or damaged, compacted, never
trusted for a session a writer may have moved on, paged across runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from plugins.jsonl.helpers import log_file, meta, turn
from support.faultyops import NoSyncFileOps
from turnkeep.codec import EventRecord
from turnkeep.meta import SessionSummary
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.names import (
    CATALOG,
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


# -- catalog and listing -------------------------------------------------------


async def test_listing_survives_a_missing_then_rebuilt_catalog(
    store: Path, open_backend: Open
) -> None:
    writer = open_backend()
    for n in range(5):
        await writer.create(meta(f"s{n}", title=f"title {n}"))
        await writer.append(f"s{n}", batch(0, n))
        await writer.release(f"s{n}")
    (store / CATALOG).unlink()
    reader = open_backend()
    listed = await reader.list()
    assert sorted(m.id for m in listed.items) == [f"s{n}" for n in range(5)]
    assert {m.summary.title for m in listed.items} == {f"title {n}" for n in range(5)}
    assert not (store / CATALOG).exists(), "list wrote the catalog"
    await writer.create(meta("new"))
    await writer.append("new", batch(0))  # a writer rebuilds it
    assert (store / CATALOG).exists()
    assert len((await open_backend().list()).items) == 6


async def test_a_damaged_catalog_is_rebuilt_or_partly_trusted(
    store: Path, open_backend: Open
) -> None:
    writer = open_backend()
    for n in range(3):
        await writer.create(meta(f"s{n}"))
        await writer.append(f"s{n}", batch(0, n))
        await writer.release(f"s{n}")
    data = (store / CATALOG).read_bytes()
    # A broken head: unusable, the files are read instead.
    (store / CATALOG).write_bytes(b"garbage" + data)
    assert len((await open_backend().list()).items) == 3
    # A damaged snapshot line: the others still count; a torn last line too.
    lines = data.split(b"\n")
    lines[1] = lines[1].replace(b"entry", b"entrx")
    (store / CATALOG).write_bytes(b"\n".join(lines) + b'{"mark":"ent')
    reader = open_backend()
    listed = {m.id for m in (await reader.list()).items}
    assert listed <= {"s0", "s1", "s2"}
    assert len(listed) >= 2


async def test_the_catalog_is_compacted(store: Path, open_backend: Open) -> None:
    writer = JsonlPersistence(store, ops=NoSyncFileOps())._impl
    writer.create(meta("s"))
    writer.append("s", batch(0))
    for n in range(400):
        writer.release("s")
        writer.claim("s", False)
        writer.update("s", SessionSummary(title=f"t{n}" * 30))
    writer.release("s")
    writer.close()
    # 800 lines of a few hundred bytes each were appended; compaction keeps
    # the file near one line per session.
    assert (store / CATALOG).stat().st_size < 150_000
    (item,) = (await open_backend().list()).items
    assert item.summary.title == "t399" * 30


async def test_another_writers_session_is_listed_from_its_files(
    store: Path, open_backend: Open
) -> None:
    writer = open_backend()
    reader = open_backend()
    await writer.create(meta("s", title="first"))
    seq = 0
    for index in range(3):
        flush = batch(seq, index)
        await writer.append("s", flush)
        seq += len(flush)
        (item,) = (await reader.list()).items
        assert item.summary.event_count == seq
        assert item.summary.updated_at == flush[-1].time
    await writer.update("s", SessionSummary(title="second"))
    (item,) = (await reader.list()).items
    assert item.summary.title == "second"


async def test_paging_merges_settled_and_moving_sessions(
    store: Path, open_backend: Open
) -> None:
    writer = open_backend()
    for n in range(12):
        await writer.create(meta(f"s{n:02}"))
        await writer.append(f"s{n:02}", batch(0, n))
        if n % 3:
            await writer.release(f"s{n:02}")  # the others stay held (moving)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await writer.list(limit=5, cursor=cursor)
        seen += [m.id for m in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(seen) == [f"s{n:02}" for n in range(12)]
    assert len(seen) == 12
