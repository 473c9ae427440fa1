"""How the host calls hooks: one plugin's implementation, the hot path, awaits.

The host calls hooks only through these helpers and its own typed methods, so
pluggy's untyped results never leak into the rest of the code.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pluggy
from pluggy import HookImpl

from turnkeep.errors import FlushError, HookContractError

__all__ = [
    "await_all",
    "call_impl",
    "call_plugin_hook",
    "direct_caller",
    "live_impls",
    "refuse_awaitables",
]


def live_impls(pm: pluggy.PluginManager, hook_name: str) -> list[HookImpl]:
    """The hook's implementation list that pluggy keeps current in place.

    Empty while no plugin implements the hook, so a caller can skip the hook
    at no cost. Falls back to a snapshot if a future pluggy moves it.
    """
    caller = getattr(pm.hook, hook_name)
    impls: object = getattr(caller, "_hookimpls", None)
    if isinstance(impls, list):
        return cast("list[HookImpl]", impls)
    return caller.get_hookimpls()  # pragma: no cover - pluggy internals moved


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
    hook-call monitoring. Falls back to the public path if a future pluggy
    moves these internals.
    """
    caller = getattr(pm.hook, hook_name)
    impls: object = getattr(caller, "_hookimpls", None)
    if not hasattr(pm, "_inner_hookexec") or not isinstance(impls, list):
        return caller  # pragma: no cover - depends on pluggy's internals
    hook_impls = cast("list[HookImpl]", impls)

    def call(session: object, event: object) -> list[object]:
        # Read per call: hook-call monitoring and tracing replace it.
        results = pm._inner_hookexec(  # pyright: ignore[reportPrivateUsage]
            hook_name, hook_impls, {"session": session, "event": event}, False
        )
        return cast("list[object]", results)

    return call


def refuse_awaitables(results: list[object], hook: str) -> None:
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
