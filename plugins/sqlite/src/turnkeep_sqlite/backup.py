"""Backup for SQLite: `turnkeep.backup.SessionBackup.backup`.

Owns the blocking half of `SqlitePersistence.backup`: SQLite's online
backup API (`sqlite3.Connection.backup`) run from a reader connection of
this backend into a new database file `DEST/<the database's name>`. All
pages are copied in one step, which reads one snapshot of the database: a
flush is one transaction, so every session in the copy holds whole flushes
only, while the writer (of this process or of others) keeps committing.

The destination folder is created 0700 and the file 0600 (with `O_EXCL |
O_NOFOLLOW`) before SQLite opens it; the copy is a database of this
backend's schema, opened as a store (`sqlite:DEST/NAME`) as it is. Rows
keep their owner columns: a later claim treats a recorded owner that is
gone as gone (`turnkeep_sqlite.owner`), as for the original.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Final

from turnkeep.backup import BackupReport
from turnkeep.errors import StorageError

from .files import SIDECAR_SUFFIXES
from .sqlerrors import storage_error

__all__ = ["backup_into", "make_target"]

_DIR_MODE: Final = 0o700
_FILE_MODE: Final = 0o600


def make_target(destination: Path, name: str) -> Path:
    """Create the private folder `destination` and an empty file `name` in it.

    Raises:
        StorageError: the folder or file exists, or cannot be made.
    """
    try:
        os.mkdir(destination, _DIR_MODE)
        os.chmod(destination, _DIR_MODE)  # mkdir's mode went through the umask
        target = destination / name
        fd = os.open(
            target,
            os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            _FILE_MODE,
        )
        try:
            os.fchmod(fd, _FILE_MODE)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StorageError(
            f"cannot create the backup {destination}: {exc.strerror or exc}"
        ) from exc
    return target


def backup_into(source: sqlite3.Connection, target: Path) -> BackupReport:
    """Copy the database of `source` into the empty file `target`, in one step.

    Raises:
        StorageError: SQLite failed to read the source or write the copy.
    """
    try:
        dest = sqlite3.connect(target, isolation_level=None)
    except sqlite3.Error as exc:
        raise storage_error(exc, "opening the backup", target) from exc
    try:
        source.backup(dest)  # pages=-1: every page in one step, one snapshot
        sessions, events = dest.execute(
            "SELECT count(*), coalesce(sum(next_seq), 0) FROM sessions "
            "WHERE next_seq > 0"
        ).fetchone()
    except sqlite3.Error as exc:
        raise storage_error(exc, "writing the backup", target) from exc
    finally:
        dest.close()  # checkpoints and removes a -wal the copy may have made
    size = 0
    for suffix in ("", *SIDECAR_SUFFIXES):
        try:
            st = os.stat(str(target) + suffix)
        except FileNotFoundError:
            continue
        os.chmod(str(target) + suffix, _FILE_MODE)  # our own private folder
        size += st.st_size
    return BackupReport(
        kind="store",
        destination=str(target.parent),
        store=f"sqlite:{target}",
        sessions=int(sessions),
        events=int(events),
        bytes=size,
    )
