"""`PostgresPersistence`: the `SessionPersistence` implementation over PostgreSQL.

Consumed by core's write-behind plugin (and the session store's resume path)
through the protocol in `turnkeep.persistence`, whose contracts it keeps.
This module wires the parts together: writes go to the `Writer` (group
commit, `turnkeep_postgres.writes`), reads to pooled connections
(`turnkeep_postgres.reads`), and a renewal task keeps this instance's leases
alive. Nothing happens at construction; the first call connects, checks the
server's durability settings, migrates the schema and opens the pool, all
with psycopg's async API, so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Final, TypeVar

import attrs
import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from turnkeep.audit import AuditRecord, check_record, check_records_range
from turnkeep.backendkit import DamagedSessions, outcome_unknown
from turnkeep.cancelrequest import CancelRequest, check_reason
from turnkeep.codec import EventRecord
from turnkeep.errors import (
    FlushOutcomeUnknownError,
    PersistenceError,
    SequenceError,
    SessionDeletedError,
    SessionFencedError,
    StorageError,
    TurnkeepError,
)
from turnkeep.follow import check_wait
from turnkeep.ids import validate_session_id
from turnkeep.listfilter import ListFilter
from turnkeep.meta import SessionMeta, SessionSummary
from turnkeep.persistence import LoadedSession, SessionPage, check_read_range
from turnkeep_postgres import audit, cancel, reads, writes
from turnkeep_postgres.config import PostgresConfig
from turnkeep_postgres.follow import CommitListener
from turnkeep_postgres.schema import check_server, configure_connection, migrate
from turnkeep_postgres.sqlerrors import (
    connection_lost,
    describe_server,
    disk_full,
    storage_error,
)
from turnkeep_postgres.statements import Queries
from turnkeep_postgres.writer import Op, Unknown, Writer, WriterStats

__all__ = ["PostgresPersistence"]

T = TypeVar("T")
# The server keeps the first NAMEDATALEN - 1 bytes of an application_name.
_APPLICATION_NAME_BYTES: Final = 63
log = logging.getLogger("turnkeep_postgres")

Pool = AsyncConnectionPool[AsyncConnection[Any]]


@attrs.define(eq=False)
class _Opened:
    pool: Pool
    queries: Queries
    writer: Writer
    renewer: asyncio.Task[None]


@attrs.define(eq=False)
class PostgresPersistence:
    """Sessions in PostgreSQL, shared by many worker processes and machines.

    Each session has one writer at a time: `create`/`claim` take a lease on
    it, which this instance renews every `lease_ms / 3` while it runs; a
    second worker gets `SessionLockedError` until the lease is released or
    runs out, and `claim(steal=True)` takes over and fences the old owner.
    Use one instance per process: its writer group-commits the flushes of
    all the sessions it serves.

    Args:
        config: the options (`PostgresConfig`).
    """

    stores_packs: ClassVar[bool] = True
    """It keeps packed records (see [packs] in `turnkeep.persistence`)."""

    config: PostgresConfig = attrs.Factory(PostgresConfig)
    _state: writes.OwnerState = attrs.field(init=False)
    _where: str = attrs.field(init=False)
    _pid: int = attrs.field(init=False, factory=os.getpid)
    _opened: _Opened | None = attrs.field(init=False, default=None)
    _opening: asyncio.Lock | None = attrs.field(init=False, default=None)
    _listener: CommitListener | None = attrs.field(init=False, default=None)
    _damaged: DamagedSessions = attrs.field(init=False, factory=DamagedSessions)
    _doubt: dict[str, list[EventRecord]] = attrs.field(
        init=False, factory=dict[str, list[EventRecord]]
    )
    """Per session, the last flush whose outcome is unknown, until settled."""
    _closed: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        self._where = describe_server(self.config.dsn)
        self._state = writes.OwnerState(
            token=uuid.uuid4(),
            info=f"{socket.gethostname()} pid {self._pid}",
            lease_s=self.config.lease_ms / 1000,
            max_event_bytes=self.config.max_event_bytes,
        )

    @property
    def where(self) -> str:
        """The server, as `user@host:port/dbname` (never the password)."""
        return self._where

    @property
    def owner_token(self) -> uuid.UUID:
        """This instance's owner token (the `owner` column of its sessions)."""
        return self._state.token

    @property
    def application_name(self) -> str:
        """The `application_name` of this instance's connections.

        `<prefix>:<host>:<pid>`, at most the server's 63 bytes: a long host
        name is cut, never the pid, so a worker's connections stay findable.
        """
        pid = f":{self._pid}"
        head = f"{self.config.application_name}:{socket.gethostname()}"
        # The server stores only printable ASCII here (it rewrites the rest,
        # longer); ours is written as the server will keep it.
        head = "".join(c if " " <= c <= "~" else "?" for c in head)
        return head[: _APPLICATION_NAME_BYTES - len(pid)] + pid

    @property
    def writer_stats(self) -> WriterStats:
        """Group-commit counters (groups, operations, largest group)."""
        return self._opened.writer.stats if self._opened else WriterStats()

    # -- SessionPersistence ------------------------------------------------

    async def create(self, meta: SessionMeta) -> None:
        """Register a new session and take its writer role.

        Nothing becomes visible until the first `append`; until then the
        session is an invisible claim row that `release`/`aclose` remove and
        that another worker may take over once its lease runs out.
        """
        validate_session_id(meta.id)
        await self._write(writes.create(self._state, meta))
        self._doubt.pop(meta.id, None)

    async def append(
        self,
        session_id: str,
        events: Sequence[EventRecord],
        *,
        summary: SessionSummary | None = None,
    ) -> None:
        """Durably append one flush (owner, generation, seq checked as it lands).

        A `summary` lands in the flush's own transaction.

        Raises:
            FlushOutcomeUnknownError: the connection was lost once the flush's
                commit was sent, so it may have landed; or this instance was
                fenced while an earlier flush's outcome was unknown (`fenced`,
                that flush's range). A later append settles the first case
                (it lands, or `SequenceError` says the flush had landed).
        """
        session_id = validate_session_id(session_id)
        self._damaged.check(session_id)
        records = list(events)  # snapshot: the caller may reuse its list

        def unknown(why: str) -> TurnkeepError:
            return outcome_unknown(session_id, records, why)

        try:
            await self._write(
                writes.append(self._state, session_id, records, summary),
                unknown=unknown if records else None,
            )
        except FlushOutcomeUnknownError:
            self._doubt[session_id] = records
            raise
        except SessionDeletedError:
            self._doubt.pop(session_id, None)  # nothing is left to settle
            raise
        except SessionFencedError as exc:
            doubt = self._doubt.get(session_id)
            if doubt is None:
                raise
            # Never "nothing was written" while a flush of ours may be in the
            # log the new owner continues (R17).
            raise outcome_unknown(
                session_id,
                doubt,
                "its commit's reply was lost, and another worker has taken the "
                "session over since",
                fenced=True,
            ) from exc
        except SequenceError as exc:
            if records and exc.got == records[0].seq:
                self._doubt.pop(session_id, None)  # the stored next seq told
            raise
        self._doubt.pop(session_id, None)

    async def load(self, session_id: str) -> LoadedSession:
        """Return the stored metadata and every durable event's exact bytes."""
        session_id = validate_session_id(session_id)
        limit = self.config.max_event_bytes
        with self._damaged.watch(session_id):  # later appends are refused too
            return await self._read(
                f"loading {session_id!r}",
                lambda conn, q: reads.load(conn, q, session_id, limit),
            )

    async def load_after(self, session_id: str, after: int, limit: int) -> list[bytes]:
        """Durable events with seq > `after`, at most `limit` (an index range)."""
        session_id = validate_session_id(session_id)
        check_read_range(after, limit)
        window, most = (after, limit), self.config.max_event_bytes
        with self._damaged.watch(session_id):
            return await self._read(
                f"reading {session_id!r}",
                lambda conn, q: reads.load_after(conn, q, session_id, window, most),
            )

    async def last_seq(self, session_id: str) -> int:
        """The last durable seq (`-1` for none), from the session row."""
        session_id = validate_session_id(session_id)
        return await self._read(
            f"reading {session_id!r}",
            lambda conn, q: reads.last_seq(conn, q, session_id),
        )

    async def wait_for_commit(
        self, session_id: str, after_seq: int, within: float
    ) -> int:
        """The last durable seq once past `after_seq`, or after `within` seconds.

        Woken by the `NOTIFY` each commit sends from its own transaction, on
        a connection of this instance that `LISTEN`s (see
        `turnkeep_postgres.follow`): no polling, from any machine.
        """
        check_wait(after_seq, within)
        session_id = validate_session_id(session_id)
        await self._open()  # migrated: the triggers that notify are there
        if self._listener is None:
            config, kwargs = self.config, self._connect_kwargs()

            async def connect() -> AsyncConnection[Any]:
                return await AsyncConnection.connect(config.dsn, **kwargs)

            self._listener = CommitListener(connect, config.schema, self._where)
        return await self._listener.wait(
            session_id, lambda: self.last_seq(session_id), after_seq, within
        )

    async def request_cancel(self, session_id: str, reason: str) -> CancelRequest:
        """Record a request to cancel the running turn (`turnkeep_postgres.cancel`).

        One statement of its own; no lease taken, no event touched; its
        `NOTIFY` wakes the owner.
        """
        session_id = validate_session_id(session_id)
        check_reason(reason)
        schema = self.config.schema
        return await self._read(
            f"recording a cancel of {session_id!r}",
            lambda conn, _: cancel.request_cancel(conn, schema, session_id, reason),
        )

    async def cancel_requested(
        self, session_id: str, after: int
    ) -> CancelRequest | None:
        """The latest cancel request numbered above `after` (one lookup)."""
        session_id = validate_session_id(session_id)
        schema = self.config.schema
        return await self._read(
            f"reading the cancel requests of {session_id!r}",
            lambda conn, _: cancel.cancel_requested(conn, schema, session_id, after),
        )

    async def record_audit(self, scope: str | None, record: AuditRecord) -> AuditRecord:
        """Store an audit record (`turnkeep_postgres.audit`): no lease taken."""
        scope = None if scope is None else validate_session_id(scope)
        check_record(record)
        schema = self.config.schema
        return await self._read(
            f"recording an audit of {scope!r}",
            lambda conn, _: audit.record_audit(conn, schema, scope, record),
        )

    async def audit_records(
        self, scope: str | None, after: int, limit: int
    ) -> list[AuditRecord]:
        """The scope's audit records numbered above `after` (one index range)."""
        scope = None if scope is None else validate_session_id(scope)
        check_records_range(after, limit)
        schema = self.config.schema
        return await self._read(
            f"reading the audit of {scope!r}",
            lambda conn, _: audit.audit_records(conn, schema, scope, after, limit),
        )

    async def list(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        where: ListFilter | None = None,
    ) -> SessionPage:
        """Page through stored sessions (those `where` keeps), newest first.

        From the indexes alone: `sessions_by_update`, or `sessions_by_status`
        per status asked for.
        """
        if limit <= 0:
            raise ValueError("limit must be positive")
        if cursor is not None:
            reads.decode_cursor(cursor)  # refuse a bad cursor before any I/O
        return await self._read(
            "listing sessions",
            lambda conn, q: reads.list_page(conn, q, limit, cursor, where),
        )

    async def held(self, session_ids: Sequence[str]) -> dict[str, bool]:
        """Whether a live owner holds each session (see `SessionPersistence`).

        Live means a lease that has not run out (server clock): a worker
        that died is seen as gone at most `lease_ms` after its last renewal.
        One read, no lock taken, no lease touched.
        """
        ids = list(dict.fromkeys(validate_session_id(i) for i in session_ids))
        if not ids:
            return {}
        return await self._read(
            "probing session holders", lambda conn, q: reads.held(conn, q, ids)
        )

    async def has(self, session_id: str) -> bool:
        """Whether the session is stored (has at least one durable flush)."""
        session_id = validate_session_id(session_id)
        return await self._read(
            f"looking up {session_id!r}", lambda conn, q: reads.has(conn, q, session_id)
        )

    async def delete(self, session_id: str, *, force: bool = False) -> None:
        """Remove a stored session and all its events (every row of it).

        Raises:
            SessionNotFoundError: nothing is stored under this id.
            SessionHeldError: another worker's lease on it is live, and not
                `force`.
        """
        session_id = validate_session_id(session_id)
        try:
            await self._write(writes.delete(self._state, session_id, force=force))
        except StorageError as exc:
            if not disk_full(exc):
                raise
            raise await self._no_room_to_delete(session_id) from exc
        self._damaged.forget(session_id)
        self._doubt.pop(session_id, None)

    async def _no_room_to_delete(self, session_id: str) -> StorageError:
        """The error of a delete refused for lack of disk, with how much to free."""
        try:
            need: int | None = await self._read(
                f"sizing {session_id!r}",
                lambda conn, q: reads.deletion_room(conn, q, session_id),
            )
        except StorageError:
            need = None
        room = f"about {need:,} bytes" if need is not None else "room"
        return StorageError(
            f"PostgreSQL at {self._where}: the server's disk is full, and nothing "
            "was deleted: PostgreSQL writes a delete to its write-ahead log before "
            f"any space is freed, which needs {room} for session {session_id!r}. "
            "Free at least that much where the server keeps its data and WAL, "
            "then retry"
        )

    async def update(self, session_id: str, summary: SessionSummary) -> None:
        """Replace the summary (the backend keeps `event_count`)."""
        session_id = validate_session_id(session_id)
        await self._write(writes.update(self._state, session_id, summary))

    async def claim(self, session_id: str, *, steal: bool = False) -> None:
        """Take the writer role; an expired lease is taken without `steal`."""
        session_id = validate_session_id(session_id)
        await self._write(writes.claim(self._state, session_id, steal=steal))

    async def release(self, session_id: str) -> None:
        """Give up the writer role (no-op if not held)."""
        session_id = validate_session_id(session_id)
        await self._write(writes.release(self._state, session_id))

    async def aclose(self) -> None:
        """Release every writer role, stop renewing, close the pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
        opened, self._opened = self._opened, None
        if opened is None:
            return
        opened.renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await opened.renewer
        if self._listener is not None:
            await self._listener.close()
        try:
            if os.getpid() == self._pid and (self._state.held or self._state.pending):
                await opened.writer.submit(writes.release_all(self._state))
        except TurnkeepError as exc:
            # The server is gone: the leases run out on their own.
            log.warning("turnkeep-postgres: could not release sessions: %s", exc)
        finally:
            await opened.writer.close()
            await opened.pool.close()

    # -- internals ---------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise PersistenceError(
                f"the PostgreSQL backend for {self._where} is closed"
            )
        if os.getpid() != self._pid:
            raise PersistenceError(
                f"the PostgreSQL backend for {self._where} was created in process "
                f"{self._pid} and cannot be used from a forked child; open a new "
                "backend in the child"
            )

    async def _write(self, op: Op[T], *, unknown: Unknown | None = None) -> T:
        opened = await self._open()
        return await opened.writer.submit(op, unknown=unknown)

    async def _read(
        self,
        doing: str,
        read: Callable[[AsyncConnection[Any], Queries], Awaitable[T]],
    ) -> T:
        opened = await self._open()
        try:
            async with opened.pool.connection() as conn:
                return await read(conn, opened.queries)
        except PoolTimeout as exc:
            raise StorageError(
                f"no connection to PostgreSQL at {self._where} could be had in time "
                f"while {doing} ({exc}). Is the server up?"
            ) from exc
        except psycopg.Error as exc:
            if connection_lost(exc):
                with contextlib.suppress(psycopg.Error):
                    await opened.pool.check()
            raise storage_error(exc, doing, self._where) from exc

    async def _open(self) -> _Opened:
        self._check_usable()
        if self._opened is not None:
            return self._opened
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._opened is None:
                opened = await self._connect()
                if self._closed:  # aclose ran while we connected
                    opened.renewer.cancel()
                    await opened.pool.close()
                    self._check_usable()
                self._opened = opened
            return self._opened

    def _connect_kwargs(self) -> dict[str, Any]:
        timeout_s = self.config.connect_timeout_ms / 1000
        return {
            "autocommit": True,
            "application_name": self.application_name,
            # libpq counts whole seconds and treats 1 as 2.
            "connect_timeout": max(2, math.ceil(timeout_s)),
        }

    async def _connect(self) -> _Opened:
        config = self.config
        timeout_s = config.connect_timeout_ms / 1000
        kwargs = self._connect_kwargs()
        try:
            first = await AsyncConnection.connect(config.dsn, **kwargs)
        except psycopg.Error as exc:
            raise storage_error(exc, "connecting", self._where) from exc
        try:
            await check_server(
                first, allow_non_durable=config.allow_non_durable, where=self._where
            )
            await migrate(first, config.schema)
            queries = await Queries.render(first, config.schema)
        except psycopg.Error as exc:
            raise storage_error(exc, "preparing the schema", self._where) from exc
        finally:
            await first.close()

        async def configure(conn: AsyncConnection[Any]) -> None:
            await configure_connection(
                conn,
                statement_timeout_ms=config.statement_timeout_ms,
                lock_timeout_ms=config.lock_timeout_ms,
                idle_in_transaction_timeout_ms=config.idle_in_transaction_timeout_ms,
            )

        pool: Pool = AsyncConnectionPool(
            config.dsn,
            kwargs=kwargs,
            min_size=config.pool_min_size,
            max_size=config.pool_max_size,
            open=False,
            configure=configure,
            timeout=timeout_s,
            name=f"turnkeep-postgres:{config.schema}",
        )
        try:
            await pool.open(wait=True, timeout=timeout_s)
        except PoolTimeout as exc:
            await pool.close()
            raise StorageError(
                f"could not open connections to PostgreSQL at {self._where} within "
                f"{timeout_s:g} s ({exc})"
            ) from exc
        writer = Writer(pool, queries, self._where, config.max_group_flushes)
        renewer = asyncio.get_running_loop().create_task(
            self._renew(writer), name="turnkeep-postgres-lease"
        )
        return _Opened(pool=pool, queries=queries, writer=writer, renewer=renewer)

    async def _renew(self, writer: Writer) -> None:
        """Extend this instance's leases every `lease_ms / 3` while it lives."""
        interval = self.config.lease_ms / 3000
        state = self._state
        while True:
            await asyncio.sleep(interval)  # the renewal period, not a wait for an event
            if not state.held and not state.pending:
                continue
            try:
                owned = await writer.submit(writes.renew(state))
            except TurnkeepError as exc:
                log.warning("turnkeep-postgres: lease renewal failed: %s", exc)
                continue
            lost = set(state.held) - owned
            if lost:
                log.info(
                    "turnkeep-postgres: %d session(s) were taken over by another "
                    "worker; their next flush here is fenced",
                    len(lost),
                )
