"""Hot reload: swap a plugin for a fresh import of its module, sessions live.

`fresh_import` purges a plugin's module and imports it again. A `Reloader`
swaps the registered plugin for the new one. When that plugin provides the
active backend, the old write-behind drains every session and closes its
backend, and its successor over the new backend takes the sessions' write
state over where it stopped: no event lost, none written twice. Flushes
requested meanwhile wait for the swap (`wait`).
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import types

import attrs
import pluggy

from turnkeep._pluggy import validate_plugin
from turnkeep.backends import BackendEntry, build
from turnkeep.config import Config
from turnkeep.errors import (
    FlushError,
    PluginNotFoundError,
    PluginReloadError,
    TurnkeepError,
)
from turnkeep.hookspecs import PluginHost
from turnkeep.plugins import PluginSet
from turnkeep.writebehind import WriteBehind

__all__ = ["Reloader", "fresh_import"]


def fresh_import(old: object) -> object:
    """Import `old`'s module anew and return the matching new plugin object.

    The plugin's module is purged from `sys.modules` together with its
    submodules (for a package plugin, the whole package), then imported
    again. On any failure the old modules are put back.
    """
    module_name = (
        old.__name__ if isinstance(old, types.ModuleType) else type(old).__module__
    )

    def owned(name: str) -> bool:
        return name == module_name or name.startswith(module_name + ".")

    saved = {name: module for name, module in sys.modules.items() if owned(name)}
    for name in saved:
        del sys.modules[name]
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(module_name)
        if isinstance(old, types.ModuleType):
            return module
        factory: object = module
        for part in type(old).__qualname__.split("."):
            factory = getattr(factory, part)
        if not callable(factory):
            raise TypeError(f"{type(old).__qualname__} is not callable")
        return factory()
    except Exception as exc:
        for name in [n for n in sys.modules if owned(n)]:
            del sys.modules[name]
        sys.modules.update(saved)
        raise PluginReloadError(
            f"reloading {module_name!r} failed: {exc!r}; the old plugin stays active"
        ) from exc


@attrs.define(eq=False)
class Reloader:
    """Swaps one plugin at a time for a fresh import of it.

    Args:
        plugins: the host's plugins.
        config: the host's configuration (to build a new backend).
        host: the host, as plugins see it (passed to `plugin_dispose`).
    """

    plugins: PluginSet
    config: Config
    host: PluginHost
    _gate: asyncio.Event | None = attrs.field(init=False, default=None)
    _lock: asyncio.Lock = attrs.field(init=False, factory=asyncio.Lock)

    @property
    def swapping(self) -> bool:
        """Whether a swap is in progress (flushes then wait for it)."""
        return self._gate is not None

    async def wait(self) -> None:
        """Return once no swap is in progress."""
        while self._gate is not None:
            await self._gate.wait()

    async def reload(self, plugin: object | str) -> object:
        """Swap a plugin for a fresh import of its module; sessions stay live.

        The new module is imported (and, for a class-instance plugin, its class
        instantiated without arguments) before anything is torn down; if that
        fails, `PluginReloadError` is raised and the old plugin stays. If the
        plugin provides the active backend, a new backend is built, the old
        write-behind drains every session and closes its backend, and its
        successor adopts the sessions where it stopped.

        Returns:
            The new plugin object.

        Raises:
            PluginNotFoundError: no such plugin is registered.
            PluginReloadError: the fresh import or construction failed.
            FlushError: the swap completed but draining failed; the events
                stay buffered and the next flush retries them.
        """
        pm = self.plugins.pm
        name = plugin if isinstance(plugin, str) else pm.get_name(plugin)
        if name is None:
            raise PluginNotFoundError(f"plugin {plugin!r} is not registered")
        # One reload at a time; by name, so a queued reload swaps the newest.
        async with self._lock:
            return await self._reload(name)

    async def _reload(self, name: str) -> object:
        plugins = self.plugins
        old = plugins.resolve(name)
        new = fresh_import(old)
        old_writebehind = plugins.writebehind
        active = plugins.active_name
        entry = plugins.backends.get(active) if active is not None else None
        provides_active = entry is not None and entry.plugin is old
        new_backends = (
            plugins.backends.collect(plugins.pm, new) if provides_active else {}
        )
        successor: WriteBehind | None = None
        if provides_active and active is not None:
            successor = self._successor(name, active, new_backends)
        try:
            validate_plugin(new)
        except (pluggy.PluginValidationError, ValueError) as exc:
            if successor is not None:
                await successor.backend.aclose()
            raise PluginReloadError(
                f"the reloaded plugin is not valid: {exc}; the old plugin stays active"
            ) from exc

        # From the first dispose on, the swap always completes: the old
        # plugins may be half torn down, so going back is not an option.
        gate = asyncio.Event()
        self._gate = gate
        errors: list[Exception] = []
        try:
            for retiring in (old_writebehind if successor else None, old):
                if retiring is None:
                    continue
                try:
                    await plugins.dispose(retiring, self.host)
                except Exception as exc:  # noqa: BLE001 - reported after the swap
                    errors.append(exc)
        finally:
            # No await from here on: every event goes either to the old
            # plugins (before) or to the new ones (after).
            plugins.unregister(old)
            if successor is not None:
                plugins.swap_writebehind(successor)
            plugins.register(new, name, backends=new_backends or None)
            self._gate = None
            gate.set()
        if errors:
            first = errors[0]
            if isinstance(first, FlushError):
                raise first
            raise PluginReloadError(
                f"plugin {name!r} was reloaded, but disposing its previous "
                f"instance failed: {first!r}"
            ) from first
        return new

    def _successor(
        self, name: str, active: str, new_backends: dict[str, BackendEntry]
    ) -> WriteBehind:
        """The write-behind over the reloaded plugin's new backend."""
        if active not in new_backends:
            raise PluginReloadError(
                f"the reloaded plugin {name!r} no longer registers the "
                f"active backend {active!r}; the old plugin stays active"
            )
        current = self.plugins.writebehind
        assert current is not None  # noqa: S101 - the plugin provides the active one
        try:
            backend = build(new_backends[active], self.config)
        except TurnkeepError as exc:
            raise PluginReloadError(
                f"the reloaded plugin {name!r} could not build backend "
                f"{active!r}: {exc}; the old plugin stays active"
            ) from exc
        return current.successor(backend)
