"""`load_after` / `last_seq` read a log's end, verified, never the whole log.

- A small tail of a long log costs a window at the end, counted through the
  backend's `FileOps`; a range reaching further back widens the window.
- Every range equals the matching slice of `load`, across owner and release
  units (a log written by several owners in turn).
- A torn tail is never returned; damage in the range read is
  `SessionCorruptError` (the walk defers to `load`, whose scan decides).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from plugins.jsonl.helpers import meta, raws, turns, write_session
from support.faultyops import NoSyncFileOps
from turnkeep.errors import SessionCorruptError, StorageError
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.names import LOG_SUFFIX, session_name

LOG_NAME = session_name("s") + LOG_SUFFIX


class CountingOps(NoSyncFileOps):
    """Counts the bytes read from the log of `s`."""

    def __init__(self) -> None:
        self.logs: set[int] = set()
        self.log_bytes = 0

    def open(
        self, path: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
    ) -> int:
        fd = super().open(path, flags, mode, dir_fd=dir_fd)
        if path == LOG_NAME:
            self.logs.add(fd)
        return fd

    def close(self, fd: int) -> None:
        self.logs.discard(fd)
        super().close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        data = super().pread(fd, size, offset)
        if fd in self.logs:
            self.log_bytes += len(data)
        return data


@pytest.mark.asyncio
async def test_a_small_tail_of_a_long_log_reads_only_its_end(store: Path) -> None:
    batches = turns(1500, span=60)
    log = write_session(store, batches)
    size = log.stat().st_size
    everything = raws(batches)
    last = len(everything) - 1
    ops = CountingOps()
    backend = JsonlPersistence(store, ops=ops)
    try:
        assert await backend.last_seq("s") == last
        assert await backend.load_after("s", last - 10, 10) == everything[-10:]
        assert await backend.load_after("s", last, 10) == []
        assert ops.log_bytes < 150_000 < size // 10
        ops.log_bytes = 0
        far = last - 1000  # well beyond the first window: it widens
        assert await backend.load_after("s", far, 5) == everything[far + 1 : far + 6]
        assert ops.log_bytes < size // 2
    finally:
        await backend.aclose()


@pytest.mark.asyncio
async def test_every_range_matches_load_across_owners_and_releases(
    store: Path,
) -> None:
    batches = turns(9, span=40)
    seq = 0
    for index, batch in enumerate(batches):
        backend = JsonlPersistence(store, ops=NoSyncFileOps())
        if index == 0:
            await backend.create(meta("s"))
        else:
            await backend.claim("s")
        await backend.append("s", batch)
        seq += len(batch)
        await backend.aclose()  # a release line after every flush
    backend = JsonlPersistence(store)
    try:
        loaded = (await backend.load("s")).events
        assert loaded == raws(batches)
        assert await backend.last_seq("s") == seq - 1
        for after in range(-1, seq + 1):
            for limit in (1, 3, 50):
                got = await backend.load_after("s", after, limit)
                assert got == loaded[after + 1 : after + 1 + limit], (after, limit)
    finally:
        await backend.aclose()


@pytest.mark.asyncio
async def test_a_torn_tail_is_not_returned(store: Path) -> None:
    batches = turns(6, span=40)
    log = write_session(store, batches)
    everything = raws(batches)
    with log.open("ab") as f:
        f.write(b'{"type":"user/message","seq":' + str(len(everything)).encode())
    backend = JsonlPersistence(store)
    try:
        assert await backend.last_seq("s") == len(everything) - 1
        assert await backend.load_after("s", len(everything) - 3, 10) == everything[-2:]
        assert await backend.load_after("s", len(everything) - 1, 10) == []
    finally:
        await backend.aclose()


@pytest.mark.asyncio
async def test_damage_in_the_range_read_is_an_error(store: Path) -> None:
    batches = turns(6, span=40)
    log = write_session(store, batches)
    everything = raws(batches)
    data = bytearray(log.read_bytes())
    # One byte of the second-to-last flush's first event: inside the range.
    target = batches[-2][0].raw
    at = bytes(data).index(bytes(target[:-1]))
    data[at + 5] ^= 0x01
    log.write_bytes(bytes(data))
    backend = JsonlPersistence(store)
    try:
        first = len(everything) - len(batches[-1]) - len(batches[-2])
        with pytest.raises(SessionCorruptError):
            await backend.load_after("s", first - 1, 100)
    finally:
        await backend.aclose()


@pytest.mark.asyncio
async def test_a_damaged_cancel_file_is_an_error_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_session(root, turns(1))
    backend = JsonlPersistence(root)
    try:
        request = await backend.request_cancel("s", "stop")
        (side,) = root.rglob("*.cancel")
        assert side.name == session_name("s") + ".cancel"
        assert await backend.cancel_requested("s", 0) == request
        side.write_bytes(b"{not json")
        with pytest.raises(StorageError, match=r"\.cancel"):
            await backend.cancel_requested("s", 0)
        with pytest.raises(StorageError):
            await backend.request_cancel("s", "again")
        await backend.delete("s")
        assert not side.exists()
    finally:
        await backend.aclose()
