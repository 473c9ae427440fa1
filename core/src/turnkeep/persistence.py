"""The persistence seam: the `SessionPersistence` protocol and its contracts.

Implemented by backends (`MemoryPersistence` in core; `turnkeep-jsonl`,
`turnkeep-sqlite`, `turnkeep-postgres`; third parties), with the pieces they
share from `turnkeep.backendkit`. Consumed by the write-behind plugin
(`turnkeep.writebehind`), the session store's resume path, and the CLI.
Backends never see event objects: they store and return `EventRecord`s /
event bytes exactly as core encoded them. The codec, the record and
metadata types a backend handles are importable from here too.

Contracts every backend keeps (the conformance kit, `turnkeep.conformance`,
checks each one; the names in brackets are the kit's):

- [append-only] Committed events are never rewritten. The first record of an
  `append` MUST carry the stored next seq; a re-append or a gap raises
  `SequenceError` (with the stored next seq) and writes nothing.
- [atomic-flush] One `append` call is one flush, the unit of atomicity:
  `load` returns whole flushes only. A torn or unacknowledged tail left by a
  crash is excluded by `load` and cut (and kept aside) by the first `append`
  after it, never by `load`; damage inside acknowledged data raises
  `SessionCorruptError`, never a silently shorter history.
- [durable-ack] When `append` returns, its records survive a process crash
  (and, for backends that claim it, power loss).
- [lazy] A session becomes visible to `has`, `list` and `load` with its
  first appended flush; `create` alone writes nothing durable. An `update`
  before that flush is kept and lands with it.
- [list-metadata-only] `list` reads headers and summaries, never whole logs;
  it pages newest first by `updated_at` (ties by id), with an opaque cursor.
- [list-filter] `list(where=ListFilter(...))` keeps the sessions whose
  stored status is one of `statuses` and whose `updated_at` lies strictly
  between `updated_after` and `updated_before` (each optional), exactly
  those `ListFilter.matches`, in the same order and keyset paging: a page
  holds `limit` of them unless it is the last. The filter is applied where
  the backend keeps its index (an indexed range, the catalog), never by
  reading logs. A backend whose `list` takes no `where` is served by
  `turnkeep.listing.list_where`, which filters pages in core.
- [summary] `update` replaces title, first prompt and status, never the log,
  and an `append` never loses them. Backends keep `event_count` (durable
  events), `turns` (durable records whose `is_turn_end` is true, i.e. of type
  `turn/end`), `size` (the summed length of the durable records' `raw`) and
  `updated_at`, which only moves forward: to the last record's `time` on
  `append`, to the given `updated_at` on `update`. The three numbers are the
  log's: values passed to `update` are ignored, and they stay right across
  reopens, takeovers and torn-tail repairs. `list` returns them too, from
  metadata alone. Backends read no clock of their own, so ordering follows
  the sessions' clock.
- [summary-append] An `append` given a `summary` stores its caller-set
  fields (title, first prompt, status) in the same atomic unit as the
  records: both land or neither, with no second durable write (no extra
  commit, fsync or rename), and `load` and `list` show them at once and
  after a reopen. `updated_at` moves to the later of the summary's and the
  last record's `time`; the numbers stay the log's. An empty `append`
  stores nothing, its summary included. A backend whose `append` takes no
  `summary` is still accepted: the write-behind then stores the summary
  with `update` after the append (see `turnkeep.capabilities`).
- [ids] Ids are untrusted: any id `validate_session_id` accepts round-trips
  exactly, distinct ids never collide (also after case folding), and an
  invalid id raises `InvalidSessionIdError` before anything is touched.
- [format-version] A stored format or schema newer than the code is refused
  with `UnsupportedFormatError` by `load` and `append` without changing a
  byte.
- [one-writer] One process writes a session at a time. `create` and `claim`
  (and an `append` on an unclaimed session) take the writer role; another
  live owner makes them raise `SessionLockedError` at once. `claim(...,
  steal=True)` takes over and fences the old owner, whose later appends raise
  `SessionFencedError` and write nothing. Reads take no lock.
- [delete] `delete` removes the session and everything it owns, so that no
  reader of the storage finds its content afterwards (log, summary,
  listing rows, sidecars, quarantined bytes, freed pages the backend can
  overwrite; what it cannot erase, its documentation says). A session
  another live owner holds is refused with `SessionHeldError` unless
  `force=True`; a forced delete fences that holder, whose next `append` or
  `update` raises `SessionDeletedError` and writes nothing.
- [unknown-outcome] An `append` whose flush may or may not have landed (a
  commit's reply lost, a sync failed after the write, a takeover that may
  have copied it in) raises `FlushOutcomeUnknownError` with its seq range,
  never an error that reads as "not written"; a later append of the same
  records settles it (it lands, or `SequenceError` says it had), and a
  `load` holds the flush exactly once or not at all.
- [held] (optional method `held`, `HoldProbe`) `held(ids)` says, for each
  id, whether a live owner holds its writer role (this instance or
  another): true while a `claim` without `steal` would be refused, false
  once the holder released it, closed, died or was deleted out. An owner
  whose liveness cannot be checked counts as live. It is read-only: it
  never takes, renews or breaks a hold, so an owner's claim or append at
  the same moment is unaffected. It costs one look per id (a record, a
  lock probe, a lease), never a log read or a walk of the store. A backend
  without it is "unknown": listings keep its sessions' stored status.
- [load-after] (optional methods `load_after` and `last_seq`,
  `IncrementalRead`) `load_after(id, after, limit)` returns the stored raw
  records that stand for a seq greater than `after` (`-1`: from the start),
  at most `limit` of them, in seq order, starting with the record that holds
  seq `after + 1` (a pack that starts before it included): exactly that run
  of `load(id).events`, durable records only (a torn tail is never
  returned). After the end it returns `[]`. `last_seq(id)` is the last seq
  the durable records stand for (`-1` for none). Both cost the records asked
  for plus one indexed look (an offset, a row), never a read of the whole
  log; damage in what they read raises `SessionCorruptError`, never a
  shorter answer; an unknown id raises `SessionNotFoundError`. A backend
  without them is served by `read_after` / `last_durable_seq` with `load`.
- [wait-for-commit] (optional method `wait_for_commit`, `CommitWaiter` in
  `turnkeep.follow`, which states the contract) wakes a follower at the
  next commit of a session, from any writer, without reading the log.
- [errors] Driver errors are wrapped in `turnkeep.errors` types.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Protocol, cast

import msgspec

from turnkeep._deprecated import renamed
from turnkeep.codec import DEFAULT_MAX_EVENT_BYTES, EventCodec, EventRecord
from turnkeep.errors import ConfigurationError
from turnkeep.listfilter import ListFilter
from turnkeep.meta import (
    FORMAT_VERSION,
    ForkPoint,
    SessionHeader,
    SessionMeta,
    SessionStatus,
    SessionSummary,
)

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "FORMAT_VERSION",
    "OPTIONAL_METHODS",
    "PROTOCOL_METHODS",
    "EventCodec",
    "EventRecord",
    "ForkPoint",
    "HoldProbe",
    "IncrementalRead",
    "ListFilter",
    "LoadedSession",
    "SessionHeader",
    "SessionMeta",
    "SessionPage",
    "SessionPersistence",
    "SessionStatus",
    "SessionSummary",
    "check_read_range",
    "validate_backend",
]


class LoadedSession(msgspec.Struct, frozen=True, kw_only=True):
    """What `load` returns.

    Attributes:
        meta: the header and current summary.
        events: each durable record's exact stored bytes, in seq order (an
            event each, or a pack standing for several, `turnkeep.packs`).
    """

    meta: SessionMeta
    events: list[bytes]


class SessionPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of `list`, newest first.

    Attributes:
        items: the sessions of this page.
        next_cursor: pass to `list(cursor=...)` for the next page; `None` on
            the last page.
    """

    items: list[SessionMeta]
    next_cursor: str | None = None


class SessionPersistence(Protocol):
    """A durable store of session logs and metadata (all methods async)."""

    async def create(self, meta: SessionMeta) -> None:
        """Register a new session's header and take the writer role for it.

        May defer every durable write to the first `append` (see [lazy]).

        Raises:
            SessionExistsError: a session with this id is already stored.
            SessionLockedError: another process is creating/driving this id.
        """
        ...

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        """Durably persist one flush of events (atomically: all or nothing).

        With `summary`, its caller-set fields (title, first prompt, status)
        land in the same atomic unit as the events (see [summary-append]);
        its numbers are ignored, as `update` ignores them.

        Raises:
            SequenceError: `events[0].seq` is not the stored next seq.
            SessionNotFoundError: the session was neither created nor stored.
            SessionLockedError: another process owns the session.
            SessionFencedError: this instance's ownership was taken over.
            UnsupportedFormatError: the stored session is of a newer format.
            StorageError: the storage failed; nothing was acknowledged.
        """
        ...

    async def load(self, session_id: str) -> LoadedSession:
        """Return the session's metadata and durable events. Read-only.

        Raises:
            SessionNotFoundError: nothing is stored under this id.
            SessionCorruptError: acknowledged data is damaged.
            UnsupportedFormatError: the stored format is newer than the code.
        """
        ...

    async def list(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        where: ListFilter | None = None,
    ) -> SessionPage:
        """Return one page of stored sessions, newest first. Read-only.

        With `where`, only the sessions it keeps (see [list-filter]).

        Raises:
            ValueError: `limit` < 1.
            InvalidCursorError: `cursor` is not one this backend made.
        """
        ...

    async def has(self, session_id: str) -> bool:
        """Whether a session is stored (has at least one durable flush)."""
        ...

    async def delete(self, session_id: str, *, force: bool = False) -> None:
        """Remove a stored session and everything it owns (see [delete]).

        This instance may hold the session (it is let go). Another live
        owner's hold is refused unless `force`; forcing fences that owner,
        which hears `SessionDeletedError` at its next write.

        Raises:
            SessionNotFoundError: nothing is stored under this id.
            SessionHeldError: another live owner holds it and not `force`.
        """
        ...

    async def update(self, session_id: str, summary: SessionSummary) -> None:
        """Replace the session's mutable summary; never touches the event log.

        `summary.event_count`, `summary.turns` and `summary.size` are
        ignored (the backend maintains them from the log).

        Raises:
            SessionNotFoundError: the session was neither created nor stored.
        """
        ...

    async def claim(self, session_id: str, *, steal: bool = False) -> None:
        """Take the writer role for a stored session.

        Raises:
            SessionNotFoundError: nothing is stored under this id.
            SessionLockedError: another live owner holds it and not `steal`.
            UnsupportedFormatError: the stored session is of a newer format.
        """
        ...

    async def release(self, session_id: str) -> None:
        """Give up the writer role (no-op if not held)."""
        ...

    async def aclose(self) -> None:
        """Release every writer role and close every handle. Idempotent."""
        ...


class HoldProbe(Protocol):
    """The optional method that tells a crashed owner from a live one."""

    async def held(self, session_ids: Sequence[str]) -> dict[str, bool]:
        """Whether a live owner holds each session (see [held]). Read-only.

        Returns:
            One entry per distinct id given: `True` if a live owner (this
            instance or another) holds its writer role, or if the holder's
            liveness cannot be checked; `False` if nobody does (released,
            closed, dead, deleted, or never stored).

        Raises:
            InvalidSessionIdError: an id is not storable (nothing was read).
        """
        ...


PROTOCOL_METHODS: tuple[str, ...] = (
    "create",
    "append",
    "load",
    "list",
    "has",
    "delete",
    "update",
    "claim",
    "release",
    "aclose",
)


class IncrementalRead(Protocol):
    """The optional methods that read a log's tail without reading it all."""

    async def load_after(self, session_id: str, after: int, limit: int) -> list[bytes]:
        """The durable records with seq > `after`, at most `limit` (see [load-after]).

        Raises:
            ValueError: `after` < -1 or `limit` < 1 (nothing was read).
            SessionNotFoundError: nothing is stored under this id.
            SessionCorruptError: acknowledged data it read is damaged.
            UnsupportedFormatError: the stored format is newer than the code.
        """
        ...

    async def last_seq(self, session_id: str) -> int:
        """The seq of the session's last durable record, `-1` for none.

        Raises:
            SessionNotFoundError: nothing is stored under this id.
        """
        ...


OPTIONAL_METHODS: tuple[str, ...] = (
    "held",
    "load_after",
    "last_seq",
    "wait_for_commit",
)
"""Methods a backend may lack (older backends); if present, they are async."""


def validate_backend(backend: object, *, name: str = "backend") -> SessionPersistence:
    """Check that `backend` implements `SessionPersistence` with async methods.

    `runtime_checkable` would check names only; this also checks each method
    is a coroutine function, so a sync method fails at activation rather than
    at the first flush.

    Raises:
        ConfigurationError: a method is missing or not `async`.
    """
    problems: list[str] = []
    for method in PROTOCOL_METHODS:
        fn = getattr(backend, method, None)
        if fn is None:
            problems.append(f"missing {method}()")
        elif not inspect.iscoroutinefunction(fn):
            problems.append(f"{method}() is not async")
    for method in OPTIONAL_METHODS:
        fn = getattr(backend, method, None)
        if fn is not None and not inspect.iscoroutinefunction(fn):
            problems.append(f"{method}() is not async")
    if problems:
        raise ConfigurationError(
            f"persistence backend {name!r} ({type(backend).__qualname__}) does not "
            f"implement SessionPersistence: {', '.join(problems)}"
        )
    return cast("SessionPersistence", backend)


def check_read_range(after: int, limit: int) -> None:
    """Refuse a `load_after` range before anything is read.

    Raises:
        ValueError: `after` < -1 or `limit` < 1.
    """
    if after < -1:
        raise ValueError(f"after must be -1 (from the start) or a seq, not {after}")
    if limit < 1:
        raise ValueError(f"limit must be positive, not {limit}")


__getattr__ = renamed(
    "turnkeep.persistence",
    {
        "read_after": "turnkeep.eventreads:read_after",
        "appends_summary": "turnkeep.capabilities:appends_summary",
        "delete_session": "turnkeep.capabilities:delete_session",
        "filters_natively": "turnkeep.capabilities:filters_natively",
        "probe_held": "turnkeep.capabilities:probe_held",
        "last_durable_seq": "turnkeep.eventreads:last_durable_seq",
    },
)
