"""The writer thread: every write to one database, grouped into shared commits.

One thread and one connection per backend instance perform all writes, so
the event loop never blocks on SQLite. Operations queue up while a commit is
in progress; the thread then takes everything queued (up to a limit) and runs
it in one `BEGIN IMMEDIATE` transaction. Operations check everything before
they write, so a refusal (wrong seq, fenced owner, ...) has written nothing
and fails only that operation; an operation that fails after writing (a
driver error half-way) rolls the group back, and the others run again in a
new transaction without it. One `COMMIT` (one WAL fsync) then
acknowledges every operation of the group; nothing is acknowledged before it.

Operations may change the backend's in-memory ownership state as they run;
they register an undo for each change, which runs if the operation fails or
the whole group rolls back, so memory never claims what the database does not.

The hop to the thread and back is as cheap as a thread hop gets (measured
in `benchmarks/bench_hop.py`): an operation goes straight into the thread's
queue (a C-level `SimpleQueue`, no extra event-loop iteration, no Python
`Condition`); everything queued while a commit runs, such as the flushes of
one loop iteration, forms the next group; one group's outcomes go back to
each event loop in one `call_soon_threadsafe` callback.

An I/O-class error while writing, or any failed `COMMIT`, *poisons* the writer
(R6): it closes its connection and every later write raises `StorageError`;
recovery is a new backend instance (reopen, then load). A failed `COMMIT`
may have left a durable commit behind, so its operations' outcome is
unknown: each gets the error its `unknown` builds (an append's
`FlushOutcomeUnknownError`, R17), not a plain `StorageError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

import attrs

from turnkeep.backendkit import Undo
from turnkeep.errors import PersistenceError, StorageError, TurnkeepError
from turnkeep_sqlite.schema import check_schema_version, retry_busy
from turnkeep_sqlite.sqlerrors import is_io, storage_error

__all__ = ["Operation", "Tx", "Unknown", "Writer", "WriterStats"]

T = TypeVar("T")


@attrs.define(eq=False)
class Tx:
    """What one operation sees of its group's transaction."""

    conn: sqlite3.Connection
    undo: Undo = attrs.Factory(Undo)
    """The operation's in-memory changes, taken back if its writes are."""
    after_commit: list[Callable[[sqlite3.Connection], None]] = attrs.Factory(
        list[Callable[[sqlite3.Connection], None]]
    )
    """Run on the connection once the group committed, before acknowledging
    (outside any transaction: a WAL checkpoint, say)."""


Operation = Callable[[Tx], T]

_LIGHT: Final = {"FULL": "NORMAL", "EXTRA": "NORMAL"}
"""The sync level of a light group, by the configured one (lower ones stay)."""


Unknown = Callable[[StorageError], TurnkeepError]
"""Builds the error of an operation whose `COMMIT` failed (outcome unknown)."""


@attrs.define(eq=False)
class _Job(Generic[T]):
    operation: Operation[T]
    future: asyncio.Future[T]
    loop: asyncio.AbstractEventLoop
    settled: bool = False
    unknown: Unknown | None = None
    light: bool = False


@attrs.define
class WriterStats:
    """Counters for tests and benchmarks (read without locking; approximate).

    `light` counts the groups committed without a sync of their own (every
    operation in them was light: see `Writer.submit`).
    """

    groups: int = 0
    operations: int = 0
    largest_group: int = 0
    light: int = 0


@attrs.define(eq=False)
class Writer:
    """Owns the write connection of one database and the thread that uses it.

    Args:
        path: the database file (for messages).
        opener: opens and prepares the connection (in the writer thread).
        closer: closes it.
        verify: run after each commit, before acknowledging (file identity).
        busy_timeout_s: how long a group waits for the database write lock.
        max_group: the most operations one commit carries.
    """

    path: Path
    opener: Callable[[], sqlite3.Connection]
    closer: Callable[[sqlite3.Connection], None]
    verify: Callable[[], None]
    busy_timeout_s: float
    max_group: int
    synchronous: str = "FULL"
    """The `PRAGMA synchronous` the connection was opened with."""
    stats: WriterStats = attrs.field(init=False, factory=WriterStats)
    _inbox: queue.SimpleQueue[_Job[Any] | None] = attrs.field(
        init=False, factory=queue.SimpleQueue[_Job[Any] | None]
    )
    _gate: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _thread: threading.Thread | None = attrs.field(init=False, default=None)
    _conn: sqlite3.Connection | None = attrs.field(init=False, default=None)
    _level: str = attrs.field(init=False, default="")
    """The `PRAGMA synchronous` set last on the connection ("": as opened)."""
    _closing: bool = attrs.field(init=False, default=False)
    _poison: StorageError | None = attrs.field(init=False, default=None)
    _outbox: list[tuple[_Job[Any], bool, Any]] = attrs.field(
        init=False, factory=list[tuple[_Job[Any], bool, Any]]
    )

    def submit(
        self,
        operation: Operation[T],
        *,
        unknown: Unknown | None = None,
        light: bool = False,
    ) -> asyncio.Future[T]:
        """Queue `operation` for a group; the future settles after its commit.

        Call it on the event loop's thread. The operation goes straight to
        the writer thread; those queued while it commits form its next group.
        If the group's `COMMIT` fails, the future fails with `unknown(error)`
        (when given): the operation may have been committed all the same.

        A `light` operation (taking or giving up the writer role) needs no
        sync of its own: a group of light operations only commits with
        `synchronous = NORMAL`, which in WAL mode survives a crash of the
        process but not of the machine until the next durable commit syncs
        the WAL (which holds it, as every commit before it). A claim lost to
        a power cut leaves the session as its last owner left it; a lost
        release, an owner that is gone (R9, R18).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._gate:
            if self._closing:
                future.set_exception(
                    PersistenceError(f"the SQLite backend for {self.path} is closed")
                )
                return future
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._main,
                    name=f"turnkeep-sqlite-writer:{self.path.name}",
                    # A process may exit without aclose(): SQLite then rolls
                    # the open transaction back, and nothing was acknowledged.
                    daemon=True,
                )
                self._thread.start()
            self._inbox.put(_Job(operation, future, loop, unknown=unknown, light=light))
        return future

    def close(self, *, wait: bool = True) -> None:
        """Finish the queued operations, close the connection, stop the thread.

        With `wait`, blocks until the thread has stopped: call it off the
        event loop.
        """
        with self._gate:
            thread = self._thread
            if not self._closing:
                self._closing = True
                if thread is not None:
                    self._inbox.put(None)  # after every queued operation
        if thread is not None:
            if wait and thread is not threading.current_thread():
                thread.join()
        elif self._conn is not None:
            self.closer(self._conn)
            self._conn = None

    # -- the thread ----------------------------------------------------------

    def _main(self) -> None:
        get, get_nowait = self._inbox.get, self._inbox.get_nowait
        stop = False
        while not stop:
            job = get()
            if job is None:
                break
            group = [job]
            # Everything queued meanwhile joins the group (up to its limit).
            while len(group) < self.max_group:
                try:
                    job = get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                group.append(job)
            try:
                self._run(group)
            except BaseException as exc:  # never leave a caller waiting forever
                self._fail(group, StorageError(f"the SQLite writer crashed: {exc!r}"))
                raise
            finally:
                self._deliver()
            # Do not keep the finished operations (and what their closures
            # hold, such as the backend) alive while waiting for the next ones.
            del group, job
        if self._conn is not None:
            self.closer(self._conn)
            self._conn = None

    def _run(self, group: list[_Job[Any]]) -> None:
        # A caller that gave up before its operation started gets nothing
        # written (reading another thread's future state is a benign race:
        # an operation cancelled later still lands whole, or not at all).
        jobs = [j for j in group if not j.future.cancelled()]
        if not jobs:
            return
        if self._poison is not None:
            self._fail(jobs, self._poisoned())
            return
        if self._conn is None:
            try:
                self._conn = self.opener()
                self._level = self.synchronous
            except Exception as exc:  # noqa: BLE001 - handed to every caller
                self._fail(jobs, exc)
                return
        conn = self._conn
        while jobs:
            jobs = self._attempt(conn, jobs)

    def _attempt(
        self, conn: sqlite3.Connection, jobs: list[_Job[Any]]
    ) -> list[_Job[Any]]:
        """Run `jobs` in one transaction; return jobs to rerun in a fresh one."""
        deadline = time.monotonic() + self.busy_timeout_s
        try:
            self._sync_level(conn, all(job.light for job in jobs))
            retry_busy(
                lambda: conn.execute("BEGIN IMMEDIATE"),
                deadline=deadline,
                path=self.path,
            )
            check_schema_version(conn, self.path)
        except sqlite3.Error as exc:
            self._rollback(conn)
            error = storage_error(exc, "starting a write", self.path)
            error.__cause__ = exc
            if is_io(exc):
                self._poison_with(error)
            self._fail(jobs, error)
            return []
        except TurnkeepError as exc:
            self._rollback(conn)
            self._fail(jobs, exc)
            return []

        done: list[tuple[_Job[Any], Any, Tx]] = []
        refused: list[tuple[_Job[Any], BaseException]] = []
        for job in jobs:
            tx = Tx(conn)
            changes = conn.total_changes
            try:
                value = job.operation(tx)
            except Exception as exc:  # noqa: BLE001 - each failure goes to its caller
                tx.undo.rollback()
                wrote = conn.total_changes != changes
                if not isinstance(exc, sqlite3.Error) and not wrote:
                    # A refusal: operations check before they write, so
                    # there is nothing to undo (and no savepoint to pay for).
                    refused.append((job, exc))
                    continue
                # A write failed half-way: roll the group back and run the
                # others again in a new transaction, without this one.
                self._undo(done)
                self._rollback(conn)
                if not isinstance(exc, sqlite3.Error):
                    self._fail([job], exc)
                    return [j for j in jobs if j is not job]
                error = storage_error(exc, "writing", self.path)
                error.__cause__ = exc
                if is_io(exc):
                    self._poison_with(error)
                    self._fail([job], error)
                    self._fail([j for j in jobs if j is not job], self._poisoned())
                    return []
                self._fail([job], error)
                return [j for j in jobs if j is not job]
            done.append((job, value, tx))

        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            # A failed COMMIT may have left a durable WAL commit behind: the
            # outcome is unknown, so poison rather than let anything retry here.
            error = storage_error(exc, "committing", self.path)
            error.__cause__ = exc
            self._rollback(conn)
            self._poison_with(error)
            self._undo(done)
            for job, _, _ in done:
                self._settle(job, False, job.unknown(error) if job.unknown else error)
            self._settle_refused(refused)
            return []
        try:
            self.verify()
        except StorageError as exc:
            self._poison_with(exc)
            self._undo(done)
            self._fail([j for j, _, _ in done], exc)
            self._settle_refused(refused)
            return []
        self._after_commit(conn, done)
        stats = self.stats
        stats.groups += 1
        stats.operations += len(done)
        stats.largest_group = max(stats.largest_group, len(done))
        for job, value, _ in done:
            self._settle(job, True, value)
        self._settle_refused(refused)
        return []

    # -- helpers ---------------------------------------------------------------

    def _after_commit(
        self, conn: sqlite3.Connection, done: list[tuple[_Job[Any], Any, Tx]]
    ) -> None:
        """Run the committed operations' follow-ups (their writes stand anyway)."""
        for _, _, tx in done:
            for follow_up in tx.after_commit:
                try:
                    follow_up(conn)
                except sqlite3.Error as exc:
                    if is_io(exc):  # R6: the next write hears of it
                        error = storage_error(exc, "after a commit", self.path)
                        error.__cause__ = exc
                        self._poison_with(error)
                        return

    @staticmethod
    def _undo(done: list[tuple[_Job[Any], Any, Tx]]) -> None:
        for _, _, tx in reversed(done):
            tx.undo.rollback()

    def _settle(self, job: _Job[Any], ok: bool, value: Any) -> None:
        if not job.settled:
            job.settled = True
            self._outbox.append((job, ok, value))

    def _settle_refused(self, refused: list[tuple[_Job[Any], BaseException]]) -> None:
        for job, error in refused:
            self._settle(job, False, error)

    def _fail(self, jobs: list[_Job[Any]], error: BaseException) -> None:
        for job in jobs:
            self._settle(job, False, error)

    def _deliver(self) -> None:
        """Send the group's outcomes to their event loops, one callback each."""
        outbox, self._outbox = self._outbox, []
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Job[Any], bool, Any]]] = {}
        for item in outbox:
            by_loop.setdefault(item[0].loop, []).append(item)
        for loop, items in by_loop.items():
            # A closed loop has no one left to tell.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, items)

    def _sync_level(self, conn: sqlite3.Connection, light: bool) -> None:
        """Commit the next group with a sync of its own, or (`light`) without."""
        level = _LIGHT.get(self.synchronous, self.synchronous) if light else None
        want = level or self.synchronous
        if want != self._level:
            conn.execute(f"PRAGMA synchronous = {want}")  # one of the known names
            self._level = want
        if light and want != self.synchronous:
            self.stats.light += 1

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the connection is being given up or poisoned anyway

    def _poison_with(self, error: StorageError) -> None:
        if self._poison is None:
            self._poison = error
        if self._conn is not None:
            conn, self._conn = self._conn, None
            # Closing a failed connection may fail again; it is gone either way.
            with contextlib.suppress(sqlite3.Error):
                self.closer(conn)

    def _poisoned(self) -> StorageError:
        error = StorageError(
            f"the SQLite writer for {self.path} failed earlier ({self._poison}); "
            "nothing more is written through it. Reopen the backend (e.g. reload "
            "the plugin) and load the session to continue."
        )
        error.__cause__ = self._poison
        return error


def _resolve(items: list[tuple[_Job[Any], bool, Any]]) -> None:
    """Settle futures on their loop (a cancelled caller is simply skipped)."""
    for job, ok, value in items:
        if job.future.done():
            continue
        if ok:
            job.future.set_result(value)
        else:
            job.future.set_exception(value)
