"""`PostgresConfig`: the options of the `postgres` backend.

The host structures the `[backends.postgres]` table (or the environment
variables `TURNKEEP_POSTGRES__<OPTION>`, e.g. `TURNKEEP_POSTGRES__DSN`) into
this class with core's converter, so unknown keys and bad values are
configuration errors that name their source. Durations are integer
milliseconds because environment variables and TOML both spell those
without ambiguity.
"""

from __future__ import annotations

from typing import Final

import attrs

from turnkeep.backendkit import positive
from turnkeep.codec import DEFAULT_MAX_EVENT_BYTES

__all__ = ["DEFAULT_SCHEMA", "MAX_IDENTIFIER_BYTES", "PostgresConfig"]

DEFAULT_SCHEMA: Final = "turnkeep"
"""The schema the tables live in unless configured otherwise."""

MAX_IDENTIFIER_BYTES: Final = 63
"""PostgreSQL truncates longer identifiers, so two long names could collide."""


def _schema_name(_inst: object, _attribute: attrs.Attribute[str], value: str) -> None:
    size = len(value.encode("utf-8", "surrogatepass"))
    if not value or "\x00" in value or size > MAX_IDENTIFIER_BYTES:
        raise ValueError(
            f"schema must be 1-{MAX_IDENTIFIER_BYTES} bytes without NUL, got {value!r}"
        )


@attrs.frozen
class PostgresConfig:
    """Options of the PostgreSQL backend.

    Attributes:
        dsn: a libpq connection string or URI (`postgresql://user@host/db`).
            Empty means libpq's defaults and `PG*` environment variables. It
            may carry a password; turnkeep never prints it.
        schema: the schema holding turnkeep's tables (created if missing).
            Any name works: it is quoted, never spliced into SQL.
        pool_min_size: connections the pool keeps open.
        pool_max_size: the most connections one backend instance opens. The
            server needs `workers x pool_max_size` connections in all.
        connect_timeout_ms: how long opening the backend waits for the server.
        statement_timeout_ms: the server cancels any one statement after this
            long (the flush fails with `StorageError`; nothing is written).
        lock_timeout_ms: how long a statement waits for a row lock held by
            another worker's transaction before it fails with `StorageError`.
        idle_in_transaction_timeout_ms: the server ends a connection that
            sits inside a transaction this long. A worker frozen in the middle
            of a flush (SIGSTOP, a debugger, a VM pause) holds its sessions'
            row locks until then, even after its lease ran out; the default
            equals the default lease.
        lease_ms: how long a worker's ownership of a session lasts without
            renewal; a live worker renews every `lease_ms / 3`. A worker that
            died loses its sessions at most `lease_ms` after its last renewal
            (see docs/adr/0008-postgres-bytea-and-leases.md).
        max_group_flushes: at most this many writes share one group commit.
        max_event_bytes: the largest event `append` accepts and `load` reads.
        allow_non_durable: accept a server whose `synchronous_commit` is `off`
            or whose `fsync` is `off` (logged as a warning at open). Such a
            server can lose acknowledged flushes in a crash.
        application_name: the prefix of `application_name` on every
            connection (the host name and pid follow), so operators can find
            a worker's connections in `pg_stat_activity`.
    """

    dsn: str = ""
    schema: str = attrs.field(default=DEFAULT_SCHEMA, validator=_schema_name)
    pool_min_size: int = attrs.field(default=1, validator=positive)
    pool_max_size: int = attrs.field(default=4, validator=positive)
    connect_timeout_ms: int = attrs.field(default=10_000, validator=positive)
    statement_timeout_ms: int = attrs.field(default=30_000, validator=positive)
    lock_timeout_ms: int = attrs.field(default=10_000, validator=positive)
    idle_in_transaction_timeout_ms: int = attrs.field(
        default=30_000, validator=positive
    )
    lease_ms: int = attrs.field(default=30_000, validator=positive)
    max_group_flushes: int = attrs.field(default=256, validator=positive)
    max_event_bytes: int = attrs.field(
        default=DEFAULT_MAX_EVENT_BYTES, validator=positive
    )
    allow_non_durable: bool = False
    application_name: str = "turnkeep"

    def __attrs_post_init__(self) -> None:
        if self.pool_min_size > self.pool_max_size:
            raise ValueError(
                f"pool_min_size ({self.pool_min_size}) exceeds pool_max_size "
                f"({self.pool_max_size})"
            )
        if self.lease_ms < 300:
            raise ValueError(
                f"lease_ms must be at least 300 (renewal runs every lease_ms / 3), "
                f"got {self.lease_ms}"
            )
