"""The blocking side of `JsonlPersistence`: each protocol method, on a thread.

Owns this instance's sessions (`Pending` ones, created but without a file
yet; held ones, open for writing, with the damage found in them) and
orchestrates the pieces: locks, the catalog, the writer, claims, reads.
Write methods run under the session's lock (taken by the backend); read
methods touch no session state but `damaged`, where `load` records damage
(or a newer format) found in a held session so that it takes no appends.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from operator import attrgetter
from pathlib import Path

import attrs
import msgspec

from turnkeep.backendkit import DamagedSessions, check_batch
from turnkeep.codec import EventRecord
from turnkeep.errors import (
    EventRejectedError,
    FlushOutcomeUnknownError,
    SessionCorruptError,
    SessionDeletedError,
    SessionExistsError,
    SessionFencedError,
    SessionNotFoundError,
    StorageError,
    TurnkeepError,
    UnsupportedFormatError,
)
from turnkeep.meta import SessionMeta, SessionSummary
from turnkeep.persistence import LoadedSession

from .catalog import Catalog, Entry
from .claim import open_stored, take_epoch
from .fileops import FileOps
from .format import all_storable, bad_event_reason
from .handle import Handle, Pending, close, poison, write_sidecar
from .listing import Run, run_of
from .locks import abandon, lock, unlock
from .names import LOG_SUFFIX
from .store import Store, storage_error
from .summary import session_header
from .unheld import Unheld, loaded_session
from .writer import append, finish_creation, materialise, release, settle

__all__ = ["Operations"]

_raw = attrgetter("raw")


@attrs.define(eq=False)
class Operations:
    """The protocol's methods as blocking calls over one store.

    Args:
        path: the store directory.
        ops: the file-system calls.
        max_event_bytes: the largest event accepted by `append`.
        max_line: the longest line a reader accepts.

    Attributes:
        damaged: held sessions found damaged or in a newer format; they take
            no appends until they are let go (released, dropped, deleted).
    """

    path: Path
    ops: FileOps
    max_event_bytes: int
    max_line: int
    store: Store = attrs.field(init=False)
    catalog: Catalog = attrs.field(init=False)
    reads: Unheld = attrs.field(init=False)
    damaged: DamagedSessions = attrs.field(init=False, factory=DamagedSessions)
    _held: dict[str, Handle] = attrs.field(init=False, factory=dict[str, Handle])
    _pending: dict[str, Pending] = attrs.field(init=False, factory=dict[str, Pending])
    _mu: threading.Lock = attrs.field(init=False, factory=threading.Lock)

    def __attrs_post_init__(self) -> None:
        self.store = Store(self.path, self.ops)
        self.catalog = Catalog(self.store, self.ops, self.max_line)
        self.reads = Unheld(self.store, self.catalog, self.max_line)

    def session_ids(self) -> list[str]:
        """Every session this instance created or holds."""
        with self._mu:
            return [*self._pending, *self._held]

    # -- writer role -----------------------------------------------------------

    def create(self, meta: SessionMeta) -> None:
        """See `JsonlPersistence.create`."""
        session_id = meta.id
        stem = self.reads.stem(session_id)
        if session_id in self._pending or session_id in self._held:
            raise SessionExistsError(f"session {session_id!r} already exists")
        if self.reads.exists(stem):
            raise SessionExistsError(f"session {session_id!r} already exists")
        lock_fd, _ = lock(self.store, stem, steal=False)
        try:
            if self.reads.exists(stem):  # it appeared before we held the lock
                raise SessionExistsError(f"session {session_id!r} already exists")
        except BaseException:
            unlock(self.store, lock_fd, stem, remove=False)
            raise
        with self._mu:
            self._pending[session_id] = Pending(stem=stem, meta=meta, lock_fd=lock_fd)

    def claim(self, session_id: str, steal: bool) -> None:
        """See `JsonlPersistence.claim`.

        The scan that validates the log keeps its events on the handle, so
        that the `load` of a resume, which follows at once, reads nothing
        again (see `load`).
        """
        held = self._held.get(session_id)
        if held is not None:
            if self._writable(session_id, held) and held.pid == os.getpid():
                return  # claiming twice is harmless
            self._drop(session_id)
        if session_id in self._pending:
            raise SessionNotFoundError(f"session {session_id!r} is not stored yet")
        self._claim(session_id, steal=steal, keep=True)

    def _claim(self, session_id: str, *, steal: bool, keep: bool = False) -> Handle:
        stem = self.reads.stem(session_id)
        if not self.reads.exists(stem):
            raise SessionNotFoundError(f"no stored session {session_id!r}")
        lock_fd, stolen = lock(self.store, stem, steal=steal)
        try:
            handle, result, sidecar = open_stored(
                self.store,
                session_id,
                stem,
                lock_fd,
                max_line=self.max_line,
                collect=keep,
            )
        except BaseException:
            unlock(self.store, lock_fd, stem, remove=False)
            raise
        try:
            # Durably "open" before our first write: should we crash from
            # here on, `list` re-reads this session instead of trusting
            # the catalog's older line.
            self.catalog.append(self._entry(handle, open_=True))
        except OSError as exc:
            close(self.ops, handle)
            raise storage_error("cannot update the catalog", exc) from exc
        final = take_epoch(
            self.store, handle, result, stolen=stolen, max_line=self.max_line
        )
        if handle.said_flush > handle.watermark:
            # The log's last word on the summary is newer than the sidecar
            # (its writer stopped before releasing): cache it there now, once
            # per claim, so that the lines this owner writes need not point
            # back at it.
            try:
                write_sidecar(self.store, handle, handle.summary)
            except OSError as exc:
                close(self.ops, handle)
                raise storage_error("cannot store the session's summary", exc) from exc
        if keep and final is result:
            # The new owner line changes none of what `load` reports.
            handle.preloaded = loaded_session(final, sidecar)
        with self._mu:
            self._held[session_id] = handle
        return handle

    def release(self, session_id: str) -> None:
        """See `JsonlPersistence.release`."""
        with self._mu:
            pending = self._pending.pop(session_id, None)
            handle = self._held.pop(session_id, None)
        if pending is not None:
            unlock(self.store, pending.lock_fd, pending.stem, remove=True)
        if handle is None:
            return
        if session_id in self.damaged:
            self.damaged.forget(session_id)
            close(self.ops, handle)  # nothing in a damaged log is ours to touch
            return
        clean = handle.failure is None
        release(self.store, handle, max_line=self.max_line)
        if clean and handle.state.released:
            try:
                self.catalog.append(self._entry(handle, open_=False))
            except OSError as exc:
                raise storage_error("cannot update the catalog", exc) from exc

    def _drop(self, session_id: str) -> None:
        with self._mu:
            handle = self._held.pop(session_id, None)
        self.damaged.forget(session_id)
        if handle is not None:
            close(self.ops, handle)

    def _writable(self, session_id: str, handle: Handle) -> bool:
        """Whether the held `handle` may still write (not failed, not damaged)."""
        return handle.failure is None and session_id not in self.damaged

    # -- writing ---------------------------------------------------------------

    def append(
        self,
        session_id: str,
        records: Sequence[EventRecord],
        summary: SessionSummary | None = None,
    ) -> None:
        """See `JsonlPersistence.append`."""
        pending = self._pending.get(session_id)
        handle = self._held.get(session_id)
        if handle is not None:
            self._forget_preloaded(handle)
        if pending is None and handle is None:
            handle = self._claim(session_id, steal=False)
        if handle is not None:
            self.damaged.check(session_id)
            _refuse_if_failed(handle)
            # The identity is checked before the write, so that an owner
            # fenced by a finished takeover writes nothing and can say so,
            # and again after it (see `writer.append`), which is what keeps a
            # takeover racing the write from being acknowledged over.
            with self.damaged.watch(session_id):
                settle(self.store, handle, max_line=self.max_line)
        expected = handle.state.seq if handle is not None else 0
        check_batch(
            session_id,
            records,
            next_seq=expected,
            max_event_bytes=self.max_event_bytes,
        )
        _check_storable(session_id, records)
        if not records:
            return
        if handle is not None:
            append(self.store, handle, records, summary)
            return
        assert pending is not None  # noqa: S101 - one of the two is set
        try:
            self.catalog.append(self._pending_entry(pending))
        except OSError as exc:
            raise storage_error("cannot update the catalog", exc) from exc
        handle = materialise(self.store, pending, records, summary)
        with self._mu:
            del self._pending[session_id]
            self._held[session_id] = handle
        finish_creation(self.store, handle, records)

    def update(self, session_id: str, summary: SessionSummary) -> None:
        """See `JsonlPersistence.update`."""
        pending = self._pending.get(session_id)
        if pending is not None:
            updated_at = max(summary.updated_at, pending.meta.summary.updated_at)
            pending.meta = msgspec.structs.replace(
                pending.meta,
                summary=msgspec.structs.replace(
                    summary, updated_at=updated_at, event_count=0, turns=0, size=0
                ),
            )
            return
        handle = self._held.get(session_id)
        if handle is not None:
            self._forget_preloaded(handle)
        if handle is not None and isinstance(handle.failure, SessionDeletedError):
            _refuse_if_failed(handle)  # deleted under us: say so, write nothing
        if handle is not None and self._writable(session_id, handle):
            try:
                with self.damaged.watch(session_id):
                    settle(self.store, handle, max_line=self.max_line)
            except SessionDeletedError:
                raise
            except SessionFencedError:
                handle = None  # not ours any more: update like any reader would
        if handle is None or not self._writable(session_id, handle):
            self.reads.update_unowned(session_id, summary)
            return
        current = handle.current_summary()
        handle.summary = msgspec.structs.replace(
            summary, updated_at=max(summary.updated_at, current.updated_at)
        )
        try:
            write_sidecar(self.store, handle, handle.summary)
        except OSError as exc:
            raise poison(handle, exc, "storing its summary") from exc

    def delete(self, session_id: str, force: bool) -> None:
        """See `JsonlPersistence.delete`."""
        self._drop(session_id)  # ours to let go: its lock is free for the delete
        self.reads.delete(session_id, force=force)

    # -- reading ---------------------------------------------------------------

    def load(self, session_id: str) -> LoadedSession:
        """See `JsonlPersistence.load`.

        The first `load` after this instance claimed the session, with no
        write in between and the log unchanged, returns what the claim's scan
        verified instead of reading the log again: a resume (claim, then
        load) reads and checks the log once.
        """
        preloaded = self._take_preloaded(session_id)
        if preloaded is not None:
            return preloaded
        try:
            return self.reads.load(session_id)
        except (SessionCorruptError, UnsupportedFormatError) as exc:
            handle = self._held.get(session_id)
            if handle is not None and handle.failure is None:
                # Appending now would bury the damage under fresh flushes (or
                # write into a format this code cannot read).
                self.damaged.record(session_id, exc)
            raise

    def _take_preloaded(self, session_id: str) -> LoadedSession | None:
        """The claim's verified load, once, if the log is as the claim left it."""
        with self._mu:
            handle = self._held.get(session_id)
            if handle is None or handle.preloaded is None:
                return None
            loaded, handle.preloaded = handle.preloaded, None
        if handle.failure is not None or session_id in self.damaged:
            return None
        ops = self.ops
        try:
            size = ops.fstat(handle.fd).st_size
            named = ops.stat(handle.stem + LOG_SUFFIX, dir_fd=handle.gfd)
        except OSError:
            return None  # a full load finds out what happened
        if size != handle.end or (named.st_dev, named.st_ino) != (
            handle.dev,
            handle.ino,
        ):
            return None  # someone else wrote or replaced it: read it afresh
        return loaded

    def _forget_preloaded(self, handle: Handle) -> None:
        with self._mu:
            handle.preloaded = None

    def has(self, session_id: str) -> bool:
        """See `JsonlPersistence.has`."""
        return self.reads.exists(self.reads.stem(session_id))

    def ordered(self) -> list[Run]:
        """The listed sessions as sorted runs (see `listing.page`)."""
        with self._mu:
            held = {i: h for i, h in self._held.items() if self._writable(i, h)}
        static, moving = self.reads.catalog_runs(held)
        return [static, run_of(moving)]

    # -- lifecycle -------------------------------------------------------------

    def close(self) -> None:
        """Close every remaining descriptor (sessions were released first)."""
        with self._mu:
            handles = list(self._held.values())
            pending = list(self._pending.values())
            self._held.clear()
            self._pending.clear()
        for handle in handles:
            close(self.ops, handle)
        for item in pending:
            unlock(self.store, item.lock_fd, item.stem, remove=True)
        self.store.close()

    def forget_after_fork(self) -> None:
        """In a forked child: close inherited descriptors, forget everything."""
        for handle in self._held.values():
            if handle.fd >= 0:
                self.ops.close(handle.fd)
            if handle.lock_fd >= 0:
                abandon(self.ops, handle.lock_fd)  # the parent's record stays
        for item in self._pending.values():
            abandon(self.ops, item.lock_fd)
        self._held.clear()
        self._pending.clear()
        self.damaged = DamagedSessions()
        self._mu = threading.Lock()
        self.store.close()

    # -- catalog lines ---------------------------------------------------------

    @staticmethod
    def _entry(handle: Handle, *, open_: bool) -> Entry:
        header = session_header(handle.header)
        return Entry(
            open=open_,
            meta=SessionMeta(header=header, summary=handle.current_summary()),
        )

    @staticmethod
    def _pending_entry(pending: Pending) -> Entry:
        summary = msgspec.structs.replace(
            pending.meta.summary, event_count=0, turns=0, size=0
        )
        return Entry(
            open=True, meta=msgspec.structs.replace(pending.meta, summary=summary)
        )


def _check_storable(session_id: str, records: Sequence[EventRecord]) -> None:
    """Refuse events whose bytes cannot be one line of the log (see `format`)."""
    raws = list(map(_raw, records))
    if all_storable(raws):  # the common case, in a few C-level passes
        return
    for record in records:
        reason = bad_event_reason(record.raw)
        if reason is not None:
            raise EventRejectedError(
                f"session {session_id!r}: event {record.type!r} (seq {record.seq}) "
                f"cannot be stored: {reason}; nothing was written",
                event_type=record.type,
            )


def _refuse_if_failed(handle: Handle) -> None:
    """Raise (a fresh copy of) the error that stopped this handle, if any."""
    failure = handle.failure
    if failure is None:
        if handle.pid != os.getpid():
            raise SessionFencedError("this handle belongs to the parent process")
        return
    error: TurnkeepError
    if isinstance(failure, FlushOutcomeUnknownError):
        # Still unknown: say so again, never "nothing was written".
        error = FlushOutcomeUnknownError(
            str(failure),
            session_id=failure.session_id,
            first_seq=failure.first_seq,
            last_seq=failure.last_seq,
            fenced=failure.fenced,
        )
    elif isinstance(failure, SessionDeletedError):
        error = SessionDeletedError(failure.session_id)
    elif isinstance(failure, SessionFencedError):
        error = SessionFencedError(str(failure))
    else:
        error = StorageError(str(failure))
    raise error from failure
