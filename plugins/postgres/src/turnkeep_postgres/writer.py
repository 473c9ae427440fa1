"""Group commit: every write of one backend instance, batched into transactions.

One asyncio task per backend instance runs the writes. While a transaction
is in flight, new writes queue; the task then takes everything queued (up to
`max_group_flushes`) and runs it in one transaction on one pooled connection,
so one WAL flush acknowledges many sessions' flushes. Nothing is
acknowledged before the `COMMIT` returns.

Isolation inside a group: an operation marked *clean* refuses (wrong seq,
fenced, locked, ...) only before it writes, so its refusal leaves the
transaction untouched and needs no savepoint. Any other operation runs
inside its own `SAVEPOINT` when it shares the transaction, so its refusal
rolls back only its own writes. A server error that aborts the whole
transaction (a timeout, a deadlock, a constraint) fails only the operation
that caused it; the others are run again in a fresh transaction. A lost
connection or a failed `COMMIT` fails the whole group with `StorageError`:
its outcome is unknown, and the next flush settles it, because every append
is a compare-and-set on the stored next seq (a retry either lands or reports,
through `SequenceError`, how much had landed).

Operations may change the instance's in-memory ownership state as they run;
they register an undo for each change (`Tx.on_rollback`), which runs if their
writes are rolled back, so memory never claims what the database does not.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import attrs
import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from turnkeep.errors import PersistenceError, StorageError, TurnkeepError
from turnkeep_postgres.sqlerrors import connection_lost, storage_error
from turnkeep_postgres.statements import Queries

__all__ = ["Op", "Tx", "Writer", "WriterStats"]

T = TypeVar("T")
log = logging.getLogger("turnkeep_postgres")


@attrs.define(eq=False)
class Tx:
    """What one operation sees of its group's transaction."""

    conn: AsyncConnection[Any]
    queries: Queries
    _undo: list[Callable[[], None]] = attrs.field(factory=list[Callable[[], None]])

    def on_rollback(self, undo: Callable[[], None]) -> None:
        """Run `undo` if this operation's writes are rolled back."""
        self._undo.append(undo)

    def rollback_memory(self) -> None:
        """Undo this operation's in-memory changes, newest first."""
        while self._undo:
            self._undo.pop()()


@attrs.frozen
class Op(Generic[T]):
    """One write operation.

    Attributes:
        run: the operation; raises a `TurnkeepError` to refuse.
        session_id: the one session it touches (`None`: many), used to order
            a group's operations so two workers lock rows in the same order.
        clean: it refuses only before its first write (no savepoint needed).
        doing: what it does, for error messages.
    """

    run: Callable[[Tx], Awaitable[T]]
    session_id: str | None
    clean: bool
    doing: str


@attrs.define(eq=False)
class _Job(Generic[T]):
    op: Op[T]
    future: asyncio.Future[T]


@attrs.define
class WriterStats:
    """Counters for tests and benchmarks."""

    groups: int = 0
    operations: int = 0
    largest_group: int = 0


def _order(job: _Job[Any]) -> tuple[bool, str]:
    session_id = job.op.session_id
    return (session_id is None, session_id or "")


@attrs.define(eq=False)
class Writer:
    """Runs one backend instance's writes in group commits.

    Args:
        pool: the connection pool.
        queries: the rendered statements.
        where: the server, for messages (no password).
        max_group: the most operations one transaction carries.
    """

    pool: AsyncConnectionPool[AsyncConnection[Any]]
    queries: Queries
    where: str
    max_group: int
    stats: WriterStats = attrs.field(init=False, factory=WriterStats)
    _queue: collections.deque[_Job[Any]] = attrs.field(
        init=False, factory=collections.deque[_Job[Any]]
    )
    _task: asyncio.Task[None] | None = attrs.field(init=False, default=None)
    _closed: bool = attrs.field(init=False, default=False)

    async def submit(self, op: Op[T]) -> T:
        """Queue `op` for the next group; return its result after the commit."""
        if self._closed:
            raise PersistenceError(f"the PostgreSQL backend for {self.where} is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.append(_Job(op, future))
        if self._task is None:
            self._task = loop.create_task(self._main(), name="turnkeep-postgres-writer")
        return await future

    async def close(self) -> None:
        """Let the queued operations finish, then refuse new ones."""
        self._closed = True
        task = self._task
        if task is not None:
            await asyncio.shield(task)

    # -- the task ------------------------------------------------------------

    async def _main(self) -> None:
        try:
            while self._queue:
                count = min(self.max_group, len(self._queue))
                group = [self._queue.popleft() for _ in range(count)]
                try:
                    await self._run(group)
                except BaseException as exc:  # never leave a caller waiting
                    _fail(group, StorageError(f"the PostgreSQL writer failed: {exc!r}"))
                    raise
        finally:
            self._task = None
            if self._queue and not self._closed:
                # Cancelled (loop shutting down): nobody will run these.
                _fail(list(self._queue), PersistenceError("the writer was stopped"))
                self._queue.clear()

    async def _run(self, group: list[_Job[Any]]) -> None:
        jobs = sorted((j for j in group if not j.future.done()), key=_order)
        if not jobs:
            return
        lost = False
        try:
            async with self.pool.connection() as conn:
                while jobs:
                    jobs, lost = await self._attempt(conn, jobs)
        except PoolTimeout as exc:
            error = StorageError(
                f"no connection to PostgreSQL at {self.where} could be had in time "
                f"({exc}); nothing was written. Is the server up?"
            )
            error.__cause__ = exc
            _fail(jobs, error)
        except psycopg.Error as exc:
            error = storage_error(exc, "getting a connection", self.where)
            error.__cause__ = exc
            _fail(jobs, error)
            lost = True
        if lost:
            # The server restarted or dropped us: purge the pool's other
            # broken connections now rather than fail one flush per each.
            try:
                await self.pool.check()
            except psycopg.Error:
                log.debug("pool check failed", exc_info=True)

    async def _attempt(
        self, conn: AsyncConnection[Any], jobs: list[_Job[Any]]
    ) -> tuple[list[_Job[Any]], bool]:
        """Run `jobs` in one transaction.

        Returns:
            The jobs to run again in a fresh transaction, and whether the
            connection was lost.
        """
        shared = len(jobs) > 1
        done: list[tuple[_Job[Any], Any, Tx]] = []
        refused: list[tuple[_Job[Any], BaseException]] = []
        culprit: _Job[Any] | None = None
        try:
            async with conn.transaction():
                for job in jobs:
                    tx = Tx(conn, self.queries)
                    culprit = job
                    try:
                        if shared and not job.op.clean:
                            async with conn.transaction():  # a savepoint
                                value = await job.op.run(tx)
                        else:
                            value = await job.op.run(tx)
                    except TurnkeepError as exc:
                        tx.rollback_memory()
                        if not shared:
                            raise
                        refused.append((job, exc))  # clean, or its savepoint undid it
                        continue
                    except psycopg.Error as exc:
                        tx.rollback_memory()
                        if shared and not job.op.clean and not connection_lost(exc):
                            refused.append((job, self._wrap(exc, job)))
                            continue
                        raise
                    done.append((job, value, tx))
                culprit = None  # from here on, a failure is the COMMIT's
        except TurnkeepError as exc:  # the only operation of the group refused
            _fail(jobs, exc)
            return [], False
        except psycopg.Error as exc:
            for _, _, tx in reversed(done):
                tx.rollback_memory()
            lost = connection_lost(exc)
            if culprit is not None and not lost:
                # One operation aborted the transaction: it alone fails; the
                # others (refused ones too: they re-check) run again.
                _fail([culprit], self._wrap(exc, culprit))
                return [j for j in jobs if j is not culprit], False
            doing = "committing" if culprit is None else culprit.op.doing
            error = storage_error(exc, doing, self.where)
            error.__cause__ = exc
            _fail(jobs, error)
            return [], lost
        stats = self.stats
        stats.groups += 1
        stats.operations += len(done)
        stats.largest_group = max(stats.largest_group, len(done))
        for job, value, _ in done:
            if not job.future.done():
                job.future.set_result(value)
        for job, error in refused:
            if not job.future.done():
                job.future.set_exception(error)
        return [], False

    def _wrap(self, exc: psycopg.Error, job: _Job[Any]) -> StorageError:
        error = storage_error(exc, job.op.doing, self.where)
        error.__cause__ = exc
        return error


def _fail(jobs: list[_Job[Any]], error: BaseException) -> None:
    for job in jobs:
        if not job.future.done():
            job.future.set_exception(error)
