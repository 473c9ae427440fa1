"""Writing a session's log: creation, flushes and release.

Owns the byte sequences of the write path:

- creation (R3): header, first owner line and first flush go to a temporary
  file, which is fsynced, renamed into place, and its directory fsynced;
- a flush (R3, R6): the log is checked to still be ours and unchanged, every
  byte is written (short writes looped), fsynced, the identity checked again,
  and only then acknowledged; an I/O error poisons the handle for good;
- release: a release line closes the epoch (so the next owner may append in
  place), and the sidecar's watermark is brought up to date.

The caller holds the session's lock and has checked the records' seqs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

import msgspec

from turnkeep.backendkit import count_turn_ends, outcome_unknown
from turnkeep.codec import EventRecord
from turnkeep.errors import (
    FlushOutcomeUnknownError,
    SessionCorruptError,
    SessionExistsError,
    SessionFencedError,
    StorageError,
)
from turnkeep.meta import SessionSummary

from .claim import reconcile
from .fileops import write_all
from .format import (
    FORMAT_NAME,
    SAID_LIMIT,
    SUFFIX_LEN,
    Header,
    Owner,
    Release,
    Said,
    encode_commit,
    encode_event_lines,
    encode_header,
    encode_owner,
    encode_release,
    said_of,
)
from .handle import (
    BOOT,
    HOST,
    Handle,
    Pending,
    check_owner,
    close,
    deleted,
    fence,
    identity,
    poison,
    write_sidecar,
)
from .names import AUDIT_SUFFIX, LOG_SUFFIX, group_name, temp_name
from .scan import ScanState
from .store import NEW_FILE_FLAGS, Store, storage_error
from .summary import read_sidecar

__all__ = [
    "append",
    "finish_creation",
    "flush_bytes",
    "materialise",
    "release",
    "settle",
]


def materialise(
    store: Store,
    pending: Pending,
    records: Sequence[EventRecord],
    summary: SessionSummary | None = None,
) -> Handle:
    """Write a new session's log file holding its first flush, renamed in.

    The flush is not acknowledged yet: `finish_creation` makes the new name
    durable (and writes the sidecar, unless the flush's commit line carries
    `summary`).

    Raises:
        SessionExistsError: a log appeared under the name (bypassing the lock).
        StorageError: the file could not be written; nothing is visible.
    """
    ops = store.ops
    meta = pending.meta
    group = group_name(meta.header.cwd)
    gfd = store.subdir(group, create=True)
    assert gfd is not None  # noqa: S101 - create=True never returns None
    header = Header(
        format=FORMAT_NAME,
        format_version=meta.header.format_version,
        id=meta.header.id,
        log=ops.token(),
        created_at=meta.header.created_at,
        cwd=meta.header.cwd,
        parent=meta.header.parent,
    )
    state = ScanState()
    owner = Owner(
        flush=1,
        epoch=1,
        seq=0,
        time=meta.summary.updated_at,
        pid=os.getpid(),
        host=HOST,
        boot=BOOT,
        turns=0,
        size=0,
    )
    state.accept(owner, 0, b"")
    said = _said(summary)
    head = encode_header(header) + encode_owner(owner)
    flush = flush_bytes(state, records, said=said)
    data = head + flush
    tmp = temp_name(pending.stem, LOG_SUFFIX, ops.token())
    what = f"cannot create the log of session {header.id!r}"
    try:
        fd = ops.open(tmp, os.O_RDWR | NEW_FILE_FLAGS, 0o600, dir_fd=gfd)
    except OSError as exc:
        raise storage_error(what, exc) from exc
    try:
        ops.fchmod(fd, 0o600)
        write_all(ops, fd, data, 0)
        ops.fsync(fd)
        if store.find(pending.stem) is not None:
            raise SessionExistsError(f"session {header.id!r} already exists")
        # An earlier session of this id whose delete was cut short may have
        # left its audit records: a new session starts with none.
        with contextlib.suppress(FileNotFoundError):
            ops.unlink(pending.stem + AUDIT_SUFFIX, dir_fd=gfd)
        ops.replace(tmp, pending.stem + LOG_SUFFIX, dir_fd=gfd)
    except BaseException as exc:
        ops.close(fd)
        store.discard(gfd, tmp)
        if isinstance(exc, OSError):
            raise storage_error(what, exc) from exc
        raise
    handle = Handle(
        stem=pending.stem,
        group=group,
        gfd=gfd,
        fd=fd,
        lock_fd=pending.lock_fd,
        header=header,
        state=state,
        end=len(data),
        summary=meta.summary,
    )
    if summary is not None:
        _said_by(handle, summary, said, len(head), flush)
    try:
        handle.track(ops)
    except OSError as exc:
        poison(handle, exc, "creating its log")  # `finish_creation` raises it
    store.remember(pending.stem, group)
    return handle


def finish_creation(
    store: Store, handle: Handle, records: Sequence[EventRecord]
) -> None:
    """Make a new log's name durable, then store its summary if it has one.

    Raises:
        FlushOutcomeUnknownError: a step failed after the log holding the
            first flush (`records`) was renamed into place, where readers
            see it and where it may stay; the handle is poisoned.
    """
    try:
        if handle.failure is not None:
            raise handle.failure
        try:
            store.ops.fsync_dir(handle.gfd)
            if handle.said_flush == 0 and _worth_a_sidecar(handle.summary):
                write_sidecar(store, handle, handle.summary)
        except OSError as exc:
            raise poison(handle, exc, "creating its log") from exc
    except StorageError as exc:
        raise _unknown(handle, records, str(exc)) from exc


def _worth_a_sidecar(summary: SessionSummary) -> bool:
    """Whether a new session's summary holds more than its log can rebuild."""
    return (
        summary.title is not None
        or summary.first_prompt is not None
        or summary.status != "active"
    )


def flush_bytes(
    state: ScanState,
    records: Sequence[EventRecord],
    *,
    said: Said | None = None,
    said_at: int | None = None,
) -> bytes:
    """The bytes of one flush after `state` (advanced past it): lines + commit.

    `said` and `said_at` go into the commit line (see `format.Said`).
    """
    region = encode_event_lines(records)
    time = max(state.time, records[-1].time)
    turns = state.turns + count_turn_ends(records)
    size = state.size + len(region) - SUFFIX_LEN * len(records)
    events = records[-1].last + 1 - records[0].seq  # packs stand for several
    commit = encode_commit(
        flush=state.flush + 1,
        epoch=state.epoch,
        seq=state.seq + events,
        time=time,
        region=region,
        n=len(records),
        turns=turns,
        size=size,
        said=said,
        said_at=said_at,
        span=events,
    )
    state.flush += 1
    if said is not None:
        state.said, state.said_flush = said, state.flush
    state.seq += events
    state.time = time
    state.released = False
    state.turns = turns
    state.size = size
    return region + commit


def append(
    store: Store,
    handle: Handle,
    records: Sequence[EventRecord],
    summary: SessionSummary | None = None,
) -> None:
    """Durably append one flush (the caller checked the log is ours: `settle`).

    A `summary` rides in the flush's commit line; while the sidecar is
    behind the last such line, later lines point back at it (`said_at`).
    A summary too large for a control line is stored in the sidecar after
    the flush instead, as `update` would.

    Raises:
        StorageError: writing failed before the flush's commit line was
            whole, so nothing of it is in the log; the handle is poisoned.
        FlushOutcomeUnknownError: the flush was written but may or may not
            be in the log: its fsync failed (poisoned), or the log was taken
            over meanwhile (`fenced`), by a takeover that may have copied it.
            The handle keeps raising it.
        SessionDeletedError: the session was deleted (a forced delete)
            meanwhile; nothing of it is stored.
    """
    ops = store.ops
    now = handle.state
    state = now.copy()
    said = _said(summary)
    data = flush_bytes(state, records, said=said, said_at=_pointer(handle, said))
    try:
        write_all(ops, handle.fd, data, handle.end)
    except OSError as exc:
        # The commit line comes last, so an incomplete write holds no flush:
        # its bytes are a torn tail, which the next claim cuts.
        raise poison(handle, exc, "flushing") from exc
    try:
        ops.fsync(handle.fd)
    except OSError as exc:
        poison(handle, exc, "flushing")
        # The bytes may be durable all the same (and a reader sees them).
        raise _unknown(handle, records, f"its fsync failed: {exc}") from exc
    # A takeover between the check above and our write sent the write to an
    # orphaned file: only acknowledge once the name still points at ours. A
    # takeover copies the log it replaces, and whether that copy was made
    # before or after our write, only the new owner's log tells.
    try:
        found = identity(ops, handle)
    except StorageError as exc:
        raise _unknown(handle, records, f"its log could not be checked: {exc}") from exc
    if found == "deleted":
        # A forced delete took the log, and the flush with it.
        raise deleted(handle)
    if found == "replaced":
        cause = fence(handle, "another owner took it over")
        raise _unknown(
            handle,
            records,
            "another process took the session over while it was written, "
            "and may have copied it into the log it continues",
            fenced=True,
        ) from cause
    handle.state = state
    start = handle.end
    handle.end += len(data)
    if summary is not None:
        _said_by(handle, summary, said, start, data)
        if said is None:
            try:
                write_sidecar(store, handle, handle.summary)
            except OSError as exc:
                raise poison(handle, exc, "storing its summary") from exc


def _said(summary: SessionSummary | None) -> Said | None:
    """What a commit line says of `summary`, if it fits in one."""
    if summary is None:
        return None
    said = said_of(summary)
    return said if len(msgspec.json.encode(said)) <= SAID_LIMIT else None


def _pointer(handle: Handle, said: Said | None) -> int | None:
    """`said_at` for a line that says nothing itself, while the sidecar is behind."""
    if said is None and handle.said_flush > handle.watermark:
        return handle.said_at
    return None


def _said_by(
    handle: Handle, summary: SessionSummary, said: Said | None, at: int, data: bytes
) -> None:
    """Note `summary` as the handle's, said by the commit line ending `data`."""
    handle.summary = msgspec.structs.replace(
        summary, updated_at=max(summary.updated_at, handle.summary.updated_at)
    )
    if said is not None:
        handle.said_flush = handle.state.flush
        handle.said_at = at + data.rindex(b"\n", 0, len(data) - 1) + 1


def _unknown(
    handle: Handle, records: Sequence[EventRecord], why: str, *, fenced: bool = False
) -> FlushOutcomeUnknownError:
    """Mark the handle failed with an outcome-unknown flush; return the error."""
    error = outcome_unknown(handle.header.id, records, why, fenced=fenced)
    handle.failure = error
    return error


def settle(store: Store, handle: Handle, *, max_line: int) -> None:
    """Check the log is still ours and ends where we left it.

    Raises:
        SessionFencedError: another owner took it over.
        SessionCorruptError, StorageError: see `reconcile`.
    """
    size = check_owner(store.ops, handle)
    if size != handle.end:
        reconcile(store, handle, size, max_line=max_line)


def release(store: Store, handle: Handle, *, max_line: int) -> None:
    """Close the epoch with a release line, refresh the sidecar, let go.

    Raises:
        StorageError: writing the release failed. The lock is dropped anyway;
            the next owner then rewrites the log instead of appending to it.
    """
    ops = store.ops
    error: StorageError | None = None
    try:
        if handle.failure is None and handle.pid == os.getpid():
            settle(store, handle, max_line=max_line)
            state = handle.state
            release_line = Release(
                flush=state.flush + 1,
                epoch=state.epoch,
                seq=state.seq,
                time=state.time,
                turns=state.turns,
                size=state.size,
                said_at=_pointer(handle, None),
            )
            line = encode_release(release_line)
            try:
                write_all(ops, handle.fd, line, handle.end)
                ops.fsync(handle.fd)
                state.accept(release_line, 0, b"")
                handle.end += len(line)
                # Keep a summary another process stored meanwhile (by `update`).
                # (Unless this owner's commit lines said one after it.)
                disk = read_sidecar(ops, handle.gfd, handle.stem, handle.header)
                newer = disk is not None and disk.rank >= handle.said_flush
                if disk is not None and newer:
                    handle.summary = disk.summary  # the catalog's line too
                summary = handle.summary
                write_sidecar(store, handle, summary)
            except OSError as exc:
                error = poison(handle, exc, "releasing it")
    except (SessionFencedError, SessionCorruptError):
        pass  # taken over, deleted or damaged: nothing there is ours to touch
    except StorageError as exc:
        error = exc
    finally:
        close(ops, handle)
    if error is not None:
        raise error
