"""The tables, their versioned migrations, and the checks made at connect.

Layout (schema name from configuration, always quoted):

- `sessions`: one row per session. Header and summary as `json` (msgspec's
  exact text, so a summary may hold any character), the columns SQL needs
  (`format_version`, `updated_at`, `next_seq` = durable event count), the
  log's other numbers (`turns`, `size`: exact as of `counted_seq`, see
  migration 2), and ownership: `generation` (the fencing token), `owner` (a
  backend instance's random token), `owner_info` (host and pid, for
  operators), `lease_until` (server clock). A row with `next_seq = 0` is a
  claim placed by `create`, invisible to reads until its first flush.
- `events`: `PRIMARY KEY (session_id, seq)`, `raw bytea` holding core's bytes
  verbatim (docs/adr/0008-postgres-bytea-and-leases.md says why not `jsonb`),
  and `turn_end` (migration 3): whether the event ends a turn, as core said
  when it was appended; `NULL` for rows no worker of schema 3 flagged yet.
- `schema_migrations`: one row per applied migration.

Indexes serve `list`: `sessions_by_update` (newest first, time windows) and
`sessions_by_status` (migration 4: one range per status). Triggers on
`sessions` (migration 5) `NOTIFY` every commit and delete, for followers.

`migrate` brings a schema to `SCHEMA_VERSION` under a transaction-scoped
advisory lock, so workers starting together migrate exactly once. It runs in
the caller's transaction when there is one (as a savepoint) and in its own
otherwise; every step is plain transactional SQL (no `CREATE INDEX
CONCURRENTLY`, which cannot run inside a transaction), some of it sent by a
Python step that reads rows first (migration 3's backfill). A schema newer
than the code is refused before anything is written.

Workers of an older schema version that are still running keep working
after a migration (they never read the version again): a worker of schema 1
moves `next_seq` alone, and one of schema 2 inserts events without
`turn_end`. Either way the numbers stay exact as of `counted_seq`, and what
lies past it is counted by reads and caught up by the next append of this
code (see `turnkeep_postgres.statements` and `turnkeep_postgres.turnends`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeAlias

import attrs
from psycopg import AsyncConnection, sql
from psycopg.pq import TransactionStatus

from turnkeep.backendkit import newer_schema
from turnkeep.errors import ConfigurationError, UnsupportedFormatError
from turnkeep_postgres import turnends
from turnkeep_postgres.statements import Queries

__all__ = [
    "LOCK_NAMESPACE",
    "SCHEMA_VERSION",
    "Migration",
    "ServerSettings",
    "Step",
    "cancel_channel",
    "check_server",
    "commit_channel",
    "configure_connection",
    "migrate",
    "migrations",
    "read_version",
]

log = logging.getLogger("turnkeep_postgres")

SCHEMA_VERSION: Final = 8
"""The schema version this code writes and the newest it reads."""

LOCK_NAMESPACE: Final = 0x746B
"""First key of turnkeep's advisory locks (`"tk"`); the second is the schema's hash."""

# `synchronous_commit` values that wait for the local WAL flush before a
# COMMIT returns; only `off` does not.
_DURABLE_COMMIT: Final = frozenset({"on", "local", "remote_write", "remote_apply"})


Step: TypeAlias = sql.Composed | Callable[[AsyncConnection[Any]], Awaitable[None]]
"""A statement, or a Python step that runs its own on the connection."""


@attrs.frozen
class Migration:
    """One schema version: the steps that create it from the previous one."""

    version: int
    description: str
    steps: tuple[Step, ...]


def _migration_1(schema: sql.Identifier) -> Migration:
    sessions = sql.SQL("{}.sessions").format(schema)
    events = sql.SQL("{}.events").format(schema)
    return Migration(
        1,
        "sessions and events",
        (
            sql.SQL(
                """CREATE TABLE IF NOT EXISTS {sessions} (
                    id text COLLATE "C" PRIMARY KEY,
                    format_version integer NOT NULL,
                    header json NOT NULL,
                    summary json NOT NULL,
                    updated_at bigint NOT NULL,
                    next_seq bigint NOT NULL DEFAULT 0 CHECK (next_seq >= 0),
                    generation bigint NOT NULL DEFAULT 1,
                    owner uuid,
                    owner_info text,
                    lease_until timestamptz
                )"""
            ).format(sessions=sessions),
            # Serves `list`: keyset pages newest first, visible sessions only.
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS sessions_by_update ON {sessions} "
                "(updated_at DESC, id) WHERE next_seq > 0"
            ).format(sessions=sessions),
            # Serves lease renewal and release-all: a worker's own rows.
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS sessions_by_owner ON {sessions} (owner) "
                "WHERE owner IS NOT NULL"
            ).format(sessions=sessions),
            sql.SQL(
                """CREATE TABLE IF NOT EXISTS {events} (
                    session_id text COLLATE "C" NOT NULL
                        REFERENCES {sessions} (id) ON DELETE CASCADE,
                    seq bigint NOT NULL CHECK (seq >= 0),
                    raw bytea NOT NULL,
                    PRIMARY KEY (session_id, seq)
                )"""
            ).format(sessions=sessions, events=events),
        ),
    )


def _migration_2(schema: sql.Identifier) -> Migration:
    """`turns` and `size` beside `next_seq`, counted as of `counted_seq`.

    `counted_seq` is the `next_seq` as of which `turns` and `size` are exact:
    this code moves all three together, while a worker of version 1 still
    running moves `next_seq` alone. The columns start at zero, counted as of
    seq 0; migration 3 counts the stored events (as released, this step
    counted them itself, matching the bytes; either way the two leave the
    same numbers).
    """
    sessions = sql.SQL("{}.sessions").format(schema)
    return Migration(
        2,
        "turns and size",
        (
            sql.SQL(
                "ALTER TABLE {sessions}"
                " ADD COLUMN IF NOT EXISTS turns bigint NOT NULL DEFAULT 0"
                " CHECK (turns >= 0),"
                " ADD COLUMN IF NOT EXISTS size bigint NOT NULL DEFAULT 0"
                " CHECK (size >= 0),"
                " ADD COLUMN IF NOT EXISTS counted_seq bigint NOT NULL DEFAULT 0"
            ).format(sessions=sessions),
        ),
    )


def _migration_3(schema: str) -> Migration:
    """`events.turn_end`, flagged for the stored events; the numbers recounted.

    Adding a column without a default changes no row. The backfill then flags
    every event by its stored bytes (core's kit decides), and sessions whose
    numbers were not counted up to `next_seq` are counted from the flags: as
    far as the flagged events reach, which is every event but those a worker
    of an older schema appends while this runs (they come last, and stay
    past `counted_seq`). Each step is idempotent.
    """
    ident = sql.Identifier(schema)
    sessions = sql.SQL("{}.sessions").format(ident)
    events = sql.SQL("{}.events").format(ident)

    async def backfill(conn: AsyncConnection[Any]) -> None:
        flagged = await turnends.backfill(conn, await Queries.render(conn, schema))
        log.info("turnkeep schema %r: %d stored events flagged", schema, flagged)

    return Migration(
        3,
        "turn ends stored per event",
        (
            sql.SQL(
                "ALTER TABLE {events} ADD COLUMN IF NOT EXISTS turn_end boolean"
            ).format(events=events),
            backfill,
            # `counted_seq` becomes the number of flagged events counted: a
            # prefix of the log, however the rows of a concurrent append fall.
            sql.SQL(
                "UPDATE {sessions} AS s SET (turns, size, counted_seq) = ("
                "SELECT count(*) FILTER (WHERE e.turn_end),"
                " COALESCE(sum(octet_length(e.raw)), 0), count(*)"
                " FROM {events} AS e WHERE e.session_id = s.id AND e.seq < s.next_seq"
                " AND e.turn_end IS NOT NULL) WHERE s.counted_seq <> s.next_seq"
            ).format(sessions=sessions, events=events),
        ),
    )


def _migration_4(schema: sql.Identifier) -> Migration:
    """`sessions_by_status`: the index of `list` filtered by status.

    On the summary's own `status` (an expression index), so workers of an
    older schema, which write no other column, keep it right. Statistics on
    the expression (PostgreSQL 14 and later) let the planner see how common
    each status is: without them it guesses every status rare and sorts a
    common status's rows for each page instead of reading the index in order.
    """
    sessions = sql.SQL("{}.sessions").format(schema)
    statistics = sql.SQL("{}.sessions_status_stats").format(schema)

    async def status_statistics(conn: AsyncConnection[Any]) -> None:
        cur = await conn.execute("SELECT current_setting('server_version_num')::int")
        row = await cur.fetchone()
        if row is not None and int(row[0]) >= 140000:
            await conn.execute(
                sql.SQL(
                    "CREATE STATISTICS IF NOT EXISTS {statistics} "
                    "ON (summary ->> 'status') FROM {sessions}"
                ).format(statistics=statistics, sessions=sessions)
            )

    return Migration(
        4,
        "sessions by status",
        (
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS sessions_by_status ON {sessions} "
                "((summary ->> 'status'), updated_at DESC, id) WHERE next_seq > 0"
            ).format(sessions=sessions),
            status_statistics,
        ),
    )


def commit_channel(schema: str) -> str:
    """The `NOTIFY` channel of `schema`'s commits (a short name per schema)."""
    return "turnkeep_" + hashlib.sha256(schema.encode()).hexdigest()[:24]


def _migration_5(schema: str) -> Migration:
    """Triggers that `NOTIFY` each commit, inside the committing transaction.

    When a row's `next_seq` moves forward (an append, whichever worker and
    schema version made it) the payload `"<last seq> <id>"` goes to
    `commit_channel(schema)`; a deleted row sends `"-1 <id>"`. PostgreSQL
    delivers a notification when its transaction commits and never for one
    rolled back, so a follower (`LISTEN`, `turnkeep_postgres.follow`) hears
    exactly the durable commits, from every machine. Ids are at most 256
    bytes, far below the payload limit.
    """
    ident = sql.Identifier(schema)
    sessions = sql.SQL("{}.sessions").format(ident)
    function = sql.SQL("{}.turnkeep_commit_notify").format(ident)
    channel = sql.Literal(commit_channel(schema))
    return Migration(
        5,
        "commits notified",
        (
            sql.SQL(
                "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger"
                " LANGUAGE plpgsql AS $body$ BEGIN"
                " IF TG_OP = 'DELETE' THEN"
                " PERFORM pg_notify(TG_ARGV[0], '-1 ' || OLD.id); RETURN OLD;"
                " END IF;"
                " PERFORM pg_notify(TG_ARGV[0],"
                " (NEW.next_seq - 1)::text || ' ' || NEW.id);"
                " RETURN NEW; END $body$"
            ).format(function=function),
            sql.SQL("DROP TRIGGER IF EXISTS commit_notify ON {sessions}").format(
                sessions=sessions
            ),
            sql.SQL(
                "CREATE TRIGGER commit_notify AFTER UPDATE OF next_seq ON {sessions}"
                " FOR EACH ROW WHEN (NEW.next_seq > OLD.next_seq)"
                " EXECUTE FUNCTION {function}({channel})"
            ).format(sessions=sessions, function=function, channel=channel),
            sql.SQL("DROP TRIGGER IF EXISTS delete_notify ON {sessions}").format(
                sessions=sessions
            ),
            sql.SQL(
                "CREATE TRIGGER delete_notify AFTER DELETE ON {sessions}"
                " FOR EACH ROW WHEN (OLD.next_seq > 0)"
                " EXECUTE FUNCTION {function}({channel})"
            ).format(sessions=sessions, function=function, channel=channel),
        ),
    )


def cancel_channel(schema: str) -> str:
    """The `NOTIFY` channel of `schema`'s cancel requests."""
    return "turnkeep_cancel_" + hashlib.sha256(schema.encode()).hexdigest()[:24]


def _migration_6(schema: str) -> Migration:
    """`cancel_requests`: each session's latest request to cancel its turn.

    Written by any process without a lease (`turnkeep_postgres.cancel`); a
    trigger sends `"<number> <id>"` to `cancel_channel(schema)` from the
    recording transaction, so the session's owner wakes without polling.
    """
    ident = sql.Identifier(schema)
    sessions = sql.SQL("{}.sessions").format(ident)
    requests = sql.SQL("{}.cancel_requests").format(ident)
    function = sql.SQL("{}.turnkeep_cancel_notify").format(ident)
    channel = sql.Literal(cancel_channel(schema))
    return Migration(
        6,
        "cancel requests",
        (
            sql.SQL(
                """CREATE TABLE IF NOT EXISTS {requests} (
                    session_id text COLLATE "C" PRIMARY KEY
                        REFERENCES {sessions} (id) ON DELETE CASCADE,
                    number bigint NOT NULL CHECK (number >= 1),
                    reason text NOT NULL,
                    requested_at bigint NOT NULL
                )"""
            ).format(requests=requests, sessions=sessions),
            sql.SQL(
                "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger"
                " LANGUAGE plpgsql AS $body$ BEGIN"
                " PERFORM pg_notify(TG_ARGV[0],"
                " NEW.number::text || ' ' || NEW.session_id);"
                " RETURN NEW; END $body$"
            ).format(function=function),
            sql.SQL("DROP TRIGGER IF EXISTS cancel_notify ON {requests}").format(
                requests=requests
            ),
            sql.SQL(
                "CREATE TRIGGER cancel_notify AFTER INSERT OR UPDATE ON {requests}"
                " FOR EACH ROW EXECUTE FUNCTION {function}({channel})"
            ).format(requests=requests, function=function, channel=channel),
        ),
    )


def _migration_7(ident: sql.Identifier) -> Migration:
    """`audit`: the audit trail (`turnkeep_postgres.audit`).

    A session's records (`session_scope` its id, deleted with it) and the
    store's log (`session_scope` NULL), numbered per scope.
    """
    sessions = sql.SQL("{}.sessions").format(ident)
    audit = sql.SQL("{}.audit").format(ident)
    return Migration(
        7,
        "audit trail",
        (
            sql.SQL(
                """CREATE TABLE IF NOT EXISTS {audit} (
                    key bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    session_scope text COLLATE "C"
                        REFERENCES {sessions} (id) ON DELETE CASCADE,
                    number bigint NOT NULL CHECK (number >= 1),
                    at bigint NOT NULL,
                    action text NOT NULL,
                    session_id text,
                    reason text NOT NULL,
                    host text NOT NULL,
                    pid bigint NOT NULL,
                    detail text NOT NULL
                )"""
            ).format(audit=audit, sessions=sessions),
            sql.SQL(
                "CREATE UNIQUE INDEX IF NOT EXISTS audit_by_scope ON {audit} "
                "((coalesce(session_scope, '')), number)"
            ).format(audit=audit),
            # What deleting a session looks up (its records go with it): the
            # expression index above cannot serve the foreign key's cascade.
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS audit_by_session ON {audit} (session_scope)"
            ).format(audit=audit),
        ),
    )


def _migration_8(schema: str) -> Migration:
    """`events.span`: how many seqs a row stands for (a packed record, more).

    The column comes with a constant default, so existing rows are not
    rewritten; its check is added `NOT VALID` (every old row holds the
    default), so no scan of the table holds the migration's lock either.
    """
    events = sql.SQL("{}.events").format(sql.Identifier(schema))

    async def check(conn: AsyncConnection[Any]) -> None:
        cur = await conn.execute(
            "SELECT 1 FROM pg_catalog.pg_constraint c"
            " JOIN pg_catalog.pg_class t ON t.oid = c.conrelid"
            " JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace"
            " WHERE n.nspname = %s AND t.relname = 'events'"
            " AND c.conname = 'events_span_positive'",
            (schema,),
        )
        if await cur.fetchone() is None:
            await conn.execute(
                sql.SQL(
                    "ALTER TABLE {events} ADD CONSTRAINT events_span_positive"
                    " CHECK (span >= 1) NOT VALID"
                ).format(events=events)
            )

    return Migration(
        8,
        "packed records",
        (
            sql.SQL(
                "ALTER TABLE {events} ADD COLUMN IF NOT EXISTS span integer"
                " NOT NULL DEFAULT 1"
            ).format(events=events),
            check,
        ),
    )


def migrations(schema: str) -> tuple[Migration, ...]:
    """Every migration, oldest first, for tables in `schema`."""
    ident = sql.Identifier(schema)
    return (
        _migration_1(ident),
        _migration_2(ident),
        _migration_3(schema),
        _migration_4(ident),
        _migration_5(schema),
        _migration_6(schema),
        _migration_7(ident),
        _migration_8(schema),
    )


async def read_version(conn: AsyncConnection[Any], schema: str) -> int | None:
    """The newest applied migration in `schema`, or `None` if it has none."""
    cur = await conn.execute(
        "SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = %s "
        "AND c.relname = 'schema_migrations'",
        (schema,),
    )
    if await cur.fetchone() is None:
        return None
    cur = await conn.execute(
        sql.SQL("SELECT max(version) FROM {}.schema_migrations").format(
            sql.Identifier(schema)
        )
    )
    row = await cur.fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _refuse_newer(schema: str, version: int) -> UnsupportedFormatError:
    return newer_schema(
        f"the turnkeep schema {schema!r} in PostgreSQL",
        version,
        supported=SCHEMA_VERSION,
        reader="turnkeep-postgres",
    )


async def migrate(conn: AsyncConnection[Any], schema: str) -> int | None:
    """Bring `schema` to `SCHEMA_VERSION`, exactly once across workers.

    Works on a connection inside a transaction (the work is a savepoint of
    it, and the lock lasts until that transaction ends) or outside one, in
    autocommit mode or not (the work is its own transaction, committed
    before this returns; the connection is left outside a transaction).
    Idempotent.

    Returns:
        The version found before (`None` for a fresh schema); when several
        workers migrate together, exactly one of them gets the old version.

    Raises:
        UnsupportedFormatError: the schema is newer than this code; nothing
            was changed.
        psycopg.Error: the server refused (the caller wraps it).
    """
    if conn.info.transaction_status == TransactionStatus.IDLE:
        # Without autocommit the first read would open a transaction that
        # nobody commits, and the migration would vanish with the connection.
        async with conn.transaction():
            return await _migrate(conn, schema)
    return await _migrate(conn, schema)


async def _migrate(conn: AsyncConnection[Any], schema: str) -> int | None:
    found = await read_version(conn, schema)
    if found is not None and found > SCHEMA_VERSION:
        raise _refuse_newer(schema, found)
    if found == SCHEMA_VERSION:
        return found
    ident = sql.Identifier(schema)
    async with conn.transaction():
        # Transaction-scoped: released at commit or rollback, also if this
        # worker dies, so a crashed migrator never blocks the others.
        await conn.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
            (LOCK_NAMESPACE, schema),
        )
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.schema_migrations ("
                "version integer PRIMARY KEY, description text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(ident)
        )
        found = await read_version(conn, schema)  # again: another may have won
        current = found or 0
        if current > SCHEMA_VERSION:
            raise _refuse_newer(schema, current)
        for migration in migrations(schema):
            if migration.version <= current:
                continue
            for step in migration.steps:
                if isinstance(step, sql.Composed):
                    await conn.execute(step)
                else:
                    await step(conn)
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {}.schema_migrations (version, description) "
                    "VALUES (%s, %s) ON CONFLICT (version) DO NOTHING"
                ).format(ident),
                (migration.version, migration.description),
            )
            log.info(
                "turnkeep schema %r migrated to version %d", schema, migration.version
            )
    return found


@attrs.frozen
class ServerSettings:
    """What `check_server` read from the server."""

    synchronous_commit: str
    fsync: str
    server_encoding: str


async def check_server(
    conn: AsyncConnection[Any], *, allow_non_durable: bool, where: str
) -> ServerSettings:
    """Refuse a server that would lose acknowledged flushes or mangle text.

    Raises:
        ConfigurationError: `synchronous_commit` or `fsync` is `off` (unless
            `allow_non_durable`), or the database encoding is not UTF-8.
    """
    cur = await conn.execute(
        "SELECT current_setting('synchronous_commit'), current_setting('fsync'), "
        "current_setting('server_encoding')"
    )
    row = await cur.fetchone()
    assert row is not None  # noqa: S101 - a SELECT without FROM returns one row
    settings = ServerSettings(str(row[0]), str(row[1]), str(row[2]))
    if settings.server_encoding.upper() not in ("UTF8", "UTF-8"):
        raise ConfigurationError(
            f"PostgreSQL database at {where} uses encoding "
            f"{settings.server_encoding}; turnkeep stores Unicode session ids and "
            "summaries and needs a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')"
        )
    problems: list[str] = []
    if settings.synchronous_commit not in _DURABLE_COMMIT:
        problems.append(f"synchronous_commit = {settings.synchronous_commit}")
    if settings.fsync != "on":
        problems.append(f"fsync = {settings.fsync}")
    if problems:
        what = " and ".join(problems)
        if not allow_non_durable:
            raise ConfigurationError(
                f"PostgreSQL at {where} runs with {what}: a crash could lose "
                "flushes turnkeep already acknowledged. Set synchronous_commit = "
                "on (server, database, role or the DSN's options) or, for "
                "throwaway data only, allow_non_durable = true"
            )
        log.warning(
            "turnkeep-postgres: %s at %s; acknowledged flushes may be lost in a "
            "crash (allow_non_durable is set)",
            what,
            where,
        )
    return settings


async def configure_connection(
    conn: AsyncConnection[Any],
    *,
    statement_timeout_ms: int,
    lock_timeout_ms: int,
    idle_in_transaction_timeout_ms: int,
) -> None:
    """Set this backend's timeouts on a new connection (session-wide)."""
    await conn.execute(
        "SELECT set_config('statement_timeout', %s, false), "
        "set_config('lock_timeout', %s, false), "
        "set_config('idle_in_transaction_session_timeout', %s, false)",
        (
            f"{statement_timeout_ms}ms",
            f"{lock_timeout_ms}ms",
            f"{idle_in_transaction_timeout_ms}ms",
        ),
    )
