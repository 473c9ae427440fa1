"""Copying a live store: `turnkeep backup DEST`.

Every session in the copy holds a whole number of its acknowledged flushes,
while agents keep writing to the original. A backend implementing
`turnkeep.backup.SessionBackup` (JSONL, SQLite) writes a store that opens as
it is (`jsonl:DEST`, `sqlite:DEST/NAME`). Any other backend (PostgreSQL,
third-party ones) is copied here, generically: each listed session is read
with one `load` (a flush-boundary cut) and written in the export format
(`turnkeep export`) as `DEST/sessions/<hash>.jsonl`, then `DEST/index.json`
names them all; `turnkeep import` restores each file.

The copy is written into a private temporary folder beside DEST and renamed
to DEST only when complete, so a DEST that exists holds a whole backup. A
DEST that exists and is not an empty folder is refused, nothing written.

Before and after the copy, the stored sessions whose turn a live process is
running are listed (`active` and held; where the backend cannot say who
holds a session, every `active` one): the report names them, since the
copy holds only each one's last whole flush. `--require-idle` refuses
(exit 4) when there is any: before the copy, nothing is written; after it,
the copy is removed and DEST left as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import shutil
from pathlib import Path
from typing import Final

import click
import msgspec

from turnkeep.backup import BackupReport, SessionBackup, Skipped, supports_backup
from turnkeep.cli.exchange import export_data
from turnkeep.cli.files import private_dir, safe_folder, write_private
from turnkeep.cli.output import clean, clean_id, emit_json, format_size
from turnkeep.cli.runtime import (
    EXIT_PROBLEMS,
    CliError,
    Opened,
    common_options,
    execute,
    fail,
    one_line,
    open_store,
)
from turnkeep.clock import now_ms
from turnkeep.errors import (
    SessionCorruptError,
    SessionNotFoundError,
    UnsafePathError,
    UnsupportedFormatError,
)
from turnkeep.listfilter import ListFilter
from turnkeep.listing import active_holds, list_where
from turnkeep.persistence import SessionPersistence

__all__ = ["BACKUP_FORMAT", "EXIT_BUSY", "BackupIndex", "IndexEntry", "register"]

BACKUP_FORMAT: Final = "turnkeep-backup"
EXIT_BUSY: Final = 4
"""The exit status of `--require-idle` when a turn was running."""
_PAGE: Final = 100
_RUNNING: Final = ListFilter(statuses=("active",))


class IndexEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One session of an export backup: its id, file and event count."""

    id: str
    file: str
    events: int


class BackupIndex(msgspec.Struct, frozen=True, kw_only=True):
    """`DEST/index.json` of an export backup (written last)."""

    format: str = BACKUP_FORMAT
    version: int = 1
    backend: str
    created_at: int
    sessions: list[IndexEntry]
    skipped: list[Skipped]


@click.command(
    "backup",
    epilog="\b\nExamples:\n"
    "  turnkeep backup ./backup-2025-06-01\n"
    "  turnkeep --store sqlite:./sessions.db backup /mnt/backups/sessions --json\n"
    "  turnkeep backup ./before-cut-over --require-idle\n"
    "\nRestore: see docs/cli.md (Backup and restore). Exit status 1 when a "
    "session was left out (damaged, newer format), 4 when --require-idle "
    "found a turn running.",
)
@click.argument("destination", metavar="DEST", type=click.Path(path_type=Path))
@click.option(
    "--require-idle",
    is_flag=True,
    help="Refuse (exit 4, no copy kept) if any turn runs before or after the copy.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@common_options
def backup(destination: Path, require_idle: bool, as_json: bool) -> None:
    """Copy every session of a live store into DEST, consistently.

    Agents may keep writing: every copied session holds whole flushes only.
    JSONL and SQLite stores are copied as stores (open the copy with
    --store); other backends (PostgreSQL) as one export file per session,
    restored with `turnkeep import`. DEST must not exist, or be empty.
    Sessions with a turn running during the copy are listed (the copy holds
    their last whole flush); --require-idle refuses then.
    """
    dest = Path(os.path.abspath(destination))

    async def body() -> int:
        _check_destination(dest)
        async with open_store() as store:
            report = await _backup(store, dest, require_idle)
        if as_json:
            emit_json(report)
        else:
            _print(report)
        return EXIT_PROBLEMS if report.skipped else 0

    execute(body)


def _check_destination(dest: Path) -> None:
    if dest.is_symlink():
        raise UnsafePathError(
            f"the backup destination {clean(str(dest))} is a symbolic link; "
            "turnkeep does not write through one (nothing was written; name "
            "the real folder)"
        )
    if not dest.exists():
        return
    if dest.is_dir() and not dest.is_symlink() and not any(dest.iterdir()):
        return
    fail(
        f"the backup destination {clean(str(dest))} exists and is not an empty "
        "folder; nothing was written (name a new folder)"
    )


async def _backup(store: Opened, dest: Path, require_idle: bool) -> BackupReport:
    """Write the backup beside `dest`, then rename it to `dest`."""
    backend = store.backend
    before = await _in_flight(backend)
    if require_idle and before:
        _refuse_busy(before, "nothing was written")
    parent = await asyncio.to_thread(safe_folder, dest.parent)
    work = parent / f".{dest.name}.backup-{secrets.token_hex(8)}.tmp"
    try:
        if supports_backup(backend):
            assert isinstance(backend, SessionBackup)  # noqa: S101 - just checked
            report = await backend.backup(work)
        else:
            report = await _export_all(store, work)
        after = await _in_flight(backend)
        if require_idle and after:
            _refuse_busy(after, "the copy was removed")
        await asyncio.to_thread(_move, work, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            await asyncio.to_thread(shutil.rmtree, work)
        raise
    where = report.store
    if where is not None:
        name, _, path = where.partition(":")
        where = f"{name}:{dest / Path(path).relative_to(work)}"
    in_flight = sorted({*before, *after})
    return msgspec.structs.replace(
        report, destination=str(dest), store=where, in_flight=in_flight
    )


async def _in_flight(backend: SessionPersistence) -> list[str]:
    """The stored sessions whose turn a live process is running now."""
    found: list[str] = []
    cursor: str | None = None
    while True:
        page = await list_where(backend, limit=_PAGE, cursor=cursor, where=_RUNNING)
        holds = await active_holds(backend, page.items)
        for meta in page.items:
            # Without `held`, who runs what is unknown: count every one.
            if meta.summary.status == "active" and (
                holds is None or holds.get(meta.id, False)
            ):
                found.append(meta.id)
        cursor = page.next_cursor
        if cursor is None:
            return found


def _refuse_busy(running: list[str], what: str) -> None:
    names = ", ".join(clean(i) for i in sorted(running)[:10])
    more = f" and {len(running) - 10} more" if len(running) > 10 else ""
    raise CliError(
        f"--require-idle: a turn is running in {len(running)} session(s) "
        f"({names}{more}); {what}. Stop or finish those turns and back up "
        "again",
        code=EXIT_BUSY,
    )


def _move(work: Path, dest: Path) -> None:
    if dest.is_dir():
        dest.rmdir()  # empty (checked); fails if something appeared meanwhile
    os.rename(work, dest)
    fd = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)  # the rename is durable once the folder's entry is
    finally:
        os.close(fd)


async def _export_all(store: Opened, work: Path) -> BackupReport:
    """Each listed session, loaded once, as an export file; then the index."""
    backend = store.backend
    await asyncio.to_thread(private_dir, work / "sessions")
    entries: list[IndexEntry] = []
    skipped: list[Skipped] = []
    size = 0
    cursor: str | None = None
    while True:
        page = await backend.list(limit=_PAGE, cursor=cursor)
        for meta in page.items:
            try:
                loaded = await backend.load(meta.id)
            except SessionNotFoundError:
                continue  # deleted meanwhile: not stored any more
            except (SessionCorruptError, UnsupportedFormatError) as exc:
                skipped.append(Skipped(session_id=meta.id, reason=str(exc)))
                continue
            name = hashlib.sha256(meta.id.encode()).hexdigest()[:40] + ".jsonl"
            data = export_data(loaded)
            await asyncio.to_thread(write_private, work / "sessions" / name, data)
            size += len(data)
            entries.append(
                IndexEntry(
                    id=meta.id, file=f"sessions/{name}", events=len(loaded.events)
                )
            )
        cursor = page.next_cursor
        if cursor is None:
            break
    index = BackupIndex(
        backend=store.name, created_at=now_ms(), sessions=entries, skipped=skipped
    )
    data = msgspec.json.format(msgspec.json.encode(index), indent=2) + b"\n"
    await asyncio.to_thread(write_private, work / "index.json", data)
    return BackupReport(
        kind="exports",
        destination=str(work),
        sessions=len(entries),
        events=sum(e.events for e in entries),
        bytes=size + len(data),
        skipped=skipped,
    )


def _print(report: BackupReport) -> None:
    for item in report.skipped:
        click.echo(
            f"skipped  {clean_id(item.session_id)}: {one_line(clean(item.reason))}",
            err=True,
        )
    click.echo(
        f"backed up {report.sessions} sessions, {report.events} events, "
        f"{format_size(report.bytes)} to {clean(report.destination)}"
        + (f" ({len(report.skipped)} skipped)" if report.skipped else "")
    )
    if report.in_flight:
        click.echo(
            "a turn was running during the copy in: "
            + ", ".join(clean(i) for i in report.in_flight)
            + " (the copy holds each one's last whole flush)"
        )
    if report.store is not None:
        click.echo(f"open the copy with: turnkeep --store {clean(report.store)} ls")
    else:
        click.echo(
            "restore a session with: turnkeep import DEST/sessions/FILE --id ID "
            "(index.json lists them)"
        )


def register(group: click.Group) -> None:
    """Add this module's commands to the `turnkeep` group."""
    group.add_command(backup)
