"""The one place that knows pluggy beyond its public API.

The host calls hooks through these helpers and its own typed methods, so
pluggy's untyped results never leak into the rest of the code. Two of them
rely on pluggy internals, for speed on the hot path: `live_impls` (a hook's
`_hookimpls` list, which pluggy keeps current in place) and `direct_caller`
(`PluginManager._inner_hookexec`). `tests/core/test_pluggy_adapter.py`
fails if a pluggy release changes either; the dependency is pinned below
pluggy's next major version.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Final, cast

import pluggy
from pluggy import HookImpl

from turnkeep import hookspecs
from turnkeep.errors import FlushError, HookContractError

__all__ = [
    "FAST_PATH",
    "SESSION_EVENT_ARGS",
    "await_all",
    "call_impl",
    "call_plugin_hook",
    "direct_caller",
    "live_impls",
    "new_manager",
    "refuse_awaitables",
    "validate_plugin",
]


def new_manager() -> pluggy.PluginManager:
    """A fresh plugin manager with turnkeep's hook specifications."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return pm


def _internals() -> tuple[bool, object]:
    """Whether the fast paths' internals are there, and the default executor."""
    pm = new_manager()
    caller = pm.hook.session_event
    hookexec = getattr(pm, "_inner_hookexec", None)
    found = isinstance(getattr(caller, "_hookimpls", None), list) and callable(hookexec)
    return found, hookexec


_FOUND: Final = _internals()

FAST_PATH: Final = _FOUND[0]
"""Whether this pluggy has the internals the fast paths use (else: public API)."""

_MULTICALL: Final = _FOUND[1]
"""pluggy's executor while no hook-call monitoring replaces it."""

SESSION_EVENT_ARGS: Final = ("session", "event")
"""The argument names of the usual `session_event`/`redact_event` signature."""


def validate_plugin(plugin: object) -> None:
    """Register `plugin` with a scratch manager: are its hooks valid?

    Raises:
        pluggy.PluginValidationError, ValueError: as `register` would.
    """
    new_manager().register(plugin)


def live_impls(pm: pluggy.PluginManager, hook_name: str) -> list[HookImpl]:
    """The hook's implementation list that pluggy keeps current in place.

    Empty while no plugin implements the hook, so a caller can skip the hook
    at no cost. Without the internals (`FAST_PATH` false), a snapshot.
    """
    caller = getattr(pm.hook, hook_name)
    if FAST_PATH:
        impls = caller._hookimpls  # pyright: ignore[reportPrivateUsage]
        return cast("list[HookImpl]", impls)
    return caller.get_hookimpls()


def call_impl(impl: HookImpl, **kwargs: Any) -> object:
    """Call one implementation with the arguments it accepts."""
    return impl.function(*(kwargs[name] for name in impl.argnames))


def call_plugin_hook(
    pm: pluggy.PluginManager, plugin: object, hook_name: str, **kwargs: Any
) -> list[object]:
    """Call one plugin's implementation of a hook, registered or not."""
    if pm.parse_hookimpl_opts(plugin, hook_name) is None:
        return []
    function: Callable[..., object] = getattr(plugin, hook_name)
    accepted = inspect.signature(function).parameters
    return [function(**{k: v for k, v in kwargs.items() if k in accepted})]


def direct_caller(
    pm: pluggy.PluginManager, hook_name: str
) -> Callable[..., list[object]]:
    """A caller for a hot hook that skips `HookCaller.__call__`'s per-call work.

    `session_event` runs for every streamed chunk. pluggy's public call path
    re-verifies the argument names and copies the implementation list on every
    call; the arguments are fixed here and implementations must not register
    plugins while they run, so the host goes straight to the manager's
    executor, which keeps ordering, `tryfirst`/`trylast`, error propagation and
    hook-call monitoring. Without the internals, the public caller.
    """
    caller = getattr(pm.hook, hook_name)
    if not FAST_PATH:
        return caller
    hook_impls = live_impls(pm, hook_name)
    # The last implementation found to be plain (positional arguments, no
    # wrapper), so that each call only checks it is still the only one.
    plain: HookImpl | None = None

    def call(session: object, event: object) -> list[object]:
        nonlocal plain
        # Read per call: hook-call monitoring and tracing replace it.
        hookexec = pm._inner_hookexec  # pyright: ignore[reportPrivateUsage]
        if hookexec is _MULTICALL and len(hook_impls) == 1:
            # One plain implementation (the write-behind, usually): what the
            # executor would do for it, without its generic loop.
            impl = hook_impls[0]
            if impl is not plain and (
                impl.argnames == SESSION_EVENT_ARGS
                and not (impl.wrapper or impl.hookwrapper)
            ):
                plain = impl
            if impl is plain:
                result = impl.function(session, event)
                return [] if result is None else [result]
        results = hookexec(
            hook_name, hook_impls, {"session": session, "event": event}, False
        )
        return cast("list[object]", results)

    return call


def refuse_awaitables(results: list[object], hook: str) -> None:
    """Raise if a synchronous hook's implementation returned an awaitable.

    Raises:
        HookContractError: one did (the coroutine is closed, never run).
    """
    awaitables = [r for r in results if inspect.isawaitable(r)]
    if not awaitables:
        return
    for item in awaitables:
        if inspect.iscoroutine(item):
            item.close()  # never awaited by design; close to avoid a warning
    raise HookContractError(
        f"a {hook} implementation returned an awaitable; {hook} is synchronous "
        "(it runs on the hot path): buffer the work and do it at session_flush"
    )


async def await_all(results: list[object], *, session_id: str, what: str) -> None:
    """Await every awaitable result together; failures become one `FlushError`."""
    awaitables: list[Awaitable[object]] = [r for r in results if inspect.isawaitable(r)]
    if not awaitables:
        return
    if len(awaitables) == 1:
        # The usual case (one persistence plugin): await it in place, with no
        # task to create and no trip through the event loop.
        try:
            await awaitables[0]
        except Exception as exc:  # noqa: BLE001 - wrapped just below
            failures: list[BaseException] = [exc]
        else:
            return
    else:
        outcomes = await asyncio.gather(*awaitables, return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, BaseException)]
    if not failures:
        return
    for failure in failures:
        if not isinstance(failure, Exception):
            raise failure  # cancellation and friends are not ours to wrap
    if len(failures) == 1 and isinstance(failures[0], FlushError):
        raise failures[0]
    first = failures[0]
    cause: BaseException = (
        first
        if len(failures) == 1
        else ExceptionGroup(
            f"{len(failures)} {what} implementations failed",
            [f for f in failures if isinstance(f, Exception)],
        )
    )
    raise FlushError(
        f"session {session_id!r}: {what} failed: {first}", session_id=session_id
    ) from cause
