"""Telling plugins which events became durable: the `session_committed` hook.

Owns, per live session, how far commits have been reported, so each flush's
newly durable range is reported once, in seq order, without gap or overlap,
whichever write-behind (before or after a reload) made it durable. Events a
session was loaded with were durable before this process saw them and are
never reported.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Final

import attrs

from turnkeep.session import Session

__all__ = ["CommitReporter"]

_log: Final = logging.getLogger("turnkeep")


@attrs.define(eq=False)
class CommitReporter:
    """Reports newly durable ranges through a `session_committed` caller.

    `observers`, when given, is the hook's live list of implementations
    (`turnkeep._pluggy.live_impls`): while it is empty the call is skipped.
    """

    _emit: Callable[..., object]
    _observers: Sequence[object] | None = None
    _reported: weakref.WeakKeyDictionary[Session, int] = attrs.field(
        init=False, factory=weakref.WeakKeyDictionary[Session, int]
    )

    def durable(self, session: Session, count: int) -> None:
        """The first `count` events of `session` are durable: report the new ones."""
        start = self._reported.get(session, session.stored)
        if count <= start:
            return
        # Advanced before the call: an observer that flushes again (or
        # fails) cannot have the range reported twice.
        self._reported[session] = count
        if self._observers is not None and not self._observers:
            return  # nobody listens: skip the hook call (this is per flush)
        try:
            self._emit(session=session, first_seq=start, last_seq=count - 1)
        except Exception:  # noqa: BLE001 - a durable flush must not look failed
            _log.exception(
                "a session_committed implementation failed for session %r "
                "(seq %d..%d); the events are durable",
                session.id,
                start,
                count - 1,
            )
