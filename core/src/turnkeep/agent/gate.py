"""The durability gate: a turn starts only on a registered, settled session.

Before a turn (or recovery) runs, `DurabilityGate.admit` makes sure that

- a session with nothing stored yet is registered with the backend, so an
  id that is already stored is refused with `SessionExistsError` before any
  model call (and the refused session is dropped, not left trapped);
- the turn watches for cancel requests from other processes
  (`turnkeep.agent.remotecancel`) from here until it ends;
- everything the previous turn appended is durable (R7): if its flush
  failed, it is retried once, and if it still fails the turn is refused
  with `TurnNotDurableError`, the events kept in memory, in order; if the
  outcome of a flush is unknown (R17), that `FlushOutcomeUnknownError`
  itself refuses the turn, with its seq range, so no one reads "not stored"
  into it.

The turn's own durability points go through `flush`, which remembers a
failure so the next admission retries it.
"""

from __future__ import annotations

import attrs

from turnkeep.agent.remotecancel import watch
from turnkeep.agent.turns import Running
from turnkeep.errors import (
    FlushError,
    FlushOutcomeUnknownError,
    SessionExistsError,
    TurnNotDurableError,
)
from turnkeep.host import Host
from turnkeep.session import Session

__all__ = ["DurabilityGate"]


@attrs.define(eq=False)
class DurabilityGate:
    """Admission of turns for the sessions of one loop."""

    host: Host
    _unsaved: set[str] = attrs.field(init=False, factory=set[str], repr=False)

    async def admit(self, running: Running) -> None:
        """Register a new session, then require the previous turn durable.

        Raises:
            SessionExistsError: a new session's id is already stored.
            FlushOutcomeUnknownError: whether the previous turn's events are
                stored is not known (the turn did not start).
            TurnNotDurableError: the previous turn still cannot be flushed.
        """
        session = running.session
        watch(self.host, running)  # until the turn ends: cancel from elsewhere
        if session.origin != "resumed":
            try:
                await self.host.register_session(session)
            except SessionExistsError as exc:
                await self.host.sessions.abandon(session.id, reason=str(exc))
                raise SessionExistsError(
                    f"session {session.id!r} is already stored; continue it "
                    "with AgentLoop.resume (or AgentLoop.open, which resumes "
                    "or creates), or choose another id. Nothing was run."
                ) from exc
        if not self._needs_flush(session):
            return
        unsaved = self.host.unsaved(session)
        running.phase = "flush"
        try:
            await self.flush(session)
        except FlushOutcomeUnknownError:
            raise  # "not durable" would be a guess: pass the range on
        except FlushError as exc:
            raise TurnNotDurableError(
                f"session {session.id!r}: the previous turn is not durable "
                f"({unsaved} event(s) unsaved) and flushing it again failed: "
                f"{exc}. The events stay in memory, in order; no new turn "
                "starts until a flush lands."
            ) from exc
        finally:
            running.phase = "between"

    async def flush(self, session: Session) -> None:
        """A durability point; a failure makes the next admission retry it.

        Raises:
            FlushError: the events could not be stored.
        """
        try:
            await session.flush()
        except FlushError:
            self._unsaved.add(session.id)
            raise
        self._unsaved.discard(session.id)

    def _needs_flush(self, session: Session) -> bool:
        if session.id in self._unsaved:
            return True
        return not self.host.is_settled(session)
