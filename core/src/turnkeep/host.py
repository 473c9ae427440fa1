"""The plugin host: lifecycle, plugins, and the typed hook facade sessions use.

A `Host` owns one `PluginSet` (its own pluggy manager, never a global one)
and the `SessionStore`. At `start` it registers the built-in plugins and
the entry points configuration selects, activates exactly one backend
(`turnkeep.backends`: wrapped in the write-behind plugin), and replays
`plugin_apply`. Hooks are called only through the small typed methods
here, so pluggy's untyped results never leak; `turnkeep.reload` swaps a
plugin while sessions stay live.

Lifecycle: `plugin_apply` is historic (replayed to plugins registered later);
`plugin_dispose` is awaited per plugin, newest first, when the host closes.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar

import attrs
import pluggy
from pluggy import HookImpl

from turnkeep._pluggy import (
    FAST_PATH,
    await_all,
    direct_caller,
    live_impls,
    refuse_awaitables,
)
from turnkeep.backends import BackendEntry
from turnkeep.clock import Clock, now_ms
from turnkeep.closereport import CloseReport, closed_over
from turnkeep.codec import EventCodec
from turnkeep.commits import CommitReporter
from turnkeep.config import Config, as_config
from turnkeep.effects import Verdict, decide
from turnkeep.errors import FlushError
from turnkeep.events import Manifest, SessionEvent, ToolCall
from turnkeep.manifests import gather
from turnkeep.persistence import SessionPersistence
from turnkeep.plugins import PluginSet
from turnkeep.redaction import run_redact_event, run_redact_text
from turnkeep.reload import Reloader
from turnkeep.session import Session
from turnkeep.store import SessionStore
from turnkeep.transcripts import TranscriptEntry, checked_transcript

__all__ = ["Host"]

T = TypeVar("T")
E = TypeVar("E", bound=SessionEvent)


@attrs.define(eq=False)
class Host:
    """Hosts plugins and sessions for one application.

    Args:
        config: the configuration: a `Config`, or a mapping with the keys of
            `turnkeep.toml` (`{"persistence": "sqlite"}`).
            `turnkeep.load_config()` reads it from files and the environment.
        plugins: plugin objects to register at start, besides entry points.
        clock: the clock for event times (tests pass a fake one).

    Use it as an async context manager, or call `start()` and `aclose()`.
    """

    _config: Config = attrs.field(factory=Config, converter=as_config, alias="config")
    plugins: Iterable[object] = ()
    clock: Clock = now_ms
    sessions: SessionStore = attrs.field(init=False)
    _set: PluginSet = attrs.field(init=False)
    _reloader: Reloader = attrs.field(init=False)
    _started: bool = attrs.field(init=False, default=False)
    _closed: bool = attrs.field(init=False, default=False)
    close_reports: list[CloseReport] = attrs.field(
        init=False, factory=list[CloseReport]
    )
    """What the last `aclose` could not store, one report per session."""
    _event_hook: Callable[..., list[object]] = attrs.field(init=False)
    _redactors: list[HookImpl] = attrs.field(init=False)
    _commits: CommitReporter = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._set = PluginSet(EventCodec(max_event_bytes=self.config.max_event_bytes))
        self._reloader = Reloader(self._set, self.config, self)
        fmt = self.config.session_format  # the format of the sessions it creates
        self.sessions = SessionStore(self, clock=self.clock, session_format=fmt)
        self._event_hook = direct_caller(self.pm, "session_event")
        self._redactors = live_impls(self.pm, "redact_event")
        observers = live_impls(self.pm, "session_committed") if FAST_PATH else None
        self._commits = CommitReporter(self.pm.hook.session_committed, observers)

    @property
    def config(self) -> Config:
        """The host's configuration."""
        return self._config

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
        self._set.install(self.config, self.plugins)
        self.pm.hook.plugin_apply.call_historic(kwargs={"host": self})
        return self

    async def aclose(self) -> list[CloseReport]:
        """Close every live session, then dispose every plugin, newest first.

        Shutdown never fails on a session: one that cannot be stored (taken
        over by another process, or its backend failing) is abandoned, and
        its report is returned, kept in `close_reports` and logged as an
        error on the `turnkeep` logger.

        Returns:
            The reports of the sessions that left something unsaved.

        Raises:
            PluginDisposeError: a plugin failed to stop (the others were
                still disposed).
        """
        if self._closed:
            return self.close_reports
        reports = await self.sessions.close_all() if self._started else []
        self._closed = True
        try:
            await self._set.dispose_all(self)
        finally:
            self.close_reports = closed_over(self.sessions.list(), reports)
        return self.close_reports

    async def __aenter__(self) -> Host:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- plugins -------------------------------------------------------------

    @property
    def pm(self) -> pluggy.PluginManager:
        """The host's own pluggy manager."""
        return self._set.pm

    def register(self, plugin: object, name: str | None = None) -> str:
        """Register a plugin now; `plugin_apply` is replayed to it.

        Returns:
            The name the plugin was registered under.
        """
        return self._set.register(plugin, name)

    async def remove(self, plugin: object | str) -> None:
        """Dispose a plugin (awaited) and unregister it."""
        target = self._set.resolve(plugin)
        try:
            await self._set.dispose(target, self)
        finally:
            self._set.unregister(target)

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
        return self._set.names()

    async def reload(self, plugin: object | str) -> object:
        """Swap a plugin for a fresh import of its module; sessions stay live.

        See `turnkeep.reload.Reloader.reload`.

        Raises:
            PluginNotFoundError: no such plugin is registered.
            PluginReloadError: the fresh import or construction failed; the
                old plugin stays.
            FlushError: the swap completed but draining failed; the events
                stay buffered and the next flush retries them.
        """
        return await self._reloader.reload(plugin)

    # -- persistence ---------------------------------------------------------

    @property
    def codec(self) -> EventCodec:
        """The event codec (built-in vocabulary plus registered types)."""
        return self._set.codec

    @property
    def persistence_name(self) -> str | None:
        """The active backend's name, or `None` without persistence."""
        return self._set.active_name

    @property
    def backends(self) -> dict[str, BackendEntry]:
        """Every registered backend, by name."""
        return self._set.backends.as_dict()

    def require_persistence(self) -> SessionPersistence:
        """Return the active backend.

        Raises:
            PersistenceNotConfiguredError: none is active.
        """
        return self._set.require_persistence()

    def unsaved(self, session: Session) -> int:
        """How many of the session's events are not durable yet.

        Always 0 without persistence: there is nothing to wait for.
        """
        writebehind = self._set.writebehind
        return writebehind.unsaved(session) if writebehind is not None else 0

    def is_settled(self, session: Session) -> bool:
        """Whether every event of the session is durable (nothing unsaved)."""
        return self.unsaved(session) == 0

    def is_fenced(self, session: Session) -> bool:
        """Whether another process took the session over from this one."""
        writebehind = self._set.writebehind
        return writebehind is not None and writebehind.is_fenced(session)

    async def register_session(self, session: Session) -> None:
        """Await the backend's registration of a session (no-op without one).

        Raises:
            SessionExistsError: a new session's id is already stored.
            SessionLockedError: another process is creating or driving it.
            FlushError: the registration failed otherwise.
        """
        if self._set.writebehind is not None:
            await self._set.writebehind.register(session)

    # -- typed hook facade (turnkeep.session.SessionHooks) -------------------

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

    def event_rejected(self, session: Session, seq: int) -> None:
        """Drop what was buffered of an event refused at its source."""
        if self._set.writebehind is not None:
            self._set.writebehind.discard(session, seq)

    @property
    def redactors(self) -> Sequence[object]:
        """The live list of `redact_event` implementations."""
        return self._redactors

    def redact_event(self, session: Session, event: E, skip: object = None) -> E:
        """Run every `redact_event` implementation (`RedactionError` if one fails)."""
        return run_redact_event(self._redactors, session, event, skip)

    def redact_text(self, text: str) -> str:
        """Run every `redact_text` implementation (`RedactionError` if one fails)."""
        return run_redact_text(self.pm.hook.redact_text.get_hookimpls(), text)

    async def flush_session(self, session: Session) -> None:
        """Emit `session_flush` and await every implementation together.

        Raises:
            FlushError: an implementation failed, or the host is closed (a
                flush can no longer make anything durable).
        """
        if self._reloader.swapping:
            await self._reloader.wait()
        if self._closed:
            raise FlushError(
                f"session {session.id!r}: the host is closed; nothing can be "
                "made durable any more",
                session_id=session.id,
            )
        results: list[object] = self.pm.hook.session_flush(session=session)
        try:
            await await_all(results, session_id=session.id, what="flush")
        finally:
            # Also after a failure: part of the flush may have landed.
            if self._set.writebehind is not None:
                durable = len(session.events) - self.unsaved(session)
                self._commits.durable(session, durable)

    async def reconcile_effect(self, session: Session, call: ToolCall) -> Verdict:
        """Ask every `reconcile_effect` implementation about `call`.

        Raises:
            EffectReconcileError: an implementation failed (see the hook).
        """
        return await decide(live_impls(self.pm, "reconcile_effect"), session, call)

    async def turn_manifest(
        self, session: Session, *, strict: bool = False
    ) -> Manifest | None:
        """The versions of outside state plugins name (`None`: none named).

        Raises:
            ManifestHookError: with `strict`, an implementation failed (see
                `turnkeep.manifests.gather`; without it, failures are logged).
        """
        impls = live_impls(self.pm, "turn_manifest")
        return await gather(impls, session, strict=strict)

    def render_transcript(
        self, events: Sequence[SessionEvent]
    ) -> list[TranscriptEntry] | None:
        """The history a plugin says `events` mean, or `None` if none claims them.

        Raises:
            HookContractError: the claiming plugin returned something other
                than a sequence of `TranscriptEntry`.
        """
        return checked_transcript(self.pm.hook.render_transcript(events=events))

    async def emit_session_closed(self, session: Session) -> None:
        """Emit `session_closed` and await every implementation."""
        results: list[object] = self.pm.hook.session_closed(session=session)
        await await_all(results, session_id=session.id, what="close")
