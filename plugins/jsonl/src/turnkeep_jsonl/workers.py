"""The threads that run the backend's blocking calls, and the hop to them.

Owns `Workers`: up to a fixed number of daemon threads, each parked on its
own inbox while idle. A job goes to the thread that went idle *last*, so a
caller that flushes one turn after another always wakes the same, warm
thread: in effect one dedicated writer thread, whose wake-up is the cheapest
the platform offers. Only jobs that arrive while every started thread is
busy start another one (up to `count`), so flushes of different sessions
still run, and fsync, side by side (on ext4, parallel fsyncs share journal
commits; one thread doing them in turn would not). A job that finds the
pool full waits in a backlog that finishing threads drain before parking.

Each result goes back to the submitting event loop with one
`call_soon_threadsafe`. `benchmarks/bench_hop.py` measures this hop beside
`asyncio.to_thread` and a bare dedicated thread: a shared queue that wakes
whichever thread waited longest cost 1.2-2.5x a dedicated thread on a busy
2-core VM; this pool costs what the dedicated thread costs.

A caller that is cancelled stops waiting; the job still runs to its end
(a write is never cut in the middle by a cancellation) and its result is
dropped: the next call on the same session waits for it (see the session
locks in `backend`), and the seq check of the next append reports whatever
it wrote.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from turnkeep.errors import PersistenceError

__all__ = ["Workers"]

T = TypeVar("T")

_Job = tuple[
    asyncio.AbstractEventLoop,
    "asyncio.Future[Any]",
    Callable[..., Any],
    tuple[Any, ...],
]
_Inbox = queue.SimpleQueue[_Job | None]


def _resolve(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # a cancelled caller stopped waiting
        future.set_result(result)


def _reject(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class Workers:
    """Daemon threads running blocking jobs for asyncio callers.

    Args:
        count: the most threads (started when jobs need them).
        name: their name prefix.
    """

    def __init__(self, count: int, name: str) -> None:
        self._count = max(1, count)
        self._name = name
        self._mu = threading.Lock()
        self._idle: list[_Inbox] = []  # parked threads; the last parked last
        self._backlog: collections.deque[_Job] = collections.deque()
        self._started = 0
        self._stopped = False

    @property
    def started(self) -> int:
        """How many threads were started (for tests and benchmarks)."""
        return self._started

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on a worker thread and return (or raise) its outcome.

        Raises:
            PersistenceError: the pool was stopped.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        job: _Job = (loop, future, fn, args)
        with self._mu:
            if self._stopped:
                raise PersistenceError(f"{self._name}: the worker threads were stopped")
            if self._idle:
                inbox: _Inbox | None = self._idle.pop()
            elif self._started < self._count:
                inbox = self._spawn()
            else:
                self._backlog.append(job)
                inbox = None
        if inbox is not None:
            inbox.put(job)
        return await future

    def stop(self) -> None:
        """Let every thread finish its jobs and exit (idempotent)."""
        with self._mu:
            self._stopped = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)
        # A busy thread exits once the backlog is drained (see `_serve`).

    def _spawn(self) -> _Inbox:
        """Start a thread; return its inbox (call with `_mu` held)."""
        inbox: _Inbox = queue.SimpleQueue()
        thread = threading.Thread(
            target=self._serve,
            args=(inbox,),
            name=f"{self._name}-{self._started}",
            # Daemon: an unclosed backend must not keep the process alive;
            # a job cut by exit was not acknowledged anyway.
            daemon=True,
        )
        thread.start()
        self._started += 1
        return inbox

    def _serve(self, inbox: _Inbox) -> None:
        job = inbox.get()
        while job is not None:
            loop, future, fn, args = job
            try:
                outcome: tuple[Callable[..., None], Any] = (_resolve, fn(*args))
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
                outcome = (_reject, exc)
            # Park (or take the next job) *before* answering: the caller's
            # next job then finds this thread, often before it even sleeps.
            job = None
            park = False
            with self._mu:
                if self._backlog:
                    job = self._backlog.popleft()
                elif not self._stopped:
                    self._idle.append(inbox)
                    park = True
            # RuntimeError: the caller's loop is closed, nobody is waiting.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(outcome[0], future, outcome[1])
            # Keep nothing of the finished job alive while parked.
            del loop, future, fn, args, outcome
            if park:
                job = inbox.get()
