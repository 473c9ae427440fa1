"""The audit trail: who took over, repaired, recovered, refused or deleted what.

`AuditLog` is an optional backend capability (checked like
`request_cancel`: by the methods' presence). The process that acts on a
session (takes it over, is refused a write by a fence, repairs or
quarantines it, recovers it, refuses a turn, resolves an unknown effect,
deletes it) records an `AuditRecord` with the time, its host and pid, the
action and the reason; `turnkeep audit` lists them. Read-only work (list,
show, verify, export, tail, audit) records nothing. `turnkeep.auditing` is
the host side: it records when the backend can, and never fails the action
because its record could not be written.

The contract [audit], which the conformance kit checks:

- `record_audit(scope, record)` stores `record` in a scope: a session's
  own records (`scope` is its id) or the store's log (`scope` is `None`).
  Each scope numbers its records 1, 2, ... in the order they were
  recorded (racing recorders each get their own number); the stored record
  is returned with its `number`, everything else as given. When it
  returns, the record is durable (synced, committed).
- A session's records never touch its log: no event, no seq, no summary
  changes, no lock is taken and no writer role is needed, so a record
  lands while another process holds the session (JSONL: a side file
  `<stem>.audit` appended and synced; SQLite and PostgreSQL: rows of a
  table `audit` of their own). The store's log (JSONL: `audit.jsonl`
  at the store's root) is never touched by `delete`.
- `audit_records(scope, after, limit)` returns the scope's records
  numbered above `after`, oldest first, at most `limit`; any instance (any
  process; for a shared database, any machine) sees a record at once, and
  a reopened store still has it.
- `delete` removes the session's records with it: a new session of the
  same id starts with none. A deletion is recorded in the store's log by
  whoever deleted (the session id, the time, the reason: no content).
- A session scope that is not stored raises `SessionNotFoundError` from
  both; an unstorable id `InvalidSessionIdError`; a record that
  `check_record` refuses `ValueError`, before anything is touched.

Records never hold a session's content: `reason` is a short text in the
actor's words and `detail` a few small strings and integers (seq numbers,
call ids, counts).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, Protocol, TypeAlias, cast, get_args

import msgspec

__all__ = [
    "ACTIONS",
    "MAX_DETAIL_ITEMS",
    "MAX_DETAIL_TEXT",
    "MAX_REASON_CHARS",
    "ROW_COLUMNS",
    "AuditAction",
    "AuditLog",
    "AuditRecord",
    "audit_log",
    "audit_record",
    "check_record",
    "check_records_range",
    "decode_record",
    "encode_record",
    "has_audit_log",
    "numbered",
    "record_from_row",
    "record_row",
]

AuditAction: TypeAlias = Literal[
    "takeover",
    "fenced_write",
    "repair",
    "quarantine",
    "recovery",
    "refusal",
    "resolution",
    "deletion",
]
"""What was done. `takeover`: this process took a session another owner held
(fencing it). `fenced_write`: this process's write was refused because another
took the session over. `repair`: a damaged log was cut back to what is intact.
`quarantine`: damaged bytes were moved aside. `recovery`: an interrupted turn
was closed after a crash. `refusal`: a turn was refused (its run context
changed, or an unknown effect blocks it). `resolution`: an unknown effect was
settled by a person. `deletion`: the session was deleted (in the store's
log)."""

ACTIONS: Final[frozenset[str]] = frozenset(get_args(AuditAction))

MAX_REASON_CHARS: Final = 500
"""The longest reason a record may carry."""

MAX_DETAIL_ITEMS: Final = 16
"""The most entries a record's `detail` may hold."""

MAX_DETAIL_TEXT: Final = 200
"""The longest key or text value in a record's `detail`."""

Detail: TypeAlias = dict[str, str | int]


class AuditRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One thing a process did to a session, or to the store.

    Attributes:
        number: its place in its scope (1, 2, ...); 0 until recorded.
        at: epoch milliseconds, by the actor's clock.
        action: one of `ACTIONS` (see `AuditAction`).
        session_id: the session acted on (`None` for the store itself).
        reason: why, in the actor's words (at most `MAX_REASON_CHARS`).
        host: the actor's host name.
        pid: the actor's process id.
        detail: a few small facts (seq numbers, call ids), never content.
    """

    at: int
    action: str
    session_id: str | None
    reason: str
    host: str
    pid: int
    detail: Detail = msgspec.field(default_factory=dict[str, str | int])
    number: int = 0


class AuditLog(Protocol):
    """The optional methods that keep the audit trail (see [audit])."""

    async def record_audit(self, scope: str | None, record: AuditRecord) -> AuditRecord:
        """Store `record` in the session `scope`'s records, or the store's log.

        Returns:
            The record as stored, with its `number`.

        Raises:
            SessionNotFoundError: the session `scope` is not stored.
            InvalidSessionIdError: `scope` is not a storable id.
            ValueError: `check_record` refuses the record.
        """
        ...

    async def audit_records(
        self, scope: str | None, after: int, limit: int
    ) -> list[AuditRecord]:
        """The scope's records numbered above `after`, oldest first.

        Raises:
            SessionNotFoundError: the session `scope` is not stored.
            InvalidSessionIdError: `scope` is not a storable id.
            ValueError: `after` < 0 or `limit` < 1.
        """
        ...


def has_audit_log(backend: object) -> bool:
    """Whether `backend` keeps an audit trail (see [audit])."""
    return callable(getattr(backend, "record_audit", None)) and callable(
        getattr(backend, "audit_records", None)
    )


def audit_log(backend: object) -> AuditLog | None:
    """`backend` as an `AuditLog`, or `None` when it keeps none."""
    return cast("AuditLog", backend) if has_audit_log(backend) else None


def audit_record(
    action: AuditAction,
    session_id: str | None,
    reason: str,
    *,
    detail: Mapping[str, str | int] | None = None,
    now_ms: int | None = None,
) -> AuditRecord:
    """A record of this process's action, fitted to the bounds (not yet stored).

    A record never stops the action it records: a reason or detail text
    that is too long is cut (ending in "…"), and entries past
    `MAX_DETAIL_ITEMS` are left out.

    Raises:
        ValueError: `action` is not one of `ACTIONS` (a mistake in the caller).
    """
    return check_record(
        AuditRecord(
            at=time.time_ns() // 1_000_000 if now_ms is None else now_ms,
            action=action,
            session_id=session_id,
            reason=_cut(reason, MAX_REASON_CHARS),
            host=_cut(socket.gethostname(), MAX_DETAIL_TEXT),
            pid=os.getpid(),
            detail=_fitted(detail or {}),
        )
    )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fitted(detail: Mapping[str, str | int]) -> Detail:
    fitted: Detail = {}
    for key, value in list(detail.items())[:MAX_DETAIL_ITEMS]:
        text = value if type(value) is int else _cut(str(value), MAX_DETAIL_TEXT)
        fitted[_cut(str(key), MAX_DETAIL_TEXT)] = text
    return fitted


def check_record(record: object) -> AuditRecord:
    """Refuse a record before anything is touched.

    Raises:
        ValueError: not an `AuditRecord`; an action outside `ACTIONS`; a
            reason that is not text of at most `MAX_REASON_CHARS`; a detail
            with more than `MAX_DETAIL_ITEMS` entries, or keys and values
            that are not short text or integers.
    """
    if not isinstance(record, AuditRecord):
        raise ValueError(f"an audit record is an AuditRecord, not {record!r:.60}")
    if record.action not in ACTIONS:
        raise ValueError(
            f"an audit action is one of {sorted(ACTIONS)}, not {record.action!r:.60}"
        )
    if not _short_text(record.reason, MAX_REASON_CHARS):
        raise ValueError(
            f"an audit reason is text of at most {MAX_REASON_CHARS} characters"
        )
    if not _small_detail(record.detail):
        raise ValueError(
            f"an audit detail maps at most {MAX_DETAIL_ITEMS} short texts (at "
            f"most {MAX_DETAIL_TEXT} characters) to short texts or integers"
        )
    return record


def _short_text(value: object, limit: int = MAX_DETAIL_TEXT) -> bool:
    return isinstance(value, str) and len(value) <= limit


def _small_detail(detail: object) -> bool:
    # Checked as `object`: a record built without msgspec's validation (the
    # constructor does not validate) may hold anything.
    if not isinstance(detail, dict):
        return False
    items = cast("dict[object, object]", detail)
    return len(items) <= MAX_DETAIL_ITEMS and all(
        _short_text(key) and (_short_text(value) or type(value) is int)
        for key, value in items.items()
    )


def check_records_range(after: int, limit: int) -> None:
    """Refuse an `audit_records` range before anything is read.

    Raises:
        ValueError: `after` < 0 or `limit` < 1.
    """
    if after < 0:
        raise ValueError(f"after must be 0 (from the start) or a number, not {after}")
    if limit < 1:
        raise ValueError(f"limit must be positive, not {limit}")


def numbered(record: AuditRecord, number: int) -> AuditRecord:
    """`record` as stored at `number` (for backends)."""
    return msgspec.structs.replace(record, number=number)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AuditRecord)


def encode_record(record: AuditRecord) -> bytes:
    """The record as stored by a backend that stores it as JSON."""
    return _encoder.encode(record)


def decode_record(data: bytes) -> AuditRecord:
    """A record `encode_record` stored.

    Raises:
        msgspec.DecodeError, msgspec.ValidationError: it is not one.
    """
    return _decoder.decode(data)


ROW_COLUMNS: Final = "number, at, action, session_id, reason, host, pid, detail"
"""The columns a SQL backend keeps a record in, in `record_row`'s order."""

_detail_decoder = msgspec.json.Decoder(dict[str, str | int])


def record_row(
    record: AuditRecord,
) -> tuple[int, int, str, str | None, str, str, int, str]:
    """`record` as the values of `ROW_COLUMNS` (its detail as JSON text)."""
    detail = _encoder.encode(record.detail).decode()
    return (
        record.number,
        record.at,
        record.action,
        record.session_id,
        record.reason,
        record.host,
        record.pid,
        detail,
    )


def record_from_row(row: Sequence[Any]) -> AuditRecord:
    """The record a row of `ROW_COLUMNS` holds (as `record_row` stored it).

    Raises:
        msgspec.DecodeError, msgspec.ValidationError: its detail is not one.
    """
    number, at, action, session_id, reason, host, pid, detail = row
    return AuditRecord(
        number=int(number),
        at=int(at),
        action=action,
        session_id=session_id,
        reason=reason,
        host=host,
        pid=int(pid),
        detail=_detail_decoder.decode(detail),
    )
