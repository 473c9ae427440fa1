"""Claiming a stored session: validate, repair the tail (R5), open an epoch (R9).

Owns the first write after a load. The log is scanned under the lock; bytes
after its last valid unit are copied to a 0600 quarantine file and made
durable before anything is cut; then an owner line opens a new epoch.

Where the previous owner may still be alive (a forced takeover, or a lock
file someone removed while its owner ran), the log is not appended to in
place: its valid part and the new owner line go to a new file that is
renamed over the log. The old owner's descriptor then points at an orphan, so
a write it was about to make cannot interleave with ours, and its identity
check fails before its next flush is acknowledged.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from typing import Final

import msgspec

from turnkeep.audit import audit_record
from turnkeep.errors import (
    SessionLockedError,
    SessionNotFoundError,
    StorageError,
)
from turnkeep.meta import SessionSummary

from . import audit
from .fileops import write_all
from .format import Owner, Sidecar, encode_owner
from .handle import (
    BOOT,
    HOST,
    Handle,
    check_watermark,
    close,
    fence,
    is_live,
    poison,
    scan_log,
)
from .names import LOG_SUFFIX, QUARANTINE_DIR, quarantine_name, temp_name
from .scan import CHUNK, ScanResult, ScanState
from .store import NEW_FILE_FLAGS, Store, storage_error
from .summary import Numbers, merge_summary, read_sidecar

log = logging.getLogger("turnkeep_jsonl")

__all__ = ["open_stored", "quarantine", "reconcile", "take_epoch"]

_LOG_FLAGS: Final = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
_REWRITE_ROUNDS: Final = 8


def open_stored(
    store: Store,
    session_id: str,
    stem: str,
    lock_fd: int,
    *,
    max_line: int,
    collect: bool = False,
) -> tuple[Handle, ScanResult, Sidecar | None]:
    """Open and validate a stored session's log (no write yet).

    Returns a handle that holds no epoch yet, what the scan found (with the
    events when `collect`) and the sidecar; `take_epoch` finishes the claim
    once the catalog knows it is open.

    Raises:
        SessionNotFoundError: there is no such log.
        SessionCorruptError, UnsupportedFormatError: see `scan`; also when the
            sidecar proves a flush was acknowledged that the log lost.
        StorageError: the log cannot be read.
    """
    ops = store.ops
    found = store.find(stem)
    if found is None:
        raise SessionNotFoundError(f"no stored session {session_id!r} to claim")
    group, gfd = found
    try:
        fd = ops.open(stem + LOG_SUFFIX, _LOG_FLAGS, dir_fd=gfd)
    except FileNotFoundError as exc:
        raise SessionNotFoundError(f"no stored session {session_id!r}") from exc
    except OSError as exc:
        raise storage_error(f"cannot open the log of {session_id!r}", exc) from exc
    try:
        st = ops.fstat(fd)
        result = scan_log(
            ops,
            fd,
            st.st_size,
            session_id=session_id,
            collect=collect,
            max_line=max_line,
        )
        sidecar = read_sidecar(ops, gfd, stem, result.header)
        check_watermark(result, sidecar)
    except BaseException as exc:
        ops.close(fd)
        if isinstance(exc, OSError):
            raise storage_error(f"cannot read the log of {session_id!r}", exc) from exc
        raise
    handle = Handle(
        stem=stem,
        group=group,
        gfd=gfd,
        fd=fd,
        lock_fd=lock_fd,
        header=result.header,
        state=result.state,
        end=result.end,
        summary=_newest_summary(result, sidecar),
        watermark=sidecar.flush if sidecar is not None else 0,
        dev=st.st_dev,
        ino=st.st_ino,
    )
    if sidecar is None or result.state.said_flush > sidecar.rank:
        # A commit line said it after the sidecar was written: the claim
        # brings the sidecar up to date (see `Operations._claim`).
        handle.said_flush = result.state.said_flush
    return handle, result, sidecar


def _newest_summary(result: ScanResult, sidecar: Sidecar | None) -> SessionSummary:
    """The caller-set fields of the newest stored summary (sidecar or log)."""
    state = result.state
    numbers = Numbers(said=state.said, said_flush=state.said_flush)
    merged = merge_summary(sidecar, numbers)
    return msgspec.structs.replace(merged, event_count=0, turns=0, size=0)


def take_epoch(
    store: Store, handle: Handle, result: ScanResult, *, stolen: bool, max_line: int
) -> ScanResult:
    """Cut the tail and open a new owner epoch (in place, or in a new file).

    Returns:
        The scan the new epoch follows: `result`, or a later scan when the
        old owner kept writing while the log was copied (which holds no
        events).

    Raises:
        StorageError: a step failed; the handle is closed.
        SessionLockedError: the old owner kept writing through a takeover.
    """
    try:
        if stolen or _maybe_alive(handle, result):
            result = _rewrite(store, handle, result, max_line)
        else:
            _in_place(store, handle, result)
        handle.track(store.ops)
        return result
    except OSError as exc:
        close(store.ops, handle)
        raise storage_error("cannot claim the session", exc) from exc
    except BaseException:
        close(store.ops, handle)
        raise


def reconcile(store: Store, handle: Handle, size: int, *, max_line: int) -> None:
    """Deal with a held log whose size is not what this handle wrote.

    Bytes after our last unit that form no valid unit are a torn tail (a
    crash of whatever wrote them, or plain damage): they are quarantined and
    cut, as on a claim (R5). Valid units we did not write mean another writer
    took the log over without us noticing: fenced.

    Raises:
        SessionFencedError: someone else wrote or cut valid data.
        SessionCorruptError: the log is damaged before our end.
        StorageError: the repair failed (the handle is poisoned).
    """
    ops = store.ops
    if size < handle.end:
        raise fence(handle, "its log was cut short by another writer")
    try:
        result = scan_log(
            ops,
            handle.fd,
            size,
            session_id=handle.header.id,
            collect=False,
            max_line=max_line,
        )
    except OSError as exc:
        raise poison(handle, exc, "reading its log") from exc
    if result.end != handle.end or result.state.flush != handle.state.flush:
        raise fence(handle, "its log was extended by another writer")
    try:
        _quarantine(store, handle, handle.fd, result.end, size)
        ops.ftruncate(handle.fd, result.end)
    except OSError as exc:
        raise poison(handle, exc, "cutting a torn tail") from exc


def _maybe_alive(handle: Handle, result: ScanResult) -> bool:
    """Whether the last owner might still be writing (then never append in place)."""
    owner = result.state.owner
    if owner is None or result.state.released:
        return False
    if owner.host != HOST or owner.boot != BOOT or not BOOT:
        return True  # cannot tell: assume it lives and take the safe path
    if owner.pid == os.getpid():
        return is_live(handle.dev, handle.ino)
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, under another user
    return True


def _next_owner(state: ScanState) -> bytes:
    owner = Owner(
        flush=state.flush + 1,
        epoch=state.epoch + 1,
        seq=state.seq,
        time=state.time,
        pid=os.getpid(),
        host=HOST,
        boot=BOOT,
        turns=state.turns,
        size=state.size,
    )
    state.accept(owner, 0, b"")
    return encode_owner(owner)


def _in_place(store: Store, handle: Handle, result: ScanResult) -> None:
    ops = store.ops
    if result.tail:
        _quarantine(store, handle, handle.fd, result.end, result.size)
        ops.ftruncate(handle.fd, result.end)
    line = _next_owner(handle.state)
    write_all(ops, handle.fd, line, result.end)
    ops.fsync(handle.fd)  # covers the truncation too
    handle.end = result.end + len(line)


def _rewrite(
    store: Store, handle: Handle, result: ScanResult, max_line: int
) -> ScanResult:
    """Copy the valid log into a new file opening our epoch; rename it in.

    A write the old owner made while we copied shows as growth of the old
    inode after our rename; then the copy is redone from the grown file (the
    old owner cannot acknowledge anything after the rename, so this ends).
    """
    ops = store.ops
    old = handle.fd
    name = handle.stem + LOG_SUFFIX
    new = -1
    line = b""
    try:
        for _ in range(_REWRITE_ROUNDS):
            if result.tail:
                _quarantine(store, handle, old, result.end, result.size)
            line = _next_owner(result.state)
            tmp = temp_name(handle.stem, LOG_SUFFIX, ops.token())
            fd = ops.open(tmp, os.O_RDWR | NEW_FILE_FLAGS, 0o600, dir_fd=handle.gfd)
            try:
                ops.fchmod(fd, 0o600)
                _copy(store, old, fd, 0, result.end)
                write_all(ops, fd, line, result.end)
                ops.fsync(fd)
                ops.replace(tmp, name, dir_fd=handle.gfd)
            except BaseException:
                ops.close(fd)
                store.discard(handle.gfd, tmp)
                raise
            if new >= 0:
                ops.close(new)
            new = fd
            ops.fsync_dir(handle.gfd)
            grown = ops.fstat(old).st_size
            if grown == result.size:
                break
            result = scan_log(
                ops,
                old,
                grown,
                session_id=handle.header.id,
                collect=False,
                max_line=max_line,
            )
        else:
            raise SessionLockedError(
                f"session {handle.header.id!r}: the previous owner kept writing "
                "during the takeover"
            )
    except BaseException:
        if new >= 0:
            ops.close(new)
        raise
    ops.close(old)
    handle.fd = new
    handle.state = result.state
    handle.end = result.end + len(line)
    return result


def _quarantine(store: Store, handle: Handle, fd: int, start: int, end: int) -> None:
    """`quarantine`, then an audit record in the session's `.audit` file.

    The record says where and how much was moved aside, never the bytes; a
    record that cannot be written is logged and the cut goes on (the
    quarantine file is durable already, see `turnkeep.auditing`).
    """
    name = quarantine(store, handle.stem, fd, start, end)
    record = audit_record(
        "quarantine",
        handle.header.id,
        "an unacknowledged tail was moved aside before the log is written on",
        detail={"offset": start, "length": end - start, "file": name},
    )
    try:
        audit.record(store, handle.gfd, handle.stem, record)
    except (OSError, StorageError, audit.SessionGone) as exc:
        # Why swallowed: the bytes are safe in quarantine; the record is a note.
        log.warning("the audit record of a quarantine could not be written: %s", exc)


def quarantine(store: Store, stem: str, fd: int, start: int, end: int) -> str:
    """Copy the bytes `[start, end)` of a log into a new 0600 file, durably (R5)."""
    ops = store.ops
    qdir = store.subdir(QUARANTINE_DIR, create=True)
    assert qdir is not None  # noqa: S101 - create=True never returns None
    name = quarantine_name(stem, start, ops.token())
    q = ops.open(name, os.O_WRONLY | NEW_FILE_FLAGS, 0o600, dir_fd=qdir)
    try:
        try:
            ops.fchmod(q, 0o600)
            _copy(store, fd, q, start, end)
            ops.fsync(q)
        finally:
            ops.close(q)
    except BaseException:
        # A partial copy under a quarantine name would pass for the cut
        # bytes; the tail stays in the log until a repair succeeds.
        with contextlib.suppress(OSError):
            ops.unlink(name, dir_fd=qdir)
        raise
    ops.fsync_dir(qdir)
    return name


def _copy(store: Store, src: int, dst: int, start: int, end: int) -> None:
    """Copy `[start, end)` of `src` to the start of `dst`."""
    offset = start
    while offset < end:
        data = store.ops.pread(src, min(CHUNK, end - offset), offset)
        if not data:
            raise OSError(errno.EIO, "the file ended while being copied")
        write_all(store.ops, dst, data, offset - start)
        offset += len(data)
