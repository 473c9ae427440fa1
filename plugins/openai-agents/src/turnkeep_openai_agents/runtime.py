"""Where the store's work runs: one private event loop thread per process.

The Agents SDK calls a session from whatever event loop it runs on
(`Runner.run_sync` makes a new loop per call) and from several threads. A
turnkeep host and its backend belong to one loop, so every store a spec
names gets one host per process, started once on a private background
loop thread and shared by every session object on that store; calls from
any loop or thread are handed to it and awaited. The hosts are closed at
interpreter exit (or by `shutdown`); a later session starts them again.

A `Host` passed by the caller stays on the caller's loop: its operations
run where they are called, and a call from another loop is refused.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import attrs

from turnkeep.config import load_config
from turnkeep.errors import ConfigurationError
from turnkeep.host import Host
from turnkeep.storespec import StoreSpec, parse_spec

from . import plugin
from .items import StoreItems

__all__ = ["Runner", "StoreKey", "join", "leave", "runner_for", "shutdown"]

T = TypeVar("T")

StoreKey = tuple[str, tuple[tuple[str, str], ...]]

_DEFAULT: Final[StoreKey] = ("", ())
"""The key of the store turnkeep's configuration chooses."""

_CLOSE_TIMEOUT: Final = 30.0
"""Seconds `shutdown` waits for the hosts to store what they hold."""


@attrs.define(eq=False)
class Runner:
    """Runs a store's operations on the loop its host belongs to."""

    items: StoreItems | None
    _make: Callable[[], Awaitable[StoreItems]] | None = attrs.field(alias="make")
    _loop: asyncio.AbstractEventLoop | None = attrs.field(alias="loop")
    _background: bool = attrs.field(alias="background")
    _starting: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)

    async def run(
        self, op: Callable[[StoreItems], Awaitable[T]], *, mutation: bool
    ) -> T:
        """Run `op` on the host's loop and return what it returns.

        A mutation that has begun is waited for even if the caller is
        cancelled (then `CancelledError` is raised once it ends), as the
        SDK's own sessions do: a change is never left half made.

        Raises:
            ConfigurationError: a caller's host is used from another loop.
        """
        if not self._background:
            current = asyncio.get_running_loop()
            if self._loop is None:
                self._loop = current
            elif self._loop is not current:
                raise ConfigurationError(
                    "a TurnkeepSession on a Host you passed must be used from the "
                    "event loop that runs that host; pass a store spec instead to "
                    "use it from any loop or thread"
                )
            return await op(await self._ready())
        assert self._loop is not None  # noqa: S101 - background runners have one
        future = asyncio.run_coroutine_threadsafe(self._on_loop(op), self._loop)
        if not mutation:
            return await asyncio.wrap_future(future)
        return await _outlast_cancellation(future)

    def run_sync(self, op: Callable[[StoreItems], Awaitable[T]]) -> T:
        """Run `op` from synchronous code (a background runner only)."""
        assert self._loop is not None  # noqa: S101 - only background runners
        assert self._background  # noqa: S101
        future = asyncio.run_coroutine_threadsafe(self._on_loop(op), self._loop)
        return future.result()

    async def _on_loop(self, op: Callable[[StoreItems], Awaitable[T]]) -> T:
        return await op(await self._ready())

    async def _ready(self) -> StoreItems:
        if self.items is None:
            async with self._starting:
                if self.items is None:
                    assert self._make is not None  # noqa: S101
                    self.items = await self._make()
        return self.items

    async def aclose(self) -> None:
        """Close the host this runner started (not a host a caller passed)."""
        if self._background and self.items is not None:
            items, self.items = self.items, None
            await items.host.aclose()


async def _outlast_cancellation(future: concurrent.futures.Future[T]) -> T:
    waiting = asyncio.wrap_future(future)
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(waiting)
        except asyncio.CancelledError as exc:
            if waiting.done():
                raise  # cancelled by the runner's own shutdown
            cancelled = cancelled or exc
            continue
        if cancelled is not None:
            raise cancelled
        return result


@attrs.define(eq=False)
class _Background:
    """The private loop thread and the runners on it (one per process)."""

    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    runners: dict[StoreKey, Runner] = attrs.field(factory=dict[StoreKey, Runner])


_guard = threading.RLock()  # re-entrant: a session's __del__ may run under it
_background: _Background | None = None
_hosted: dict[int, Runner] = {}
"""Runners over hosts callers passed, by `id(host)` (each keeps its host)."""
_hosts: dict[int, Host] = {}
_users: dict[tuple[StoreKey | int, str], int] = {}
"""How many open `TurnkeepSession` objects use each (store, session id)."""


def join(key: StoreKey | int, session_id: str) -> None:
    """Count one more open session object of `session_id` on store `key`."""
    with _guard:
        _users[key, session_id] = _users.get((key, session_id), 0) + 1


def leave(key: StoreKey | int, session_id: str) -> bool:
    """Count one fewer; whether it was the last one."""
    with _guard:
        left = _users.get((key, session_id), 0) - 1
        if left > 0:
            _users[key, session_id] = left
            return False
        _users.pop((key, session_id), None)
        return True


def runner_for(store: str | Host | None) -> tuple[Runner, StoreKey | int]:
    """The runner of `store` (a spec, a started `Host`, or `None`: configuration).

    Raises:
        ValueError: the spec is malformed.
    """
    if isinstance(store, Host):
        with _guard:
            key = id(store)
            runner = _hosted.get(key)
            if runner is None or _hosts.get(key) is not store:
                store.register(plugin, None)  # idempotent: it may be loaded already
                runner = Runner(
                    StoreItems(store), make=None, loop=None, background=False
                )
                _hosted[key], _hosts[key] = runner, store
            return runner, key
    spec = parse_spec(store) if store is not None else None
    store_key = spec.key() if spec is not None else _DEFAULT
    with _guard:
        background = _start_background()
        runner = background.runners.get(store_key)
        if runner is None:
            runner = Runner(
                None,
                make=lambda: _start_host(spec),
                loop=background.loop,
                background=True,
            )
            background.runners[store_key] = runner
        return runner, store_key


async def _start_host(spec: StoreSpec | None) -> StoreItems:
    config = load_config(overrides=spec.overrides() if spec is not None else None)
    host = Host(config, plugins=[plugin])
    await host.start()
    try:
        host.require_persistence()
    except BaseException:
        await host.aclose()
        raise
    return StoreItems(host)


def _start_background() -> _Background:
    global _background
    if _background is None or not _background.thread.is_alive():
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=loop.run_forever, name="turnkeep-openai-agents", daemon=True
        )
        thread.start()
        _background = _Background(loop, thread)
    return _background


def shutdown(timeout: float = _CLOSE_TIMEOUT) -> None:
    """Close every host this package started, and its loop thread.

    Each host closes its live sessions (storing what they hold and releasing
    their writer roles). Sessions used afterwards start a fresh host. Hosts
    a caller passed are theirs to close.
    """
    global _background
    with _guard:
        background, _background = _background, None
        _hosted.clear()
        _hosts.clear()
    if background is None or not background.thread.is_alive():
        return

    async def close_all() -> None:
        await asyncio.gather(
            *(r.aclose() for r in background.runners.values()), return_exceptions=True
        )

    try:
        asyncio.run_coroutine_threadsafe(close_all(), background.loop).result(timeout)
    finally:
        background.loop.call_soon_threadsafe(background.loop.stop)
        background.thread.join(timeout)
        if not background.thread.is_alive():
            background.loop.close()


def _forget_after_fork() -> None:
    # The child has no loop thread: its first session starts its own.
    global _background
    _background = None
    _hosted.clear()
    _hosts.clear()


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget_after_fork)
