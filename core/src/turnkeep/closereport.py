"""What closing a live session left behind: `CloseReport`.

A session closes `saved` (everything durable), `fenced` (another process
took it over: what it still held could not be stored) or `abandoned`
(dropped on purpose, or because nothing could store it any more). Hosts
return, keep and log the reports of sessions that left something unsaved.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Literal, TypeAlias

import attrs

from turnkeep.session import Session

__all__ = ["CloseOutcome", "CloseReport", "closed_over"]

_log = logging.getLogger("turnkeep")

CloseOutcome: TypeAlias = Literal["saved", "fenced", "abandoned"]
"""How a session left: everything stored; taken over by another process (what
it still held could not be stored); dropped on purpose without storing."""


@attrs.frozen
class CloseReport:
    """What closing (or abandoning) a live session left behind.

    Attributes:
        session_id: the session.
        outcome: `saved`, `fenced` or `abandoned` (see `CloseOutcome`).
        unsaved: how many of its events were not stored by this process.
        first_unsaved_seq: the seq of the first of them (`None` if none).
        reason: why they were not stored, for people (empty when saved).
        in_doubt: the first and last seq of a flush among them whose outcome
            is unknown (it may be stored: load the session to see), if any.
    """

    session_id: str
    outcome: CloseOutcome
    unsaved: int = 0
    first_unsaved_seq: int | None = None
    reason: str = ""
    in_doubt: tuple[int, int] | None = None

    @property
    def saved(self) -> bool:
        """Whether everything the session held is durable."""
        return self.unsaved == 0

    def describe(self) -> str:
        """One line for a log or a terminal."""
        if self.saved:
            return f"session {self.session_id!r}: closed, everything stored"
        last = (self.first_unsaved_seq or 0) + self.unsaved - 1
        doubt = ""
        if self.in_doubt is not None:
            doubt = (
                f", of which seq {self.in_doubt[0]}..{self.in_doubt[1]} may be "
                "stored all the same (outcome unknown: load the session to see)"
            )
        return (
            f"session {self.session_id!r}: {self.outcome}; {self.unsaved} "
            f"event(s) not stored by this process (seq {self.first_unsaved_seq}"
            f"..{last}){doubt}: {self.reason}"
        )


def closed_over(
    sessions: Iterable[Session], reports: list[CloseReport]
) -> list[CloseReport]:
    """Mark `sessions` closed once nothing can store them any more.

    Returns:
        The reports of `reports` that left something unsaved, each logged
        as an error on the `turnkeep` logger.
    """
    for session in sessions:
        session.closed = True  # nothing could store what it would take
    unsaved = [r for r in reports if not r.saved]
    for report in unsaved:
        _log.error("closing the host: %s", report.describe())
    return unsaved
