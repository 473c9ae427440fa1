"""What the write-behind holds of a live session, for tests that look inside."""

from __future__ import annotations

from turnkeep.host import Host
from turnkeep.session import Session
from turnkeep.writebehind import WriteState


def write_state(host: Host, session: Session) -> WriteState:
    """The session's write state in the host's active write-behind."""
    writebehind = host._set.writebehind
    assert writebehind is not None, "the host has no persistence backend"
    return writebehind.state(session)


def summary_unsaved(host: Host, session: Session) -> bool:
    """Whether the session's summary changed since the backend last got it."""
    return session.summary is not write_state(host, session).stored_summary
