"""The open state of a session this process drives, and how it fails.

Owns `Handle` (the log and lock descriptors, the log's state, the summary),
`Pending` (a created session with no file yet), the checks that a handle may
still write (R9: the log is the same file, unchanged since our last write),
and the two ways a handle stops writing for good: poisoned by an I/O error
(R6) or fenced by another owner. Also the reading helpers writers share:
scanning an open log and the sidecar watermark rule (R4).
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Final, Literal

import attrs
import msgspec

from turnkeep.errors import (
    SessionCorruptError,
    SessionDeletedError,
    SessionFencedError,
    StorageError,
    TurnkeepError,
)
from turnkeep.meta import SessionMeta, SessionSummary
from turnkeep.persistence import LoadedSession

from .fileops import FileOps
from .format import MAX_HEADER_BYTES, Header, Sidecar, decode_header, encode_sidecar
from .locks import drop
from .names import LOG_SUFFIX, SIDECAR_SUFFIX
from .scan import ScanResult, ScanState, scan
from .store import READ_FLAGS, Store, storage_error

__all__ = [
    "BOOT",
    "HOST",
    "Handle",
    "Pending",
    "check_identity",
    "check_owner",
    "check_watermark",
    "close",
    "fence",
    "identity",
    "is_live",
    "poison",
    "scan_log",
    "write_sidecar",
]

HOST: Final = socket.gethostname()


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""  # not Linux: liveness checks then assume a live owner


BOOT: Final = _boot_id()

_live_lock = threading.Lock()
_live: dict[tuple[int, int], int] = {}
"""Log files (device, inode) that have an open handle in this process."""


@attrs.define(eq=False)
class Pending:
    """A created session without a log file yet (lazy materialisation)."""

    stem: str
    meta: SessionMeta
    lock_fd: int


@attrs.define(eq=False)
class Handle:
    """A session this process drives: its open log, its lock and its state.

    `failure` is set once the handle must not write any more: a
    `StorageError` (poisoned, R6), `SessionFencedError` (taken over), or
    `FlushOutcomeUnknownError` (either of those after a flush was written,
    so that flush may be in the log). Every later write raises it again.
    (Damage found in the log is kept by `Operations.damaged`, the backend
    kit's guard.)
    """

    stem: str
    group: str
    gfd: int
    fd: int
    lock_fd: int
    header: Header
    state: ScanState
    end: int
    summary: SessionSummary
    watermark: int = 0
    said_flush: int = 0
    """The unit whose commit line last carried `summary` (0: none); while it
    is past `watermark` (the sidecar's unit), later lines point at it."""
    said_at: int = 0
    """The byte offset of that commit line."""
    pid: int = attrs.field(factory=os.getpid)
    dev: int = 0
    ino: int = 0
    failure: TurnkeepError | None = None
    preloaded: LoadedSession | None = None
    """What `claim` verified, for the `load` of a resume that follows it
    (see `Operations.load`); dropped by the first write."""

    def current_summary(self) -> SessionSummary:
        """The summary with the log's numbers."""
        return SessionSummary(
            updated_at=max(self.summary.updated_at, self.state.time),
            title=self.summary.title,
            first_prompt=self.summary.first_prompt,
            status=self.summary.status,
            event_count=self.state.seq,
            turns=self.state.turns,
            size=self.state.size,
        )

    def track(self, ops: FileOps) -> None:
        """Note the log file's identity and that this process has it open."""
        st = ops.fstat(self.fd)
        self.dev, self.ino = st.st_dev, st.st_ino
        with _live_lock:
            _live[(self.dev, self.ino)] = _live.get((self.dev, self.ino), 0) + 1


def is_live(dev: int, ino: int) -> bool:
    """Whether a handle of this process has the log file `(dev, ino)` open."""
    with _live_lock:
        return (dev, ino) in _live


def close(ops: FileOps, handle: Handle) -> None:
    """Close the handle's files (dropping its lock) without writing anything."""
    if handle.fd >= 0:
        with _live_lock:
            key = (handle.dev, handle.ino)
            count = _live.get(key, 0) - 1
            if count > 0:
                _live[key] = count
            else:
                _live.pop(key, None)
        ops.close(handle.fd)
        handle.fd = -1
    if handle.lock_fd >= 0:
        drop(ops, handle.lock_fd)
        handle.lock_fd = -1


def poison(handle: Handle, exc: OSError, doing: str) -> StorageError:
    """Mark the handle failed after an I/O error (R6) and return the error."""
    error = storage_error(
        f"session {handle.header.id!r}: I/O error while {doing}; nothing was "
        "acknowledged and this handle takes no more writes (release the "
        "session, then claim or load it again to recover)",
        exc,
    )
    if handle.failure is None:
        handle.failure = error
    return error


def fence(handle: Handle, why: str) -> SessionFencedError:
    """Mark the handle fenced and return the error."""
    error = SessionFencedError(
        f"session {handle.header.id!r}: {why}; this instance may no longer write "
        "it (nothing was written). Load it again to continue from what the new "
        "owner wrote."
    )
    handle.failure = error
    return error


def deleted(handle: Handle) -> SessionDeletedError:
    """Mark the handle fenced by a delete and return the error."""
    error = SessionDeletedError(handle.header.id)
    handle.failure = error
    return error


def check_owner(ops: FileOps, handle: Handle) -> int:
    """Refuse to write unless the log's name still points at our file (R9).

    Returns:
        The file's size, for the caller to compare with `handle.end` (a
        different size means someone else wrote to it).

    Raises:
        SessionFencedError: the log was replaced or removed.
        StorageError: the checks themselves failed (the handle is poisoned).
    """
    try:
        size = ops.fstat(handle.fd).st_size
    except OSError as exc:
        raise poison(handle, exc, "checking its log") from exc
    check_identity(ops, handle)
    return size


def check_identity(ops: FileOps, handle: Handle) -> None:
    """Raise unless the log's name still points at our open file.

    Raises:
        SessionDeletedError: it was deleted (a forced delete).
        SessionFencedError: it was replaced (a takeover).
        StorageError: the check failed (the handle is poisoned).
    """
    found = identity(ops, handle)
    if found == "deleted":
        raise deleted(handle)
    if found == "replaced":
        raise fence(handle, "another owner took it over")


def identity(ops: FileOps, handle: Handle) -> Literal["ours", "replaced", "deleted"]:
    """What the log's name points at: our open file, another one, nothing.

    Raises:
        StorageError: the lookup failed (the handle is poisoned).
    """
    try:
        now = ops.stat(handle.stem + LOG_SUFFIX, dir_fd=handle.gfd)
    except FileNotFoundError:
        return "deleted"
    except OSError as exc:
        raise poison(handle, exc, "checking its log") from exc
    if (now.st_dev, now.st_ino) != (handle.dev, handle.ino):
        if _another_log(ops, handle):
            return "deleted"  # ...and created again since
        return "replaced"
    return "ours"


def _another_log(ops: FileOps, handle: Handle) -> bool:
    """Whether the file now under the log's name is another log (another token).

    A takeover copies the header, token included; only deleting the session
    and creating it again makes a log with another token.
    """
    try:
        fd = ops.open(handle.stem + LOG_SUFFIX, READ_FLAGS, dir_fd=handle.gfd)
    except OSError:
        return False  # gone again, or unreadable: a takeover is all we can say
    try:
        head = ops.pread(fd, MAX_HEADER_BYTES, 0)
    except OSError:
        return False
    finally:
        ops.close(fd)
    header = decode_header(head[: max(head.find(b"\n"), 0)])
    return header is not None and header.log != handle.header.log


def write_sidecar(store: Store, handle: Handle, summary: SessionSummary) -> None:
    """Replace the sidecar: `summary` plus the watermark of the log so far.

    Written only after the flushes it covers were fsynced, so its watermark
    never claims more than the log durably holds.

    Raises:
        OSError: the sidecar could not be replaced (the old one stays).
    """
    state = handle.state
    sidecar = Sidecar(
        format_version=handle.header.format_version,
        id=handle.header.id,
        log=handle.header.log,
        flush=state.flush,
        seq=state.seq,
        summary=msgspec.structs.replace(
            summary,
            updated_at=max(summary.updated_at, state.time),
            event_count=state.seq,
            turns=state.turns,
            size=state.size,
        ),
    )
    data = encode_sidecar(sidecar)
    store.write_atomic(handle.gfd, handle.stem + SIDECAR_SUFFIX, data)
    handle.watermark = handle.state.flush


def scan_log(
    ops: FileOps,
    fd: int,
    size: int,
    *,
    session_id: str,
    collect: bool,
    max_line: int,
    tolerate: bool = False,
) -> ScanResult:
    """`scan` over an open log file."""
    pread = ops.pread
    return scan(
        lambda offset, n: pread(fd, n, offset),
        size,
        session_id=session_id,
        collect=collect,
        max_line=max_line,
        data_from=lambda offset: ops.seek_data(fd, offset),
        tolerate=tolerate,
    )


def check_watermark(result: ScanResult, sidecar: Sidecar | None) -> None:
    """Raise if the sidecar proves more was acknowledged than the log holds (R4).

    Raises:
        SessionCorruptError: the log lost an acknowledged flush.
    """
    if sidecar is not None and sidecar.flush > result.state.flush:
        offset = result.damage if result.damage is not None else result.end
        raise SessionCorruptError(
            f"session {result.header.id!r}: its log ends at flush "
            f"{result.state.flush} but flush {sidecar.flush} was acknowledged "
            f"(damage at byte {offset}); it cannot be loaded without losing "
            "acknowledged data (restore the file from a backup)",
            session_id=result.header.id,
            offset=offset,
        )
