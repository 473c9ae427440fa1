"""Backups of a live store: the optional `SessionBackup` protocol and its report.

A backup is a copy of every stored session cut at a flush boundary: each
session in it holds a whole number of acknowledged flushes, never part of
one, while writers keep appending to the original. `SessionBackup` is an
optional backend protocol for backends that can copy their own storage that
way into a new store that opens as it is (implemented by `turnkeep-jsonl`:
each log up to its last valid unit, its sidecar and a rebuilt catalog; and
`turnkeep-sqlite`: SQLite's online backup API from a reader connection).

A backend without it (PostgreSQL, third-party ones) is backed up by the
`turnkeep backup` command in the export format instead (one file per
session, each from one `load`, itself a flush-boundary cut), restored with
`turnkeep import`; see `turnkeep.cli.backup` and docs/cli.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import msgspec

__all__ = ["BackupReport", "SessionBackup", "Skipped", "supports_backup"]


class Skipped(msgspec.Struct, frozen=True, kw_only=True):
    """A session a backup left out, and why (damaged, newer format ...)."""

    session_id: str
    reason: str


class BackupReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a backup copied.

    Attributes:
        kind: `store` (a store that opens as it is, at `store`) or `exports`
            (one turnkeep export per session plus `index.json`).
        destination: the folder the backup was written to.
        store: the store spec that opens the copy (`jsonl:PATH`,
            `sqlite:PATH`), for `store` backups.
        sessions: how many sessions were copied.
        events: how many events they hold together.
        bytes: how many bytes were written.
        skipped: sessions left out (each with its reason).
        in_flight: sessions a live process was running a turn in, before
            or after the copy (`turnkeep backup` fills it): the copy holds
            each one's last whole flush, not the turn's end.
    """

    kind: Literal["store", "exports"]
    destination: str
    store: str | None = None
    sessions: int
    events: int
    bytes: int
    skipped: list[Skipped] = msgspec.field(default_factory=list[Skipped])
    in_flight: list[str] = msgspec.field(default_factory=list[str])


@runtime_checkable
class SessionBackup(Protocol):
    """Optional backend method: copy the whole store, consistently, while live."""

    async def backup(self, destination: Path) -> BackupReport:
        """Copy every stored session into a new store at `destination`.

        `destination` does not exist yet (its parent does); the backend
        creates it (folders 0700, files 0600). Each copied session holds a
        whole number of its acknowledged flushes; writers are not stopped.
        A session that cannot be read (damaged in acknowledged data, of a
        newer format) is left out and named in `skipped`.

        Raises:
            StorageError: the store cannot be read or the copy written.
        """
        ...


def supports_backup(backend: object) -> bool:
    """Whether `backend` implements `SessionBackup`."""
    return isinstance(backend, SessionBackup)
