"""The log's numbers (`event_count`, `turns`, `size`) in lines, files and listings.

Control lines carry them, so `list` reads them from a log's end; logs,
sidecars and catalogs written before they existed have them recomputed from
the logs (never trusted as zeros), and the next writer writes them down.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from plugins.jsonl.helpers import log_file, meta, turns
from support.faultyops import NoSyncFileOps
from turnkeep.codec import EventRecord
from turnkeep.meta import TURN_END_TYPE, SessionSummary
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.format import (
    MARK,
    encode_event_lines,
    seal,
    unseal,
)
from turnkeep_jsonl.names import CATALOG, SIDECAR_SUFFIX

pytestmark = pytest.mark.asyncio
Open = Callable[..., JsonlPersistence]


def numbers(records: list[EventRecord]) -> tuple[int, int, int]:
    return (
        len(records),
        sum(r.type == TURN_END_TYPE for r in records),
        sum(len(r.raw) for r in records),
    )


def numbers_of(summary: SessionSummary) -> tuple[int, int, int]:
    return (summary.event_count, summary.turns, summary.size)


def flat(batches: list[list[EventRecord]]) -> list[EventRecord]:
    return [r for batch in batches for r in batch]


def objects(path: Path) -> list[dict[str, Any]]:
    """Every sealed line of a file, decoded (the checksum field dropped)."""
    out: list[dict[str, Any]] = []
    for line in path.read_bytes().splitlines():
        body = unseal(line)
        assert body is not None, line
        out.append(msgspec.json.decode(body))
    return out


def sidecar_of(store: Path) -> Path:
    (found,) = store.glob(f"g-*/*{SIDECAR_SUFFIX}")
    return found


def contents(store: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}


# -- what the files hold ---------------------------------------------------------


async def test_every_control_line_carries_the_logs_numbers(
    store: Path, open_backend: Open
) -> None:
    backend = open_backend()
    batches = turns(4, seed="numbers")
    await backend.create(meta("s", title="t"))
    for batch in batches:
        await backend.append("s", batch)
    await backend.release("s")
    seen: list[EventRecord] = []
    controls = 0
    events = iter(flat(batches))
    for obj in objects(log_file(store))[1:]:
        if "mark" not in obj:
            seen.append(next(events))
            continue
        controls += 1
        assert (obj["seq"], obj["turns"], obj["size"]) == numbers(seen), obj
    assert controls == 1 + len(batches) + 1  # owner, commits, release
    (sidecar,) = objects(sidecar_of(store))
    summary = sidecar["summary"]
    want = numbers(flat(batches))
    assert (summary["event_count"], summary["turns"], summary["size"]) == want
    catalog = objects(store / CATALOG)
    assert catalog[0]["format_version"] == 2
    (entry,) = [o for o in catalog if o.get("mark") == "entry" and not o["open"]]
    summary = entry["meta"]["summary"]
    assert (summary["event_count"], summary["turns"], summary["size"]) == want


async def test_a_torn_turn_end_without_its_commit_is_not_counted(
    store: Path, open_backend: Open
) -> None:
    batches = turns(2, seed="torn")
    writer = open_backend()
    await writer.create(meta("s"))
    for batch in batches:
        await writer.append("s", batch)
    seq = len(flat(batches))
    torn = turns(3, seed="torn")[2]
    assert torn[0].seq == seq
    assert torn[-1].type == TURN_END_TYPE
    # Whole, intact event lines (the last one a turn/end), no commit line.
    with log_file(store).open("ab") as f:
        f.write(encode_event_lines(torn))
    reader = open_backend()
    want = numbers(flat(batches))
    assert numbers_of((await reader.load("s")).meta.summary) == want
    (item,) = (await reader.list()).items
    assert numbers_of(item.summary) == want


async def test_a_log_with_odd_event_bytes_recounts_as_it_was_counted(
    store: Path, open_backend: Open
) -> None:
    def record(seq: int, kind: str) -> EventRecord:
        raw = b'{"seq":%d,"time":1,"type":"%b","data":{}}' % (seq, kind.encode())
        return EventRecord(seq, kind, 1, raw)

    records = [record(0, "turn/start"), record(1, "turn/end"), record(2, "turn/end")]
    writer = open_backend()
    await writer.create(meta("s"))
    await writer.append("s", records)
    await writer.aclose()
    loaded = await open_backend().load("s")  # recounted by the scan
    assert numbers_of(loaded.meta.summary) == numbers(records)
    assert loaded.meta.summary.turns == 2


# -- files written before the numbers existed ------------------------------------


def _without_numbers(obj: dict[str, Any]) -> dict[str, Any]:
    obj = dict(obj)
    for key in ("turns", "size"):
        obj.pop(key, None)
    if isinstance(obj.get("summary"), dict):
        obj["summary"] = _without_numbers(obj["summary"])
    if isinstance(obj.get("meta"), dict):
        obj["meta"] = {
            **obj["meta"],
            "summary": _without_numbers(obj["meta"]["summary"]),
        }
    return obj


def _strip(line: bytes) -> bytes:
    body = unseal(line)
    assert body is not None
    return seal(msgspec.json.encode(_without_numbers(msgspec.json.decode(body))))


def age_store(store: Path) -> None:
    """Rewrite a store as code from before `turns` and `size` left it."""
    for log in store.glob("g-*/*.jsonl"):
        lines = log.read_bytes().splitlines(keepends=True)
        log.write_bytes(
            b"".join(_strip(x[:-1]) if x.startswith(MARK) else x for x in lines)
        )
    for sidecar in store.glob(f"g-*/*{SIDECAR_SUFFIX}"):
        sidecar.write_bytes(_strip(sidecar.read_bytes()[:-1]))
    entries: dict[str, bytes] = {}
    for obj in objects(store / CATALOG)[1:]:
        if obj["mark"] == "entry":
            entries[obj["meta"]["header"]["id"]] = msgspec.json.encode(
                _without_numbers(obj)
            )
        else:
            entries.pop(obj["id"], None)
    body = b"".join(seal(e) for e in entries.values())
    base = len(body)
    while True:
        head = seal(
            b'{"mark":"catalog","format_version":1,"base":%d,"fcrc":"%08x"}'
            % (base, zlib.crc32(body))
        )
        if len(head) + len(body) == base:
            break
        base = len(head) + len(body)
    (store / CATALOG).write_bytes(head + body)
    assert b'"turns"' not in b"".join(p.read_bytes() for p in store.rglob("*.*"))


async def test_a_store_from_before_the_numbers_lists_and_loads_them(
    store: Path, open_backend: Open
) -> None:
    logs: dict[str, list[EventRecord]] = {}
    writer = JsonlPersistence(store, ops=NoSyncFileOps())._impl  # pyright: ignore[reportPrivateUsage]
    for n in range(4):
        sid = f"s{n}"
        batches = turns(n + 1, seed=sid)
        writer.create(meta(sid, title=f"title {n}"))
        for batch in batches:
            writer.append(sid, batch)
        logs[sid] = flat(batches)
        if n % 2:
            writer.release(sid)
    writer.close()  # the others end with a commit line, as after a crash
    age_store(store)
    before = contents(store)
    want = {sid: numbers(records) for sid, records in logs.items()}

    reader = open_backend()
    listed = {m.id: numbers_of(m.summary) for m in (await reader.list()).items}
    assert listed == want
    for sid in logs:
        assert numbers_of((await reader.load(sid)).meta.summary) == want[sid]
    assert contents(store) == before
    await reader.update("s0", SessionSummary(title="renamed"))  # not the owner
    (item,) = [m for m in (await reader.list()).items if m.id == "s0"]
    assert numbers_of(item.summary) == want["s0"]

    # The next writer writes the numbers down again: its owner line, its
    # commits, its release, the sidecar, and a version 2 catalog.
    more = turns(3, seed="more")[2]
    more = [
        msgspec.structs.replace(r, seq=len(logs["s1"]) + i) for i, r in enumerate(more)
    ]
    await reader.claim("s1")
    await reader.append("s1", more)
    await reader.release("s1")
    logs["s1"] += more
    want["s1"] = numbers(logs["s1"])
    assert objects(store / CATALOG)[0]["format_version"] == 2
    last = objects(log_file(store, "s1"))[-1]
    assert (last["mark"], last["seq"], last["turns"], last["size"]) == (
        "release",
        *want["s1"],
    )
    fresh = open_backend()
    listed = {m.id: numbers_of(m.summary) for m in (await fresh.list()).items}
    assert listed == want
    titles = {m.id: m.summary.title for m in (await fresh.list()).items}
    assert titles["s0"] == "renamed"
