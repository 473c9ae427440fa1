"""`wait_for_commit` for SQLite: `PRAGMA data_version`, polled.

SQLite tells a connection that another connection committed to the file:
`PRAGMA data_version` changes. A follower opens one reader connection of
its own (it never writes, so every commit, this process's writer's
included, is another connection's) and asks it every `POLL_SECONDS`,
which reads a counter in the shared WAL index: no table, no log. Only when
the number moved does it ask the session row for the last seq, so a wait
costs the same whatever the session's size. A connection that cannot
see commits (an `immutable` reader of a file nobody may write) is not
used: the wait then polls the session row (`turnkeep.follow`).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Final

from turnkeep.follow import POLL_SECONDS as ROW_POLL_SECONDS
from turnkeep_sqlite.config import SqliteConfig
from turnkeep_sqlite.schema import connect_reader
from turnkeep_sqlite.sqlerrors import storage_error

__all__ = ["POLL_SECONDS", "wait_for_commit"]

POLL_SECONDS: Final = 0.005
"""How often a follower asks its connection's `data_version`."""


async def wait_for_commit(
    config: SqliteConfig,
    last_seq: Callable[[], Awaitable[int]],
    after_seq: int,
    within: float,
) -> int:
    """The last durable seq once past `after_seq`, or after `within` seconds.

    `last_seq` reads the session row (and raises `SessionNotFoundError`
    once the session is gone).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    last = await last_seq()
    if last > after_seq or within <= 0:
        return last
    conn, immutable = await asyncio.to_thread(
        connect_reader, config, probe_header=False
    )
    try:
        # The baseline comes first and the row after it, so a commit
        # between the two is seen by one or the other.
        version = _data_version(conn, config)
        interval = ROW_POLL_SECONDS if immutable else POLL_SECONDS
        while True:
            last = await last_seq()
            if last > after_seq:
                return last
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return await last_seq()
                await asyncio.sleep(min(interval, remaining))
                now = _data_version(conn, config)
                if now != version or immutable:
                    version = now
                    break
    finally:
        conn.close()


def _data_version(conn: sqlite3.Connection, config: SqliteConfig) -> int:
    try:
        row = conn.execute("PRAGMA data_version").fetchone()
    except sqlite3.Error as exc:
        raise storage_error(exc, "watching for commits", config.path) from exc
    return int(row[0])
