"""Persistence backends: discovery, registration, selection and activation.

Backends come from plugins, found through the `turnkeep` entry-point group
(or registered directly), each contributing named factories through the
`register_persistence` hook. A `BackendRegistry` collects them and refuses
a name registered twice; `select` picks the configured one (or the default,
or none), `build` structures its `[backends.<name>]` options and checks the
result implements `SessionPersistence`; `activate` wraps it in the
write-behind plugin, or, without persistence, returns the plugin that holds
events to what a backend could store.

Consumed by `turnkeep.host` (start-up), `turnkeep.reload` (a reloaded plugin
that provides the active backend) and the CLI.
"""

from __future__ import annotations

import difflib
import importlib.metadata
from collections.abc import Callable, Iterator
from typing import Any, Final

import attrs
import pluggy

from turnkeep._pluggy import call_plugin_hook
from turnkeep.admission import EventAdmission
from turnkeep.codec import EventCodec
from turnkeep.config import DEFAULT_BACKEND, Config, make_converter, structure_config
from turnkeep.errors import (
    ConfigurationError,
    PersistenceConflictError,
    PluginNotFoundError,
    UnknownBackendError,
)
from turnkeep.hookspecs import RegisterPersistence
from turnkeep.persistence import SessionPersistence, validate_backend
from turnkeep.writebehind import WriteBehind

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendEntry",
    "BackendRegistry",
    "activate",
    "build",
    "installed_plugins",
    "load_entry_points",
]

ENTRY_POINT_GROUP: Final = "turnkeep"
"""The entry-point group plugins are installed under (name = backend key)."""


@attrs.frozen
class BackendEntry:
    """A persistence backend contributed through `register_persistence`.

    Attributes:
        name: the backend's configuration key.
        factory: builds the backend from its structured configuration.
        config_type: the attrs class of its options (or `None`: no options).
        plugin: the plugin object that registered it.
    """

    name: str
    factory: Callable[[Any], object]
    config_type: type[Any] | None
    plugin: object


def installed_plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """The plugins installed under the `turnkeep` entry-point group, by name."""
    return {
        ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    }


def load_entry_points(
    config: Config,
    pm: pluggy.PluginManager,
    register: Callable[[object, str], object],
) -> None:
    """Register the installed plugins that `config.plugins` selects.

    Raises:
        PluginNotFoundError: a selected plugin is not installed.
    """
    for blocked in config.blocked_plugins:
        pm.set_blocked(blocked)
    if config.plugins == "none":
        return
    available = installed_plugins()
    wanted = list(available) if config.plugins == "all" else list(config.plugins)
    missing = [n for n in wanted if n not in available]
    if missing:
        raise PluginNotFoundError(
            f"plugin(s) {', '.join(map(repr, missing))} are not installed "
            f"(installed: {', '.join(sorted(available)) or 'none'})"
        )
    for name in sorted(wanted):
        if name in config.blocked_plugins or pm.has_plugin(name):
            continue
        register(available[name].load(), name)


@attrs.define
class BackendRegistry:
    """Every backend the registered plugins contribute, by name."""

    _entries: dict[str, BackendEntry] = attrs.field(
        factory=dict[str, BackendEntry], alias="entries"
    )

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def get(self, name: str) -> BackendEntry | None:
        """The entry registered as `name`, if any."""
        return self._entries.get(name)

    def as_dict(self) -> dict[str, BackendEntry]:
        """A copy of the entries, by name."""
        return dict(self._entries)

    @staticmethod
    def collect(pm: pluggy.PluginManager, plugin: object) -> dict[str, BackendEntry]:
        """Call `plugin`'s `register_persistence` and return what it registers.

        Raises:
            PersistenceConflictError: it registers one name twice.
        """
        collected: dict[str, BackendEntry] = {}

        def register(
            name: str,
            factory: Callable[[Any], object],
            config_type: type[Any] | None = None,
        ) -> None:
            if name in collected:
                raise PersistenceConflictError(
                    f"persistence backend {name!r} is registered twice by one plugin"
                )
            collected[name] = BackendEntry(name, factory, config_type, plugin)

        callback: RegisterPersistence = register
        call_plugin_hook(pm, plugin, "register_persistence", register=callback)
        return collected

    def add(
        self,
        collected: dict[str, BackendEntry],
        *,
        name_of: Callable[[object], str | None],
    ) -> None:
        """Add one plugin's backends.

        Raises:
            PersistenceConflictError: another plugin registered one of the
                names; nothing was added.
        """
        for entry in collected.values():
            clash = self._entries.get(entry.name)
            if clash is not None and clash.plugin is not entry.plugin:
                raise PersistenceConflictError(
                    f"persistence backend {entry.name!r} is registered by both "
                    f"{name_of(clash.plugin)!r} and {name_of(entry.plugin)!r}; "
                    "uninstall or block one of them"
                )
        self._entries.update(collected)

    def drop(self, plugin: object) -> None:
        """Forget the backends `plugin` registered."""
        for name, entry in list(self._entries.items()):
            if entry.plugin is plugin:
                del self._entries[name]

    def check_tables(self, config: Config) -> None:
        """Refuse `[backends.<name>]` options for a backend nobody provides.

        A misspelt table would otherwise be ignored and its options lost in
        silence. A backend that is installed but not loaded here (another
        plugin selection) may keep its table; the installed ones are looked
        up only when a table names no registered backend, so a usual start-up
        reads no package metadata for this.

        Raises:
            ConfigurationError: a table names an unknown backend.
        """
        if set(config.backends) <= set(self._entries):
            return
        known = set(self._entries) | set(installed_plugins())
        unknown = sorted(set(config.backends) - known)
        if not unknown:
            return
        name = unknown[0]
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ConfigurationError(
            f"options are configured for backend {name!r}, which is neither "
            f"registered nor installed (known: {', '.join(sorted(known))}); "
            f"{hint}fix the [backends.{name}] table (or TURNKEEP_{name.upper()}__* "
            f"variables), install the backend's plugin, or remove them"
        )

    def select(self, config: Config) -> BackendEntry | None:
        """The configured backend, the default one, or `None` (no persistence).

        Raises:
            UnknownBackendError: `config.persistence` names no registered
                backend.
        """
        configured = config.persistence
        if configured is None and DEFAULT_BACKEND in self._entries:
            configured = DEFAULT_BACKEND
        if configured is None or configured == "none":
            return None
        entry = self._entries.get(configured)
        if entry is None:
            registered = ", ".join(sorted(self._entries)) or "none"
            raise UnknownBackendError(
                f"persistence backend {configured!r} is not registered "
                f"(registered: {registered}); {_why_unregistered(configured, config)}"
            )
        return entry


def _why_unregistered(name: str, config: Config) -> str:
    """What to do about a configured backend that no plugin registered.

    The backend's plugin may be installed and left unloaded by the plugin
    selection: then installing it again would not help, and the message
    names the setting that keeps it out. The installed plugins are read
    only here, on the error path.
    """
    if name not in installed_plugins():
        return f"install turnkeep-{name} or fix `persistence`"
    if name in config.blocked_plugins:
        return (
            f"its plugin {name!r} is installed but not loaded: "
            f"`blocked_plugins` lists it; remove it from `blocked_plugins`"
        )
    if config.plugins == "none":
        setting = '`plugins = "none"` loads no installed plugin'
    elif config.plugins == "all":
        # Registered plugins that were since unregistered, or a host whose
        # plugins were registered by hand: nothing in the selection excludes it.
        return f"its plugin {name!r} is installed but was not registered here"
    else:
        setting = f"`plugins` lists only {', '.join(map(repr, config.plugins))}"
    return (
        f"its plugin {name!r} is installed but not loaded: {setting}; "
        f'set `plugins = "all"` or add {name!r} to `plugins`'
    )


def build(entry: BackendEntry, config: Config) -> SessionPersistence:
    """Build `entry`'s backend from its `[backends.<name>]` options.

    Raises:
        ConfigurationError: the options are invalid, or the backend does not
            implement `SessionPersistence`.
    """
    options = config.backends.get(entry.name, {})
    if entry.config_type is None:
        if options:
            raise ConfigurationError(
                f"backend {entry.name!r} takes no options, got "
                f"{', '.join(sorted(options))}"
            )
        backend_config: object = None
    else:
        names = {f.name for f in attrs.fields(entry.config_type)}
        if "max_event_bytes" in names and "max_event_bytes" not in options:
            # One limit for the whole host unless the backend's own table
            # says otherwise: a backend that bounded its reads below the
            # host's limit would read valid events back as damage.
            options = {**options, "max_event_bytes": config.max_event_bytes}
        backend_config = structure_config(
            options,
            entry.config_type,
            source=f"[backends.{entry.name}]",
            converter=make_converter(),
        )
    return validate_backend(entry.factory(backend_config), name=entry.name)


def activate(
    entry: BackendEntry | None, config: Config, codec: EventCodec
) -> WriteBehind | EventAdmission:
    """The plugin that takes the host's events.

    A write-behind over the built backend; without a backend, the admission
    check alone (events are still held to what a backend could store).

    Raises:
        ConfigurationError: see `build`.
    """
    if entry is None:
        return EventAdmission(codec)
    return WriteBehind(backend=build(entry, config), codec=codec, name=entry.name)
