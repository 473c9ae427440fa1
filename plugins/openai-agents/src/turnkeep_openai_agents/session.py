"""`TurnkeepSession`: the Agents SDK's `Session` on a turnkeep store.

Each SDK session is a turnkeep session with the same id, its items stored
as `oai/*` events (`turnkeep_openai_agents.events`). It behaves as the
SDK's `SQLiteSession` in everything the `Session` protocol promises; what
differs is the store: durable per call on any turnkeep backend, one writer
process per session, readable with the `turnkeep` command.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from turnkeep.errors import SessionClosedError
from turnkeep.host import Host
from turnkeep.ids import validate_session_id

from .items import StoreItems, copy_items
from .runtime import join, leave, runner_for

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["TurnkeepSession"]

T = TypeVar("T")


class TurnkeepSession:
    """An Agents SDK session stored on a turnkeep store.

    Args:
        session_id: the conversation's id (also its turnkeep session id).
        store: a store spec (`"sqlite:./agents.db"`, `"jsonl:./sessions"`,
            `"postgres:postgresql://host/db"`, `"memory"`), a started `Host`
            (then call the session from the loop that runs it), or `None`
            for the store turnkeep's configuration chooses.
        session_settings: as the SDK's sessions take (`limit`: the default
            number of items `get_items` returns).

    Raises:
        InvalidSessionIdError: the id is not storable (empty, NUL, too long).
        ValueError: the store spec is malformed.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: str | Host | None = None,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self.session_id = validate_session_id(session_id)
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self._store = store
        _, self._key = runner_for(store)  # a malformed spec fails here, not later
        join(self._key, self.session_id)
        self._closed = False

    def __repr__(self) -> str:
        return f"TurnkeepSession({self.session_id!r})"

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest `limit` items in order (all when `None`, as the settings say).

        A `limit` of 0 returns nothing and a negative one returns every item,
        as `SQLiteSession` does.
        """
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None and wanted <= 0:
            wanted = None if wanted < 0 else 0
        if wanted == 0:
            self._check_open()
            return []
        found = await self._run(lambda s: s.get(self.session_id, wanted))
        return cast("list[TResponseInputItem]", found)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append `items` (one event, durable when this returns).

        Raises:
            SessionClosedError: this object was closed.
            SessionLockedError: another process writes this session.
            EventRejectedError: an item is not plain JSON
                (`LossyPayloadError`, naming where), or the batch is larger
                than `max_event_bytes`; nothing was stored.
            FlushError: the store failed (the change may or may not be
                stored: the next read says which).
        """
        self._check_open()
        if not items:
            return
        copied = copy_items(cast("list[Any]", items))
        await self._run(lambda s: s.add(self.session_id, copied), mutation=True)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it (`None` if there is none)."""
        item = await self._run(lambda s: s.pop(self.session_id), mutation=True)
        return cast("TResponseInputItem | None", item)

    async def clear_session(self) -> None:
        """Remove every item of this session (others are untouched).

        The items stay in the append-only log, hidden, until the session is
        erased (`turnkeep rm`, or `turnkeep prune` once it is old enough).
        """
        await self._run(lambda s: s.clear(self.session_id), mutation=True)

    def close(self) -> None:
        """Stop using this object; the last one of an id releases its writer role.

        Idempotent. The store's host keeps running for other sessions (it
        closes at exit, or with `turnkeep_openai_agents.shutdown()`). With a
        `Host` you passed, the session stays live in it until you close it.
        """
        if self._closed:
            return
        self._closed = True
        if leave(self._key, self.session_id) and not isinstance(self._store, Host):
            runner, _ = runner_for(self._store)
            if runner.items is not None:
                runner.run_sync(lambda s: s.release(self.session_id))

    def __del__(self) -> None:
        # An object dropped without close() no longer counts as a user (its
        # writer role is released at exit, or when another object closes).
        # Never raises: it may run at interpreter exit, or inside a garbage
        # collection anywhere.
        with contextlib.suppress(Exception):
            if not getattr(self, "_closed", True):
                self._closed = True
                leave(self._key, self.session_id)

    # -- helpers -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"TurnkeepSession {self.session_id!r} is closed")

    async def _run(
        self, op: Callable[[StoreItems], Awaitable[T]], *, mutation: bool = False
    ) -> T:
        self._check_open()
        runner, _ = runner_for(self._store)
        return await runner.run(op, mutation=mutation)
