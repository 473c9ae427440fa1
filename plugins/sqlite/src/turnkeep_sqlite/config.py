"""`SqliteConfig`: the options of the `sqlite` backend.

The host structures the `[backends.sqlite]` table (or the environment
variables `TURNKEEP_SQLITE__<OPTION>`, e.g. `TURNKEEP_SQLITE__PATH`) into
this class with core's converter, so unknown keys and bad values are
configuration errors that name their source.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final, Literal, TypeAlias

import attrs

from turnkeep.backendkit import positive
from turnkeep.codec import DEFAULT_MAX_EVENT_BYTES

__all__ = ["DEFAULT_PATH", "SqliteConfig", "Synchronous", "default_path"]

Synchronous: TypeAlias = Literal["EXTRA", "FULL", "NORMAL", "OFF"]
"""SQLite's `PRAGMA synchronous` levels this backend accepts by name."""

DEFAULT_PATH: Final = Path("turnkeep") / "sessions.sqlite3"
"""Where the database lives below the user's state directory by default."""


def default_path() -> Path:
    """Return `$XDG_STATE_HOME/turnkeep/sessions.sqlite3` (or `~/.local/state/...`)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / DEFAULT_PATH


@attrs.frozen
class SqliteConfig:
    """Options of the SQLite backend.

    Attributes:
        path: the database file. Its directory is created 0700 if missing;
            an existing directory must be owned by this user and not
            group/world-writable. The default is
            `$XDG_STATE_HOME/turnkeep/sessions.sqlite3`.
        busy_timeout_ms: how long a write waits for another process's write
            transaction before it fails with `StorageError` (never a raw
            "database is locked").
        synchronous: SQLite's `PRAGMA synchronous`. Anything below `FULL` can
            lose acknowledged flushes on power loss and is refused unless
            `allow_non_durable` is set.
        allow_non_durable: accept `synchronous` below `FULL` (logged as a
            warning at open). Only for throwaway data.
        allow_network_filesystem: accept a database on NFS/SMB and similar,
            where SQLite's locking and WAL are unreliable. Not recommended;
            use the PostgreSQL backend to share sessions across machines.
        allow_foreign_triggers: open a database holding triggers turnkeep
            did not create (refused by default: they run on every write).
        max_event_bytes: the largest stored event accepted by `append` and
            read back by `load`; larger stored values make `load` fail with
            `SessionCorruptError` instead of allocating them.
        read_threads: worker threads (each with its own connection) serving
            `load`, `list` and `has`.
        max_group_flushes: at most this many flushes share one group commit.
    """

    path: Path = attrs.field(factory=default_path)
    busy_timeout_ms: int = attrs.field(default=10_000, validator=positive)
    synchronous: Synchronous = "FULL"
    allow_non_durable: bool = False
    allow_network_filesystem: bool = False
    allow_foreign_triggers: bool = False
    max_event_bytes: int = attrs.field(
        default=DEFAULT_MAX_EVENT_BYTES, validator=positive
    )
    read_threads: int = attrs.field(default=2, validator=positive)
    max_group_flushes: int = attrs.field(default=256, validator=positive)
