"""Test doubles and helpers: offline models, an in-memory store, hook checks.

Opt in from a test suite or an example (nothing here is loaded
automatically):

    from turnkeep.testing import HookMonitor, RecordingPlugin, ScriptedModel

`ScriptedModel` replies from a script (`Reply`, `ScriptedCall`) and
`EchoModel` repeats the user, so a loop runs with no model server.
`MemoryStorage` / `MemoryPersistence` are the in-memory reference backend
(`persistence = "memory"`), shared by several hosts through one storage.

`RecordingPlugin` records every session hook call it receives.
`HookMonitor.attach(host)` watches every hook call of one host and collects
violations of the invariants every test should keep: `seq` contiguous per
session as emitted through `session_event`, and no `session_event` delivered
to a plugin after its `plugin_dispose` returned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from turnkeep.agent.models import EchoModel, Reply, ScriptedCall, ScriptedModel
from turnkeep.errors import EventRejectedError
from turnkeep.hookspecs import hookimpl
from turnkeep.memory import MemoryPersistence, MemoryStorage

if TYPE_CHECKING:
    from turnkeep.events import SessionEvent
    from turnkeep.host import Host
    from turnkeep.session import Session

__all__ = [
    "EchoModel",
    "HookMonitor",
    "MemoryPersistence",
    "MemoryStorage",
    "RecordingPlugin",
    "Reply",
    "ScriptedCall",
    "ScriptedModel",
]


@attrs.define(eq=False)
class RecordingPlugin:
    """Records `(hook, session_id, event_or_None)` for every session hook."""

    calls: list[tuple[str, str, SessionEvent | None]] = attrs.field(
        factory=list[tuple[str, str, "SessionEvent | None"]]
    )

    @hookimpl
    def session_created(self, session: Session) -> None:
        """Record the creation."""
        self.calls.append(("session_created", session.id, None))

    @hookimpl(trylast=True)
    def session_event(self, session: Session, event: SessionEvent) -> None:
        """Record the event."""
        self.calls.append(("session_event", session.id, event))

    @hookimpl
    def session_flush(self, session: Session) -> None:
        """Record the flush."""
        self.calls.append(("session_flush", session.id, None))

    def events(self, session_id: str) -> list[SessionEvent]:
        """The events recorded for one session, in order."""
        return [
            e
            for h, s, e in self.calls
            if h == "session_event" and s == session_id and e
        ]


@attrs.define(eq=False)
class HookMonitor:
    """Collects invariant violations across every hook call of a host."""

    host: Host
    violations: list[str] = attrs.field(factory=list[str])
    _next_seq: dict[int, int] = attrs.field(factory=dict[int, int])
    _disposed: list[object] = attrs.field(factory=list[object])

    @classmethod
    def attach(cls, host: Host) -> HookMonitor:
        """Start monitoring `host` (call before `host.start()`)."""
        monitor = cls(host)
        host.pm.add_hookcall_monitoring(monitor._before, monitor._after)
        return monitor

    def disposed(self, plugin: object) -> None:
        """Note that `plugin_dispose` of `plugin` returned."""
        self._disposed.append(plugin)

    def _before(
        self, hook_name: str, hook_impls: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> None:
        if hook_name != "session_event":
            return
        for impl in hook_impls:
            if any(impl.plugin is p for p in self._disposed):
                self.violations.append(
                    f"session_event reached {impl.plugin_name!r} after its dispose"
                )

    def _after(
        self,
        outcome: Any,
        hook_name: str,
        hook_impls: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> None:
        session = kwargs.get("session")
        if session is None:
            return
        key = id(session)
        if hook_name == "session_created":
            self._next_seq[key] = len(session.events)
            return
        if hook_name != "session_event":
            return
        error = outcome.exception
        if isinstance(error, EventRejectedError):
            return
        event = kwargs["event"]
        expected = self._next_seq.get(key, event.seq)
        if event.seq != expected:
            self.violations.append(
                f"session {session.id!r}: session_event seq {event.seq}, expected "
                f"{expected}"
            )
        self._next_seq[key] = event.seq + 1
