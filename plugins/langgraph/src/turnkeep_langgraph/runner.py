"""One host per store per process, on a private event-loop thread, shared.

A turnkeep `Host` and its sessions belong to the event loop they started
on. LangGraph calls a checkpointer from anywhere: sync methods from worker
threads, async ones from whatever loop runs the graph (`invoke` inside an
`asyncio.run`, a new loop per call, several loops at once). So each store
gets one host, started on a daemon thread that runs its own loop, shared by
every saver on that store in this process; calls cross to that loop and
back (`Portal`). The hosts are closed at interpreter exit (their sessions
flushed and released), or when the last saver of a store is closed.

A host the caller started itself is used on the caller's loop instead: its
async methods run there directly, sync ones from other threads cross to it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import attrs

from turnkeep.config import Config, load_config
from turnkeep.errors import ConfigurationError
from turnkeep.host import Host
from turnkeep.storespec import parse_spec

from . import events
from .threads import ThreadStore

__all__ = ["Portal", "Shared", "acquire", "release"]

T = TypeVar("T")

_log = logging.getLogger("turnkeep")

_CLOSE_TIMEOUT_S = 30.0


@attrs.define(eq=False)
class Portal:
    """Runs coroutines on one loop, for callers on any thread or loop."""

    loop: asyncio.AbstractEventLoop
    thread: int
    """`threading.get_ident()` of the thread that runs `loop`."""

    def run(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run `make()` on the loop and wait for it (from any other thread).

        Raises:
            ConfigurationError: called on the loop's own thread, where
                waiting would block the loop forever.
        """
        if threading.get_ident() == self.thread:
            raise ConfigurationError(
                "a sync TurnkeepSaver method was called on the event loop its "
                "host runs on; waiting there would block it: use the async "
                "method (aget_tuple, aput, ...) or let the saver start its own "
                "host (store='sqlite:...')"
            )
        return asyncio.run_coroutine_threadsafe(make(), self.loop).result()

    async def arun(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run `make()` on the loop from any loop.

        A caller cancelled meanwhile stops waiting; the call itself runs to
        its end, so a thread's index never misses what was appended.
        """
        if asyncio.get_running_loop() is self.loop:
            return await make()
        future = asyncio.run_coroutine_threadsafe(make(), self.loop)
        return await asyncio.shield(asyncio.wrap_future(future))


@attrs.define(eq=False)
class Shared:
    """A started host, its portal, its threads, and how many savers use it."""

    key: object
    host: Host
    portal: Portal
    threads: ThreadStore
    owned: bool
    users: int = 0


_lock = threading.Lock()
_shared: dict[object, Shared] = {}
_loop: Portal | None = None
_threads: list[threading.Thread] = []


def _background() -> Portal:
    global _loop
    if _loop is None:
        loop = asyncio.new_event_loop()
        started = threading.Event()
        ident: list[int] = []

        def main() -> None:
            asyncio.set_event_loop(loop)
            ident.append(threading.get_ident())
            loop.call_soon(started.set)
            loop.run_forever()

        thread = threading.Thread(target=main, name="turnkeep-langgraph", daemon=True)
        thread.start()
        started.wait()
        _loop = Portal(loop, ident[0])
        _threads.append(thread)
        atexit.register(_close_all)
    return _loop


def _config(store: str | None) -> Config:
    if store is None:
        return load_config()
    try:
        spec = parse_spec(store)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
    return load_config(overrides=spec.overrides())


def acquire(store: str | Host | None) -> Shared:
    """The shared host of `store`, started on first use.

    Args:
        store: a store spec (`sqlite:PATH`, `jsonl:DIR`, `postgres:DSN`,
            `memory`), a started `Host` (used on the loop running now), or
            `None` for turnkeep's configuration (files and environment).

    Raises:
        ConfigurationError: the spec is malformed, a `Host` was given with
            no running loop or not started, or the store cannot start.
        PersistenceNotConfiguredError: the store has no backend.
    """
    if isinstance(store, Host):
        return _acquire_host(store)
    key = ("spec", store)
    with _lock:
        shared = _shared.get(key)
        if shared is None:
            portal = _background()
            config = _config(store)
            host = portal.run(lambda: _start(config))
            shared = Shared(key, host, portal, ThreadStore(host), owned=True)
            _shared[key] = shared
        shared.users += 1
        return shared


async def _start(config: Config) -> Host:
    host = Host(config, plugins=[events])
    await host.start()
    try:
        host.require_persistence()
    except BaseException:
        await host.aclose()
        raise
    return host


def _acquire_host(host: Host) -> Shared:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise ConfigurationError(
            "TurnkeepSaver(store=host) must be created on the loop the host "
            "runs on (inside that loop's code), or given a store spec instead"
        ) from None
    host.require_persistence()
    key = ("host", id(host))
    with _lock:
        shared = _shared.get(key)
        if shared is None or shared.host is not host:
            host.register(events, "langgraph")
            portal = Portal(loop, threading.get_ident())
            shared = Shared(key, host, portal, ThreadStore(host), owned=False)
            _shared[key] = shared
        shared.users += 1
        return shared


def release(shared: Shared) -> None:
    """One saver less on `shared`; the last one closes a host the saver started.

    A host given by the caller is left running (its threads are closed).
    """
    with _lock:
        shared.users -= 1
        if shared.users > 0:
            return
        del _shared[shared.key]
    if shared.owned:
        shared.portal.run(lambda: _close(shared))
    elif (
        threading.get_ident() != shared.portal.thread
        and shared.portal.loop.is_running()
    ):
        # The caller's host: let its threads go while its loop runs (a loop
        # that ended took them along when the host was closed).
        shared.portal.run(shared.threads.aclose)


async def arelease(shared: Shared) -> None:
    """`release` from a coroutine."""
    with _lock:
        shared.users -= 1
        if shared.users > 0:
            return
        del _shared[shared.key]
    await shared.portal.arun(
        (lambda: _close(shared)) if shared.owned else shared.threads.aclose
    )


async def _close(shared: Shared) -> None:
    try:
        await shared.threads.aclose()
    finally:
        await shared.host.aclose()


class _AtExitExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each call at once, on the caller's thread.

    At interpreter exit every `ThreadPoolExecutor` refuses new work, so a
    backend that closes through `asyncio.to_thread` (SQLite) could not
    close: its host's dispose failed with a traceback on stderr. Nothing
    else runs on the portal's loop by then, so blocking it is harmless.
    """

    def submit(  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride] - same call, no pool
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller
            future.set_exception(exc)
        return future


def _close_all() -> None:
    with _lock:
        owned = [s for s in _shared.values() if s.owned]
        _shared.clear()
    portal = _loop
    if portal is None:
        return
    if owned:
        # Before the closes are scheduled: the loop runs callbacks in order.
        portal.loop.call_soon_threadsafe(
            portal.loop.set_default_executor, _AtExitExecutor(max_workers=1)
        )
    for shared in owned:
        future = asyncio.run_coroutine_threadsafe(_close(shared), portal.loop)
        try:
            future.result(timeout=_CLOSE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - exiting: log it, close the others
            _log.exception("closing the LangGraph saver's store at exit failed")
    portal.loop.call_soon_threadsafe(portal.loop.stop)
    for thread in _threads:
        thread.join(timeout=_CLOSE_TIMEOUT_S)
    if not portal.loop.is_running():
        portal.loop.close()
