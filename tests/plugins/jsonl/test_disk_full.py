"""Deleting on a full disk frees space before it needs any (JSONL).

`delete` rewrote the catalog first (a copy of it, then a rename), so on a
full disk `rm` and `prune` failed with ENOSPC and turnkeep could not free
the space it held. Now a delete whose first catalog rewrite finds the disk
full drops the catalog (a cache of the files), removes the session's
files, and writes a new catalog last if there is room by then. A crash in
between leaves either the whole session (its files are still there; the
catalog is rebuilt from the files) or none of it.

The disk is modelled by the file operations: while full, every write
fails with ENOSPC; removing any file makes room.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from plugins.jsonl.helpers import meta, turn
from support.faultyops import NoSyncFileOps
from turnkeep.errors import SessionNotFoundError, StorageError
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.names import session_name


class FullDisk(NoSyncFileOps):
    """Writes fail with ENOSPC while `full`; an unlink makes room."""

    def __init__(self) -> None:
        self.full = False
        self.fail_unlink: str | None = None

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        if self.full and len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().pwrite(fd, data, offset)

    def unlink(self, name: str, *, dir_fd: int) -> None:
        if name == self.fail_unlink:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().unlink(name, dir_fd=dir_fd)
        self.full = False


async def _two_sessions(store: Path) -> None:
    backend = JsonlPersistence(store, ops=NoSyncFileOps())
    for sid in ("s", "keep"):
        await backend.create(meta(sid, title=f"title of {sid}"))
        await backend.append(sid, turn(0, 0))
        await backend.release(sid)
    await backend.aclose()


@pytest.mark.asyncio
async def test_delete_on_a_full_disk_frees_space_first(tmp_path: Path) -> None:
    store = tmp_path / "store"
    await _two_sessions(store)
    ops = FullDisk()
    backend = JsonlPersistence(store, ops=ops)
    ops.full = True
    await backend.delete("s")
    assert not await backend.has("s")
    assert [m.id for m in (await backend.list()).items] == ["keep"]
    await backend.aclose()
    catalog = store / "catalog.jsonl"
    assert catalog.exists()  # rebuilt once the delete made room
    assert b"title of s" not in catalog.read_bytes()
    assert b"title of keep" in catalog.read_bytes()


@pytest.mark.asyncio
async def test_a_delete_stopped_after_dropping_the_catalog_loses_nothing(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    await _two_sessions(store)
    ops = FullDisk()
    ops.fail_unlink = session_name("s") + ".jsonl"  # stopped at the session's log
    backend = JsonlPersistence(store, ops=ops)
    ops.full = True
    with pytest.raises(StorageError):
        await backend.delete("s")
    assert not (store / "catalog.jsonl").exists()  # dropped, then stopped
    await backend.aclose()
    again = JsonlPersistence(store, ops=NoSyncFileOps())
    assert sorted(m.id for m in (await again.list()).items) == ["keep", "s"]
    assert len((await again.load("s")).events) == len(turn(0, 0))
    await again.delete("s")  # with room again: done, catalog rebuilt
    with pytest.raises(SessionNotFoundError):
        await again.load("s")
    assert [m.id for m in (await again.list()).items] == ["keep"]
    await again.aclose()
    assert (store / "catalog.jsonl").exists()
