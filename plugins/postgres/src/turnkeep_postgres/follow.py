"""`wait_for_commit` for PostgreSQL: `LISTEN` to the commits' `NOTIFY`.

Every commit that moves a session's `next_seq` sends a notification from
inside its own transaction (a trigger, schema migration 5), delivered when
that transaction commits and never if it rolls back. A backend instance
that follows sessions keeps one connection of its own that `LISTEN`s on its
schema's channel; a task reads the notifications and wakes the waiters of
the session each one names. A follower on another machine thus sees a
commit without polling: a wait costs one `last_seq` when it starts and one
per notification for its session. If the listening connection fails, its
waiters are woken, re-check the session row, and the next wait connects
again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import psycopg
from psycopg import AsyncConnection, sql

from turnkeep.errors import PersistenceError
from turnkeep_postgres.schema import commit_channel
from turnkeep_postgres.sqlerrors import storage_error

__all__ = ["CommitListener"]

log = logging.getLogger("turnkeep_postgres")


@attrs.define(eq=False)
class CommitListener:
    """One `LISTEN` connection and the waiters it wakes, per backend instance."""

    connect: Callable[[], Awaitable[AsyncConnection[Any]]]
    schema: str
    where: str
    _waiters: dict[str, set[asyncio.Event]] = attrs.field(
        init=False, factory=dict[str, set[asyncio.Event]]
    )
    _task: asyncio.Task[None] | None = attrs.field(init=False, default=None)
    _starting: asyncio.Lock = attrs.field(init=False, factory=asyncio.Lock)
    _closed: bool = attrs.field(init=False, default=False)

    async def wait(
        self,
        session_id: str,
        last_seq: Callable[[], Awaitable[int]],
        after_seq: int,
        within: float,
    ) -> int:
        """The last durable seq once past `after_seq`, or after `within` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        last = await last_seq()
        if last > after_seq or within <= 0:
            return last
        wake = asyncio.Event()
        self._waiters.setdefault(session_id, set()).add(wake)
        try:
            while True:
                # Listening first, the row after: a commit between the two
                # is seen by one or the other.
                await self._listening()
                wake.clear()
                last = await last_seq()
                remaining = deadline - loop.time()
                if last > after_seq or remaining <= 0:
                    return last
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), remaining)
        finally:
            waiters = self._waiters.get(session_id)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._waiters[session_id]

    async def close(self) -> None:
        """Stop listening (waiters still waiting are woken). Idempotent."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _listening(self) -> None:
        if self._closed:
            raise PersistenceError(f"the PostgreSQL backend for {self.where} is closed")
        if self._task is not None and not self._task.done():
            return
        async with self._starting:
            if self._task is not None and not self._task.done():
                return
            try:
                conn = await self.connect()
            except psycopg.Error as exc:
                raise storage_error(exc, "listening for commits", self.where) from exc
            try:
                channel = sql.Identifier(commit_channel(self.schema))
                await conn.execute(sql.SQL("LISTEN {}").format(channel))
            except psycopg.Error as exc:
                await conn.close()
                raise storage_error(exc, "listening for commits", self.where) from exc
            self._task = asyncio.get_running_loop().create_task(
                self._deliver(conn), name="turnkeep-postgres-follow"
            )

    async def _deliver(self, conn: AsyncConnection[Any]) -> None:
        try:
            async for note in conn.notifies():
                _, _, session_id = note.payload.partition(" ")
                for wake in self._waiters.get(session_id, ()):
                    wake.set()
        except psycopg.Error as exc:
            log.warning("turnkeep-postgres: stopped listening for commits: %s", exc)
        finally:
            with contextlib.suppress(psycopg.Error):
                await conn.close()
            # Whoever waits re-checks its session and listens again.
            for waiters in self._waiters.values():
                for wake in waiters:
                    wake.set()
