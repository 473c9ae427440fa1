"""JSONL reads from another instance see only what is on disk.

A writer writes a flush, then syncs it. A reader in another process that
read between the two would see a flush that a power cut can still take
back, and a follower would pass on a seq that may be stored again. Each
read (`last_seq`, `load_after`, `load`, and so `wait_for_commit`) syncs the
log itself before it reads, and reads only what was written before that
sync: whatever it returns is covered by a completed `fsync`.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import pytest

from plugins.jsonl.helpers import log_file, meta, turns
from support.faultyops import NoSyncFileOps
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.fileops import OsFileOps

pytestmark = pytest.mark.asyncio


class Disk:
    """How far each file is known to be on disk: sizes at completed syncs."""

    def __init__(self) -> None:
        self.synced: dict[tuple[int, int], int] = {}
        self.mu = threading.Lock()

    def note(self, fd: int, size: int) -> None:
        st = os.fstat(fd)
        with self.mu:
            key = (st.st_dev, st.st_ino)
            self.synced[key] = max(self.synced.get(key, 0), size)

    def of(self, path: Path) -> int:
        st = path.stat()
        return self.synced.get((st.st_dev, st.st_ino), 0)


class HeldSync(OsFileOps):
    """The writer: each fsync of a log waits until the test lets it go."""

    def __init__(self, disk: Disk) -> None:
        self.disk = disk
        self.hold = False
        self.release = threading.Event()
        self.waiting = threading.Event()

    def fsync(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        if self.hold:
            self.waiting.set()
            self.release.wait(30)
        os.fsync(fd)
        self.disk.note(fd, size)


class Tracked(OsFileOps):
    """A reader whose syncs are real and noted."""

    def __init__(self, disk: Disk) -> None:
        self.disk = disk
        self.syncs = 0

    def fsync(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        os.fsync(fd)
        self.syncs += 1
        self.disk.note(fd, size)


async def test_a_flush_is_read_only_once_a_sync_covers_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    batches = turns(2)
    first = JsonlPersistence(root, ops=NoSyncFileOps())
    await first.create(meta())
    await first.append("s", batches[0])
    await first.aclose()

    disk = Disk()
    writer_ops = HeldSync(disk)
    writer = JsonlPersistence(root, ops=writer_ops)
    reader_ops = Tracked(disk)
    reader = JsonlPersistence(root, ops=reader_ops)
    try:
        await writer.claim("s")
        writer_ops.hold = True
        # The second flush is written; its writer's sync has not returned.
        appending = asyncio.create_task(writer.append("s", batches[1]))
        assert await asyncio.to_thread(writer_ops.waiting.wait, 30)
        log = log_file(root)
        written = log.stat().st_size
        assert disk.of(log) < written  # nobody synced the second flush yet

        last = batches[1][-1].seq
        assert await reader.last_seq("s") == last
        # What the reader reported is on disk: its own sync covered it.
        assert disk.of(log) >= written
        after = await reader.load_after("s", batches[0][-1].seq, 100)
        assert after == [r.raw for r in batches[1]]
        assert reader_ops.syncs >= 2

        writer_ops.release.set()
        await appending
        writer_ops.hold = False
    finally:
        writer_ops.hold = False
        writer_ops.release.set()
        await writer.aclose()
        await reader.aclose()


async def test_a_file_system_that_cannot_sync_from_a_reader_is_still_read(
    tmp_path: Path,
) -> None:
    class CannotSync(OsFileOps):
        def fsync(self, fd: int) -> None:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    root = tmp_path / "store"
    batches = turns(1)
    writer = JsonlPersistence(root, ops=NoSyncFileOps())
    await writer.create(meta())
    await writer.append("s", batches[0])
    await writer.aclose()
    reader = JsonlPersistence(root, ops=CannotSync())
    try:
        assert await reader.last_seq("s") == batches[0][-1].seq
        assert len((await reader.load("s")).events) == len(batches[0])
    finally:
        await reader.aclose()


async def test_an_io_error_syncing_a_read_is_a_storage_error(tmp_path: Path) -> None:
    from turnkeep.errors import StorageError

    class Broken(OsFileOps):
        def fsync(self, fd: int) -> None:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    root = tmp_path / "store"
    writer = JsonlPersistence(root, ops=NoSyncFileOps())
    await writer.create(meta())
    await writer.append("s", turns(1)[0])
    await writer.aclose()
    reader = JsonlPersistence(root, ops=Broken())
    try:
        with pytest.raises(StorageError):
            await reader.last_seq("s")
    finally:
        await reader.aclose()
