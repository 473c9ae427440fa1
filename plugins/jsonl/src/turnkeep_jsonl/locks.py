"""Per-session writer locks: `flock` on `locks/<stem>.lock` (R9).

Owns taking, stealing and dropping the lock. `flock` (never POSIX record
locks, which a process loses when it closes *any* descriptor of the file)
belongs to the open file description, so two backend instances in one
process exclude each other exactly as two processes do. The lock is for
liveness; safety comes from the epoch and identity checks of the writer.

Taking a lock re-checks, after `flock` succeeds, that the name still points
at the locked file: a lock file unlinked or replaced meanwhile is retried, so
two owners never hold two different files under one name.
"""

from __future__ import annotations

import fcntl
import os
import stat
from typing import Final

from turnkeep.errors import SessionLockedError, StorageError

from .names import LOCK_SUFFIX, LOCKS_DIR, temp_name
from .store import NEW_FILE_FLAGS, Store, storage_error

__all__ = ["lock", "unlock"]

_LOCK_FLAGS: Final = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_ATTEMPTS: Final = 16


def lock(store: Store, stem: str, *, steal: bool) -> tuple[int, bool]:
    """Take session `stem`'s lock: its descriptor, and whether it was stolen.

    With `steal`, a lock another owner holds is replaced by a fresh lock file
    (the old owner keeps a lock on a file nobody will open again).

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
        ops.replace(tmp, stem + LOCK_SUFFIX, dir_fd=locks)
    except OSError:
        ops.close(fd)
        store.discard(locks, tmp)
        raise
    return fd


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
        ops.close(lock_fd)
