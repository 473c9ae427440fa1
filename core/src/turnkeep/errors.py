"""Every error turnkeep raises: one tree under `TurnkeepError`.

Each class carries a stable `code` to route on (never parse messages), and
mixes in the builtin whose meaning fits, so `except LookupError` still works
for callers that do not know turnkeep. The root is in `turnkeep.errorbase`
and the errors of turns in `turnkeep.turnerrors`; both are re-exported here,
the one module callers import. Backends wrap driver errors
(`OSError`, `sqlite3.Error`, `psycopg.Error`) in these with `raise ... from`.
Messages say what happened, to which session, and what to do.
"""

from __future__ import annotations

from turnkeep.errorbase import TurnkeepError
from turnkeep.turnerrors import (
    CallNotFoundError,
    ContextMismatchError,
    EffectBlockedError,
    EffectNotUnknownError,
    EffectReconcileError,
    ManifestDriftError,
    ManifestHookError,
    ModelError,
    ToolError,
    TurnError,
    TurnInProgressError,
    TurnNotDurableError,
)

__all__ = [
    "CallNotFoundError",
    "CancelUnsupportedError",
    "ConfigurationError",
    "ContextMismatchError",
    "EffectBlockedError",
    "EffectNotUnknownError",
    "EffectReconcileError",
    "EventDecodeError",
    "EventNotSerializableError",
    "EventRejectedError",
    "EventTooLargeError",
    "EventTypeError",
    "FlushError",
    "FlushOutcomeUnknownError",
    "FlushSessionDeletedError",
    "HookContractError",
    "ImportInputError",
    "InvalidCursorError",
    "InvalidForkPointError",
    "InvalidListFilterError",
    "InvalidSeedError",
    "InvalidSessionIdError",
    "InvalidSummaryError",
    "LossyPayloadError",
    "ManifestDriftError",
    "ManifestHookError",
    "ModelError",
    "PersistenceConflictError",
    "PersistenceError",
    "PersistenceNotConfiguredError",
    "PluginDisposeError",
    "PluginNotFoundError",
    "PluginReloadError",
    "RedactionError",
    "SequenceError",
    "SessionClosedError",
    "SessionCorruptError",
    "SessionDeletedError",
    "SessionExistsError",
    "SessionFencedError",
    "SessionHeldError",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionOwnershipError",
    "StorageError",
    "ToolError",
    "TurnError",
    "TurnInProgressError",
    "TurnNotDurableError",
    "TurnkeepError",
    "UnknownBackendError",
    "UnknownEventTypeError",
    "UnsafePathError",
    "UnsupportedFormatError",
]


# -- configuration and plugins -------------------------------------------------


class ConfigurationError(TurnkeepError, ValueError):
    """The configuration is invalid: unknown keys, wrong types, bad values."""

    code = "configuration"


class PersistenceNotConfiguredError(ConfigurationError):
    """An operation needs a persistence backend and none is active."""

    code = "persistence-not-configured"


class UnknownBackendError(ConfigurationError, LookupError):
    """Configuration names a persistence backend that no plugin registered."""

    code = "unknown-backend"


class PersistenceConflictError(ConfigurationError):
    """Two plugins registered a persistence backend under the same name."""

    code = "persistence-conflict"


class PluginNotFoundError(ConfigurationError, LookupError):
    """A plugin named in configuration or a call is not installed/registered."""

    code = "plugin-not-found"


class PluginReloadError(TurnkeepError):
    """A hot reload could not import or start the new plugin (the old one stays)."""

    code = "plugin-reload"


class PluginDisposeError(TurnkeepError):
    """A plugin's `plugin_dispose` failed (the others were still disposed)."""

    code = "plugin-dispose"


class HookContractError(TurnkeepError, TypeError):
    """A hook implementation broke its calling convention (returned an awaitable)."""

    code = "hook-contract"


# -- sessions and events -------------------------------------------------------


class InvalidSessionIdError(TurnkeepError, ValueError):
    """A session id is empty, contains NUL, is not text, or is too long."""

    code = "invalid-session-id"


class SessionNotFoundError(TurnkeepError, LookupError):
    """No session with this id exists (live, or in the backend)."""

    code = "session-not-found"


class SessionExistsError(TurnkeepError, ValueError):
    """A session with this id already exists."""

    code = "session-exists"


class SessionClosedError(TurnkeepError, RuntimeError):
    """The session was closed; it takes no more events."""

    code = "session-closed"


class InvalidForkPointError(TurnkeepError, ValueError):
    """A fork point lies outside the source session's log."""

    code = "invalid-fork-point"


class InvalidCursorError(TurnkeepError, ValueError):
    """A `list` cursor was not produced by this backend's `list`."""

    code = "invalid-cursor"


class InvalidListFilterError(TurnkeepError, ValueError):
    """A `list` filter names an unknown status or a time that is not one."""

    code = "invalid-list-filter"


class InvalidSummaryError(TurnkeepError, ValueError):
    """Summary text that no backend could store (not valid Unicode)."""

    code = "invalid-summary"


class InvalidSeedError(TurnkeepError, ValueError):
    """Seed events for a new session are not a contiguous log from seq 0."""

    code = "invalid-seed"


class EventTypeError(TurnkeepError, TypeError):
    """A payload was appended without a type, and its class names none."""

    code = "event-type"


class EventRejectedError(TurnkeepError, ValueError):
    """An event was refused at its source, before anything buffered it.

    Attributes:
        event_type: the `type` of the refused event.
    """

    code = "event-rejected"

    def __init__(self, message: str, *, event_type: str) -> None:
        super().__init__(message)
        self.event_type = event_type


class EventNotSerializableError(EventRejectedError, TypeError):
    """An event's data cannot be encoded as JSON."""

    code = "event-not-serializable"


class LossyPayloadError(EventNotSerializableError):
    """An event's data holds a value storage would give back as something else.

    A `set`, `tuple`, `datetime`, `bytes`, `NaN` or non-text key where the
    schema says `Any` (`tool/call` arguments): stored as JSON, the loaded
    event would differ. Typed `bytes`/`datetime` fields are stored exactly.

    Attributes:
        path: where the value is, e.g. `data.arguments.when`.
    """

    code = "lossy-payload"

    def __init__(self, message: str, *, event_type: str, path: str) -> None:
        super().__init__(message, event_type=event_type)
        self.path = path


class EventTooLargeError(EventRejectedError):
    """An event's encoded size exceeds the configured maximum."""

    code = "event-too-large"


class RedactionError(EventRejectedError):
    """A redaction hook failed, so the event was refused rather than stored raw."""

    code = "redaction"


class EventDecodeError(TurnkeepError, ValueError):
    """Stored event bytes could not be decoded into an event."""

    code = "event-decode"


class UnknownEventTypeError(EventDecodeError):
    """A stored event has a type no plugin registered, and is not ignorable."""

    code = "unknown-event-type"


class ImportInputError(TurnkeepError, ValueError):
    """A file given to `turnkeep import` cannot be read as a conversation.

    The message names the file and line (not JSON or UTF-8, empty, nested
    too deeply, a wrong shape); nothing was stored.

    Attributes:
        path: the file as the user named it (`-` for stdin), when known.
        line: the 1-based line of the problem, when known.
        item: the index of the offending item in the input, when one is.
    """

    code = "import-input"

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        item: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.line = line
        self.item = item


class UnsafePathError(TurnkeepError, OSError):
    """A path the user named is refused as a place to write (R21).

    A symbolic link, a file that is neither regular nor a pipe or terminal,
    or a folder reached through someone else's link in a shared sticky folder
    (`/tmp`); nothing was written. The message names the path.
    """

    code = "unsafe-path"


# -- persistence ---------------------------------------------------------------


class PersistenceError(TurnkeepError):
    """A persistence backend could not do what was asked."""

    code = "persistence"


class StorageError(PersistenceError, OSError):
    """The storage underneath a backend failed (I/O, driver, server).

    A write that raised this was not acknowledged. File backends poison the
    session's handle (no retry of fsync on it; recovery is a reopen and a
    load); backends whose storage can say what landed (databases) let a retry
    either land or report, through `SequenceError`, how much already had.
    """

    code = "storage"


class CancelUnsupportedError(PersistenceError):
    """The backend cannot record a cancel request for another process."""

    code = "cancel-unsupported"


class SequenceError(PersistenceError, ValueError):
    """An append did not start at the stored next seq (a re-append or a gap).

    Attributes:
        session_id: the session.
        expected: the stored next seq.
        got: the first seq of the refused batch.
    """

    code = "sequence"

    def __init__(self, message: str, *, session_id: str, expected: int, got: int):
        super().__init__(message)
        self.session_id = session_id
        self.expected = expected
        self.got = got


class SessionCorruptError(PersistenceError):
    """Damage inside the acknowledged log: the session cannot be loaded.

    Attributes:
        session_id: the session.
        offset: byte offset (or row/seq position) of the first bad record,
            when the backend can tell.
    """

    code = "session-corrupt"

    def __init__(
        self, message: str, *, session_id: str, offset: int | None = None
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.offset = offset


class UnsupportedFormatError(PersistenceError):
    """Stored data has a format or schema version this code cannot read."""

    code = "unsupported-format"


class SessionOwnershipError(PersistenceError):
    """Another process owns (or took over) the right to write this session."""

    code = "session-ownership"


class SessionLockedError(SessionOwnershipError):
    """Another live process is driving this session right now."""

    code = "session-locked"


class SessionHeldError(SessionLockedError):
    """`delete` refused: another live owner holds the session right now.

    Nothing was deleted. Stop that owner, or delete with `force=True`
    (`turnkeep rm --force`), which fences it out. `session_id`: the session.
    """

    code = "session-held"

    def __init__(self, session_id: str, holder: str = "another live owner") -> None:
        super().__init__(
            f"session {session_id!r} is held by {holder}; nothing was deleted. "
            "Stop that owner first, or force it with delete(session_id, "
            "force=True) (`turnkeep rm --force`), which fences the holder out"
        )
        self.session_id = session_id


class SessionFencedError(SessionOwnershipError):
    """A takeover fenced this process out: nothing written; reload to go on."""

    code = "session-fenced"


class SessionDeletedError(SessionFencedError):
    """The session was deleted (by a forced delete) while this instance held it.

    Nothing was written, and nothing is stored under the id: what this
    process still holds is all that is left.

    Attributes:
        session_id: the session.
    """

    code = "session-deleted"

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session {session_id!r} was deleted from the store (a forced "
            "delete) while this instance held it; nothing was written, and "
            "there is nothing left to reload"
        )
        self.session_id = session_id


class FlushError(PersistenceError):
    """A flush could not make the session's buffered events durable.

    The events stay buffered, in order; the session is *unsettled* and the
    next flush retries them.

    Attributes:
        session_id: the session.
    """

    code = "flush"

    def __init__(self, message: str, *, session_id: str) -> None:
        super().__init__(message)
        self.session_id = session_id


class FlushOutcomeUnknownError(FlushError):
    """A flush may or may not be durable: its outcome could not be learned.

    Its commit's acknowledgement was lost (a dropped connection, a failed
    sync), or a takeover raced it and may have copied it into the new
    owner's log. The flush is atomic: `first_seq`..`last_seq` are all in the
    log or none are, and only reading the log tells. Never store them
    elsewhere on the strength of this error: resume (or load) and look.
    Backends raise it whenever they cannot tell, so their other `append`
    errors mean nothing of the flush was stored.

    Attributes:
        session_id: the session.
        first_seq: the first seq of the flush whose outcome is unknown.
        last_seq: its last seq.
        fenced: this process lost the writer role as well (a takeover), so
            it can store nothing more of the session; otherwise a later
            flush of the same events settles the question (it lands, or the
            backend reports through `SequenceError` that they had landed).
    """

    code = "flush-outcome-unknown"

    def __init__(
        self,
        message: str,
        *,
        session_id: str,
        first_seq: int,
        last_seq: int,
        fenced: bool = False,
    ) -> None:
        super().__init__(message, session_id=session_id)
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.fenced = fenced


class FlushSessionDeletedError(FlushError):
    """A flush found its session deleted from the store (a forced delete).

    Nothing more can be stored under this id; closing the session reports
    what stayed unsaved. Its cause is the backend's `SessionDeletedError`.
    """

    code = "flush-session-deleted"
