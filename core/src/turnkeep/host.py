"""The plugin host: one pluggy manager, the persistence capability, lifecycles.

A `Host` owns one `PluginManager` (never a global one), loads the `turnkeep`
entry points that configuration selects, collects the backends plugins
register and activates exactly one (wrapping it in the write-behind plugin),
and owns the `SessionStore`. Hooks are called only through small typed
methods here, so pluggy's untyped results never leak.

Lifecycle: `plugin_apply` is historic (replayed to plugins registered later);
`plugin_dispose` is awaited per plugin. `await host.reload(...)` swaps a
plugin for a fresh import of its module while sessions stay live; when that
plugin provides the active backend, the write-behind state on each session
carries the cursor across the swap, so no event is lost or written twice.
"""

from __future__ import annotations

import asyncio
import difflib
import importlib
import importlib.metadata
import inspect
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar, cast

import attrs
import pluggy
from pluggy import HookImpl

from turnkeep import hookspecs, memory
from turnkeep._hookcall import (
    await_all,
    call_impl,
    call_plugin_hook,
    direct_caller,
    live_impls,
    refuse_awaitables,
)
from turnkeep._reimport import fresh_import
from turnkeep.admission import ADMISSION_NAME, EventAdmission
from turnkeep.clock import Clock, now_ms
from turnkeep.codec import EventCodec
from turnkeep.config import DEFAULT_BACKEND, Config, make_converter, structure_config
from turnkeep.errors import (
    ConfigurationError,
    FlushError,
    HookContractError,
    PersistenceConflictError,
    PersistenceNotConfiguredError,
    PluginDisposeError,
    PluginNotFoundError,
    PluginReloadError,
    RedactionError,
    TurnkeepError,
    UnknownBackendError,
)
from turnkeep.events import VOCABULARY, SessionEvent, event_type_name
from turnkeep.hookspecs import PROJECT_NAME
from turnkeep.persistence import SessionPersistence, validate_backend
from turnkeep.redaction import SecretRedactor
from turnkeep.session import Session, SessionStore
from turnkeep.writebehind import WriteBehind

__all__ = ["ENTRY_POINT_GROUP", "BackendEntry", "Host"]

ENTRY_POINT_GROUP: Final = "turnkeep"
WRITE_BEHIND_NAME: Final = "turnkeep.writebehind"

T = TypeVar("T")
E = TypeVar("E", bound=SessionEvent)


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


@attrs.define(eq=False)
class Host:
    """Hosts plugins and sessions for one application.

    Args:
        config: the configuration (`turnkeep.config.load_config()` reads it
            from files and the environment).
        plugins: plugin objects to register at start, besides entry points.
        clock: the clock for event times (tests pass a fake one).

    Use it as an async context manager, or call `start()` and `aclose()`.
    """

    config: Config = attrs.Factory(Config)
    plugins: Iterable[object] = ()
    clock: Clock = now_ms
    pm: pluggy.PluginManager = attrs.field(init=False)
    sessions: SessionStore = attrs.field(init=False)
    _codec: EventCodec = attrs.field(init=False)
    _backends: dict[str, BackendEntry] = attrs.field(
        init=False, factory=dict[str, BackendEntry]
    )
    _event_types: dict[str, tuple[type[SessionEvent], object]] = attrs.field(
        init=False, factory=dict[str, tuple[type[SessionEvent], object]]
    )
    _active_name: str | None = attrs.field(init=False, default=None)
    _writebehind: WriteBehind | None = attrs.field(init=False, default=None)
    _order: list[object] = attrs.field(init=False, factory=list[object])
    _started: bool = attrs.field(init=False, default=False)
    _closed: bool = attrs.field(init=False, default=False)
    _reloading: asyncio.Event | None = attrs.field(init=False, default=None)
    _reload_lock: asyncio.Lock = attrs.field(init=False, factory=asyncio.Lock)
    _event_hook: Callable[..., list[object]] = attrs.field(init=False)
    _redactors: list[HookImpl] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.pm = pluggy.PluginManager(PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self._codec = EventCodec(max_event_bytes=self.config.max_event_bytes)
        self.sessions = SessionStore(self, clock=self.clock)
        self._event_hook = direct_caller(self.pm, "session_event")
        self._redactors = live_impls(self.pm, "redact_event")

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> Host:
        """Load plugins, activate the configured backend, apply plugins.

        Raises:
            PluginNotFoundError: a plugin named in `config.plugins` is not
                installed.
            UnknownBackendError: `config.persistence` names no registered
                backend.
            PersistenceConflictError: two plugins registered one name.
            ConfigurationError: the backend's options are invalid, or the
                backend does not implement `SessionPersistence`.
        """
        if self._started:
            return self
        self._started = True
        self._register_plugin(memory, "memory")
        if self.config.redact_secrets:
            self._register_plugin(SecretRedactor(), "turnkeep.redaction")
        self._load_entrypoints()
        for plugin in self.plugins:
            self._register_plugin(plugin, None)
        self._check_backend_tables()
        self._activate(self.config.persistence)
        self.pm.hook.plugin_apply.call_historic(kwargs={"host": self})
        return self

    async def aclose(self) -> None:
        """Dispose every plugin, newest first, then unregister them.

        Raises:
            FlushError: a session could not be drained (the others were).
        """
        if self._closed:
            return
        self._closed = True
        errors: list[Exception] = []
        for plugin in reversed(self._order[:]):
            try:
                await self._dispose(plugin)
            except Exception as exc:  # noqa: BLE001 - every plugin still gets disposed
                errors.append(exc)
            self._unregister(plugin)
        self._active_name = None
        for session in self.sessions.list():
            session.closed = True  # nothing could store what it would take
        if errors:
            first = errors[0]
            if isinstance(first, TurnkeepError):
                raise first
            raise PluginDisposeError(
                f"disposing a plugin failed while closing the host: {first!r}"
            ) from first

    async def __aenter__(self) -> Host:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- plugins -------------------------------------------------------------

    def register(self, plugin: object, name: str | None = None) -> str:
        """Register a plugin now; `plugin_apply` is replayed to it.

        Returns:
            The name the plugin was registered under.
        """
        return self._register_plugin(plugin, name)

    async def remove(self, plugin: object | str) -> None:
        """Dispose a plugin (awaited) and unregister it."""
        target = self._resolve(plugin)
        try:
            await self._dispose(target)
        finally:
            self._unregister(target)

    @asynccontextmanager
    async def plugin(self, plugin: T, name: str | None = None) -> AsyncGenerator[T]:
        """Register `plugin` for the duration of an `async with` block."""
        self.register(plugin, name)
        try:
            yield plugin
        finally:
            if self.pm.is_registered(plugin):
                await self.remove(plugin)

    def plugin_names(self) -> list[str]:
        """Names of the registered plugins, in registration order."""
        names: list[str] = []
        for plugin in self._order:
            name = self.pm.get_name(plugin)
            if name is not None:
                names.append(name)
        return names

    async def reload(self, plugin: object | str) -> object:
        """Swap a plugin for a fresh import of its module; sessions stay live.

        The new module is imported (and, for a class-instance plugin, its class
        instantiated without arguments) before anything is torn down; if that
        fails, `PluginReloadError` is raised and the old plugin stays. If the
        plugin provides the active backend, a new backend is built, the old
        write-behind drains every session and closes its backend, and the new
        one adopts the sessions where the old one stopped. Flushes requested
        meanwhile wait for the swap.

        Returns:
            The new plugin object.

        Raises:
            PluginNotFoundError: no such plugin is registered.
            PluginReloadError: the fresh import or construction failed.
            FlushError: the swap completed but draining failed; the events
                stay buffered and the next flush retries them.
        """
        name = plugin if isinstance(plugin, str) else self.pm.get_name(plugin)
        if name is None:
            raise PluginNotFoundError(f"plugin {plugin!r} is not registered")
        # One reload at a time; by name, so a queued reload swaps the newest.
        async with self._reload_lock:
            return await self._reload(name)

    async def _reload(self, name: str) -> object:
        old = self._resolve(name)
        new = fresh_import(old)
        active_entry = (
            self._backends.get(self._active_name) if self._active_name else None
        )
        provides_active = active_entry is not None and active_entry.plugin is old
        new_backends = self._collect_backends(new) if provides_active else {}
        new_writebehind: WriteBehind | None = None
        if provides_active:
            active = self._active_name
            assert active is not None  # noqa: S101 - provides_active implies it
            if active not in new_backends:
                raise PluginReloadError(
                    f"the reloaded plugin {name!r} no longer registers the "
                    f"active backend {active!r}; the old plugin stays active"
                )
            try:
                backend = self._build_backend(new_backends[active])
            except TurnkeepError as exc:
                raise PluginReloadError(
                    f"the reloaded plugin {name!r} could not build backend "
                    f"{active!r}: {exc}; the old plugin stays active"
                ) from exc
            new_writebehind = WriteBehind(
                backend=backend, codec=self._codec, name=active
            )
        try:
            _check_registrable(new)
        except PluginReloadError:
            if new_writebehind is not None:
                await new_writebehind.backend.aclose()
            raise

        # From the first dispose on, the swap always completes: the old
        # plugins may be half torn down, so going back is not an option.
        gate = asyncio.Event()
        self._reloading = gate
        errors: list[Exception] = []
        old_writebehind = self._writebehind if provides_active else None
        try:
            if old_writebehind is not None:
                try:
                    await self._dispose(old_writebehind)
                except Exception as exc:  # noqa: BLE001 - reported after the swap
                    errors.append(exc)
            try:
                await self._dispose(old)
            except Exception as exc:  # noqa: BLE001 - reported after the swap
                errors.append(exc)
        finally:
            # No await from here on: every event goes either to the old
            # plugins (before) or to the new ones (after).
            if old_writebehind is not None:
                self._unregister(old_writebehind)
            self._unregister(old)
            if new_writebehind is not None:
                self._writebehind = new_writebehind
                self._register_plugin(new_writebehind, WRITE_BEHIND_NAME)
            self._register_plugin(new, name, backends=new_backends or None)
            self._reloading = None
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

    # -- persistence ---------------------------------------------------------

    @property
    def codec(self) -> EventCodec:
        """The event codec (built-in vocabulary plus registered types)."""
        return self._codec

    @property
    def persistence_name(self) -> str | None:
        """The active backend's name, or `None` without persistence."""
        return self._active_name

    @property
    def backends(self) -> dict[str, BackendEntry]:
        """Every registered backend, by name."""
        return dict(self._backends)

    def require_persistence(self) -> SessionPersistence:
        """Return the active backend.

        Raises:
            PersistenceNotConfiguredError: none is active.
        """
        if self._writebehind is None:
            available = ", ".join(sorted(self._backends)) or "none installed"
            raise PersistenceNotConfiguredError(
                "no persistence backend is active; set `persistence` in "
                f"turnkeep.toml or TURNKEEP_PERSISTENCE (available: {available})"
            )
        return self._writebehind.backend

    # -- typed hook facade (SessionHooks) ------------------------------------

    def emit_session_created(self, session: Session) -> None:
        """Emit `session_created`."""
        self.pm.hook.session_created(session=session)

    @property
    def session_event_hook(self) -> Callable[..., list[object]]:
        """The `session_event` hook caller; sessions call it directly."""
        return self._event_hook

    def check_session_event_results(self, results: list[object]) -> None:
        """Refuse awaitables returned by `session_event` implementations."""
        refuse_awaitables(results, "session_event")

    @property
    def redactors(self) -> Sequence[object]:
        """The live list of `redact_event` implementations."""
        return self._redactors

    def redact_event(self, session: Session, event: E) -> E:
        """Run every `redact_event` implementation, in hook order.

        Raises:
            RedactionError: an implementation raised or broke its contract.
        """
        current = event
        for impl in list(reversed(self._redactors)):
            try:
                result = call_impl(impl, session=session, event=current)
            except Exception as exc:
                raise RedactionError(
                    f"redacting event {event.type!r} (seq {event.seq}) failed "
                    f"in {impl.plugin_name!r}; the event was refused, not stored "
                    f"raw: {type(exc).__name__}",
                    event_type=event.type,
                ) from exc
            if result is None:
                continue
            if (
                type(result) is not type(event)
                or result.seq != event.seq  # pyright: ignore[reportAttributeAccessIssue]
                or result.time != event.time  # pyright: ignore[reportAttributeAccessIssue]
            ):
                raise RedactionError(
                    f"{impl.plugin_name!r} returned a different event from "
                    f"redact_event for {event.type!r} (seq {event.seq})",
                    event_type=event.type,
                )
            current = cast(E, result)
        return current

    def redact_text(self, text: str) -> str:
        """Run every `redact_text` implementation, in hook order.

        Raises:
            RedactionError: an implementation raised.
        """
        impls = self.pm.hook.redact_text.get_hookimpls()
        current = text
        for impl in reversed(impls):
            try:
                result = call_impl(impl, text=current)
            except Exception as exc:
                raise RedactionError(
                    f"redacting metadata text failed in {impl.plugin_name!r}: "
                    f"{type(exc).__name__}",
                    event_type="summary",
                ) from exc
            if isinstance(result, str):
                current = result
        return current

    async def flush_session(self, session: Session) -> None:
        """Emit `session_flush` and await every implementation together.

        Raises:
            FlushError: an implementation failed, or the host is closed (a
                flush can no longer make anything durable).
        """
        while self._reloading is not None:
            await self._reloading.wait()
        if self._closed:
            raise FlushError(
                f"session {session.id!r}: the host is closed; nothing can be "
                "made durable any more",
                session_id=session.id,
            )
        results: list[object] = self.pm.hook.session_flush(session=session)
        await await_all(results, session_id=session.id, what="flush")

    async def emit_session_closed(self, session: Session) -> None:
        """Emit `session_closed` and await every implementation."""
        results: list[object] = self.pm.hook.session_closed(session=session)
        await await_all(results, session_id=session.id, what="close")

    # -- internals -----------------------------------------------------------

    def _register_plugin(
        self,
        plugin: object,
        name: str | None,
        *,
        backends: dict[str, BackendEntry] | None = None,
    ) -> str:
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
                backends if backends is not None else self._collect_backends(plugin)
            )
            for entry in collected.values():
                clash = self._backends.get(entry.name)
                if clash is not None and clash.plugin is not plugin:
                    raise PersistenceConflictError(
                        f"persistence backend {entry.name!r} is registered by both "
                        f"{self.pm.get_name(clash.plugin)!r} and {registered!r}; "
                        "uninstall or block one of them"
                    )
            self._backends.update(collected)
            self._collect_event_types(plugin)
        except BaseException:
            self._unregister(plugin)
            raise
        return registered

    def _unregister(self, plugin: object) -> None:
        if self.pm.is_registered(plugin):
            self.pm.unregister(plugin)
        if plugin in self._order:
            self._order.remove(plugin)
        for name, entry in list(self._backends.items()):
            if entry.plugin is plugin:
                del self._backends[name]
        stale = [t for t, (_, owner) in self._event_types.items() if owner is plugin]
        for tag in stale:
            del self._event_types[tag]
        if stale:
            self._rebuild_codec()
        if plugin is self._writebehind:
            self._writebehind = None

    def _collect_backends(self, plugin: object) -> dict[str, BackendEntry]:
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

        call_plugin_hook(self.pm, plugin, "register_persistence", register=register)
        return collected

    def _collect_event_types(self, plugin: object) -> None:
        added: dict[str, tuple[type[SessionEvent], object]] = {}

        def register(cls: type[SessionEvent]) -> None:
            tag = event_type_name(cls)
            known = self._event_types.get(tag) or added.get(tag)
            if known is not None or tag in _VOCABULARY_TAGS:
                raise ConfigurationError(
                    f"event type {tag!r} is already registered"
                    + (
                        f" by {self.pm.get_name(known[1])!r}"
                        if known
                        else " (built in)"
                    )
                )
            added[tag] = (cls, plugin)

        call_plugin_hook(self.pm, plugin, "register_event_types", register=register)
        if added:
            self._event_types.update(added)
            self._rebuild_codec()

    def _rebuild_codec(self) -> None:
        self._codec.set_types([cls for cls, _ in self._event_types.values()])

    def _load_entrypoints(self) -> None:
        selection = self.config.plugins
        for blocked in self.config.blocked_plugins:
            self.pm.set_blocked(blocked)
        if selection == "none":
            return
        available = {
            ep.name: ep
            for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        }
        wanted = list(available) if selection == "all" else list(selection)
        missing = [n for n in wanted if n not in available]
        if missing:
            raise PluginNotFoundError(
                f"plugin(s) {', '.join(map(repr, missing))} are not installed "
                f"(installed: {', '.join(sorted(available)) or 'none'})"
            )
        for name in sorted(wanted):
            if name in self.config.blocked_plugins or self.pm.has_plugin(name):
                continue
            self._register_plugin(available[name].load(), name)

    def _check_backend_tables(self) -> None:
        # A misspelt `[backends.<name>]` table would otherwise be ignored and
        # its options lost in silence. A backend that is installed but not
        # loaded here (another plugin selection) may keep its table; the
        # installed ones are looked up only when a table names no registered
        # backend, so a usual start-up reads no package metadata for this.
        if set(self.config.backends) <= set(self._backends):
            return
        installed = {
            ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        }
        known = set(self._backends) | installed
        unknown = sorted(set(self.config.backends) - known)
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

    def _activate(self, configured: str | None) -> None:
        if configured is None and DEFAULT_BACKEND in self._backends:
            configured = DEFAULT_BACKEND
        if configured is None or configured == "none":
            # No persistence (asked for, or nothing configured and no default
            # installed): events are still held to what a backend could store.
            self._register_plugin(EventAdmission(self._codec), ADMISSION_NAME)
            return
        entry = self._backends.get(configured)
        if entry is None:
            raise UnknownBackendError(
                f"persistence backend {configured!r} is not registered "
                f"(registered: {', '.join(sorted(self._backends)) or 'none'}); "
                f"install turnkeep-{configured} or fix `persistence`"
            )
        backend = self._build_backend(entry)
        self._active_name = configured
        self._writebehind = WriteBehind(
            backend=backend, codec=self._codec, name=configured
        )
        self._register_plugin(self._writebehind, WRITE_BEHIND_NAME)

    def _build_backend(self, entry: BackendEntry) -> SessionPersistence:
        options = self.config.backends.get(entry.name, {})
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
                options = {**options, "max_event_bytes": self.config.max_event_bytes}
            backend_config = structure_config(
                options,
                entry.config_type,
                source=f"[backends.{entry.name}]",
                converter=make_converter(),
            )
        return validate_backend(entry.factory(backend_config), name=entry.name)

    def _resolve(self, plugin: object | str) -> object:
        if isinstance(plugin, str):
            found = self.pm.get_plugin(plugin)
            if found is None:
                raise PluginNotFoundError(f"no plugin named {plugin!r} is registered")
            return found
        if not self.pm.is_registered(plugin):
            raise PluginNotFoundError(f"plugin {plugin!r} is not registered")
        return plugin

    async def _dispose(self, plugin: object) -> None:
        results = call_plugin_hook(self.pm, plugin, "plugin_dispose", host=self)
        for result in results:
            if inspect.isawaitable(result):
                await result


def _check_registrable(plugin: object) -> None:
    """Register `plugin` with a scratch manager to validate its hooks early."""
    scratch = pluggy.PluginManager(PROJECT_NAME)
    scratch.add_hookspecs(hookspecs)
    try:
        scratch.register(plugin)
    except (pluggy.PluginValidationError, ValueError) as exc:
        raise PluginReloadError(
            f"the reloaded plugin is not valid: {exc}; the old plugin stays active"
        ) from exc


_VOCABULARY_TAGS: Final = frozenset(event_type_name(c) for c in VOCABULARY)
