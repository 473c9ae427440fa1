"""The threads that run the backend's blocking calls, and the hop to them.

Owns `Workers`: a fixed set of daemon threads fed from one queue, each
result handed back to the submitting event loop with `call_soon_threadsafe`.
It does what `loop.run_in_executor` does with less machinery per call,
which matters here: a flush is one hop, and the hop is most of what a flush
costs beyond its fsync (measured on a 2-core VM: 105-135 us against
160-180 us through a `ThreadPoolExecutor`).

A caller that is cancelled stops waiting; the job still runs to its end
(a write is never cut in the middle by a cancellation) and its result is
dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Workers"]

T = TypeVar("T")

_Job = tuple[
    asyncio.AbstractEventLoop,
    "asyncio.Future[Any]",
    Callable[..., Any],
    tuple[Any, ...],
]


def _resolve(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # a cancelled caller stopped waiting
        future.set_result(result)


def _reject(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class Workers:
    """Daemon threads running blocking jobs for asyncio callers.

    Args:
        count: how many threads (started on first use).
        name: their name prefix.
    """

    def __init__(self, count: int, name: str) -> None:
        self._count = count
        self._name = name
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._mu = threading.Lock()

    def _start(self) -> None:
        with self._mu:
            while len(self._threads) < self._count:
                thread = threading.Thread(
                    target=self._serve,
                    name=f"{self._name}-{len(self._threads)}",
                    # Daemon: an unclosed backend must not keep the process
                    # alive; a job cut by exit was not acknowledged anyway.
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
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
                outcome: tuple[Callable[..., None], Any] = (_reject, exc)
            else:
                outcome = (_resolve, result)
            # RuntimeError: the caller's loop is closed, nobody is waiting.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(outcome[0], future, outcome[1])

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on a worker thread and return (or raise) its outcome."""
        if len(self._threads) < self._count:
            self._start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((loop, future, fn, args))
        return await future

    def stop(self) -> None:
        """Let every thread finish its job and exit (idempotent)."""
        with self._mu:
            for _ in self._threads:
                self._queue.put(None)
            self._threads.clear()
