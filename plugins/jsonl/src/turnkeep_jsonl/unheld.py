"""What needs no writer role: loading, existence, listing, deleting, summaries.

Owns the operations that work on any stored session, held by this instance,
by another process, or by nobody: `load` (read-only; retried when a writer
repairs the file mid-read), `has`, the listing runs, `delete`, and `update`
of a session this instance does not hold.

Reads of a log (`load`, `load_after`, `last_seq`) return only what is
durable: another process's writer writes a flush, then syncs it, and a
reader between the two would see a flush a power cut can still take back
(and a follower would pass on a seq that may be reused). So a read takes
the log's size, syncs the file itself (`sync_read`: whatever was written
before is then on disk, whoever wrote it), and reads only below that size.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Final

import attrs
import msgspec

from turnkeep.errors import (
    SessionCorruptError,
    SessionHeldError,
    SessionLockedError,
    SessionNotFoundError,
)
from turnkeep.meta import SessionMeta, SessionSummary
from turnkeep.persistence import LoadedSession

from . import tail
from .catalog import Catalog, Entry, Gone
from .fileops import FileOps
from .format import MAX_HEADER_BYTES, Sidecar, encode_sidecar
from .handle import Handle, check_watermark, scan_log
from .listing import Run, run_of
from .locks import lock, unlock
from .names import (
    AUDIT_SUFFIX,
    CANCEL_SUFFIX,
    LOG_SUFFIX,
    QUARANTINE_DIR,
    QUARANTINE_SUFFIX,
    SIDECAR_SUFFIX,
    TEMP_SUFFIX,
    session_name,
)
from .scan import ScanResult, check_header
from .store import READ_FLAGS, Store, storage_error
from .summary import (
    inspect_session,
    log_numbers,
    merge_summary,
    numbers_of,
    read_sidecar,
    session_header as core_header,
)

__all__ = ["Unheld", "loaded_session"]

_LOAD_ATTEMPTS: Final = 3
_CANNOT_SYNC: Final = frozenset({errno.EINVAL, errno.EROFS, errno.EBADF})
_DISK_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
"""What `fsync` of a read-only descriptor answers where the file system
cannot sync from it (a read-only mount has no writer to wait for)."""


def sync_read(ops: FileOps, fd: int) -> None:
    """Make what was written to the open log `fd` durable before reading it.

    Raises:
        OSError: the sync failed (an I/O error: what was written may not be
            on disk).
    """
    try:
        ops.fsync(fd)
    except OSError as exc:
        if exc.errno not in _CANNOT_SYNC:
            raise


@attrs.define(eq=False)
class Unheld:
    """Operations on stored sessions that take no writer role.

    Args:
        store: the store.
        catalog: its catalog.
        max_line: the longest line `load` accepts.
    """

    store: Store
    catalog: Catalog
    max_line: int
    _static_of: dict[str, Entry] | None = attrs.field(init=False, default=None)
    _static: Run = attrs.field(init=False, factory=lambda: run_of([]))
    _open: list[Entry] = attrs.field(init=False, factory=list[Entry])
    _static_held: set[str] = attrs.field(init=False, factory=set[str])

    @staticmethod
    def stem(session_id: str) -> str:
        """The file stem of a session id."""
        return session_name(session_id)

    def exists(self, stem: str) -> bool:
        """Whether session `stem` has a log."""
        if self.store.root(create=False) is None:
            return False
        return self.store.find(stem) is not None

    def locate(self, session_id: str) -> tuple[str, int]:
        """The session's stem and the descriptor of the directory of its log.

        Raises:
            SessionNotFoundError: no log is stored under this id.
        """
        return self._locate(session_id)

    def _locate(self, session_id: str) -> tuple[str, int]:
        """The session's stem and the descriptor of the directory of its log."""
        stem = session_name(session_id)
        found = self.store.find(stem) if self.exists(stem) else None
        if found is None:
            raise SessionNotFoundError(f"no stored session {session_id!r}")
        return stem, found[1]

    # -- load ------------------------------------------------------------------

    def load(self, session_id: str) -> LoadedSession:
        """See `JsonlPersistence.load`."""
        ops = self.store.ops
        for attempt in range(_LOAD_ATTEMPTS):
            stem, gfd = self._locate(session_id)
            try:
                fd = ops.open(stem + LOG_SUFFIX, READ_FLAGS, dir_fd=gfd)
            except FileNotFoundError:
                continue  # deleted (or renamed over) meanwhile: look again
            except OSError as exc:
                raise storage_error(
                    f"cannot open the log of {session_id!r}", exc
                ) from exc
            try:
                st = ops.fstat(fd)
                sync_read(ops, fd)
                try:
                    result = scan_log(
                        ops,
                        fd,
                        st.st_size,
                        session_id=session_id,
                        collect=True,
                        max_line=self.max_line,
                    )
                    sidecar = read_sidecar(ops, gfd, stem, result.header)
                    check_watermark(result, sidecar)
                except SessionCorruptError:
                    if attempt + 1 < _LOAD_ATTEMPTS and self._moved(fd, st, gfd, stem):
                        continue  # a writer repaired or replaced it as we read
                    raise
            except OSError as exc:
                raise storage_error(
                    f"cannot read the log of {session_id!r}", exc
                ) from exc
            finally:
                ops.close(fd)
            return loaded_session(result, sidecar)
        raise SessionNotFoundError(f"no stored session {session_id!r}")

    def load_after(self, session_id: str, after: int, limit: int) -> list[bytes] | None:
        """Events with seq > `after`, at most `limit`, read from the log's end.

        `None` when the tail walk could not verify its answer (see `tail`):
        the caller then loads the whole log, which is authoritative.
        """
        ops = self.store.ops
        stem, gfd = self._locate(session_id)
        try:
            fd = ops.open(stem + LOG_SUFFIX, READ_FLAGS, dir_fd=gfd)
        except FileNotFoundError:
            return None  # deleted or replaced meanwhile: `load` looks again
        except OSError as exc:
            raise storage_error(f"cannot open the log of {session_id!r}", exc) from exc
        try:
            size = ops.fstat(fd).st_size
            sync_read(ops, fd)
            return tail.read_after(
                ops,
                fd,
                size,
                where=(session_id, gfd, stem),
                after=after,
                limit=limit,
            )
        except OSError as exc:
            raise storage_error(f"cannot read the log of {session_id!r}", exc) from exc
        finally:
            ops.close(fd)

    def log_path(self, session_id: str) -> Path:
        """Where the session's log is (for a follower to stat)."""
        stem = session_name(session_id)
        found = self.store.find(stem) if self.exists(stem) else None
        if found is None:
            raise SessionNotFoundError(f"no stored session {session_id!r}")
        return self.store.path / found[0] / (stem + LOG_SUFFIX)

    def last_seq(self, session_id: str) -> int:
        """The last durable seq, from the log's last control line."""
        ops = self.store.ops
        stem, gfd = self._locate(session_id)
        try:
            fd = ops.open(stem + LOG_SUFFIX, READ_FLAGS, dir_fd=gfd)
        except FileNotFoundError as exc:
            raise SessionNotFoundError(f"no stored session {session_id!r}") from exc
        except OSError as exc:
            raise storage_error(f"cannot open the log of {session_id!r}", exc) from exc
        try:
            size = ops.fstat(fd).st_size
            sync_read(ops, fd)
            return tail.last_seq(ops, fd, size)
        except OSError as exc:
            raise storage_error(f"cannot read the log of {session_id!r}", exc) from exc
        finally:
            ops.close(fd)

    def _moved(self, fd: int, before: os.stat_result, gfd: int, stem: str) -> bool:
        ops = self.store.ops
        now = ops.fstat(fd)
        try:
            named = ops.stat(stem + LOG_SUFFIX, dir_fd=gfd)
        except FileNotFoundError:
            return True
        return (
            now.st_size != before.st_size
            or now.st_mtime_ns != before.st_mtime_ns
            or (named.st_dev, named.st_ino) != (before.st_dev, before.st_ino)
        )

    # -- list ------------------------------------------------------------------

    def catalog_runs(self, held: dict[str, Handle]) -> tuple[Run, list[SessionMeta]]:
        """The catalog's settled sessions as a run, plus those that may move.

        Settled ones come from the catalog alone (cached while its file is
        unchanged); sessions held here come from memory; sessions marked
        open by another writer are re-read from their sidecar and log end.
        """
        entries = self.catalog.read()
        if entries is None:
            entries = self.catalog.scan_files()
        if entries is not self._static_of:
            self._static = run_of([e.meta for e in entries.values() if not e.open])
            self._open = [e for e in entries.values() if e.open]
            self._static_of = entries
            self._static_held = set()
        if held.keys() - self._static_held:
            # A session settled in the catalog that we now hold: drop it from
            # the settled run (it is listed from memory below).
            self._static = run_of(
                [m for m in self._static.metas if m.header.id not in held]
            )
            self._static_held = set(held)
        moving = [
            SessionMeta(header=core_header(h.header), summary=h.current_summary())
            for h in held.values()
        ]
        for entry in self._open:
            if entry.meta.header.id in held:
                continue
            found = self._inspect(entry.meta.header.id)
            if found is not None:
                moving.append(found)
        return self._static, moving

    def _inspect(self, session_id: str) -> SessionMeta | None:
        stem = session_name(session_id)
        try:
            located = self.store.find(stem)
            if located is None:
                return None
            found = inspect_session(
                self.store.ops, located[1], stem, max_line=self.max_line
            )
        except OSError:
            return None  # unreadable right now: `load` will say why
        if found is None or found.header.id != session_id:
            return None
        return SessionMeta(header=core_header(found.header), summary=found.summary)

    # -- delete ----------------------------------------------------------------

    def delete(self, session_id: str, *, force: bool) -> None:
        """See `JsonlPersistence.delete` (the caller dropped its own handle).

        Under the session's lock, taken from a live holder only when forced
        (the holder then finds its log gone: `SessionDeletedError`).
        """
        stem, gfd = self._locate(session_id)
        try:
            lock_fd, _ = lock(self.store, stem, steal=False, brief=True)
        except SessionLockedError:
            if not force:
                raise SessionHeldError(
                    session_id, "another process (or backend instance)"
                ) from None
            lock_fd, _ = lock(self.store, stem, steal=True)
        try:
            self._delete_locked(session_id, stem, gfd)
        finally:
            unlock(self.store, lock_fd, stem, remove=True)

    def _delete_locked(self, session_id: str, stem: str, gfd: int) -> None:
        ops = self.store.ops
        full = False
        try:
            found = inspect_session(ops, gfd, stem, max_line=self.max_line)
            if found is not None:
                # Durably "open" first, and without the summary's text: a
                # crash halfway then leaves a line that `list` re-checks
                # against the files, and no earlier line keeps the text.
                header = core_header(found.header)
                blank = SessionSummary(updated_at=found.summary.updated_at)
                try:
                    self.catalog.rewrite(
                        Entry(open=True, meta=SessionMeta(header=header, summary=blank))
                    )
                except OSError as exc:
                    if exc.errno not in _DISK_FULL:
                        raise
                    # No room for the rewrite's copy: free space first. The
                    # catalog goes (no line keeps the text, and `list` reads
                    # the files until it is rebuilt), then the files.
                    self.catalog.drop()
                    full = True
            try:
                ops.unlink(stem + LOG_SUFFIX, dir_fd=gfd)
            except FileNotFoundError as exc:
                raise SessionNotFoundError(f"no stored session {session_id!r}") from exc
            self.store.discard(gfd, stem + SIDECAR_SUFFIX)
            self.store.discard(gfd, stem + CANCEL_SUFFIX)
            self.store.discard(gfd, stem + AUDIT_SUFFIX)
            self._drop_quarantine(stem)
            self._drop_temporary(gfd, stem)
            ops.fsync_dir(gfd)
            try:
                self.catalog.rewrite(Gone(id=session_id))
            except OSError as exc:
                if not (full and exc.errno in _DISK_FULL):
                    raise
                # Still no room: the catalog stays missing, which is safe
                # (`list` reads the files); the next writer rebuilds it.
        except OSError as exc:
            raise storage_error(f"cannot delete session {session_id!r}", exc) from exc

    def _drop_temporary(self, gfd: int, stem: str) -> None:
        """Remove the session's temporary files a crash left (we hold its lock)."""
        prefix = f".{stem}."  # see `names.temp_name`
        for name in self.store.ops.listdir(gfd):
            if name.startswith(prefix) and name.endswith(TEMP_SUFFIX):
                self.store.discard(gfd, name)

    def _drop_quarantine(self, stem: str) -> None:
        qdir = self.store.subdir(QUARANTINE_DIR, create=False)
        if qdir is None:
            return
        for name in self.store.ops.listdir(qdir):
            if name.startswith(stem + ".") and name.endswith(QUARANTINE_SUFFIX):
                self.store.discard(qdir, name)

    # -- update ----------------------------------------------------------------

    def update_unowned(self, session_id: str, summary: SessionSummary) -> None:
        """`update` of a session this instance does not hold (no lock taken).

        Keeps the sidecar's watermark; a concurrent owner's later sidecar
        writes keep this summary (they re-read it).
        """
        stem, gfd = self._locate(session_id)
        ops = self.store.ops
        try:
            fd = ops.open(stem + LOG_SUFFIX, READ_FLAGS, dir_fd=gfd)
        except FileNotFoundError as exc:
            raise SessionNotFoundError(f"no stored session {session_id!r}") from exc
        except OSError as exc:
            raise storage_error(f"cannot open the log of {session_id!r}", exc) from exc
        try:
            size = ops.fstat(fd).st_size
            head = ops.pread(fd, min(size, MAX_HEADER_BYTES), 0)
            newline = head.find(b"\n")
            header = check_header(head[: max(newline, 0)], session_id)
            numbers = log_numbers(ops, fd, size, header, max_line=self.max_line)
            old = read_sidecar(ops, gfd, stem, header)
            updated_at = max(
                summary.updated_at, numbers.time, old.summary.updated_at if old else 0
            )
            new = msgspec.structs.replace(
                summary,
                updated_at=updated_at,
                event_count=numbers.seq,
                turns=numbers.turns,
                size=numbers.size,
            )
            entry = Entry(
                open=True, meta=SessionMeta(header=core_header(header), summary=new)
            )
            self.catalog.append(entry)
            sidecar = Sidecar(
                format_version=header.format_version,
                id=header.id,
                log=header.log,
                flush=old.flush if old is not None else 0,
                seq=old.seq if old is not None else 0,
                summary=new,
                # Newer than anything the log said so far (the watermark
                # stays: only an owner vouches for what was fsynced).
                said_flush=max(numbers.flush, old.rank if old is not None else 0),
            )
            self.store.write_atomic(gfd, stem + SIDECAR_SUFFIX, encode_sidecar(sidecar))
            self.catalog.append(
                msgspec.structs.replace(entry, open=not numbers.released)
            )
        except OSError as exc:
            raise storage_error(f"cannot update session {session_id!r}", exc) from exc
        finally:
            ops.close(fd)


def loaded_session(result: ScanResult, sidecar: Sidecar | None) -> LoadedSession:
    """What `load` returns for a verified scan (events collected) and sidecar."""
    numbers = numbers_of(result.state)
    summary = merge_summary(sidecar, numbers)
    meta = SessionMeta(header=core_header(result.header), summary=summary)
    return LoadedSession(meta=meta, events=result.events)
