"""`wait_for_commit` for JSONL: the log file's `stat`, polled.

A commit appends to the session's log (its records, then the commit line)
and syncs it, so a commit changes the log's size; a repair or a takeover
that rewrites the log replaces the file (another inode). A follower stats
the log every `POLL_SECONDS` (one system call, no read, no lock: the
writer never notices) and only when the answer changed reads the log's
last control line (`last_seq`, a read at the end of the file), so waiting
costs the same whatever the log's size. Polling, not inotify: it needs
nothing beyond the standard library, works on every file system the
store works on (network ones included), and a commit is seen within
`POLL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final, TypeAlias

__all__ = ["POLL_SECONDS", "wait_for_commit"]

POLL_SECONDS: Final = 0.005
"""How often a follower stats the log it waits on."""

_Signature: TypeAlias = tuple[int, int, int, int] | None


async def wait_for_commit(
    last_seq: Callable[[], Awaitable[int]],
    locate: Callable[[], Awaitable[Path]],
    after_seq: int,
    within: float,
) -> int:
    """The last durable seq once past `after_seq`, or after `within` seconds.

    `last_seq` reads the log's last control line and `locate` finds the
    log's path; both raise `SessionNotFoundError` once the session is gone.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    last = await last_seq()
    if last > after_seq or within <= 0:
        return last
    path = await locate()
    # The file's state is taken first and the last seq after it, so a
    # commit between the two is seen by one or the other.
    seen = _signature(path)
    while True:
        last = await last_seq()
        if last > after_seq:
            return last
        if seen is None:  # gone or moved, yet `last_seq` found it: follow it
            path = await locate()
            seen = _signature(path)
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return await last_seq()
            await asyncio.sleep(min(POLL_SECONDS, remaining))
            now = _signature(path)
            if now != seen:
                seen = now
                break


def _signature(path: Path) -> _Signature:
    try:
        st = os.stat(path)
    except OSError:  # gone (deleted, or renamed over): `last_seq` says which
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
