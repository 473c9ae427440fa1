"""The JSONL audit files: checksummed lines, a torn last line, damage named.

- A session's records are `<stem>.audit` beside its log, the store's are
  `audit.jsonl` at the root; both are 0600 and the log is not touched.
- A torn last line (a crash mid-append: never acknowledged) is ignored by
  readers and cut by the next recorder, which numbers after the last
  complete record.
- A complete line whose checksum does not match is a `StorageError` naming
  the file, for readers and recorders alike.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from plugins.jsonl.helpers import meta, turns, write_session
from turnkeep.audit import MAX_DETAIL_TEXT, audit_record
from turnkeep.auditing import note
from turnkeep.errors import StorageError
from turnkeep_jsonl import JsonlPersistence
from turnkeep_jsonl.fileops import OsFileOps
from turnkeep_jsonl.names import LOG_SUFFIX, session_name


@pytest.mark.asyncio
async def test_files_lines_torn_tails_and_damage(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_session(root, turns(1))
    (log,) = root.rglob(session_name("s") + LOG_SUFFIX)
    before = log.read_bytes()
    backend = JsonlPersistence(root)
    try:
        first = await backend.record_audit("s", audit_record("repair", "s", "cut"))
        (side,) = root.rglob("*.audit")
        assert side.name == session_name("s") + ".audit"
        assert stat.S_IMODE(side.stat().st_mode) == 0o600
        assert log.read_bytes() == before
        store = await backend.record_audit(None, audit_record("deletion", "x", "r"))
        assert (root / "audit.jsonl").exists()
        assert store.number == first.number == 1

        with side.open("ab") as f:
            f.write(b'0badc0de {"at": 1, "acti')  # torn: no newline
        assert await backend.audit_records("s", 0, 10) == [first]
        second = await backend.record_audit("s", audit_record("repair", "s", "again"))
        assert second.number == 2
        assert await backend.audit_records("s", 0, 10) == [first, second]
        assert side.read_bytes().count(b"\n") == 2

        side.write_bytes(side.read_bytes().replace(b"again", b"AGAIN"))
        with pytest.raises(StorageError, match=r"\.audit"):
            await backend.audit_records("s", 0, 10)
        with pytest.raises(StorageError, match="damaged"):
            await backend.record_audit("s", audit_record("repair", "s", "more"))
        await backend.delete("s")
        assert not side.exists()
        assert await backend.audit_records(None, 0, 10) == [store]
    finally:
        await backend.aclose()


@pytest.mark.asyncio
async def test_a_backup_keeps_the_audit_trail(tmp_path: Path) -> None:
    # The session's records and the store's log come along, up to their last
    # complete line; a torn last line (a recorder mid-append) is left out.
    root = tmp_path / "store"
    write_session(root, turns(1))
    backend = JsonlPersistence(root)
    try:
        kept = await backend.record_audit("s", audit_record("repair", "s", "cut"))
        deleted = await backend.record_audit(None, audit_record("deletion", "x", "r"))
        (side,) = root.rglob("*.audit")
        with side.open("ab") as f:
            f.write(b'0badc0de {"at": 1, "acti')  # torn: no newline
        await backend.backup(tmp_path / "copy")
    finally:
        await backend.aclose()
    copy = JsonlPersistence(tmp_path / "copy")
    try:
        assert await copy.audit_records("s", 0, 10) == [kept]
        assert await copy.audit_records(None, 0, 10) == [deleted]
        (copied,) = (tmp_path / "copy").rglob("*.audit")
        assert not copied.read_bytes().endswith(b"acti")
        assert stat.S_IMODE(copied.stat().st_mode) == 0o600
    finally:
        await copy.aclose()


@pytest.mark.asyncio
async def test_a_long_id_still_has_its_torn_tail_cut_and_recorded(
    tmp_path: Path,
) -> None:
    # The quarantine file's name (the stem and more) is longer than a detail
    # text may be: the record is cut to fit, never in the way of the claim.
    sid = "x" * 110
    root = tmp_path / "store"
    write_session(root, turns(1), session_id=sid)
    log = next(root.rglob(session_name(sid) + LOG_SUFFIX))
    with log.open("ab") as f:
        f.write(b"torn")
    backend = JsonlPersistence(root)
    try:
        await backend.claim(sid)
        [record] = await backend.audit_records(sid, 0, 10)
    finally:
        await backend.aclose()
    assert record.action == "quarantine"
    assert record.detail["length"] == 4
    file = record.detail["file"]
    assert isinstance(file, str)
    assert len(file) <= MAX_DETAIL_TEXT
    assert file.endswith("…")
    assert not log.read_bytes().endswith(b"torn")


class _DeletedWhileWritten(OsFileOps):
    """Unlinks the session (log and audit file) right after an audit sync,
    as a forced delete in another process could (a delete takes no audit
    lock)."""

    armed = False

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        if self.armed and path.endswith(".audit"):
            self.armed = False
            os.unlink(path)
            os.unlink(path.removesuffix(".audit") + LOG_SUFFIX)


@pytest.mark.asyncio
async def test_a_record_whose_session_is_deleted_meanwhile_goes_to_the_store_log(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    write_session(root, turns(1))
    ops = _DeletedWhileWritten()
    backend = JsonlPersistence(root, ops=ops)
    try:
        ops.armed = True
        stored = await note(backend, "fenced_write", "s", "a refused write")
        assert stored is not None
        # Not acknowledged in a file that is gone: kept in the store's log.
        assert await backend.audit_records(None, 0, 10) == [stored]
        assert list(root.rglob("*.audit")) == []
    finally:
        await backend.aclose()


class _AuditUnlinkFails(OsFileOps):
    def unlink(self, name: str, *, dir_fd: int) -> None:
        if name.endswith(".audit"):
            raise OSError(errno.EIO, "the process died here")
        super().unlink(name, dir_fd=dir_fd)


@pytest.mark.asyncio
async def test_a_new_session_never_inherits_the_records_of_a_deleted_one(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    old = JsonlPersistence(root)
    await old.create(meta())
    await old.append("s", turns(1)[0])
    await old.record_audit("s", audit_record("takeover", "s", "the old session's"))
    await old.release("s")
    await old.aclose()
    cut_short = JsonlPersistence(root, ops=_AuditUnlinkFails())
    await cut_short.delete("s")  # the log went; its audit file stayed
    await cut_short.aclose()
    assert len(list(root.rglob("*.audit"))) == 1
    fresh = JsonlPersistence(root)
    try:
        await fresh.create(meta())
        await fresh.append("s", turns(1)[0])
        assert await fresh.audit_records("s", 0, 10) == []
        first = await fresh.record_audit("s", audit_record("repair", "s", "new"))
        assert first.number == 1
    finally:
        await fresh.aclose()


class _TornUnderTheReader(OsFileOps):
    """The first read of an audit file sees a line a recorder was rewriting."""

    torn = True

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        data = super().pread(fd, size, offset)
        if self.torn and os.readlink(f"/proc/self/fd/{fd}").endswith(".audit"):
            self.torn = False
            return data.replace(b"repair", b"REPAIR", 1)
        return data


@pytest.mark.asyncio
async def test_a_reader_reads_again_before_calling_a_file_damaged(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    write_session(root, turns(1))
    writer = JsonlPersistence(root)
    try:
        kept = await writer.record_audit("s", audit_record("repair", "s", "cut"))
    finally:
        await writer.aclose()
    reader = JsonlPersistence(root, ops=_TornUnderTheReader())
    try:
        assert await reader.audit_records("s", 0, 10) == [kept]
    finally:
        await reader.aclose()
