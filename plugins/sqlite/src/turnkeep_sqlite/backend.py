"""`SqlitePersistence`: the `SessionPersistence` implementation over one SQLite file.

Consumed by core's write-behind plugin (and the session store's resume path)
through the protocol in `turnkeep.persistence`, whose contracts it keeps.
This module only wires the parts together: writes go to the `Writer` thread
(group commit, `turnkeep_sqlite.writes`), reads to the `Readers` pool
(`turnkeep_sqlite.reads`). The writer connection is opened (pragmas,
migrations) lazily, on the writer thread, by the first operation that
writes; reads never need it, and never migrate or change the file, so
`list`, `load` and `has` work on a file or folder the user cannot write
(opened `mode=ro` there), and on a missing file create nothing.
Constructing a backend touches no file and never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sqlite3
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar, TypeVar

import attrs
import msgspec

from turnkeep.audit import AuditRecord, check_record, check_records_range
from turnkeep.backendkit import DamagedSessions, outcome_unknown
from turnkeep.backup import BackupReport
from turnkeep.cancelrequest import CancelRequest, check_reason
from turnkeep.codec import EventRecord
from turnkeep.errors import (
    PersistenceError,
    SessionOwnershipError,
    StorageError,
    TurnkeepError,
    UnsupportedFormatError,
)
from turnkeep.follow import check_wait
from turnkeep.ids import validate_session_id
from turnkeep.listfilter import ListFilter
from turnkeep.meta import SessionMeta, SessionSummary
from turnkeep.persistence import LoadedSession, SessionPage, check_read_range
from turnkeep.salvage import IntactLog
from turnkeep_sqlite import audit, cancel, follow, objects, reads, writes
from turnkeep_sqlite.backup import backup_into, make_target
from turnkeep_sqlite.config import SqliteConfig
from turnkeep_sqlite.files import (
    FileIdentity,
    check_identity,
    in_use,
    inspect_database_file,
    prepare_database_file,
    registry_lock,
    tighten_sidecars,
    track,
    untrack,
)
from turnkeep_sqlite.owner import current_identity, live_tokens
from turnkeep_sqlite.reads import Readers
from turnkeep_sqlite.schema import (
    SCHEMA_VERSION,
    check_schema_version,
    connect_reader,
    connect_writer,
)
from turnkeep_sqlite.sqlerrors import is_full, storage_error as sql_storage_error
from turnkeep_sqlite.writer import Tx, Unknown, Writer, WriterStats

__all__ = ["SqlitePersistence"]

T = TypeVar("T")


@attrs.define(eq=False)
class SqlitePersistence:
    """Sessions in one SQLite database file (WAL, `synchronous=FULL`).

    Several instances (in one process or many) may share a file; each
    session has one writer at a time (see `claim`). Use one instance per
    process and database where possible: its writer thread group-commits
    the flushes of all sessions it serves.

    Args:
        config: the options (`SqliteConfig`).
    """

    stores_packs: ClassVar[bool] = True
    """It keeps packed records (see [packs] in `turnkeep.persistence`)."""

    config: SqliteConfig = attrs.Factory(SqliteConfig)
    _token: str = attrs.field(init=False, factory=lambda: secrets.token_hex(16))
    _pid: int = attrs.field(init=False, factory=os.getpid)
    _state: writes.WriterState = attrs.field(init=False)
    _database: _Database = attrs.field(init=False)
    _writer: Writer = attrs.field(init=False)
    _readers: Readers = attrs.field(init=False)
    _damaged: DamagedSessions = attrs.field(init=False, factory=DamagedSessions)
    _used: bool = attrs.field(init=False, default=False)
    _closed: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        # abspath, not resolve(): never follow links on the user's behalf.
        path = Path(os.path.abspath(self.config.path))
        self.config = attrs.evolve(self.config, path=path)
        self._state = writes.WriterState(
            token=self._token,
            identity=msgspec.json.encode(current_identity()),
            max_event_bytes=self.config.max_event_bytes,
        )
        self._database = _Database(self.config, self._pid)
        self._writer = Writer(
            path=path,
            opener=self._database.open_writer,
            closer=self._database.close,
            verify=self._database.verify,
            busy_timeout_s=self.config.busy_timeout_ms / 1000,
            max_group=self.config.max_group_flushes,
            synchronous=self.config.synchronous,
        )
        self._readers = Readers(
            self.config,
            opener=self._database.open_reader,
            closer=self._database.close,
        )
        live_tokens().add(self._token)
        dropped = weakref.finalize(
            self, _abandon, self._token, self._writer, self._readers
        )
        # Not at interpreter exit: finalizers run before atexit hooks
        # registered earlier, so it would close the writer under a host
        # that an atexit hook is still closing (its sessions' last release
        # then failed). At exit SQLite rolls back whatever was not committed.
        dropped.atexit = False

    @property
    def path(self) -> Path:
        """The database file (absolute)."""
        return self.config.path

    @property
    def writer_stats(self) -> WriterStats:
        """Group-commit counters (groups, operations, largest group)."""
        return self._writer.stats

    # -- SessionPersistence ------------------------------------------------

    async def create(self, meta: SessionMeta) -> None:
        """Register a new session and take its writer role.

        Nothing becomes visible until the first `append`; until then the
        session is an invisible claim row that `release`/`aclose` remove.
        """
        validate_session_id(meta.id)
        await self._write(lambda tx: writes.create(tx, self._state, meta))

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        """Durably append one flush (checks seq and ownership in its transaction).

        A `summary` is stored in the same transaction (one commit).
        """
        session_id = validate_session_id(session_id)
        self._damaged.check(session_id)
        records = list(events)  # snapshot: the caller may reuse its list

        def unknown(error: StorageError) -> TurnkeepError:
            # The COMMIT failed: the flush may be durable all the same (R17).
            exc = outcome_unknown(session_id, records, str(error))
            exc.__cause__ = error
            return exc

        await self._write(
            lambda tx: writes.append(tx, self._state, session_id, records, summary),
            unknown=unknown if records else None,
        )

    async def load(self, session_id: str) -> LoadedSession:
        """Return the stored metadata and every durable event's exact bytes."""
        session_id = validate_session_id(session_id)
        with self._damaged.watch(session_id):  # later appends are refused too
            return await self._read(lambda conn: reads.load(conn, session_id))

    async def load_after(self, session_id: str, after: int, limit: int) -> list[bytes]:
        """Durable events with seq > `after`, at most `limit` (an index range)."""
        session_id = validate_session_id(session_id)
        check_read_range(after, limit)
        with self._damaged.watch(session_id):
            return await self._read(
                lambda conn: reads.load_after(conn, session_id, after, limit)
            )

    async def last_seq(self, session_id: str) -> int:
        """The last durable seq (`-1` for none), from the session row."""
        session_id = validate_session_id(session_id)
        return await self._read(lambda conn: reads.last_seq(conn, session_id))

    async def wait_for_commit(
        self, session_id: str, after_seq: int, within: float
    ) -> int:
        """The last durable seq once past `after_seq`, or after `within` seconds.

        Watches `PRAGMA data_version` on a connection of its own (see
        `turnkeep_sqlite.follow`); reads the session row only when a commit
        landed somewhere in the file.
        """
        check_wait(after_seq, within)
        session_id = validate_session_id(session_id)
        return await follow.wait_for_commit(
            self.config, lambda: self.last_seq(session_id), after_seq, within
        )

    async def request_cancel(self, session_id: str, reason: str) -> CancelRequest:
        """Record a request to cancel the running turn (`turnkeep_sqlite.cancel`).

        One operation of the writer; no writer role, no event touched.
        """
        session_id = validate_session_id(session_id)
        check_reason(reason)
        return await self._write(
            lambda tx: cancel.request_cancel(tx, session_id, reason)
        )

    async def cancel_requested(
        self, session_id: str, after: int
    ) -> CancelRequest | None:
        """The latest cancel request numbered above `after` (one lookup)."""
        session_id = validate_session_id(session_id)
        return await self._read(
            lambda conn: cancel.cancel_requested(conn, session_id, after)
        )

    async def record_audit(self, scope: str | None, record: AuditRecord) -> AuditRecord:
        """Store an audit record (`turnkeep_sqlite.audit`): no writer role."""
        scope = None if scope is None else validate_session_id(scope)
        check_record(record)
        return await self._write(lambda tx: audit.record_audit(tx, scope, record))

    async def audit_records(
        self, scope: str | None, after: int, limit: int
    ) -> list[AuditRecord]:
        """The scope's audit records numbered above `after` (one index range)."""
        scope = None if scope is None else validate_session_id(scope)
        check_records_range(after, limit)
        return await self._read(
            lambda conn: audit.audit_records(conn, scope, after, limit)
        )

    async def read_intact(self, session_id: str) -> IntactLog:
        """Events up to the first missing or unreadable row (salvage). Read-only."""
        session_id = validate_session_id(session_id)
        return await self._read(lambda conn: reads.intact(conn, session_id))

    async def held(self, session_ids: Sequence[str]) -> dict[str, bool]:
        """Whether a live owner holds each session (see `SessionPersistence`).

        Read from each row's owner record (token and process identity), as
        a claimant would judge it: a crashed owner's record is not a hold.
        Nothing is written or locked.
        """
        ids = [validate_session_id(i) for i in session_ids]
        if not ids:
            return {}
        return await self._read(lambda conn: reads.held(conn, ids))

    async def list(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        where: ListFilter | None = None,
    ) -> SessionPage:
        """Page through stored sessions (those `where` keeps), newest first.

        From the indexes alone: `sessions_recent`, or `sessions_by_status`
        per status asked for.

        Raises:
            ValueError: `limit` < 1.
            InvalidCursorError: `cursor` is not one this backend made.
            SessionCorruptError: a session on the page has a row no session
                has (the file was edited); it names the session.
        """
        if limit <= 0:
            raise ValueError("limit must be positive")
        if cursor is not None:
            reads.decode_cursor(cursor)  # refuse a bad cursor before any I/O
        return await self._read(
            lambda conn: reads.list_page(conn, limit, cursor, where)
        )

    async def store_problems(self) -> list[str]:
        """Schema objects turnkeep did not create (see `StoreCheck`)."""
        found = await self._read(objects.foreign_objects)
        return [
            f"{line} in {self.path} was not created by turnkeep"
            for line in objects.describe(found)
        ]

    async def has(self, session_id: str) -> bool:
        """Whether the session is stored (has at least one durable flush)."""
        session_id = validate_session_id(session_id)
        return await self._read(lambda conn: reads.has(conn, session_id))

    async def delete(self, session_id: str, *, force: bool = False) -> None:
        """Remove a stored session and all its events.

        Raises:
            SessionNotFoundError: nothing is stored under this id.
            SessionHeldError: another live owner holds it, and not `force`.
        """
        session_id = validate_session_id(session_id)
        try:
            await self._write(
                lambda tx: writes.delete(tx, self._state, session_id, force=force)
            )
        except StorageError as exc:
            if not is_full(exc):
                raise
            raise await self._no_room_to_delete(session_id) from exc
        self._damaged.forget(session_id)

    async def _no_room_to_delete(self, session_id: str) -> StorageError:
        """The error of a delete the full disk refused, saying how much to free."""
        try:
            need = await self._readers.run(
                lambda conn: reads.deletion_room(conn, session_id)
            )
        except (sqlite3.Error, StorageError):
            need = None
        room = f"about {need:,} bytes" if need is not None else "room"
        return StorageError(
            f"SQLite database {self.path}: the disk is full, and nothing was "
            f"deleted: SQLite writes the pages a delete changes to its "
            f"write-ahead log before any space is freed, which needs {room} "
            f"for session {session_id!r}. Free at least that much on the "
            "database's file system (or remove the whole database file) and "
            "retry, with a new process: this one stops writing after a failed "
            "write (R6)"
        )

    async def update(self, session_id: str, summary: SessionSummary) -> None:
        """Replace the summary (the backend keeps `event_count`)."""
        session_id = validate_session_id(session_id)
        await self._write(
            lambda tx: writes.update(tx, self._state, session_id, summary)
        )

    async def claim(self, session_id: str, *, steal: bool = False) -> None:
        """Take the writer role; a crashed owner's role is taken without `steal`."""
        session_id = validate_session_id(session_id)
        # Light: the turn's own durable commit syncs it (see `Writer.submit`),
        # so a process that opens, runs one turn and closes pays one sync.
        await self._write(
            lambda tx: writes.claim(tx, self._state, session_id, steal=steal),
            light=True,
        )

    async def release(self, session_id: str) -> None:
        """Give up the writer role (no-op if not held)."""
        session_id = validate_session_id(session_id)
        await self._write(
            lambda tx: writes.release(tx, self._state, session_id), light=True
        )

    async def aclose(self) -> None:
        """Release every writer role, then stop the threads. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._used and os.getpid() == self._pid:
                await self._writer.submit(
                    lambda tx: writes.release_all(tx, self._state), light=True
                )
        except TurnkeepError:
            pass  # a poisoned or unopenable store: the rows die with this process
        finally:
            live_tokens().discard(self._token)
            await asyncio.to_thread(self._shutdown)

    # -- backup (turnkeep.backup.SessionBackup) -----------------------------

    async def backup(self, destination: Path) -> BackupReport:
        """Copy the database, one consistent snapshot, into `destination/NAME`.

        Writers keep committing meanwhile; see `turnkeep_sqlite.backup`.

        Raises:
            StorageError: `destination` exists or cannot be made, or SQLite
                failed to read or copy the database.
            UnsupportedFormatError: the schema is newer than this code.
        """
        self._check_usable()
        await self._read(lambda conn: None)  # the schema is current (migrated if due)
        database, path = self._database, self.path

        def run() -> BackupReport:
            opened = database.open_reader()
            if opened is None:
                raise StorageError(
                    f"SQLite database {path} does not exist; there is nothing to "
                    "back up (nothing was written)"
                )
            conn = opened[0]
            try:
                try:
                    check_schema_version(conn, path)
                except sqlite3.Error as exc:
                    raise sql_storage_error(exc, "reading", path) from exc
                return backup_into(conn, make_target(Path(destination), path.name))
            finally:
                database.close(conn)

        return await asyncio.to_thread(run)

    # -- internals ---------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise PersistenceError(f"the SQLite backend for {self.path} is closed")
        if os.getpid() != self._pid:
            raise SessionOwnershipError(
                f"the SQLite backend for {self.path} was created in process "
                f"{self._pid} and cannot be used from a forked child; open a new "
                "backend in the child"
            )

    async def _write(
        self,
        operation: Callable[[Tx], T],
        *,
        unknown: Unknown | None = None,
        light: bool = False,
    ) -> T:
        self._check_usable()
        self._used = True
        return await self._writer.submit(operation, unknown=unknown, light=light)

    async def _read(self, read: Callable[[sqlite3.Connection], T]) -> T:
        self._check_usable()
        try:
            return await self._readers.run(read)
        except reads.Outdated as outdated:
            await self._migrate(outdated.version)
        try:
            return await self._readers.run(read)
        except reads.Outdated as outdated:  # another process took it back?
            raise UnsupportedFormatError(
                f"SQLite database {self.path} is still at schema version "
                f"{outdated.version} after migrating it to {SCHEMA_VERSION}; "
                "another program rewrote it (nothing was changed)"
            ) from outdated

    async def _migrate(self, version: int) -> None:
        """Migrate an older file through the writer, which opening it does.

        Readers never migrate (they may be reading a file nobody can write);
        a file that needs it can be read only once someone could migrate it.
        """
        try:
            await self._write(lambda tx: None)
        except StorageError as exc:
            raise UnsupportedFormatError(
                f"SQLite database {self.path} is at schema version {version}, "
                f"older than this turnkeep-sqlite reads ({SCHEMA_VERSION}), and "
                f"migrating it needs write access, which failed ({exc}); it "
                "cannot be read read-only. Make the file and its folder "
                "writable and open the store once (any turnkeep command), then "
                "it can be read read-only (nothing was changed)"
            ) from exc

    def _shutdown(self) -> None:
        self._writer.close()
        self._readers.close()


@attrs.define(eq=False)
class _Database:
    """Opens and closes this backend's connections to its file.

    Kept apart from the backend so the threads hold no reference to the
    backend (its finalizer must be able to run). Every connection is counted
    in the process-wide registry of `turnkeep_sqlite.files`, which tells when
    the file may be opened directly without dropping SQLite's locks.
    """

    config: SqliteConfig
    pid: int
    file: FileIdentity | None = None
    _files: dict[sqlite3.Connection, FileIdentity] = attrs.field(
        factory=dict[sqlite3.Connection, FileIdentity]
    )

    def open_writer(self) -> sqlite3.Connection:
        path = self.config.path
        with registry_lock:
            identity = prepare_database_file(
                path, allow_network=self.config.allow_network_filesystem
            )
            conn = connect_writer(
                self.config, pid=self.pid, probe_header=not in_use(identity)
            )
            try:
                tighten_sidecars(path)
                check_identity(path, identity)
            except BaseException:
                conn.close()
                raise
            track(identity)
            self._files[conn] = identity
        self.file = identity
        return conn

    def open_reader(self) -> tuple[sqlite3.Connection, bool] | None:
        """A read-only connection and whether to keep it; `None`: no file yet."""
        path = self.config.path
        with registry_lock:
            identity = inspect_database_file(
                path, allow_network=self.config.allow_network_filesystem
            )
            if identity is None:
                return None
            conn, immutable = connect_reader(
                self.config, probe_header=not in_use(identity)
            )
            try:
                check_identity(path, identity)
            except BaseException:
                conn.close()
                raise
            track(identity)
            self._files[conn] = identity
        return conn, not immutable

    def close(self, conn: sqlite3.Connection) -> None:
        try:
            conn.close()
        finally:
            with registry_lock:
                identity = self._files.pop(conn, None)
                if identity is not None:
                    untrack(identity)

    def verify(self) -> None:
        if self.file is not None:
            check_identity(self.config.path, self.file)


def _abandon(token: str, writer: Writer, readers: Readers) -> None:
    """Finalizer for an instance dropped without `aclose()`."""
    live_tokens().discard(token)
    writer.close(wait=False)
    readers.close(wait=False)
