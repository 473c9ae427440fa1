"""Backup for JSONL: `turnkeep.backup.SessionBackup.backup`.

Owns the blocking half of `JsonlPersistence.backup`: a copy of the store,
taken while writers keep appending, that opens as a store of its own. Each
session's files are copied under the same group and stem:

- the sidecar FIRST, as it is (it is replaced atomically, so it is read
  whole). Its watermark only ever names flushes that were fsynced before it
  was written, so the log read after it holds at least those flushes and
  the copy never looks as if it lost one (format section 5);
- then the log, up to the end of its last valid unit (a flush boundary,
  found by the same scan `load` runs): the log is append-only below that
  offset, so the bytes copied are exactly the units the scan checked; an
  unfinished flush after it is not copied;
- its audit records (`<stem>.audit`), up to their last complete line;
- the catalog is rebuilt from the copied files, so it lists exactly them,
  and the store's own audit log (`audit.jsonl`) is copied the same way.

Locks and quarantine files are not copied (a lock guards a live writer of
the original; quarantined bytes were never acknowledged). A session
damaged in acknowledged data, or of a newer format, is left out and named
in the report; nothing of the original is ever written.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

import attrs

from turnkeep.backup import BackupReport, Skipped
from turnkeep.errors import SessionCorruptError, StorageError, UnsupportedFormatError

from .catalog import Catalog
from .fileops import FileOps, write_all
from .format import MAX_HEADER_BYTES, decode_header, decode_sidecar
from .handle import check_watermark, scan_log
from .names import (
    AUDIT_LOG,
    AUDIT_SUFFIX,
    LOG_SUFFIX,
    SIDECAR_SUFFIX,
    is_session_log,
    temp_name,
)
from .operations import Operations
from .store import NEW_FILE_FLAGS, READ_FLAGS, Store, storage_error
from .summary import SIDECAR_LIMIT

__all__ = ["backup"]

_COPY_CHUNK: Final = 1 << 20


def backup(impl: Operations, destination: Path) -> BackupReport:
    """Copy every session of `impl`'s store into a new store at `destination`.

    Raises:
        StorageError: the store cannot be read or the copy written.
    """
    ops = impl.ops
    if impl.store.root(create=False) is None:
        groups: dict[str, int] = {}
    else:
        groups = impl.store.groups()
    target = Store(Path(os.path.abspath(destination)), ops)
    try:
        target.root(create=True)
        copied = _Tally()
        for group, gfd in sorted(groups.items()):
            try:
                names = sorted(ops.listdir(gfd))
            except OSError as exc:
                raise storage_error(f"cannot list {impl.path / group}", exc) from exc
            for filename in names:
                stem = is_session_log(filename)
                if stem is not None:
                    _copy_session(impl, gfd, group, stem, target, copied)
        source_root = impl.store.root(create=False)
        if source_root is not None:
            dest_root = target.root(create=True)
            assert dest_root is not None  # noqa: S101 - create=True never returns None
            _copy_lines(ops, source_root, AUDIT_LOG, dest_root)
        dest_catalog = Catalog(target, ops, impl.max_line)
        try:
            dest_catalog.rewrite()
        except OSError as exc:
            where = f"cannot write the catalog of {destination}"
            raise storage_error(where, exc) from exc
        copied.bytes += _size_of(ops, target)
    finally:
        target.close()
    return BackupReport(
        kind="store",
        destination=str(destination),
        store=f"jsonl:{destination}",
        sessions=copied.sessions,
        events=copied.events,
        bytes=copied.bytes,
        skipped=copied.skipped,
    )


@attrs.define
class _Tally:
    sessions: int = 0
    events: int = 0
    bytes: int = 0
    skipped: list[Skipped] = attrs.field(factory=list[Skipped])


def _copy_session(
    impl: Operations, gfd: int, group: str, stem: str, target: Store, tally: _Tally
) -> None:
    where = impl.path / group / (stem + LOG_SUFFIX)
    try:
        _copy_files(impl, gfd, group, stem, target, tally)
    except (SessionCorruptError, UnsupportedFormatError) as exc:
        sid = exc.session_id if isinstance(exc, SessionCorruptError) else stem
        tally.skipped.append(Skipped(session_id=sid, reason=str(exc)))
    except OSError as exc:
        raise storage_error(f"cannot back up {where}", exc) from exc


def _copy_files(
    impl: Operations, gfd: int, group: str, stem: str, target: Store, tally: _Tally
) -> None:
    """Copy one session's sidecar and checked log prefix.

    Raises:
        SessionCorruptError, UnsupportedFormatError: as `load` would.
        OSError: a file cannot be read or written.
    """
    ops = impl.ops
    sidecar = _read_sidecar(ops, gfd, stem)  # before the log: see the docstring
    try:
        fd = ops.open(stem + LOG_SUFFIX, READ_FLAGS, dir_fd=gfd)
    except FileNotFoundError:
        return  # deleted meanwhile: not stored any more
    try:
        size = ops.fstat(fd).st_size
        head = ops.pread(fd, min(size, MAX_HEADER_BYTES), 0)
        header = decode_header(head[: max(head.find(b"\n"), 0)])
        if header is None:
            raise SessionCorruptError(
                f"{impl.path / group / (stem + LOG_SUFFIX)}: its header is damaged",
                session_id=stem,
                offset=0,
            )
        result = scan_log(
            ops, fd, size, session_id=header.id, collect=False, max_line=impl.max_line
        )
        decoded = decode_sidecar(sidecar) if sidecar is not None else None
        if decoded is not None and (decoded.id, decoded.log) != (header.id, header.log):
            decoded = None  # another incarnation's: ignored, as by `load`
        check_watermark(result, decoded)
        dest_gfd = target.subdir(group, create=True)
        assert dest_gfd is not None  # noqa: S101 - create=True never returns None
        _copy_prefix(ops, fd, result.end, dest_gfd, stem + LOG_SUFFIX)
    finally:
        ops.close(fd)
    if sidecar is not None:
        target.write_atomic(dest_gfd, stem + SIDECAR_SUFFIX, sidecar)
    _copy_lines(ops, gfd, stem + AUDIT_SUFFIX, dest_gfd)
    tally.sessions += 1
    tally.events += result.state.seq


def _read_sidecar(ops: FileOps, gfd: int, stem: str) -> bytes | None:
    try:
        fd = ops.open(stem + SIDECAR_SUFFIX, READ_FLAGS, dir_fd=gfd)
    except FileNotFoundError:
        return None
    try:
        return ops.pread(fd, SIDECAR_LIMIT + 1, 0)
    finally:
        ops.close(fd)


def _copy_prefix(ops: FileOps, src: int, end: int, dest_gfd: int, name: str) -> None:
    """Write the first `end` bytes of `src` to `name` (temp, fsync, rename)."""
    stem, _, suffix = name.rpartition(".")
    tmp = temp_name(stem, "." + suffix, ops.token())
    out = ops.open(tmp, os.O_WRONLY | NEW_FILE_FLAGS, 0o600, dir_fd=dest_gfd)
    try:
        try:
            ops.fchmod(out, 0o600)
            offset = 0
            while offset < end:
                chunk = ops.pread(src, min(_COPY_CHUNK, end - offset), offset)
                if not chunk:
                    raise StorageError(f"{name} became shorter while it was copied")
                write_all(ops, out, chunk, offset)
                offset += len(chunk)
            ops.fsync(out)
        finally:
            ops.close(out)
        ops.replace(tmp, name, dir_fd=dest_gfd)
    except BaseException:
        ops.unlink(tmp, dir_fd=dest_gfd)
        raise
    ops.fsync_dir(dest_gfd)


def _copy_lines(ops: FileOps, src_dir: int, name: str, dest_dir: int) -> None:
    """Copy `name` (an audit file) up to its last complete line, if it exists.

    A recorder appends under its own lock while the copy runs: the lines
    before the last newline read are complete, checksummed records.
    """
    try:
        fd = ops.open(name, READ_FLAGS, dir_fd=src_dir)
    except FileNotFoundError:
        return
    try:
        data = ops.pread(fd, ops.fstat(fd).st_size, 0)
        end = data.rfind(b"\n") + 1
        if end:
            _copy_prefix(ops, fd, end, dest_dir, name)
    finally:
        ops.close(fd)


def _size_of(ops: FileOps, target: Store) -> int:
    """The bytes of every file in the new store."""
    total = 0
    root = target.root(create=False)
    if root is None:
        return 0
    for fd in [root, *target.groups().values()]:
        for name in ops.listdir(fd):
            st = ops.stat(name, dir_fd=fd)
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total
