"""Classifying `sqlite3` errors and wrapping them in turnkeep errors.

Every `sqlite3.Error` that leaves this package is wrapped (`raise ... from`)
in a `turnkeep.errors` type. The classes decide what the writer does next:
*busy* errors are retried until the configured deadline and never reach a
caller as "database is locked"; *I/O* errors during a write poison the
writer (R6: nothing after a failed fsync is trusted); anything else fails the
one operation that caused it.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from turnkeep.errors import StorageError

__all__ = [
    "is_busy",
    "is_corrupt",
    "is_full",
    "is_io",
    "primary_code",
    "storage_error",
]

# Primary result codes (sqlite3.h); Python 3.11 exposes the extended code.
_PERM: Final = 3
_BUSY: Final = 5
_LOCKED: Final = 6
_READONLY: Final = 8
_IOERR: Final = 10
_CORRUPT: Final = 11
_FULL: Final = 13
_CANTOPEN: Final = 14
_PROTOCOL: Final = 15
_NOLFS: Final = 22
_NOTADB: Final = 26

_IO_CODES: Final = frozenset(
    {_PERM, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _PROTOCOL, _NOLFS, _NOTADB}
)


def primary_code(exc: sqlite3.Error) -> int:
    """The primary SQLite result code of `exc` (0 when it carries none)."""
    code: int | None = getattr(exc, "sqlite_errorcode", None)
    return (code or 0) & 0xFF


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether `exc` means another connection holds a lock (retryable)."""
    return primary_code(exc) in (_BUSY, _LOCKED)


def is_io(exc: sqlite3.Error) -> bool:
    """Whether `exc` is a storage failure (I/O, full, read-only, damaged)."""
    return primary_code(exc) in _IO_CODES


def is_full(exc: BaseException) -> bool:
    """Whether `exc`, or an error it was raised from, is `SQLITE_FULL`."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, sqlite3.Error) and primary_code(seen) == _FULL:
            return True
        seen = seen.__cause__
    return False


def is_corrupt(exc: sqlite3.Error) -> bool:
    """Whether `exc` reports a damaged database file."""
    return primary_code(exc) in (_CORRUPT, _NOTADB)


def storage_error(exc: sqlite3.Error, doing: str, path: object) -> StorageError:
    """Return a `StorageError` describing `exc`; the caller raises it `from exc`."""
    name: str = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    return StorageError(f"SQLite database {path}: {doing} failed ({name}: {exc})")
