"""The registered plugins of one host and what they contribute.

A `PluginSet` owns the host's pluggy manager and the registration order,
and keeps the contributions in step with it: the backends a plugin
registers (`turnkeep.backends`) and its event types
(`turnkeep.eventtypes`) arrive with the plugin and leave with it. It also
holds the plugin that takes the host's events: the write-behind over the
active backend, or the admission check when nothing persists.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Final

import attrs
import pluggy

from turnkeep import memory
from turnkeep._pluggy import call_plugin_hook, new_manager
from turnkeep.backends import (
    BackendEntry,
    BackendRegistry,
    activate,
    load_entry_points,
)
from turnkeep.codec import EventCodec
from turnkeep.config import Config
from turnkeep.errors import (
    HookContractError,
    PersistenceNotConfiguredError,
    PluginDisposeError,
    PluginNotFoundError,
    TurnkeepError,
)
from turnkeep.eventtypes import EventTypeRegistry
from turnkeep.hookspecs import PluginHost
from turnkeep.persistence import SessionPersistence
from turnkeep.redaction import REDACTOR_NAME, SecretRedactor
from turnkeep.writebehind import WriteBehind

__all__ = ["ADMISSION_NAME", "WRITE_BEHIND_NAME", "PluginSet"]

WRITE_BEHIND_NAME: Final = "turnkeep.writebehind"
ADMISSION_NAME: Final = "turnkeep.admission"


@attrs.define(eq=False)
class PluginSet:
    """One host's plugins, in registration order, and their contributions."""

    codec: EventCodec
    pm: pluggy.PluginManager = attrs.field(init=False, factory=new_manager)
    backends: BackendRegistry = attrs.field(init=False, factory=BackendRegistry)
    event_types: EventTypeRegistry = attrs.field(init=False)
    writebehind: WriteBehind | None = attrs.field(init=False, default=None)
    """The write-behind over the active backend (`None`: no persistence)."""
    _order: list[object] = attrs.field(init=False, factory=list[object])

    def __attrs_post_init__(self) -> None:
        self.event_types = EventTypeRegistry(self.codec)

    @property
    def active_name(self) -> str | None:
        """The active backend's name, or `None` without persistence."""
        return self.writebehind.name if self.writebehind is not None else None

    def require_persistence(self) -> SessionPersistence:
        """Return the active backend.

        Raises:
            PersistenceNotConfiguredError: none is active.
        """
        if self.writebehind is None:
            available = ", ".join(sorted(self.backends)) or "none installed"
            raise PersistenceNotConfiguredError(
                "no persistence backend is active; set `persistence` in "
                f"turnkeep.toml or TURNKEEP_PERSISTENCE (available: {available})"
            )
        return self.writebehind.backend

    def names(self) -> list[str]:
        """Names of the registered plugins, in registration order."""
        names = (self.pm.get_name(p) for p in self._order)
        return [n for n in names if n is not None]

    def ordered(self) -> list[object]:
        """The registered plugins, oldest first."""
        return list(self._order)

    def register(
        self,
        plugin: object,
        name: str | None,
        *,
        backends: dict[str, BackendEntry] | None = None,
    ) -> str:
        """Register `plugin` and collect its contributions.

        Args:
            plugin: the plugin object (a module or an instance).
            name: its name (pluggy makes one when `None`).
            backends: its backends, when already collected (a reload builds
                the new backend before it registers the plugin).

        Returns:
            The name it is registered under.

        Raises:
            HookContractError: its hook implementations are invalid.
            PluginNotFoundError: configuration blocks it.
            PersistenceConflictError, ConfigurationError: a contribution
                clashes; the plugin is not left registered.
        """
        if self.pm.is_registered(plugin):
            existing = self.pm.get_name(plugin)
            assert existing is not None  # noqa: S101 - registered plugins have names
            return existing
        try:
            registered = self.pm.register(plugin, name)
        except pluggy.PluginValidationError as exc:
            raise HookContractError(
                f"plugin {name or plugin!r} is not valid: {exc}"
            ) from exc
        if registered is None:
            raise PluginNotFoundError(f"plugin {name!r} is blocked by configuration")
        self._order.append(plugin)
        try:
            collected = (
                backends
                if backends is not None
                else BackendRegistry.collect(self.pm, plugin)
            )
            self.backends.add(collected, name_of=self.pm.get_name)
            self.event_types.collect(self.pm, plugin, name_of=self.pm.get_name)
        except BaseException:
            self.unregister(plugin)
            raise
        return registered

    def unregister(self, plugin: object) -> None:
        """Unregister `plugin` (if registered) and drop its contributions."""
        if self.pm.is_registered(plugin):
            self.pm.unregister(plugin)
        if plugin in self._order:
            self._order.remove(plugin)
        self.backends.drop(plugin)
        self.event_types.drop(plugin)
        if plugin is self.writebehind:
            self.writebehind = None

    def resolve(self, plugin: object | str) -> object:
        """The registered plugin object for `plugin` (an object or a name).

        Raises:
            PluginNotFoundError: no such plugin is registered.
        """
        if isinstance(plugin, str):
            found = self.pm.get_plugin(plugin)
            if found is None:
                raise PluginNotFoundError(f"no plugin named {plugin!r} is registered")
            return found
        if not self.pm.is_registered(plugin):
            raise PluginNotFoundError(f"plugin {plugin!r} is not registered")
        return plugin

    async def dispose(self, plugin: object, host: PluginHost) -> None:
        """Call `plugin`'s `plugin_dispose` and await it."""
        results = call_plugin_hook(self.pm, plugin, "plugin_dispose", host=host)
        for result in results:
            if inspect.isawaitable(result):
                await result

    def install(self, config: Config, plugins: Iterable[object]) -> None:
        """Register built-ins, selected entry points and `plugins`; activate.

        The configured backend is activated last, over every plugin.

        Raises:
            PluginNotFoundError, UnknownBackendError,
            PersistenceConflictError, ConfigurationError: see `Host.start`.
        """
        self.register(memory, "memory")
        if config.redact_secrets:
            patterns = tuple(config.redact_patterns.items())
            redactor = SecretRedactor(patterns, config.redact_high_entropy)
            self.register(redactor, REDACTOR_NAME)
        load_entry_points(config, self.pm, self.register)
        for plugin in plugins:
            self.register(plugin, None)
        self.backends.check_tables(config)
        self.activate(config)

    async def dispose_all(self, host: PluginHost) -> None:
        """Dispose and unregister every plugin, newest first.

        Raises:
            PluginDisposeError: a plugin failed to stop (every plugin was
                still disposed and unregistered); a `TurnkeepError` it
                raised is raised as it is.
        """
        errors: list[Exception] = []
        for plugin in reversed(self.ordered()):
            try:
                await self.dispose(plugin, host)
            except Exception as exc:  # noqa: BLE001 - every plugin still gets disposed
                errors.append(exc)
            self.unregister(plugin)
        if errors:
            first = errors[0]
            if isinstance(first, TurnkeepError):
                raise first
            raise PluginDisposeError(
                f"disposing a plugin failed while closing the host: {first!r}"
            ) from first

    def activate(self, config: Config) -> None:
        """Build the configured backend and register what takes the events.

        Raises:
            UnknownBackendError, ConfigurationError: see `turnkeep.backends`.
        """
        taker = activate(self.backends.select(config), config, self.codec)
        if isinstance(taker, WriteBehind):
            self.writebehind = taker
            self.register(taker, WRITE_BEHIND_NAME)
        else:
            self.register(taker, ADMISSION_NAME)

    def swap_writebehind(self, new: WriteBehind) -> None:
        """Register `new` in place of the current write-behind (no await)."""
        if self.writebehind is not None:
            self.unregister(self.writebehind)
        self.writebehind = new
        self.register(new, WRITE_BEHIND_NAME)
