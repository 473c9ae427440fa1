"""Per-session writer locks: `flock` on `locks/<stem>.lock` (R9).

Owns taking, stealing and dropping the lock. `flock` (never POSIX record
locks, which a process loses when it closes *any* descriptor of the file)
belongs to the open file description, so two backend instances in one
process exclude each other exactly as two processes do. The lock is for
liveness; safety comes from the epoch and identity checks of the writer.

Taking a lock re-checks, after `flock` succeeds, that the name still points
at the locked file: a lock file unlinked or replaced meanwhile is retried, so
two owners never hold two different files under one name.

The holder writes its process identity (`turnkeep.owners`) into the lock
file it holds and empties it when it lets go, always through its own
descriptor (so only ever into its own file, never a successor's). `held`
reads those records to tell a live holder from a crashed one without
touching any lock: taking the `flock`, even for a moment, would make a real
owner's claim at that moment fail. A process killed mid-turn leaves its
record behind, naming a process that no longer runs; a record naming this
process counts only while one of its descriptors still holds that file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import threading
from collections.abc import Sequence
from typing import Final

import msgspec

from turnkeep.errors import SessionLockedError, StorageError
from turnkeep.owners import (
    ProcessIdentity,
    current_identity,
    is_this_process,
    process_alive,
)

from .fileops import FileOps
from .names import LOCK_SUFFIX, LOCKS_DIR, temp_name
from .store import NEW_FILE_FLAGS, READ_FLAGS, Store, storage_error

__all__ = ["abandon", "drop", "held", "lock", "unlock"]

_LOCK_FLAGS: Final = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_ATTEMPTS: Final = 16
_MAX_RECORD: Final = 4096
_record_decoder: Final = msgspec.json.Decoder(ProcessIdentity)

_mine_lock = threading.Lock()
_mine: dict[tuple[int, int], int] = {}
"""Lock files (device, inode) this process holds, with how many descriptors."""


def lock(
    store: Store, stem: str, *, steal: bool, brief: bool = False
) -> tuple[int, bool]:
    """Take session `stem`'s lock: its descriptor, and whether it was stolen.

    With `steal`, a lock another owner holds is replaced by a fresh lock file
    (the old owner keeps a lock on a file nobody will open again). A `brief`
    hold (a delete) goes on without its identity record when the disk is
    full: the `flock` is what excludes, the record only names the holder,
    and a delete must be able to run on a full disk to free it.

    Raises:
        SessionLockedError: another owner holds it (and not `steal`).
        StorageError: the lock file cannot be used (a symlink, not ours, ...).
    """
    locks = store.subdir(LOCKS_DIR, create=True)
    assert locks is not None  # noqa: S101 - create=True never returns None
    name = stem + LOCK_SUFFIX
    ops = store.ops
    try:
        for _ in range(_ATTEMPTS):
            fd = ops.open(name, _LOCK_FLAGS, 0o600, dir_fd=locks)
            try:
                st = ops.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    raise StorageError(
                        f"refusing lock file {name}: not a regular file of ours"
                    )
                if st.st_mode & 0o777 != 0o600:
                    ops.fchmod(fd, 0o600)
                try:
                    ops.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if not steal:
                        raise SessionLockedError(
                            "another process (or another backend instance) is "
                            "driving this session; take it over explicitly "
                            "(steal=True) if that owner is gone or stuck"
                        ) from None
                    return _replace(store, locks, stem), True
                try:
                    now = ops.stat(name, dir_fd=locks)
                except FileNotFoundError:
                    continue  # unlinked between our open and our flock: again
                if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                    _record(ops, fd, st, brief=brief)
                    kept, fd = fd, -1
                    return kept, False
            finally:
                if fd >= 0:
                    ops.close(fd)
    except OSError as exc:
        raise storage_error(f"cannot lock {name}", exc) from exc
    raise SessionLockedError(f"the lock file {name} keeps being replaced")


def _replace(store: Store, locks: int, stem: str) -> int:
    ops = store.ops
    tmp = temp_name(stem, LOCK_SUFFIX, ops.token())
    fd = ops.open(tmp, os.O_RDWR | NEW_FILE_FLAGS, 0o600, dir_fd=locks)
    try:
        ops.fchmod(fd, 0o600)
        ops.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh inode: free
        # Recorded before the rename: the name never shows our hold unrecorded.
        _record(ops, fd, ops.fstat(fd))
        ops.replace(tmp, stem + LOCK_SUFFIX, dir_fd=locks)
    except OSError:
        drop(ops, fd)
        store.discard(locks, tmp)
        raise
    return fd


def _record(ops: FileOps, fd: int, st: os.stat_result, *, brief: bool = False) -> None:
    """Write our identity into the lock file `fd` holds; count the hold as ours."""
    record = msgspec.json.encode(current_identity())
    try:
        ops.pwrite(fd, record, 0)
        ops.ftruncate(fd, len(record))
    except OSError as exc:
        if not (brief and exc.errno in (errno.ENOSPC, errno.EDQUOT)):
            raise
        ops.ftruncate(fd, 0)  # no half record: an empty one names nobody
    with _mine_lock:
        key = (st.st_dev, st.st_ino)
        _mine[key] = _mine.get(key, 0) + 1


def _forget(ops: FileOps, fd: int) -> None:
    try:
        st = ops.fstat(fd)
    except OSError:
        return
    with _mine_lock:
        key = (st.st_dev, st.st_ino)
        count = _mine.get(key, 0) - 1
        if count > 0:
            _mine[key] = count
        else:
            _mine.pop(key, None)


def drop(ops: FileOps, fd: int) -> None:
    """Let go of a lock: empty its record (we hold the file), then close it."""
    # The record is advisory: left behind, it names this process, which
    # counts only while it holds the file (`held`).
    with contextlib.suppress(OSError):
        ops.ftruncate(fd, 0)
    _forget(ops, fd)
    ops.close(fd)


def abandon(ops: FileOps, fd: int) -> None:
    """Close a lock descriptor leaving the record (a forked child's copy).

    The parent still holds the file through its own descriptor: its record
    stays true.
    """
    _forget(ops, fd)
    ops.close(fd)


def held(store: Store, stems: Sequence[str]) -> dict[str, bool]:
    """Whether a live process holds each session's lock, from its record alone.

    Opens each lock file read-only (no `flock`, no write): a missing or
    empty file is not held; an unreadable record counts as held (an owner
    it cannot read is never assumed gone).

    Raises:
        StorageError: the locks directory cannot be read.
    """
    try:
        locks = store.subdir(LOCKS_DIR, create=False)
    except OSError as exc:
        raise storage_error("cannot open the locks directory", exc) from exc
    if locks is None:
        return dict.fromkeys(stems, False)
    return {stem: _held(store.ops, locks, stem) for stem in stems}


def _held(ops: FileOps, locks: int, stem: str) -> bool:
    name = stem + LOCK_SUFFIX
    try:
        fd = ops.open(name, READ_FLAGS | os.O_NONBLOCK, 0, dir_fd=locks)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise storage_error(f"cannot read the lock file {name}", exc) from exc
    try:
        st = ops.fstat(fd)
        raw = ops.pread(fd, _MAX_RECORD, 0) if stat.S_ISREG(st.st_mode) else b"?"
    except OSError as exc:
        raise storage_error(f"cannot read the lock file {name}", exc) from exc
    finally:
        ops.close(fd)
    if not raw:
        return False
    try:
        owner = _record_decoder.decode(raw)
    except msgspec.DecodeError:
        return True
    if is_this_process(owner):
        with _mine_lock:
            return (st.st_dev, st.st_ino) in _mine
    return process_alive(owner)


def unlock(store: Store, lock_fd: int, stem: str, *, remove: bool) -> None:
    """Drop a lock; with `remove`, also unlink its file if it is still ours.

    Only done for sessions that never got a log (nobody can steal those), so
    unlinking cannot pull the name from under another owner.
    """
    ops = store.ops
    try:
        if remove:
            locks = store.subdir(LOCKS_DIR, create=False)
            if locks is not None:
                mine = ops.fstat(lock_fd)
                now = ops.stat(stem + LOCK_SUFFIX, dir_fd=locks)
                if (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
                    ops.unlink(stem + LOCK_SUFFIX, dir_fd=locks)
    except OSError:
        pass  # the lock file is only a rendezvous point; a leftover is harmless
    finally:
        drop(ops, lock_fd)
