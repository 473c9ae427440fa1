"""`SessionMaintenance` on the JSONL backend: `inspect_tail` and `repair`.

A torn tail (an unfinished flush left by a crash) is reported by
`inspect_tail` without a byte changing, and cut by `repair` only after its
bytes are in a quarantine file; acknowledged data is never touched, and a
session that is damaged, newer, missing or owned elsewhere is refused with
nothing cut.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from plugins.jsonl.helpers import log_file, raws, turns, write_session
from turnkeep.errors import (
    SessionCorruptError,
    SessionLockedError,
    SessionNotFoundError,
    UnsupportedFormatError,
)
from turnkeep.maintenance import supports_maintenance, verify_session
from turnkeep.meta import FORMAT_VERSION
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.format import decode_header, encode_header

pytestmark = pytest.mark.asyncio

TORN = b'{"type":"user/message","seq":99,"time":1,"data":{"te'

OpenBackend = Callable[..., JsonlPersistence]


def digest(root: Path) -> str:
    """sha256 over every file of the store except lock files."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.parent.name != "locks":
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def stored(store: Path, count: int = 3) -> tuple[Path, list[bytes]]:
    batches = turns(count, seed="maintenance")
    return write_session(store, batches), raws(batches)


def quarantined(name: str) -> tuple[bytes, int]:
    path = Path(name)
    return path.read_bytes(), path.stat().st_mode & 0o777


def tear(path: Path, data: bytes = TORN) -> int:
    size = path.stat().st_size
    with path.open("ab") as f:
        f.write(data)
    return size


async def test_a_clean_log_has_no_tail(store: Path, open_backend: OpenBackend) -> None:
    stored(store)
    backend = open_backend()
    assert supports_maintenance(backend)
    assert await backend.inspect_tail("s") is None
    before = digest(store)
    assert await backend.repair("s") is None
    assert digest(store) == before, "repairing a clean log wrote something"


async def test_inspect_reports_the_tail_without_changing_a_byte(
    store: Path, open_backend: OpenBackend
) -> None:
    log, _ = stored(store)
    offset = tear(log)
    before = digest(store)
    report = await open_backend().inspect_tail("s")
    assert report is not None
    assert (report.session_id, report.offset, report.length) == ("s", offset, len(TORN))
    assert report.quarantine is None
    assert f"offset {offset}" in report.reason
    assert digest(store) == before


async def test_a_flush_without_its_commit_line_is_a_tail(
    store: Path, open_backend: OpenBackend
) -> None:
    log, events = stored(store, count=4)
    data = log.read_bytes()
    commit = data.rindex(b'{"mark":"commit"')
    log.write_bytes(data[:commit])  # the last flush's event lines stay intact
    report = await open_backend().inspect_tail("s")
    assert report is not None
    assert report.offset < commit
    assert report.offset + report.length == commit
    assert "without their commit line" in report.reason
    assert len((await open_backend().load("s")).events) < len(events)


async def test_garbage_after_the_log_is_named_by_its_offset(
    store: Path, open_backend: OpenBackend
) -> None:
    log, _ = stored(store)
    offset = tear(log, b"not json at all\n" + TORN)
    report = await open_backend().inspect_tail("s")
    assert report is not None
    assert report.offset == offset
    assert f"offset {offset}" in report.reason


async def test_verify_mentions_the_tail_but_finds_no_problem(
    store: Path, open_backend: OpenBackend
) -> None:
    log, events = stored(store)
    offset = tear(log)
    report = await verify_session(open_backend(), "s")
    assert report.ok
    assert report.events == len(events)
    assert report.tail is not None
    assert report.tail.offset == offset


async def test_repair_quarantines_then_cuts_and_keeps_every_acknowledged_byte(
    store: Path, open_backend: OpenBackend
) -> None:
    log, events = stored(store)
    offset = tear(log)
    acknowledged = log.read_bytes()[:offset]
    backend = open_backend()

    report = await backend.repair("s")

    assert report is not None
    assert (report.offset, report.length) == (offset, len(TORN))
    assert report.quarantine is not None
    assert quarantined(report.quarantine) == (TORN, 0o600)
    after = log.read_bytes()
    assert after.startswith(acknowledged)
    assert TORN not in after
    assert (await backend.load("s")).events == events
    assert await backend.inspect_tail("s") is None
    assert await backend.repair("s") is None
    # Released cleanly: another instance takes the session over at once.
    other = open_backend()
    await other.claim("s")
    await other.release("s")


async def test_repair_leaves_a_listing_unchanged(
    store: Path, open_backend: OpenBackend
) -> None:
    log, _ = stored(store)
    tear(log)
    backend = open_backend()
    before = (await backend.list()).items
    await backend.repair("s")
    after = (await open_backend().list()).items
    assert [m.summary.event_count for m in after] == [
        m.summary.event_count for m in before
    ]


async def test_repair_refuses_a_session_another_owner_drives(
    store: Path, open_backend: OpenBackend
) -> None:
    log, _ = stored(store)
    tear(log)
    owner = open_backend()
    await owner.claim("s")  # cuts the tail itself; tear it again behind it
    tear(log)
    before = digest(store)
    with pytest.raises(SessionLockedError):
        await open_backend().repair("s")
    assert digest(store) == before
    await owner.release("s")


async def test_repair_refuses_a_session_this_instance_holds(
    store: Path, open_backend: OpenBackend
) -> None:
    log, _ = stored(store)
    backend = open_backend()
    await backend.claim("s")
    tear(log)
    with pytest.raises(SessionLockedError, match="this process"):
        await backend.repair("s")
    await backend.release("s")


async def test_damaged_acknowledged_data_is_refused_with_nothing_cut(
    store: Path, open_backend: OpenBackend
) -> None:
    log, _ = stored(store, count=4)
    data = bytearray(log.read_bytes())
    first_event = data.index(b'{"type"')
    data[first_event + 20] ^= 0x01
    log.write_bytes(bytes(data))
    tear(log)
    before = digest(store)
    backend = open_backend()
    with pytest.raises(SessionCorruptError):
        await backend.inspect_tail("s")
    with pytest.raises(SessionCorruptError):
        await backend.repair("s")
    assert digest(store) == before


async def test_a_newer_format_is_refused_with_nothing_cut(
    store: Path, open_backend: OpenBackend
) -> None:
    log, _ = stored(store)
    data = log.read_bytes()
    end = data.index(b"\n")
    header = decode_header(data[:end])
    assert header is not None
    newer = msgspec.structs.replace(header, format_version=FORMAT_VERSION + 1)
    log.write_bytes(encode_header(newer) + data[end + 1 :])
    tear(log)
    before = digest(store)
    backend = open_backend()
    with pytest.raises(UnsupportedFormatError):
        await backend.inspect_tail("s")
    with pytest.raises(UnsupportedFormatError):
        await backend.repair("s")
    assert digest(store) == before


async def test_unknown_sessions_are_not_found(
    store: Path, open_backend: OpenBackend
) -> None:
    backend = open_backend()
    with pytest.raises(SessionNotFoundError):
        await backend.inspect_tail("nope")  # no store directory at all
    stored(store)
    with pytest.raises(SessionNotFoundError):
        await backend.inspect_tail("nope")
    with pytest.raises(SessionNotFoundError):
        await backend.repair("nope")
    assert not log_file(store).name.startswith("nope")
