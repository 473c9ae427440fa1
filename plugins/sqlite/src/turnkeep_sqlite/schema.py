"""The database schema, its migrations, and opening a connection safely.

Schema version lives in `PRAGMA user_version` and the file is marked as
turnkeep's with `PRAGMA application_id`. Migrations are explicit steps; the
pending ones are applied together in one `BEGIN IMMEDIATE` transaction that
re-reads the version first, so two processes opening a new file at once
apply each step exactly once; every step is logged in `schema_migrations`.
A database newer than this code is refused before anything writes to it:
the version is read from the file header (or through a read-only
connection when a WAL is pending) before the writer connection switches
journal modes or migrates. Only the writer
migrates: readers open the file read-only (`mode=ro`) and report the version
they find (`reader_schema`), so a read changes nothing on disk.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar
from urllib.parse import quote

from turnkeep.backendkit import is_turn_end_type, newer_schema
from turnkeep.errors import ConfigurationError, StorageError, UnsupportedFormatError
from turnkeep_sqlite.config import SqliteConfig
from turnkeep_sqlite.files import read_header
from turnkeep_sqlite.objects import refuse_foreign_triggers
from turnkeep_sqlite.sqlerrors import is_busy, primary_code, storage_error

__all__ = [
    "APPLICATION_ID",
    "SCHEMA_VERSION",
    "check_schema_version",
    "connect_reader",
    "connect_writer",
    "empty_database",
    "reader_schema",
    "retry_busy",
]

T = TypeVar("T")

log = logging.getLogger("turnkeep_sqlite")

SCHEMA_VERSION: Final = 7
"""The schema this code writes, and the newest it reads.

1: sessions, events, schema_migrations. 2: `sessions.turns` and
`sessions.size` (the log's `turn/end` events and event bytes), filled from
the events of existing sessions. 3: the index `sessions_by_status`, which
serves `list` filtered by status. 4: the table `cancel_requests` (each
session's latest request to cancel its running turn, from any process).
5: the table `audit` (the audit trail: each session's records, deleted
with it, and the store's log, `session_key` NULL). 6: the generated column
`sessions.listing` (a session's metadata as the JSON `list` returns; the
table is rebuilt with it), carried by both listing indexes so a page is
read from an index alone. 7: `events.span` (how many seqs a row stands
for: 1 for an event, more for a packed record, `turnkeep.packs`).
"""

APPLICATION_ID: Final = 0x544B5351
"""`PRAGMA application_id` of a turnkeep database ("TKSQ")."""

_STATUSES: Final = "('active', 'idle', 'interrupted', 'failed', 'closed')"

_Step = Callable[[sqlite3.Connection], None]


def _statements(*statements: str) -> _Step:
    """A migration step that runs `statements` in order."""

    def run(conn: sqlite3.Connection) -> None:
        for statement in statements:
            conn.execute(statement)

    return run


def _turns_and_size(conn: sqlite3.Connection) -> None:
    """Version 2: the log's numbers beside `next_seq`, filled from the events.

    Adds `turns` (events of type `turn/end`) and `size` (their stored bytes,
    summed) to `sessions` unless they are there, then computes both for every
    session from its events below `next_seq`. Run inside the migration's
    transaction, so it lands whole or not at all, and running it again
    computes the same values.
    """
    columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    for column in ("turns", "size"):
        if column not in columns:
            conn.execute(
                f"ALTER TABLE sessions ADD COLUMN {column} INTEGER NOT NULL "
                f"DEFAULT 0 CHECK (typeof({column}) = 'integer' AND {column} >= 0)"
            )
    # Which types end a turn is core's to say, not SQL's: ask the kit per row.
    conn.create_function("turnkeep_turn_end", 1, is_turn_end_type, deterministic=True)
    conn.execute(
        "UPDATE sessions SET (turns, size) = ("
        "SELECT coalesce(sum(turnkeep_turn_end(type)), 0), "
        "coalesce(sum(length(raw)), 0) "
        "FROM events WHERE session_key = sessions.key AND seq < sessions.next_seq)"
    )


LISTING: Final = (
    "json_object("
    "'header', json_object('id', id, 'format_version', format_version, "
    "'created_at', created_at, 'cwd', cwd, 'parent', CASE WHEN parent_id IS NULL "
    "THEN NULL ELSE json_object('session_id', parent_id, 'seq', parent_seq) END), "
    "'summary', json_object('updated_at', updated_at, 'title', title, "
    "'first_prompt', first_prompt, 'status', status, 'event_count', next_seq, "
    "'turns', turns, 'size', size))"
)
"""`sessions.listing`: the row as `turnkeep.meta.SessionMeta` encodes it."""


_SESSION_COLUMNS: Final = (
    "key, id, format_version, created_at, cwd, parent_id, parent_seq, updated_at, "
    "title, first_prompt, status, next_seq, generation, owner_token, owner_info, "
    "turns, size"
)
"""Every stored column of `sessions` before version 6, in table order."""

_SESSIONS_V6: Final = (
    """CREATE TABLE sessions_v6 (
    key            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    format_version INTEGER NOT NULL CHECK (typeof(format_version) = 'integer'),
    created_at     INTEGER NOT NULL,
    cwd            TEXT,
    parent_id      TEXT,
    parent_seq     INTEGER,
    updated_at     INTEGER NOT NULL DEFAULT 0 CHECK (typeof(updated_at) = 'integer'),
    title          TEXT,
    first_prompt   TEXT,
    status         TEXT NOT NULL DEFAULT 'active' CHECK (status IN """
    + _STATUSES
    + """),
    next_seq       INTEGER NOT NULL DEFAULT 0
                   CHECK (typeof(next_seq) = 'integer' AND next_seq >= 0),
    generation     INTEGER NOT NULL DEFAULT 0,
    owner_token    TEXT,
    owner_info     BLOB,
    turns          INTEGER NOT NULL DEFAULT 0
                   CHECK (typeof(turns) = 'integer' AND turns >= 0),
    size           INTEGER NOT NULL DEFAULT 0
                   CHECK (typeof(size) = 'integer' AND size >= 0),
    listing        TEXT GENERATED ALWAYS AS ("""
    + LISTING
    + """) STORED
)"""
)


def _listing(conn: sqlite3.Connection) -> None:
    """Version 6: `sessions.listing`, and both listing indexes carrying it.

    A listing handed to Python as 13 columns a row spent most of its time
    converting values (one Python object each); as one JSON text decoded
    by msgspec it costs about half. The column is generated, so no write
    path can let it drift from the columns it is made of, and the indexes
    hold it, so a page never computes it nor visits the table.

    `STORED`, not `VIRTUAL`: SQLite then computes it once per write of the
    row, where a virtual one is computed again for every index entry it
    replaces and adds (measured: a flush's `UPDATE` of the row cost 1.3x
    with it stored, 1.75x virtual). A stored generated column cannot be
    added by `ALTER TABLE`, so the table is rebuilt, as SQLite's manual
    describes: a new table, the rows copied with their keys (which the
    other tables reference), the old one dropped (with foreign keys off,
    see `_migrate`, so nothing cascades) and the new one renamed. A
    refusal rolls the migration's transaction back: the file stays as it
    was.

    Raises:
        UnsupportedFormatError: this SQLite has no generated columns (before
            3.31) or no JSON functions (built without them).
        StorageError: a session row holds a BLOB where text belongs (an
            edited file), which no JSON value can hold.
    """
    require_sqlite(conn)
    if conn.execute("PRAGMA foreign_keys").fetchone()[0]:
        # Dropping the old table would delete every row that references it.
        raise StorageError("schema step 6 must run with foreign keys off")
    columns = {row[1] for row in conn.execute("PRAGMA table_xinfo(sessions)")}
    if "listing" not in columns:
        _refuse_blobs(conn)
        conn.execute("DROP TABLE IF EXISTS sessions_v6")
        conn.execute(_SESSIONS_V6)
        conn.execute(
            f"INSERT INTO sessions_v6 ({_SESSION_COLUMNS}) "  # noqa: S608 - constant column list
            f"SELECT {_SESSION_COLUMNS} FROM sessions"
        )
        conn.execute("DROP TABLE sessions")
        conn.execute("ALTER TABLE sessions_v6 RENAME TO sessions")
    conn.execute("DROP INDEX IF EXISTS sessions_recent")
    conn.execute("DROP INDEX IF EXISTS sessions_by_status")
    conn.execute(
        "CREATE INDEX sessions_recent ON sessions (updated_at DESC, id, listing) "
        "WHERE next_seq > 0"
    )
    conn.execute(
        "CREATE INDEX sessions_by_status "
        "ON sessions (status, updated_at DESC, id, listing) WHERE next_seq > 0"
    )


_MIN_SQLITE: Final = (3, 31, 0)
"""The oldest SQLite with generated columns (schema version 6)."""


def require_sqlite(conn: sqlite3.Connection | None = None) -> None:
    """Refuse an SQLite that cannot keep schema version 6.

    Without `conn`, its version only (enough for a reader, which never
    computes `sessions.listing`); with it, its JSON functions too.

    Raises:
        UnsupportedFormatError: it cannot, and says which to use instead.
    """
    missing = None
    if sqlite3.sqlite_version_info < _MIN_SQLITE:
        missing = "has no generated columns"
    elif conn is not None:
        try:
            conn.execute("SELECT json_object('a', 1)").fetchone()
        except sqlite3.OperationalError:
            missing = "has no JSON functions"
    if missing is not None:
        raise UnsupportedFormatError(
            f"the SQLite library this Python uses ({sqlite3.sqlite_version}) "
            f"{missing}, which turnkeep-sqlite's schema version 6 needs; "
            "nothing was changed. Use a Python whose sqlite3 module is built "
            "on SQLite 3.31 or newer with its JSON functions (any from 3.38 on)."
        )


def _refuse_blobs(conn: sqlite3.Connection) -> None:
    """Refuse rows whose text columns hold BLOBs (`json_object` cannot)."""
    found = conn.execute(
        "SELECT quote(id) FROM sessions WHERE 'blob' IN (typeof(id), typeof(cwd), "
        "typeof(parent_id), typeof(title), typeof(first_prompt)) LIMIT 5"
    ).fetchall()
    if found:
        names = ", ".join(row[0] for row in found)
        raise StorageError(
            f"session row(s) {names} hold a BLOB in a text column (id, cwd, "
            "parent_id, title or first_prompt): the file was edited. Schema "
            "version 6 cannot be made while they do; nothing was changed. Set "
            "those values to text or NULL (or delete the rows), then open the "
            "store again."
        )


# One step per version, each run in the migration's one transaction
# (`executescript` would commit early).
_MIGRATIONS: Final[tuple[tuple[int, _Step], ...]] = (
    (
        1,
        _statements(
            """CREATE TABLE IF NOT EXISTS sessions (
                key            INTEGER PRIMARY KEY,
                id             TEXT NOT NULL UNIQUE,
                format_version INTEGER NOT NULL
                               CHECK (typeof(format_version) = 'integer'),
                created_at     INTEGER NOT NULL,
                cwd            TEXT,
                parent_id      TEXT,
                parent_seq     INTEGER,
                updated_at     INTEGER NOT NULL DEFAULT 0
                               CHECK (typeof(updated_at) = 'integer'),
                title          TEXT,
                first_prompt   TEXT,
                status         TEXT NOT NULL DEFAULT 'active'
                               CHECK (status IN """
            + _STATUSES
            + """),
                next_seq       INTEGER NOT NULL DEFAULT 0
                               CHECK (typeof(next_seq) = 'integer' AND next_seq >= 0),
                generation     INTEGER NOT NULL DEFAULT 0,
                owner_token    TEXT,
                owner_info     BLOB
            )""",
            # Serves `list`: newest first, ties by id, only visible sessions.
            """CREATE INDEX IF NOT EXISTS sessions_recent
                ON sessions (updated_at DESC, id) WHERE next_seq > 0""",
            """CREATE TABLE IF NOT EXISTS events (
                session_key INTEGER NOT NULL
                            REFERENCES sessions (key) ON DELETE CASCADE,
                seq         INTEGER NOT NULL CHECK (seq >= 0),
                type        TEXT NOT NULL,
                time        INTEGER NOT NULL,
                raw         BLOB NOT NULL CHECK (typeof(raw) = 'blob'),
                PRIMARY KEY (session_key, seq)
            )""",
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                version    INTEGER NOT NULL,
                applied_at INTEGER NOT NULL,
                pid        INTEGER NOT NULL
            )""",
        ),
    ),
    (2, _turns_and_size),
    (
        3,
        _statements(
            # Serves `list(where=...)` by status: one index range per status,
            # newest first, so a page of a rare status reads that page only.
            """CREATE INDEX IF NOT EXISTS sessions_by_status
                ON sessions (status, updated_at DESC, id) WHERE next_seq > 0""",
        ),
    ),
    (
        4,
        _statements(
            """CREATE TABLE IF NOT EXISTS cancel_requests (
                session_key  INTEGER PRIMARY KEY
                             REFERENCES sessions (key) ON DELETE CASCADE,
                number       INTEGER NOT NULL CHECK (number >= 1),
                reason       TEXT NOT NULL,
                requested_at INTEGER NOT NULL
            )""",
        ),
    ),
    (
        5,
        _statements(
            """CREATE TABLE IF NOT EXISTS audit (
                key         INTEGER PRIMARY KEY,
                session_key INTEGER REFERENCES sessions (key) ON DELETE CASCADE,
                number      INTEGER NOT NULL CHECK (number >= 1),
                at          INTEGER NOT NULL,
                action      TEXT NOT NULL,
                session_id  TEXT,
                reason      TEXT NOT NULL,
                host        TEXT NOT NULL,
                pid         INTEGER NOT NULL,
                detail      TEXT NOT NULL
            )""",
            # One range per scope (0: the store's log; session keys are >= 1),
            # and no two records of a scope with one number.
            """CREATE UNIQUE INDEX IF NOT EXISTS audit_by_scope
                ON audit (coalesce(session_key, 0), number)""",
            # What deleting a session looks up (its records go with it): the
            # expression index above cannot serve the foreign key's cascade.
            """CREATE INDEX IF NOT EXISTS audit_by_session ON audit (session_key)""",
        ),
    ),
    (6, _listing),
    (
        7,
        _statements(
            # A packed record stands for seqs `seq` .. `seq + span - 1`.
            """ALTER TABLE events ADD COLUMN span INTEGER NOT NULL DEFAULT 1
                CHECK (typeof(span) = 'integer' AND span >= 1)""",
        ),
    ),
)

_CANTOPEN: Final = 14
_NOTADB: Final = 26

_SYNC_LEVELS: Final = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}


def retry_busy(operation: Callable[[], T], *, deadline: float, path: Path) -> T:
    """Run `operation`, retrying while SQLite reports a lock held elsewhere.

    The connection's own busy timeout is kept short and this loop polls with
    small jittered pauses instead, so waiters notice a released lock within
    about a millisecond (SQLite's busy handler sleeps up to 100 ms).

    Raises:
        StorageError: still busy at `deadline` (`time.monotonic()` seconds).
    """
    pause = 0.0002
    while True:
        try:
            return operation()
        except sqlite3.Error as exc:
            if not is_busy(exc):
                raise
            if time.monotonic() >= deadline:
                raise StorageError(
                    f"SQLite database {path}: another process kept it locked "
                    "past the busy timeout; nothing was written. Retry later, "
                    "or raise busy_timeout_ms."
                ) from exc
        time.sleep(random.uniform(0, pause))  # noqa: S311 - jitter, not security
        pause = min(pause * 2, 0.002)


def connect_writer(
    config: SqliteConfig, *, pid: int, probe_header: bool
) -> sqlite3.Connection:
    """Open the writer connection: check the version, set and verify pragmas, migrate.

    With `probe_header` (only while no connection of this process uses the
    file), a newer or foreign file is refused before anything can change it;
    otherwise the migration transaction's own check refuses it.

    Raises:
        UnsupportedFormatError: the database is of a newer schema, or this
            SQLite cannot keep the current one (`require_sqlite`).
        ConfigurationError: the settings cannot be made durable.
        StorageError: SQLite failed, the file is not turnkeep's, or it holds
            triggers turnkeep did not create (`turnkeep_sqlite.objects`).
    """
    path = config.path
    deadline = time.monotonic() + config.busy_timeout_ms / 1000
    require_sqlite()
    try:
        if probe_header:
            _probe_version(path)
    except sqlite3.Error as exc:
        raise storage_error(exc, "reading the schema version", path) from exc
    conn = _connect(path)
    try:
        retry_busy(lambda: _enable_wal(conn, path), deadline=deadline, path=path)
        _set_synchronous(conn, config)
        conn.execute("PRAGMA foreign_keys = ON")
        _enable_secure_delete(conn, path)
        conn.execute("PRAGMA journal_size_limit = 67108864")
        conn.execute("PRAGMA fullfsync = ON")  # macOS: F_FULLFSYNC; no-op elsewhere
        conn.execute("PRAGMA checkpoint_fullfsync = ON")
        retry_busy(lambda: _migrate(conn, path, pid=pid), deadline=deadline, path=path)
        require_sqlite(conn)  # a file at version 6 already: its writes need JSON
        refuse_foreign_triggers(conn, path, allow=config.allow_foreign_triggers)
    except sqlite3.Error as exc:
        conn.close()
        raise storage_error(exc, "opening", path) from exc
    except BaseException:
        conn.close()
        raise
    return conn


def connect_reader(
    config: SqliteConfig, *, probe_header: bool
) -> tuple[sqlite3.Connection, bool]:
    """Open a reader connection (`query_only`) with bounded value sizes.

    Where the user can write the file and its folder, it is an ordinary
    connection, so closing the last one removes the `-wal`/`-shm` as the
    writer's does and a read leaves no file behind; elsewhere it is opened
    `mode=ro`, which needs no write access at all. Neither migrates nor
    changes a byte of the file. With `probe_header` (only while no
    connection of this process uses the file), a newer or foreign file is
    refused before SQLite opens it. Returns the connection and whether it
    is `immutable` (see `_immutable_is_safe`): such a connection takes no
    locks and must be used for one read only.

    Raises:
        UnsupportedFormatError: the database is of a newer schema, or this
            SQLite cannot keep the current one (`require_sqlite`).
        StorageError: the file cannot be opened for reading, or is not
            turnkeep's.
    """
    path = config.path
    deadline = time.monotonic() + config.busy_timeout_ms / 1000
    require_sqlite()
    writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    immutable = False
    try:
        if probe_header:
            try:
                _probe_version(path)
            except sqlite3.Error as exc:
                # Reading a pending WAL needs its index, as below.
                if not writable and primary_code(exc) == _CANTOPEN:
                    _immutable_is_safe(path)  # says why, when the WAL holds data
                raise
        conn = _connect_reader(path, config, read_only=not writable)
        try:
            # The first read opens the WAL index (`-shm`): where that fails,
            # it fails here, not in the middle of a caller's read.
            retry_busy(
                lambda: conn.execute("SELECT count(*) FROM sqlite_master").fetchone(),
                deadline=deadline,
                path=path,
            )
        except sqlite3.Error as exc:
            conn.close()
            if writable or primary_code(exc) != _CANTOPEN:
                raise
            if not _immutable_is_safe(path):
                raise
            conn = _connect_reader(path, config, read_only=True, immutable=True)
            immutable = True
    except sqlite3.Error as exc:
        if primary_code(exc) == _NOTADB:
            raise StorageError(
                f"{path} is not an SQLite database; point the sqlite backend's "
                "`path` at a new file or at a turnkeep database"
            ) from exc
        raise storage_error(exc, "opening a reader", path) from exc
    return conn, immutable


def _connect_reader(
    path: Path, config: SqliteConfig, *, read_only: bool, immutable: bool = False
) -> sqlite3.Connection:
    if read_only:
        query = "mode=ro&immutable=1" if immutable else "mode=ro"
        conn = sqlite3.connect(
            f"file:{quote(str(path))}?{query}",
            uri=True,
            timeout=0.002,  # retry_busy polls; see its docstring
            isolation_level=None,
            check_same_thread=False,  # used by one thread at a time, handed over
            cached_statements=64,
        )
    else:
        conn = _connect(path)
    try:
        conn.execute("PRAGMA query_only = ON")
        # Bounded reads (R15): a stored value over the limit fails the query
        # with SQLITE_TOOBIG instead of being allocated.
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, read_limit(config))
    except BaseException:
        conn.close()
        raise
    return conn


def _immutable_is_safe(path: Path) -> bool:
    """Whether a WAL file that `mode=ro` cannot open may be read as immutable.

    A WAL-mode file needs its `-shm` (and `-wal`) beside it; in a folder the
    user cannot write, SQLite cannot create them and `mode=ro` fails with
    SQLITE_CANTOPEN. `immutable=1` then reads the main file alone, without
    locks or change detection. That is safe only because nobody can be
    writing: a WAL writer must create those same files in that same
    read-only folder. It is *not* safe when a `-wal` holds frames, because
    immutable reads ignore the WAL and would miss acknowledged flushes: that
    case is refused.

    Raises:
        StorageError: the folder is read-only and a `-wal` holds data.
    """
    if os.access(path.parent, os.W_OK):
        return False  # a writable folder: the failure is something else
    # SQLite opens the WAL index of a `mode=ro` connection from a `-shm`
    # that exists (read-only), so only a missing one gets here.
    if not _wal_bytes(path):
        return True
    raise StorageError(
        f"SQLite database {path}: its write-ahead log {path}-wal holds data "
        "not yet copied into the file, and the folder is read-only, so SQLite "
        "cannot read that log; make the folder writable once and open the "
        f"store (or run sqlite3 {path} 'PRAGMA wal_checkpoint(TRUNCATE)'), "
        "then it can be read read-only (nothing was changed)"
    )


def _wal_bytes(path: Path) -> int:
    """The size of the `-wal` beside `path` (0: absent, so no frames)."""
    try:
        return os.stat(f"{path}-wal", follow_symlinks=False).st_size
    except FileNotFoundError:
        return 0
    except OSError:
        return 1  # cannot tell: assume frames, the safe answer for both callers


def reader_schema(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version a reader finds, in its read transaction.

    Returns `SCHEMA_VERSION` for a database this code reads, 0 for an empty
    (never migrated) file, and an older version for one that still needs
    migrating, which only the writer may do.

    Raises:
        UnsupportedFormatError: the schema is newer than `SCHEMA_VERSION`.
        StorageError: the file belongs to another application.
    """
    version, app_id, count = conn.execute(
        "SELECT (SELECT user_version FROM pragma_user_version), "
        "(SELECT application_id FROM pragma_application_id), "
        "(SELECT count(*) FROM sqlite_master)"
    ).fetchone()
    if app_id not in (0, APPLICATION_ID):
        raise _foreign(path, f"application_id {app_id:#x}")
    if version > SCHEMA_VERSION:
        raise _newer(path, version)
    if version == 0 and count and app_id != APPLICATION_ID:
        raise _foreign(path, "tables of another application")
    return version


def empty_database(config: SqliteConfig) -> sqlite3.Connection:
    """An in-memory database of the current schema, holding no session.

    Reads of a store whose file does not exist yet (or was never migrated)
    run against it, so they answer exactly as an empty store would, without
    creating the file.
    """
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    _migrate(conn, Path(":memory:"), pid=os.getpid())
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, read_limit(config))
    conn.execute("PRAGMA query_only = ON")
    return conn


READ_MARGIN: Final = 4096
"""Bytes a reader's values may take beyond `max_event_bytes`.

The limit binds every string SQLite hands over, the schema's own text
included (the `sessions` table's is ~1,500 bytes since step 6), so even
the smallest `max_event_bytes` leaves room to open the file and list it.
"""


def read_limit(config: SqliteConfig) -> int:
    """`SQLITE_LIMIT_LENGTH` of a reader connection (R15)."""
    return config.max_event_bytes + READ_MARGIN


def check_schema_version(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse to go on if another process migrated the file past this code.

    Raises:
        UnsupportedFormatError: the schema is newer than `SCHEMA_VERSION`.
    """
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise _newer(path, version)


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(
        path,
        timeout=0.002,  # retry_busy polls; see its docstring
        isolation_level=None,  # transactions are explicit (BEGIN IMMEDIATE)
        check_same_thread=False,  # used by one thread at a time, handed over
        cached_statements=64,
    )


def _probe_version(path: Path) -> None:
    """Refuse a newer or foreign database before anything may write to it.

    Switching the journal mode or migrating would change the file, so the
    version is read first: from the file header when there is no `-wal`
    (then the main file is all there is), else through a read-only
    connection, which reads the WAL too and never checkpoints.
    """
    header = read_header(path)
    if header is None:
        return  # a new, empty file
    if header.application_id not in (0, APPLICATION_ID):
        raise _foreign(path, f"application_id {header.application_id:#x}")
    version, app_id = header.user_version, header.application_id
    tables = header.has_tables
    if _wal_bytes(path):
        uri = f"file:{quote(str(path))}?mode=ro"
        probe = sqlite3.connect(uri, uri=True, timeout=1.0)
        try:
            # One statement, so one read transaction: read apart, a migration
            # committing in between shows version 0 beside its new tables.
            version, app_id, count = probe.execute(
                "SELECT (SELECT user_version FROM pragma_user_version), "
                "(SELECT application_id FROM pragma_application_id), "
                "(SELECT count(*) FROM sqlite_master)"
            ).fetchone()
            tables = count > 0
        finally:
            probe.close()
    if app_id not in (0, APPLICATION_ID):
        raise _foreign(path, f"application_id {app_id:#x}")
    if version > SCHEMA_VERSION:
        raise _newer(path, version)
    if version == 0 and tables and app_id != APPLICATION_ID:
        raise _foreign(path, "tables of another application")


def _foreign(path: Path, what: str) -> StorageError:
    return StorageError(
        f"{path} belongs to another application ({what}); point `path` at a "
        "new file or at a turnkeep database (the file was not modified)"
    )


def _enable_secure_delete(conn: sqlite3.Connection, path: Path) -> None:
    """Zero what a delete frees (R19): no deleted text lingers in free space."""
    conn.execute("PRAGMA secure_delete = ON")
    if conn.execute("PRAGMA secure_delete").fetchone()[0] != 1:
        raise StorageError(
            f"SQLite database {path}: this SQLite cannot turn on secure_delete, "
            "so deleted sessions would stay readable in freed pages"
        )


def _enable_wal(conn: sqlite3.Connection, path: Path) -> None:
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise StorageError(
            f"SQLite database {path}: cannot switch to WAL mode (it stays in "
            f"{mode!r} mode); turnkeep needs WAL for durable, concurrent access"
        )


def _set_synchronous(conn: sqlite3.Connection, config: SqliteConfig) -> None:
    conn.execute(f"PRAGMA synchronous = {config.synchronous}")  # from a Literal
    level = conn.execute("PRAGMA synchronous").fetchone()[0]
    if level >= _SYNC_LEVELS["FULL"]:
        return
    if not config.allow_non_durable:
        raise ConfigurationError(
            f"SQLite database {config.path}: synchronous is {level} (below FULL), "
            "so an acknowledged flush could be lost on power loss; use "
            "synchronous = FULL, or set allow_non_durable = true for throwaway data"
        )
    log.warning(
        "SQLite database %s runs with synchronous=%s (allow_non_durable): "
        "acknowledged flushes may be lost on power loss",
        config.path,
        level,
    )


def _migrate(conn: sqlite3.Connection, path: Path, *, pid: int) -> None:
    # Foreign keys off while the schema changes (they cannot be switched
    # inside a transaction): step 6 drops the old `sessions`, which would
    # otherwise delete every row referencing it. The steps keep every key.
    enforced = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        _migrate_steps(conn, path, pid=pid)
    finally:
        if enforced:
            conn.execute("PRAGMA foreign_keys = ON")


def _migrate_steps(conn: sqlite3.Connection, path: Path, *, pid: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise _newer(path, version)
        if app_id not in (0, APPLICATION_ID) or (
            version == 0
            and conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        ):
            raise StorageError(
                "the SQLite file already holds tables of another application; "
                "point `path` at a new file or at a turnkeep database"
            )
        for step, apply in _MIGRATIONS:
            if step <= version:
                continue
            apply(conn)
            conn.execute(
                "INSERT INTO schema_migrations (version, applied_at, pid) "
                "VALUES (?, ?, ?)",
                (step, time.time_ns() // 1_000_000, pid),
            )
            conn.execute(f"PRAGMA user_version = {step:d}")
        if app_id != APPLICATION_ID:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _newer(path: Path, version: int) -> UnsupportedFormatError:
    return newer_schema(
        f"SQLite database {path}",
        version,
        supported=SCHEMA_VERSION,
        reader="turnkeep-sqlite",
    )
