"""The backends' thread hops as they were before `bench_hop` (the "before" rows).

Kept only so that `bench_hop` can measure the old and the new hop in one run,
side by side: the JSONL backend's shared-queue pool (every idle thread
waiting on one `SimpleQueue`, so a job wakes whichever thread waited
longest) and the SQLite writer's staged hand-off (operations collected for
one event-loop iteration by `call_soon`, then handed over under a
`threading.Condition`). `install_before` swaps them into a backend
instance; nothing else changes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from turnkeep.errors import PersistenceError, StorageError
from turnkeep_jsonl import JsonlPersistence
from turnkeep_sqlite import SqlitePersistence
from turnkeep_sqlite.writer import (  # pyright: ignore[reportPrivateUsage]
    Operation,
    Unknown,
    Writer,
    _Job,  # pyright: ignore[reportPrivateUsage]
)

__all__ = ["SharedQueueWorkers", "StagedWriter", "install_before"]

T = TypeVar("T")
_PoolJob = tuple[
    asyncio.AbstractEventLoop,
    "asyncio.Future[Any]",
    Callable[..., Any],
    tuple[Any, ...],
]


def _resolve(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _reject(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class SharedQueueWorkers:
    """The JSONL hop before: `count` threads started at once on one queue."""

    def __init__(self, count: int, name: str) -> None:
        self._count = count
        self._name = name
        self._queue: queue.SimpleQueue[_PoolJob | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._mu = threading.Lock()

    def _start(self) -> None:
        with self._mu:
            while len(self._threads) < self._count:
                thread = threading.Thread(
                    target=self._serve,
                    name=f"{self._name}-{len(self._threads)}",
                    daemon=True,
                )
                thread.start()
                self._threads.append(thread)

    def _serve(self) -> None:
        get = self._queue.get
        while True:
            job = get()
            if job is None:
                return
            loop, future, fn, args = job
            try:
                outcome: tuple[Callable[..., None], Any] = (_resolve, fn(*args))
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
                outcome = (_reject, exc)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(outcome[0], future, outcome[1])

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if len(self._threads) < self._count:
            self._start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((loop, future, fn, args))
        return await future

    def stop(self) -> None:
        with self._mu:
            for _ in self._threads:
                self._queue.put(None)
            self._threads.clear()


@attrs.define(eq=False)
class StagedWriter(Writer):
    """The SQLite hop before: staged per loop iteration, then a `Condition`."""

    _pending: collections.deque[Any] = attrs.field(
        init=False, factory=collections.deque[Any]
    )
    _cond: threading.Condition = attrs.field(init=False, factory=threading.Condition)
    _staged: dict[asyncio.AbstractEventLoop, list[Any]] = attrs.field(
        init=False, factory=dict[asyncio.AbstractEventLoop, list[Any]]
    )
    _stage_lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _stopping: bool = attrs.field(init=False, default=False)
    _worker: threading.Thread | None = attrs.field(init=False, default=None)

    def submit(
        self, operation: Operation[T], *, unknown: Unknown | None = None
    ) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        job = _writer_job(operation, future, loop, unknown)
        with self._stage_lock:
            staged = self._staged.get(loop)
            if staged is None:
                staged = self._staged[loop] = []
                loop.call_soon(self._hand_off, loop)
            staged.append(job)
        return future

    def _hand_off(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._stage_lock:
            jobs = self._staged.pop(loop, [])
        with self._cond:
            if self._stopping:
                error = PersistenceError(
                    f"the SQLite backend for {self.path} is closed"
                )
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(error)
                return
            self._pending.extend(jobs)
            if self._worker is None:
                self._worker = threading.Thread(target=self._staged_main, daemon=True)
                self._worker.start()
            self._cond.notify()

    def close(self, *, wait: bool = True) -> None:
        with self._cond:
            self._stopping = True
            thread = self._worker
            self._cond.notify()
        if thread is not None and wait and thread is not threading.current_thread():
            thread.join()
        super().close(wait=wait)  # the base thread never started: closes the connection

    def _staged_main(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending:
                    break
                group = [
                    self._pending.popleft()
                    for _ in range(min(self.max_group, len(self._pending)))
                ]
            try:
                self._run(group)
            except BaseException as exc:
                self._fail(group, StorageError(f"the SQLite writer crashed: {exc!r}"))
                raise
            finally:
                self._deliver()
            del group


def _writer_job(
    operation: Operation[T],
    future: asyncio.Future[T],
    loop: asyncio.AbstractEventLoop,
    unknown: Unknown | None,
) -> Any:
    return _Job(operation, future, loop, unknown=unknown)


def install_before(backend: JsonlPersistence | SqlitePersistence) -> None:
    """Give `backend` the hop it had before (a fresh, unused instance only)."""
    if isinstance(backend, JsonlPersistence):
        workers = SharedQueueWorkers(backend.threads, "jsonl-before")
        backend._workers = workers  # type: ignore[assignment]  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
        return
    now = backend._writer  # pyright: ignore[reportPrivateUsage]
    backend._writer = StagedWriter(  # pyright: ignore[reportPrivateUsage]
        path=now.path,
        opener=now.opener,
        closer=now.closer,
        verify=now.verify,
        busy_timeout_s=now.busy_timeout_s,
        max_group=now.max_group,
    )
