"""Group commit: every write of one backend instance, batched into transactions.

One asyncio task per backend instance runs the writes. While a transaction
is in flight, new writes queue; the task then takes everything queued (up to
`max_group_flushes`) and runs it in one transaction on one pooled connection,
so one WAL flush acknowledges many sessions' flushes. Nothing is
acknowledged before the `COMMIT` returns. An operation that arrives alone
and whose writes are one statement (see `Op.atomic`) runs without a
`BEGIN`: its statement is its transaction, and is acknowledged once it has
committed.

The appends of a group whose sessions this instance holds land in one
statement (`append_many`: the same compare-and-set per session row, and only
the matching sessions' events are inserted), so a group costs one round
trip, not one per session; the sessions that did not match are explained one
by one (fenced, wrong seq, ...) and fail alone.

Isolation inside a group: an operation marked *clean* refuses (wrong seq,
fenced, locked, ...) only before it writes, so its refusal leaves the
transaction untouched and needs no savepoint. Any other operation runs
inside its own `SAVEPOINT` when it shares the transaction, so its refusal
rolls back only its own writes. A server error that aborts the whole
transaction (a timeout, a deadlock, a constraint) fails only the operation
that caused it; the others are run again in a fresh transaction. A connection lost
before the commit was asked for fails the whole group with `StorageError`:
the server rolls an unfinished transaction back, so nothing of it landed. A
connection lost once the `COMMIT` (or a lone operation's one statement) was
sent leaves the outcome unknown: the commit may be durable and only its
reply lost. Each operation of it then fails with the error its `unknown`
builds (an append's `FlushOutcomeUnknownError` with its seq range, R17), and
the next flush settles it, because every append is a compare-and-set on the
stored next seq (a retry either lands or reports, through `SequenceError`,
that it had landed).

Operations may change the instance's in-memory ownership state as they run;
they register an undo for each change (`Tx.undo`), which runs if their
writes are rolled back, so memory never claims what the database does not.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import attrs
import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from turnkeep.backendkit import Undo
from turnkeep.errors import PersistenceError, StorageError, TurnkeepError
from turnkeep.meta import FORMAT_VERSION
from turnkeep_postgres.sqlerrors import connection_lost, describe_error, storage_error
from turnkeep_postgres.statements import Queries

__all__ = ["Batched", "Op", "Tx", "Unknown", "Writer", "WriterStats"]

T = TypeVar("T")
log = logging.getLogger("turnkeep_postgres")

Unknown = Callable[[str], TurnkeepError]
"""Builds the error of an operation whose commit may or may not have landed,
from what happened (a clause); the writer sets the driver error as its cause."""


@attrs.define(eq=False)
class Tx:
    """What one operation sees of its group's transaction."""

    conn: AsyncConnection[Any]
    queries: Queries
    undo: Undo = attrs.Factory(Undo)
    """The operation's in-memory changes, taken back if its writes are."""


@attrs.frozen
class Batched:
    """An append that can share one statement with other sessions' appends.

    Attributes:
        session_id: the session.
        generation: the generation this instance holds.
        first: the batch's first seq (the stored next seq it expects).
        time: the last record's time (the new `updated_at` at least).
        raws: the records' bytes, in seq order.
        ends: which of the records end a turn (their `turn_end` flags).
        spans: how many seqs each record stands for (a packed record, more
            than one).
        turns: how many of the records end a turn.
        owner: this instance's owner token.
        lease_s: the lease to set, in seconds.
        landed: applies the in-memory effects once it landed.
        missed: when its rows did not match, raises why, or lands the append
            on its own (after counting what workers of an older schema
            appended; see `turnkeep_postgres.writes`).
    """

    session_id: str
    generation: int
    first: int
    time: int
    raws: list[bytes]
    ends: list[bool]
    spans: list[int]
    turns: int
    owner: uuid.UUID
    lease_s: float
    landed: Callable[[Tx], None]
    missed: Callable[[Tx], Awaitable[None]]


@attrs.frozen
class Op(Generic[T]):
    """One write operation.

    Attributes:
        run: the operation; raises a `TurnkeepError` to refuse.
        session_id: the one session it touches (`None`: many), used to order
            a group's operations so two workers lock rows in the same order.
        clean: it refuses only before its first write (no savepoint needed;
            writes of facts that hold whatever becomes of it, as in `atomic`,
            do not count); a callable says so when the writer is about to run
            it.
        doing: what it does, for error messages.
        batch: for an append, returns its `Batched` form when it can share a
            statement (the session is held); `run` is used otherwise.
        atomic: all its writes are one statement (anything else it runs only
            reads, or writes facts that hold whatever becomes of it, such as
            an append's catch-up of counts; a callable says so when the
            writer is about to run it).
            Alone in a group, such an operation runs on the autocommit
            connection without a transaction of its own, and commits with
            its statement: one round trip, not three.
        light: taking or giving up the writer role: a group of light
            operations commits with `synchronous_commit` off, so it does not
            wait for the WAL flush. The server still commits it in order: the
            next durable commit's flush covers it, and a crash of the server
            before then leaves the session as its last owner left it (a lost
            release is a lease that runs out, R9).
    """

    run: Callable[[Tx], Awaitable[T]]
    session_id: str | None
    clean: bool | Callable[[], bool]
    doing: str
    batch: Callable[[], Batched | None] | None = None
    atomic: bool | Callable[[], bool] = False
    light: bool = False


def _now(flag: bool | Callable[[], bool]) -> bool:
    # Asked right before the operation runs, in the writer task, which is
    # the only one that changes what the flag depends on (what is held).
    return flag if isinstance(flag, bool) else flag()


@attrs.define(eq=False)
class _Job(Generic[T]):
    op: Op[T]
    future: asyncio.Future[T]
    unknown: Unknown | None = None


@attrs.define
class WriterStats:
    """Counters for tests and benchmarks.

    Groups committed (`groups`: transactions, and lone operations that
    committed with their own statement, also counted in `solo`) and the
    operations they held, the largest group, appends that shared one
    statement (`batched`), and groups committed without waiting for the WAL
    flush (`light`: only the writer role changed hands).
    """

    groups: int = 0
    operations: int = 0
    largest_group: int = 0
    batched: int = 0
    solo: int = 0
    light: int = 0


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

    async def submit(self, op: Op[T], *, unknown: Unknown | None = None) -> T:
        """Queue `op` for the next group; return its result after the commit.

        If the connection is lost once the commit was sent, `op` fails with
        `unknown(why)` (when given): it may have been committed all the same.
        """
        if self._closed:
            raise PersistenceError(f"the PostgreSQL backend for {self.where} is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.append(_Job(op, future, unknown))
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
        batching = True
        try:
            async with self.pool.connection() as conn:
                while jobs:
                    jobs, lost, batching = await self._attempt(conn, jobs, batching)
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
        self, conn: AsyncConnection[Any], jobs: list[_Job[Any]], batching: bool
    ) -> tuple[list[_Job[Any]], bool, bool]:
        """Run `jobs` in one transaction (a lone atomic one: its own statement).

        Returns:
            The jobs to run again in a fresh transaction, whether the
            connection was lost, and whether the rerun may batch appends.
        """
        shared = len(jobs) > 1
        done: list[tuple[_Job[Any], Any, Tx]] = []
        refused: list[tuple[_Job[Any], BaseException]] = []
        culprit: _Job[Any] | None = None
        in_batch = False
        # Set once the server may commit: a failure from then on, if the
        # connection is lost, leaves the outcome unknown.
        committing = False
        # Only the writer role changes hands: no wait for the WAL flush.
        light = all(job.op.light for job in jobs)
        # A lone one-statement operation commits with its statement.
        solo = not shared and not light and _now(jobs[0].op.atomic)
        try:
            async with contextlib.nullcontext() if solo else conn.transaction():
                if light:
                    await conn.execute("SET LOCAL synchronous_commit TO off")
                    self.stats.light += 1
                rest = jobs
                if shared and batching:
                    in_batch = True
                    rest = await self._batch(conn, jobs, done, refused)
                    in_batch = False
                for job in rest:
                    tx = Tx(conn, self.queries)
                    culprit = job
                    clean = _now(job.op.clean)
                    committing = solo  # its one statement is its commit
                    try:
                        if shared and not clean:
                            async with conn.transaction():  # a savepoint
                                value = await job.op.run(tx)
                        else:
                            value = await job.op.run(tx)
                    except TurnkeepError as exc:
                        tx.undo.rollback()
                        if not shared:
                            raise
                        refused.append((job, exc))  # clean, or its savepoint undid it
                        continue
                    except psycopg.Error as exc:
                        tx.undo.rollback()
                        if shared and not clean and not connection_lost(exc):
                            refused.append((job, self._wrap(exc, job)))
                            continue
                        raise
                    done.append((job, value, tx))
                culprit = None  # from here on, a failure is the COMMIT's
                committing = True
        except TurnkeepError as exc:  # the only operation of the group refused
            _fail(jobs, exc)
            return [], False, batching
        except psycopg.Error as exc:
            for _, _, tx in reversed(done):
                tx.undo.rollback()
            lost = connection_lost(exc)
            if in_batch and not lost:
                # The shared statement failed: run the group again one
                # operation at a time, which finds the one at fault.
                return jobs, False, False
            if culprit is not None and not lost:
                # One operation aborted the transaction: it alone fails; the
                # others (refused ones too: they re-check) run again.
                _fail([culprit], self._wrap(exc, culprit))
                return [j for j in jobs if j is not culprit], False, batching
            if culprit is not None:
                doing = culprit.op.doing
            elif in_batch:
                doing = "appending a group of flushes"
            else:
                doing = "committing"
            error = storage_error(exc, doing, self.where)
            error.__cause__ = exc
            if lost and committing:
                self._unknown(exc, [culprit] if culprit else [j for j, _, _ in done])
                for job, refusal in refused:  # refused before writing: it stands
                    _fail([job], refusal)
            _fail(jobs, error)
            return [], lost, batching
        stats = self.stats
        stats.groups += 1
        stats.operations += len(done)
        stats.largest_group = max(stats.largest_group, len(done))
        if solo and done:
            stats.solo += 1
        for job, value, _ in done:
            if not job.future.done():
                job.future.set_result(value)
        for job, error in refused:
            if not job.future.done():
                job.future.set_exception(error)
        return [], False, batching

    async def _batch(
        self,
        conn: AsyncConnection[Any],
        jobs: list[_Job[Any]],
        done: list[tuple[_Job[Any], Any, Tx]],
        refused: list[tuple[_Job[Any], BaseException]],
    ) -> list[_Job[Any]]:
        """Land every batchable append of the group in one statement.

        Only the first operation on each session may join (a later one must
        see its effects), and only when at least two join. Returns the jobs
        still to run, in order.
        """
        items: list[tuple[_Job[Any], Batched]] = []
        rest: list[_Job[Any]] = []
        touched: set[str | None] = set()
        for job in jobs:
            item = None
            if job.op.session_id not in touched and job.op.batch is not None:
                item = job.op.batch()
            touched.add(job.op.session_id)
            if item is None:
                rest.append(job)
            else:
                items.append((job, item))
        if len(items) < 2:
            return jobs
        first = items[0][1]
        params: dict[str, Any] = {
            "ids": [i.session_id for _, i in items],
            "generations": [i.generation for _, i in items],
            "firsts": [i.first for _, i in items],
            "counts": [sum(i.spans) for _, i in items],
            "times": [i.time for _, i in items],
            "turns": [i.turns for _, i in items],
            "sizes": [sum(map(len, i.raws)) for _, i in items],
            "sids": [i.session_id for _, i in items for _ in i.raws],
            "seqs": [seq for _, i in items for seq in _seqs(i.first, i.spans)],
            "spans": [span for _, i in items for span in i.spans],
            "raws": [raw for _, i in items for raw in i.raws],
            "ends": [end for _, i in items for end in i.ends],
            "owner": first.owner,
            "lease": first.lease_s,
            "format": FORMAT_VERSION,
        }
        cur = await conn.execute(self.queries.append_many, params)
        landed = {str(row[0]) for row in await cur.fetchall()}
        self.stats.batched += len(landed)
        for job, item in items:
            tx = Tx(conn, self.queries)
            if item.session_id in landed:
                item.landed(tx)
                done.append((job, None, tx))
                continue
            try:
                await item.missed(tx)  # raises the refusal, or lands it alone
            except TurnkeepError as exc:
                tx.undo.rollback()
                refused.append((job, exc))
            else:
                item.landed(tx)
                done.append((job, None, tx))
        return rest

    def _unknown(self, exc: psycopg.Error, jobs: list[_Job[Any]]) -> None:
        """Fail `jobs`, whose commit was sent when the connection was lost.

        It may have landed (only its reply lost): each job with an `unknown`
        gets the error it builds; the others a `StorageError` that says so.
        """
        why = (
            f"the connection to PostgreSQL at {self.where} was lost after its "
            f"commit was sent, before the reply came: {describe_error(exc)}"
        )
        for job in jobs:
            error: TurnkeepError
            if job.unknown is not None:
                error = job.unknown(why)
            else:
                error = StorageError(
                    f"{job.op.doing}: {why}; it may have been committed all the "
                    "same (read the session to see)"
                )
            error.__cause__ = exc
            _fail([job], error)

    def _wrap(self, exc: psycopg.Error, job: _Job[Any]) -> StorageError:
        error = storage_error(exc, job.op.doing, self.where)
        error.__cause__ = exc
        return error


def _fail(jobs: list[_Job[Any]], error: BaseException) -> None:
    for job in jobs:
        if not job.future.done():
            job.future.set_exception(error)


def _seqs(first: int, spans: list[int]) -> list[int]:
    """Each record's first seq, from the batch's first and the records' spans."""
    out: list[int] = []
    for span in spans:
        out.append(first)
        first += span
    return out
