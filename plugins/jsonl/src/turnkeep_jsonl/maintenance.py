"""Torn tails on request: `turnkeep.maintenance.SessionMaintenance` for JSONL.

Owns the blocking halves of `JsonlPersistence.inspect_tail` and
`JsonlPersistence.repair` (consumed by `turnkeep verify` and `turnkeep
repair`). A tail is what follows a log's last valid unit: an unfinished
flush left by a crash, never acknowledged (`docs/formats/jsonl.md`, section
3). The backend already cuts it on the first claim or append after a crash;
`repair` is that same claim, asked for explicitly and reported on.

- `inspect_tail` reads the log exactly as `load` does (same scan, same
  sidecar watermark check) and writes nothing.
- `repair` takes the writer role through the backend's own claim, which
  copies the tail into a 0600 quarantine file and fsyncs it (and its
  directory) before it cuts the log and opens a new owner epoch, fsynced;
  then it releases the session cleanly. Acknowledged data is never touched:
  damage inside it makes the claim refuse before anything is cut.
"""

from __future__ import annotations

import os
import stat

from turnkeep.errors import SessionLockedError, SessionNotFoundError
from turnkeep.maintenance import TailReport

from .handle import check_watermark, scan_log
from .names import LOG_SUFFIX, QUARANTINE_DIR, QUARANTINE_SUFFIX, session_name
from .operations import Operations
from .scan import ScanResult
from .store import READ_FLAGS, storage_error
from .summary import read_sidecar

__all__ = ["inspect_tail", "repair"]


def open_log(impl: Operations, session_id: str) -> tuple[int, int, str]:
    """Open a stored session's log for reading, without taking it.

    Returns:
        The log's descriptor (the caller closes it), its folder's descriptor
        and the session's file stem.

    Raises:
        SessionNotFoundError: nothing is stored under this id.
        StorageError: the log cannot be opened.
    """
    store = impl.store
    stem = session_name(session_id)
    found = store.find(stem) if store.root(create=False) is not None else None
    if found is None:
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    gfd = found[1]
    try:
        fd = store.ops.open(stem + LOG_SUFFIX, READ_FLAGS, dir_fd=gfd)
    except FileNotFoundError as exc:
        raise SessionNotFoundError(f"no stored session {session_id!r}") from exc
    except OSError as exc:
        raise storage_error(f"cannot open the log of {session_id!r}", exc) from exc
    return fd, gfd, stem


def inspect_tail(impl: Operations, session_id: str) -> TailReport | None:
    """What the next claim or append of the session would cut. Read-only.

    Raises:
        SessionNotFoundError: nothing is stored under this id.
        SessionCorruptError, UnsupportedFormatError: as `load` would.
        StorageError: the log cannot be read.
    """
    ops = impl.store.ops
    fd, gfd, stem = open_log(impl, session_id)
    try:
        size = ops.fstat(fd).st_size
        result = scan_log(
            ops, fd, size, session_id=session_id, collect=False, max_line=impl.max_line
        )
        check_watermark(result, read_sidecar(ops, gfd, stem, result.header))
    except OSError as exc:
        raise storage_error(f"cannot read the log of {session_id!r}", exc) from exc
    finally:
        ops.close(fd)
    if not result.tail:
        return None
    return TailReport(
        session_id=session_id,
        offset=result.end,
        length=result.tail,
        reason=_reason(result),
    )


def repair(impl: Operations, session_id: str) -> TailReport | None:
    """Quarantine and cut the session's tail now (the caller holds its lock).

    Returns what was cut, with the quarantine file's path, or `None` when
    the log had no tail.

    Raises:
        SessionLockedError: another owner drives the session, or this
            instance does (its own next append repairs the tail).
        SessionNotFoundError, SessionCorruptError, UnsupportedFormatError,
            StorageError: as for `claim`; nothing was cut.
    """
    if session_id in impl.session_ids():
        raise SessionLockedError(
            f"session {session_id!r} is open for writing in this process; "
            "release it first (its next append cuts the tail anyway)"
        )
    if inspect_tail(impl, session_id) is None:
        return None
    stem = session_name(session_id)
    before = _quarantined(impl, stem)
    # The claim is the one place the backend cuts tails: quarantine (fsync),
    # cut, owner line (fsync). Reusing it keeps one implementation of R5.
    impl.claim(session_id, False)
    try:
        added = sorted(_quarantined(impl, stem) - before)
    finally:
        impl.release(session_id)
    if not added:
        return None  # someone else cut it between our look and our claim
    name = added[-1]
    qdir = impl.store.subdir(QUARANTINE_DIR, create=False)
    length = 0
    if qdir is not None:
        try:
            st = impl.store.ops.stat(name, dir_fd=qdir)
        except OSError as exc:
            raise storage_error(
                f"cannot inspect the quarantine file {name}", exc
            ) from exc
        if stat.S_ISREG(st.st_mode):
            length = st.st_size
    offset = int(name[len(stem) + 1 :].split(".", 1)[0])
    return TailReport(
        session_id=session_id,
        offset=offset,
        length=length,
        reason="cut after its last acknowledged flush and kept in quarantine",
        quarantine=os.fspath(impl.store.path / QUARANTINE_DIR / name),
    )


def _reason(result: ScanResult) -> str:
    if result.damage is None:
        return (
            "event lines without their commit line: a flush stopped by a crash "
            "before it was acknowledged"
        )
    return (
        f"the record at offset {result.damage} is torn or garbled and no "
        "acknowledged record follows it: a write stopped by a crash, never "
        "acknowledged"
    )


def _quarantined(impl: Operations, stem: str) -> set[str]:
    qdir = impl.store.subdir(QUARANTINE_DIR, create=False)
    if qdir is None:
        return set()
    try:
        names = impl.store.ops.listdir(qdir)
    except OSError as exc:
        raise storage_error("cannot list the quarantine directory", exc) from exc
    prefix = stem + "."
    return {n for n in names if n.startswith(prefix) and n.endswith(QUARANTINE_SUFFIX)}
