"""The audit trail for JSONL: append-only, checksummed side files.

A session's records are `<stem>.audit` next to its log (removed with it);
the store's log is `audit.jsonl` at the store's root (never removed). Each
line is `<crc32 of the JSON, 8 hex digits> <AuditRecord as JSON>` and a newline. A
recorder takes the file's `flock` (its own, never the session's writer
lock, so a record lands while another process holds the session), cuts a
torn last line left by a crash (never acknowledged: its sync had not
returned), numbers the record after the last line, appends it and syncs
the file and its directory before answering; a session's file that a
delete unlinked meanwhile is reported gone (the caller then records in the
store's log), never acknowledged. Readers take no lock and ignore an
unterminated last line; a complete line whose checksum or content is wrong
is read once more (a recorder may have rewritten a torn line under the
reader), then a `StorageError` naming the file. A new session removes
whatever audit file an interrupted delete of an earlier one left.
"""

from __future__ import annotations

import fcntl
import os
import stat
import zlib
from typing import Final

import msgspec

from turnkeep.audit import AuditRecord, decode_record, encode_record, numbered
from turnkeep.errors import StorageError

from .fileops import write_all
from .names import AUDIT_LOG, AUDIT_SUFFIX, LOG_SUFFIX
from .store import READ_FLAGS, Store

__all__ = ["SessionGone", "file_name", "read_records", "record"]

_APPEND_FLAGS: Final = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINE: Final = 1 << 17
"""Longer than any record (`check_record` bounds its text): the tail window."""
_CHUNK: Final = 1 << 20


def file_name(stem: str | None) -> str:
    """The audit file of session `stem`, or of the store (`None`)."""
    return AUDIT_LOG if stem is None else stem + AUDIT_SUFFIX


def record(
    store: Store, dir_fd: int, stem: str | None, entry: AuditRecord
) -> AuditRecord:
    """Append `entry` after the file's last record, durably; return it numbered.

    Raises:
        OSError: the file could not be read, written or synced.
        StorageError: the file holds something else.
    """
    ops = store.ops
    name = file_name(stem)
    fd = ops.open(name, _APPEND_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        st = ops.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise StorageError(
                f"refusing audit file {name}: not a regular file of ours"
            )
        ops.flock(fd, fcntl.LOCK_EX)
        if stem is not None and not _exists(store, dir_fd, stem + LOG_SUFFIX):
            # Deleted since it was located: what this file holds goes too.
            store.discard(dir_fd, name)
            raise SessionGone(stem)
        size = ops.fstat(fd).st_size
        if size == 0:
            ops.fchmod(fd, 0o600)
        window = ops.pread(fd, min(size, _MAX_LINE), max(0, size - _MAX_LINE))
        end = window.rfind(b"\n") + 1
        kept = size - len(window) + end
        if kept < size:
            ops.ftruncate(fd, kept)  # a torn line nobody was told about
        last = window[: end - 1].rfind(b"\n") + 1 if end else 0
        number = _decode(window[last : end - 1], store, name).number if end else 0
        stored = numbered(entry, number + 1)
        line = encode_record(stored)
        write_all(ops, fd, f"{zlib.crc32(line):08x} ".encode() + line + b"\n", kept)
        ops.fsync(fd)
        # The name must last too, and an earlier recorder may have died
        # before syncing it: the directory is synced every time (records
        # are rare; a lost name would lose every record in the file).
        ops.fsync_dir(dir_fd)
        if stem is not None and not _same_file(store, dir_fd, name, fd):
            # A delete (which takes no audit lock) took the file while we
            # wrote: the record went with it. Say so; the caller then keeps
            # it in the store's log.
            raise SessionGone(stem)
        return stored
    finally:
        ops.close(fd)  # drops the flock


class SessionGone(Exception):
    """The session was deleted while its record was being written."""


def _same_file(store: Store, dir_fd: int, name: str, fd: int) -> bool:
    """Whether `name` still names the open file `fd`."""
    held = store.ops.fstat(fd)
    try:
        named = store.ops.stat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _exists(store: Store, dir_fd: int, name: str) -> bool:
    try:
        store.ops.stat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def read_records(
    store: Store, dir_fd: int, stem: str | None, after: int, limit: int
) -> list[AuditRecord]:
    """The file's records numbered above `after`, at most `limit`.

    Raises:
        OSError: the file could not be read.
        StorageError: a complete line is not a record.
    """
    name = file_name(stem)
    try:
        return _read(store, dir_fd, name, after, limit)
    except StorageError:
        # A recorder may have cut a torn last line and written a record in
        # its place between two of our reads, which joins into a line that
        # fails its checksum: read again before calling the file damaged.
        return _read(store, dir_fd, name, after, limit)


def _read(
    store: Store, dir_fd: int, name: str, after: int, limit: int
) -> list[AuditRecord]:
    ops = store.ops
    try:
        fd = ops.open(name, READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return []
    found: list[AuditRecord] = []
    try:
        offset, pending = 0, b""
        while len(found) < limit:
            chunk = ops.pread(fd, _CHUNK, offset)
            if not chunk:
                break  # what is left in `pending` is a torn, unacknowledged line
            offset += len(chunk)
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                entry = _decode(line, store, name)
                if entry.number > after and len(found) < limit:
                    found.append(entry)
    finally:
        ops.close(fd)
    return found


def _decode(line: bytes, store: Store, name: str) -> AuditRecord:
    crc, _, body = line.partition(b" ")
    try:
        if crc != f"{zlib.crc32(body):08x}".encode():
            raise msgspec.DecodeError("checksum mismatch")
        return decode_record(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise StorageError(
            f"the audit file {name} in {os.fspath(store.path)} has a damaged "
            f"line ({exc}); move it aside to record again"
        ) from exc
