"""`JsonlPersistence`: the `SessionPersistence` protocol over JSON-lines files.

Owns the protocol's methods, this instance's sessions (created but not yet
written; held for writing) and the threads. Every blocking call runs on a
worker thread; calls on one session run one at a time (a lock per session,
taken on the worker, so a cancelled caller cannot let two writes overlap),
while different sessions flush concurrently. Reads (`load`, `has`, `list`)
take no session lock and write nothing.

Consumed by the host through the `jsonl` entry point (see `__init__`).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final, TypeVar

import attrs

from turnkeep.audit import AuditRecord, check_record, check_records_range
from turnkeep.backendkit import records_after
from turnkeep.backup import BackupReport
from turnkeep.cancelrequest import CancelRequest, check_reason
from turnkeep.codec import DEFAULT_MAX_EVENT_BYTES, EventRecord
from turnkeep.errors import (
    SessionLockedError,
    SessionNotFoundError,
    StorageError,
    TurnkeepError,
)
from turnkeep.follow import check_wait
from turnkeep.ids import validate_session_id
from turnkeep.listfilter import ListFilter
from turnkeep.maintenance import TailReport
from turnkeep.meta import SessionMeta, SessionSummary
from turnkeep.persistence import LoadedSession, SessionPage, check_read_range
from turnkeep.salvage import IntactLog

from . import audit, cancel
from .backup import backup
from .config import JsonlConfig, default_path
from .fileops import FileOps, OsFileOps
from .follow import FOLLOW_MODES, wait_for_commit
from .format import SUFFIX_LEN
from .listing import decode_cursor, page
from .locks import held as holders
from .maintenance import inspect_tail, repair
from .names import session_name
from .operations import Operations
from .salvage import read_intact
from .store import storage_error
from .workers import Workers

__all__ = ["JsonlPersistence"]

T = TypeVar("T")

_instances: weakref.WeakSet[JsonlPersistence] = weakref.WeakSet()
_LINE_SLACK: Final = SUFFIX_LEN + 64


@attrs.define(eq=False)
class JsonlPersistence:
    """A `SessionPersistence` keeping one append-only log file per session.

    Args:
        path: the store directory (default: the user data directory).
        ops: the file-system calls (tests pass recording or faulty ones).
        max_event_bytes: the largest event accepted, and so the longest line
            `load` reads into memory (keep it at least the host's limit).
        threads: worker threads for blocking I/O.
        follow: `notify` (inotify where available) or `poll`: how
            `wait_for_commit` learns of a commit (`turnkeep_jsonl.follow`).

    Nothing is read or written until the first call.
    """

    stores_packs: ClassVar[bool] = True
    """It keeps packed records (see [packs] in `turnkeep.persistence`)."""

    path: Path = attrs.field(factory=default_path, converter=Path)
    ops: FileOps = attrs.field(factory=OsFileOps)
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    threads: int = 8
    follow: str = attrs.field(
        default="notify", validator=attrs.validators.in_(FOLLOW_MODES)
    )
    _impl: Operations = attrs.field(init=False)
    _workers: Workers | None = attrs.field(init=False, default=None)
    _locks: dict[str, threading.Lock] = attrs.field(
        init=False, factory=dict[str, threading.Lock]
    )
    _mu: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _pid: int = attrs.field(init=False, factory=os.getpid)

    def __attrs_post_init__(self) -> None:
        self.path = Path(os.path.abspath(self.path))
        self._impl = Operations(
            path=self.path,
            ops=self.ops,
            max_event_bytes=self.max_event_bytes,
            max_line=self.max_event_bytes + _LINE_SLACK,
        )
        _instances.add(self)

    @classmethod
    def from_config(cls, config: JsonlConfig | None) -> JsonlPersistence:
        """Build the backend from its configuration (the host's factory)."""
        config = config if config is not None else JsonlConfig()
        return cls(
            path=config.path if config.path is not None else default_path(),
            max_event_bytes=config.max_event_bytes,
            threads=config.threads,
            follow=config.follow,
        )

    # -- the protocol ----------------------------------------------------------

    async def create(self, meta: SessionMeta) -> None:
        """Register a new session and take its writer role (nothing on disk yet).

        Raises:
            SessionExistsError: the id is stored, or created here already.
            SessionLockedError: another owner is creating or driving it.
        """
        session_id = validate_session_id(meta.id)
        await self._locked(session_id, self._impl.create, meta)

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        """Durably persist one flush (all or nothing); see the protocol.

        A `summary` rides in the flush's commit line (no other write); the
        sidecar catches up at the next `update`, release or claim.
        """
        session_id = validate_session_id(session_id)
        await self._locked(session_id, self._impl.append, session_id, events, summary)

    async def load(self, session_id: str) -> LoadedSession:
        """Return the session's metadata and durable events (read-only)."""
        session_id = validate_session_id(session_id)
        return await self._run(self._impl.load, session_id)

    async def load_after(self, session_id: str, after: int, limit: int) -> list[bytes]:
        """Durable events with seq > `after`, at most `limit` (read-only).

        Read backwards from the log's end and verified there (`tail`); when
        that cannot vouch for its answer, from a whole `load`.
        """
        session_id = validate_session_id(session_id)
        check_read_range(after, limit)
        found = await self._run(self._impl.reads.load_after, session_id, after, limit)
        if found is not None:
            return found
        return records_after((await self.load(session_id)).events, after, limit)

    async def last_seq(self, session_id: str) -> int:
        """The last durable seq (`-1` for none), from the last control line."""
        session_id = validate_session_id(session_id)
        return await self._run(self._impl.reads.last_seq, session_id)

    async def wait_for_commit(
        self, session_id: str, after_seq: int, within: float
    ) -> int:
        """The last durable seq once past `after_seq`, or after `within` seconds.

        Woken by inotify where available, else stats the log every few
        milliseconds (see `turnkeep_jsonl.follow`); reads its last control
        line only when the file may have changed.
        """
        check_wait(after_seq, within)
        session_id = validate_session_id(session_id)
        reads = self._impl.reads
        return await wait_for_commit(
            lambda: self.last_seq(session_id),
            lambda: self._run(reads.log_path, session_id),
            after_seq,
            within,
            notify=self.follow == "notify",
        )

    async def request_cancel(self, session_id: str, reason: str) -> CancelRequest:
        """Record a request to cancel the running turn (`turnkeep_jsonl.cancel`).

        Takes no lock and never touches the log.
        """
        session_id = validate_session_id(session_id)
        check_reason(reason)
        return await self._run(self._cancel, session_id, reason)

    async def cancel_requested(
        self, session_id: str, after: int
    ) -> CancelRequest | None:
        """The latest cancel request numbered above `after` (one small read)."""
        session_id = validate_session_id(session_id)
        return await self._run(self._cancel_requested, session_id, after)

    def _cancel(self, session_id: str, reason: str) -> CancelRequest:
        stem, gfd = self._impl.reads.locate(session_id)
        try:
            return cancel.request_cancel(self._impl.store, gfd, stem, reason)
        except StorageError:
            raise  # the file's content, already said
        except OSError as exc:
            raise storage_error(
                f"cannot record a cancel of {session_id!r}", exc
            ) from exc

    def _cancel_requested(self, session_id: str, after: int) -> CancelRequest | None:
        stem, gfd = self._impl.reads.locate(session_id)
        try:
            return cancel.cancel_requested(self._impl.store, gfd, stem, after)
        except StorageError:
            raise  # the file's content, already said
        except OSError as exc:
            raise storage_error(f"cannot read a cancel of {session_id!r}", exc) from exc

    async def record_audit(self, scope: str | None, record: AuditRecord) -> AuditRecord:
        """Append an audit record, synced (`turnkeep_jsonl.audit`).

        Takes the audit file's own lock, never the session's; the log is
        untouched.
        """
        scope = None if scope is None else validate_session_id(scope)
        check_record(record)
        return await self._run(self._record_audit, scope, record)

    async def audit_records(
        self, scope: str | None, after: int, limit: int
    ) -> list[AuditRecord]:
        """The scope's audit records numbered above `after`, at most `limit`."""
        scope = None if scope is None else validate_session_id(scope)
        check_records_range(after, limit)
        return await self._run(self._audit_records, scope, after, limit)

    def _audit_dir(self, scope: str | None, *, create: bool) -> tuple[str | None, int]:
        if scope is not None:
            return self._impl.reads.locate(scope)
        root = self._impl.store.root(create=create)
        return None, -1 if root is None else root

    def _record_audit(self, scope: str | None, record: AuditRecord) -> AuditRecord:
        stem, fd = self._audit_dir(scope, create=True)
        try:
            return audit.record(self._impl.store, fd, stem, record)
        except audit.SessionGone as exc:
            raise SessionNotFoundError(f"no stored session {scope!r}") from exc
        except StorageError:
            raise  # the file's content, already said
        except OSError as exc:
            raise storage_error(f"cannot record an audit of {scope!r}", exc) from exc

    def _audit_records(
        self, scope: str | None, after: int, limit: int
    ) -> list[AuditRecord]:
        stem, fd = self._audit_dir(scope, create=False)
        if fd < 0:
            return []  # no store yet: nothing recorded
        try:
            return audit.read_records(self._impl.store, fd, stem, after, limit)
        except StorageError:
            raise  # the file's content, already said
        except OSError as exc:
            raise storage_error(f"cannot read the audit of {scope!r}", exc) from exc

    async def list(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        where: ListFilter | None = None,
    ) -> SessionPage:
        """One page of stored sessions (those `where` keeps), newest first.

        From the catalog and the summaries of sessions that may have moved
        on (held here, or open elsewhere); no log is parsed.
        """
        if limit <= 0:
            raise ValueError("limit must be positive")
        after = decode_cursor(cursor) if cursor is not None else None
        ordered = await self._run(self._impl.ordered)
        return page(ordered, limit=limit, after=after, where=where)

    async def held(self, session_ids: Sequence[str]) -> dict[str, bool]:
        """Whether a live owner holds each session (see `SessionPersistence`).

        Read from the owner record in each session's lock file (one small
        read per id; no `flock` taken, nothing written): a holder killed
        mid-turn left a record naming a process that no longer runs.
        """
        ids = [validate_session_id(i) for i in session_ids]
        if not ids:
            return {}
        stems = {i: session_name(i) for i in ids}
        found = await self._run(holders, self._impl.store, list(stems.values()))
        return {i: found[stems[i]] for i in ids}

    async def has(self, session_id: str) -> bool:
        """Whether a session is stored (has at least one durable flush)."""
        session_id = validate_session_id(session_id)
        return await self._run(self._impl.has, session_id)

    async def delete(self, session_id: str, *, force: bool = False) -> None:
        """Remove a stored session and every file it owns.

        Raises:
            SessionNotFoundError: nothing is stored under this id.
            SessionHeldError: another process (or instance) holds its lock,
                and not `force`.
        """
        session_id = validate_session_id(session_id)
        await self._locked(session_id, self._impl.delete, session_id, force)

    async def update(self, session_id: str, summary: SessionSummary) -> None:
        """Replace the session's summary (the sidecar); never touches the log.

        Raises:
            SessionNotFoundError: the session was neither created nor stored.
        """
        session_id = validate_session_id(session_id)
        await self._locked(session_id, self._impl.update, session_id, summary)

    async def claim(self, session_id: str, *, steal: bool = False) -> None:
        """Take the writer role for a stored session.

        Raises:
            SessionNotFoundError: nothing is stored under this id.
            SessionLockedError: another live owner holds it and not `steal`.
        """
        session_id = validate_session_id(session_id)
        await self._locked(session_id, self._impl.claim, session_id, steal)

    async def release(self, session_id: str) -> None:
        """Give up the writer role (no-op if not held)."""
        session_id = validate_session_id(session_id)
        await self._locked(session_id, self._impl.release, session_id)

    async def aclose(self) -> None:
        """Release every session, close every file, stop the threads.

        Raises:
            StorageError: a session could not be released cleanly (all the
                others were; every file is closed anyway).
        """
        if self._workers is None:
            return
        errors: list[TurnkeepError] = []
        for session_id in self._impl.session_ids():
            try:
                await self.release(session_id)
            except TurnkeepError as exc:
                errors.append(exc)
        await self._run(self._impl.close)
        workers, self._workers = self._workers, None
        workers.stop()  # every job has finished: the threads just exit
        if errors:
            raise errors[0]

    # -- maintenance (turnkeep.maintenance.SessionMaintenance) ----------------

    async def inspect_tail(self, session_id: str) -> TailReport | None:
        """Report the unacknowledged tail the next append would cut. Read-only.

        Raises:
            SessionNotFoundError: nothing is stored under this id.
            SessionCorruptError, UnsupportedFormatError: as `load` would.
        """
        session_id = validate_session_id(session_id)
        return await self._run(inspect_tail, self._impl, session_id)

    async def repair(self, session_id: str) -> TailReport | None:
        """Quarantine and cut the tail now, under the writer role.

        Never touches acknowledged data; see `turnkeep_jsonl.maintenance`.

        Raises:
            SessionLockedError: another owner (or this instance) holds it.
            SessionCorruptError: acknowledged data is damaged (nothing cut).
        """
        session_id = validate_session_id(session_id)
        return await self._locked(session_id, repair, self._impl, session_id)

    # -- salvage (turnkeep.salvage.SessionSalvage) ----------------------------

    async def read_intact(self, session_id: str) -> IntactLog:
        """The log's whole units before the first damaged record. Read-only.

        Raises:
            SessionNotFoundError: nothing is stored under this id.
            SessionCorruptError: the header line is damaged.
        """
        session_id = validate_session_id(session_id)
        return await self._run(read_intact, self._impl, session_id)

    # -- backup (turnkeep.backup.SessionBackup) -------------------------------

    async def backup(self, destination: Path) -> BackupReport:
        """Copy every session, cut at its last flush, into a new store.

        Writers keep going; see `turnkeep_jsonl.backup`.

        Raises:
            StorageError: the store cannot be read or the copy written.
        """
        return await self._run(backup, self._impl, Path(destination))

    # -- threads ---------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if os.getpid() != self._pid:
            raise SessionLockedError(
                "this JsonlPersistence belongs to the parent process; a forked "
                "child must open its own"
            )
        workers = self._workers
        if workers is None:
            workers = self._workers = Workers(self.threads, "turnkeep-jsonl")
        try:
            return await workers.run(fn, *args)
        except StorageError:
            raise
        except OSError as exc:
            # A safety net: every path wraps its own errors with context; one
            # that slipped through still reaches the caller as a typed error.
            raise storage_error(f"{self.path}: file-system error", exc) from exc

    async def _locked(self, session_id: str, fn: Callable[..., T], *args: Any) -> T:
        with self._mu:
            lock = self._locks.get(session_id)
            if lock is None:
                lock = self._locks[session_id] = threading.Lock()

        def job() -> T:
            with lock:
                return fn(*args)

        return await self._run(job)

    def after_fork_in_child(self) -> None:
        """Drop the parent's descriptors in a forked child.

        `flock` locks belong to the open file description, which a fork
        shares: closing the child's copies lets the parent's `release` free
        the session even while the child lives on.
        """
        self._workers = None  # its threads did not survive the fork
        self._impl.forget_after_fork()


def _after_fork_in_child() -> None:
    for backend in list(_instances):
        backend.after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
