"""The writer thread: every write to one database, grouped into shared commits.

One thread and one connection per backend instance perform all writes, so
the event loop never blocks on SQLite. Operations queue up while a commit is
in progress; the thread then takes everything queued (up to a limit) and runs
it in one `BEGIN IMMEDIATE` transaction, each operation inside its own
savepoint: a refusal (wrong seq, fenced owner, ...) rolls back only that
savepoint and fails only that operation. One `COMMIT` (one WAL fsync) then
acknowledges every operation of the group; nothing is acknowledged before it.

Operations may change the backend's in-memory ownership state as they run;
they register an undo for each change, which runs if their savepoint or the
whole group rolls back, so memory never claims what the database does not.

An I/O-class error while writing, or any failed `COMMIT`, *poisons* the writer
(R6): it closes its connection and every later write raises `StorageError`;
recovery is a new backend instance (reopen, then load).
"""

from __future__ import annotations

import collections
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Generic, TypeVar

import attrs

from turnkeep.errors import PersistenceError, StorageError, TurnkeepError
from turnkeep_sqlite.schema import check_schema_version, retry_busy
from turnkeep_sqlite.sqlerrors import is_io, storage_error

__all__ = ["Operation", "Tx", "Writer", "WriterStats"]

T = TypeVar("T")


@attrs.define(eq=False)
class Tx:
    """What one operation sees of its group's transaction."""

    conn: sqlite3.Connection
    _undo: list[Callable[[], None]] = attrs.field(factory=list[Callable[[], None]])

    def on_rollback(self, undo: Callable[[], None]) -> None:
        """Run `undo` if this operation's writes are rolled back."""
        self._undo.append(undo)

    def rollback_memory(self) -> None:
        """Undo this operation's in-memory changes, newest first."""
        while self._undo:
            self._undo.pop()()


Operation = Callable[[Tx], T]


@attrs.define(eq=False)
class _Job(Generic[T]):
    operation: Operation[T]
    future: Future[T]


@attrs.define
class WriterStats:
    """Counters for tests and benchmarks (read without locking; approximate)."""

    groups: int = 0
    operations: int = 0
    largest_group: int = 0


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
    stats: WriterStats = attrs.field(init=False, factory=WriterStats)
    _queue: collections.deque[_Job[Any]] = attrs.field(
        init=False, factory=collections.deque[_Job[Any]]
    )
    _cond: threading.Condition = attrs.field(init=False, factory=threading.Condition)
    _thread: threading.Thread | None = attrs.field(init=False, default=None)
    _conn: sqlite3.Connection | None = attrs.field(init=False, default=None)
    _closing: bool = attrs.field(init=False, default=False)
    _poison: StorageError | None = attrs.field(init=False, default=None)

    def submit(self, operation: Operation[T]) -> Future[T]:
        """Queue `operation` for the next group; its future settles after commit."""
        future: Future[T] = Future()
        with self._cond:
            if self._closing:
                future.set_exception(
                    PersistenceError(f"the SQLite backend for {self.path} is closed")
                )
                return future
            self._queue.append(_Job(operation, future))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._main,
                    name=f"turnkeep-sqlite-writer:{self.path.name}",
                    # A process may exit without aclose(): SQLite then rolls
                    # the open transaction back, and nothing was acknowledged.
                    daemon=True,
                )
                self._thread.start()
            self._cond.notify()
        return future

    def close(self, *, wait: bool = True) -> None:
        """Finish the queued operations, close the connection, stop the thread.

        With `wait`, blocks until the thread has stopped: call it off the
        event loop.
        """
        with self._cond:
            self._closing = True
            thread = self._thread
            self._cond.notify()
        if thread is not None:
            if wait and thread is not threading.current_thread():
                thread.join()
        elif self._conn is not None:
            self.closer(self._conn)
            self._conn = None

    # -- the thread ----------------------------------------------------------

    def _main(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    break
                group = [
                    self._queue.popleft()
                    for _ in range(min(self.max_group, len(self._queue)))
                ]
            try:
                self._run(group)
            except BaseException as exc:  # never leave a caller waiting forever
                self._fail(group, StorageError(f"the SQLite writer crashed: {exc!r}"))
                raise
            # Do not keep the finished operations (and what their closures
            # hold, such as the backend) alive while waiting for the next ones.
            del group
        if self._conn is not None:
            self.closer(self._conn)
            self._conn = None

    def _run(self, group: list[_Job[Any]]) -> None:
        jobs = [j for j in group if j.future.set_running_or_notify_cancel()]
        if not jobs:
            return
        if self._poison is not None:
            self._fail(jobs, self._poisoned())
            return
        if self._conn is None:
            try:
                self._conn = self.opener()
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
            try:
                conn.execute("SAVEPOINT op")
                value = job.operation(tx)
                conn.execute("RELEASE op")
            except Exception as exc:  # noqa: BLE001 - each failure goes to its caller
                tx.rollback_memory()
                if not isinstance(exc, sqlite3.Error):
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    refused.append((job, exc))
                    continue
                error = storage_error(exc, "writing", self.path)
                error.__cause__ = exc
                if is_io(exc) or not conn.in_transaction:
                    # The storage failed, or SQLite rolled the whole
                    # transaction back: nothing of this group was written.
                    self._undo(done)
                    self._rollback(conn)
                    if is_io(exc):
                        self._poison_with(error)
                        self._fail([j for j in jobs if j is not job], self._poisoned())
                        self._fail([job], error)
                        return []
                    self._fail([job], error)
                    return [j for j in jobs if j is not job]
                conn.execute("ROLLBACK TO op")
                conn.execute("RELEASE op")
                refused.append((job, error))
                continue
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
            self._fail([j for j, _, _ in done], error)
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
        stats = self.stats
        stats.groups += 1
        stats.operations += len(done)
        stats.largest_group = max(stats.largest_group, len(done))
        for job, value, _ in done:
            job.future.set_result(value)
        self._settle_refused(refused)
        return []

    # -- helpers ---------------------------------------------------------------

    @staticmethod
    def _undo(done: list[tuple[_Job[Any], Any, Tx]]) -> None:
        for _, _, tx in reversed(done):
            tx.rollback_memory()

    @staticmethod
    def _settle_refused(refused: list[tuple[_Job[Any], BaseException]]) -> None:
        for job, error in refused:
            job.future.set_exception(error)

    @staticmethod
    def _fail(jobs: list[_Job[Any]], error: BaseException) -> None:
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(error)

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
