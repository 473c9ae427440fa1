"""The 0.1 forms of `AgentLoop` that name the session, kept until 0.3.

Owns how a call such as `run_turn(session_id, text)` or `cancel(session_id)`
is read and warned about: a loop drives one session, so the session
argument is deprecated in favour of one loop per session. The `stacklevel`
each caller passes points the `DeprecationWarning` at the user's call.
"""

from __future__ import annotations

import warnings
from typing import Protocol

from turnkeep._deprecated import REMOVED_IN
from turnkeep.host import Host

__all__ = ["deprecated", "new_session", "session_and_text", "session_arg"]


class _Loop(Protocol):
    host: Host


def new_session(self: _Loop, session_id: str | None = None) -> str:
    """Deprecated: another live session; use `AgentLoop.create` per conversation."""
    deprecated("new_session()", "AgentLoop.create(...) per conversation", stacklevel=3)
    return self.host.sessions.create(session_id).id


def session_and_text(
    method: str, args: tuple[str, ...], default: str
) -> tuple[str, str]:
    """Read `(text)` or the deprecated `(session_id, text)` of `method`."""
    if len(args) == 1:
        return default, args[0]
    if len(args) == 2:
        session_id, text = args
        return session_arg(method, session_id, default, stacklevel=5), text
    raise TypeError(f"{method}() takes the user's text (got {len(args)} values)")


def session_arg(
    method: str, session_id: str | None, default: str, *, stacklevel: int = 4
) -> str:
    """The session `method` acts on: `default`, unless one is named (deprecated)."""
    if session_id is None:
        return default
    deprecated(
        f"{method}(session_id, ...)",
        f"{method}(...) on the loop of that session (one loop per session)",
        stacklevel=stacklevel,
    )
    return session_id


def deprecated(old: str, new: str, *, stacklevel: int) -> None:
    """Warn that `AgentLoop.<old>` goes in the next minor release."""
    warnings.warn(
        f"AgentLoop.{old} is deprecated and goes in turnkeep {REMOVED_IN}; use {new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
