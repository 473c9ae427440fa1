"""Following a session from outside the process that writes it.

`CommitWaiter` is an optional backend capability (checked like `held` and
`load_after`: by the method's presence): `wait_for_commit(session_id,
after_seq, within)` returns once the session's last durable seq is past
`after_seq`, or when `within` seconds have passed, with the last durable
seq either way. A follower (`turnkeep tail -f`, a service streaming a
session) waits, then reads only what is new with `read_after`, so
following a long session costs per new event, not per session size.

The contract [wait-for-commit], which the conformance kit checks:

- It returns what `last_seq` returns (the last record `load` would
  return), never a seq of a torn or unfinished flush: at once if that is
  already past `after_seq`, else as soon as a
  commit by any writer (this instance, another instance, another process,
  for a shared database another machine) takes it past, else after
  `within` seconds with the unchanged last seq.
- It is read-only and takes no lock; waiting costs no log read (a stat, a
  `PRAGMA data_version`, a `LISTEN`), and each wake one `last_seq`.
- `SessionNotFoundError` for a session that is not stored (or is deleted
  while waited on), `InvalidSessionIdError` for an unstorable id,
  `ValueError` for `after_seq` < -1 or a negative or non-finite `within`.

A backend without it is followed by `wait_for_commit` here, which polls
`last_durable_seq` every `POLL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import math
from typing import Final, Protocol, cast

from turnkeep.eventreads import last_durable_seq
from turnkeep.persistence import SessionPersistence

__all__ = [
    "POLL_SECONDS",
    "CommitWaiter",
    "check_wait",
    "has_commit_waiter",
    "poll_for_commit",
    "wait_for_commit",
]

POLL_SECONDS: Final = 0.05
"""How often the fallback asks a backend without `wait_for_commit`."""


class CommitWaiter(Protocol):
    """The optional method that wakes a follower at the next commit."""

    async def wait_for_commit(
        self, session_id: str, after_seq: int, within: float
    ) -> int:
        """The last durable seq once it is past `after_seq`, or at `within`.

        Raises:
            ValueError: `after_seq` < -1, or `within` negative or not finite.
            SessionNotFoundError: the session is not stored.
            InvalidSessionIdError: the id is not storable.
        """
        ...


def has_commit_waiter(backend: object) -> bool:
    """Whether `backend` has its own `wait_for_commit` (see [wait-for-commit])."""
    return callable(getattr(backend, "wait_for_commit", None))


def check_wait(after_seq: int, within: float) -> None:
    """Refuse a wait before anything is read.

    Raises:
        ValueError: `after_seq` < -1, or `within` negative or not finite.
    """
    if after_seq < -1:
        raise ValueError(
            f"after_seq must be -1 (nothing yet) or a seq, not {after_seq}"
        )
    if not (math.isfinite(within) and within >= 0):
        raise ValueError(
            f"within must be a finite number of seconds >= 0, not {within}"
        )


async def wait_for_commit(
    backend: SessionPersistence, session_id: str, after_seq: int, within: float
) -> int:
    """`backend.wait_for_commit(...)`, or `poll_for_commit` for a backend without it.

    Raises:
        ValueError, SessionNotFoundError, InvalidSessionIdError: as
            `CommitWaiter.wait_for_commit`.
    """
    check_wait(after_seq, within)
    if has_commit_waiter(backend):
        waiter = cast("CommitWaiter", backend)
        return await waiter.wait_for_commit(session_id, after_seq, within)
    return await poll_for_commit(backend, session_id, after_seq, within)


async def poll_for_commit(
    backend: SessionPersistence,
    session_id: str,
    after_seq: int,
    within: float,
    *,
    interval: float = POLL_SECONDS,
) -> int:
    """Ask `last_durable_seq` every `interval` seconds until it passes `after_seq`.

    The fallback for backends without `wait_for_commit`; also the last
    resort of a backend whose notification channel is down.
    """
    check_wait(after_seq, within)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        last = await last_durable_seq(backend, session_id)
        remaining = deadline - loop.time()
        if last > after_seq or remaining <= 0:
            return last
        await asyncio.sleep(min(interval, remaining))
