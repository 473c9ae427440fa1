"""Salvage for JSONL: `turnkeep.salvage.SessionSalvage.read_intact`.

Owns the blocking half of `JsonlPersistence.read_intact`. It reads the log
as `load` does, but with the scan's `tolerate` switch: damage that a later
durable unit proves was acknowledged (R4) ends the intact prefix instead of
raising. The prefix is every whole, checksummed unit before the first bad
record. What was lost is read from what follows: the valid commit lines
after the damage name the flushes and seqs that had been acknowledged, and
the sidecar's watermark says which flush was last acknowledged when the
log lost its end. Nothing is written: the damaged log stays as it is.
"""

from __future__ import annotations

from turnkeep.meta import SessionMeta
from turnkeep.salvage import Damage, IntactLog

from .format import MARK, Sidecar, decode_control
from .handle import scan_log
from .maintenance import open_log
from .operations import Operations
from .scan import CHUNK, Reader, ScanResult
from .store import storage_error
from .summary import merge_summary, numbers_of, read_sidecar, session_header

__all__ = ["read_intact"]


def read_intact(impl: Operations, session_id: str) -> IntactLog:
    """The log's units before the first damaged record, and what was lost.

    Raises:
        SessionNotFoundError: nothing is stored under this id.
        SessionCorruptError: the header line is damaged.
        UnsupportedFormatError: the log is of a newer format.
        StorageError: the log cannot be read.
    """
    ops = impl.store.ops
    fd, gfd, stem = open_log(impl, session_id)
    try:
        size = ops.fstat(fd).st_size
        result = scan_log(
            ops,
            fd,
            size,
            session_id=session_id,
            collect=True,
            max_line=impl.max_line,
            tolerate=True,
        )
        sidecar = read_sidecar(ops, gfd, stem, result.header)
        later = (0, 0)
        if result.durable_damage and result.damage is not None:
            later = _later_commits(
                lambda o, n: ops.pread(fd, n, o), result.damage, size
            )
    except OSError as exc:
        raise storage_error(f"cannot read the log of {session_id!r}", exc) from exc
    finally:
        ops.close(fd)
    numbers = numbers_of(result.state)
    meta = SessionMeta(
        header=session_header(result.header), summary=merge_summary(sidecar, numbers)
    )
    return IntactLog(
        meta=meta, events=result.events, damage=_damage(result, sidecar, later)
    )


def _damage(
    result: ScanResult, sidecar: Sidecar | None, later: tuple[int, int]
) -> Damage | None:
    state = result.state
    watermark = sidecar.flush if sidecar is not None else 0
    if not result.durable_damage and watermark <= state.flush:
        return None  # at most a torn, unacknowledged tail: not damage
    last_flush = max(later[0], watermark)
    next_seq = max(later[1], sidecar.seq if sidecar is not None else 0)
    offset = result.damage if result.damage is not None else result.end
    if result.durable_damage:
        reason = (
            f"the record at byte {offset} is damaged and acknowledged flushes follow it"
        )
    else:
        reason = (
            f"the log ends at flush {state.flush} (byte {result.end}) but its "
            f"summary says flush {watermark} was acknowledged"
        )
    return Damage(
        first_seq=state.seq,
        last_seq=next_seq - 1 if next_seq > state.seq else None,
        lost_bytes=result.size - result.end,
        offset=offset,
        first_flush=state.flush + 1,
        last_flush=last_flush if last_flush > state.flush else None,
        reason=reason,
    )


def _later_commits(read: Reader, start: int, size: int) -> tuple[int, int]:
    """The highest flush number and next seq named by valid control lines.

    Read from `start` to `size` a chunk at a time; a damaged line is simply
    not a valid control line.
    """
    flush = seq = 0
    at = start
    rest = b""
    while at < size:
        chunk = read(at, min(CHUNK, size - at))
        if not chunk:
            break
        at += len(chunk)
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            if line.startswith(MARK) and (control := decode_control(line)) is not None:
                flush = max(flush, control.flush)
                seq = max(seq, control.seq)
    return flush, seq
