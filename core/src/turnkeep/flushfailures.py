"""The errors a failed flush reports when its outcome is not a plain failure.

Owns the wording of the two flush failures that tell the caller more than
"nothing was stored": a flush whose outcome is unknown (it may be in the
log) and a flush whose session was deleted under it. The write-behind
raises them; their text says what the caller can and cannot do next.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnkeep.codec import EventRecord
from turnkeep.errors import FlushOutcomeUnknownError, FlushSessionDeletedError

__all__ = ["deleted", "in_doubt"]


def in_doubt(
    backend: str,
    session_id: str,
    doubt: tuple[int, int] | None,
    fenced: bool,
    batch: Sequence[EventRecord],
    cause: Exception,
) -> FlushOutcomeUnknownError:
    """The error of a flush attempt while a flush's outcome is unknown.

    Args:
        backend: the backend's name.
        session_id: the session.
        doubt: the seq range in doubt (default: the batch's).
        fenced: this process lost the writer role too.
        batch: the records of the attempt.
        cause: what the backend raised.
    """
    first, last = doubt or (batch[0].seq, batch[-1].last)
    rest = (
        f"; seq {last + 1}..{batch[-1].last} are not stored"
        if batch[-1].last > last
        else ""
    )
    what = (
        "another process took the session over, so this one cannot find out: "
        "resume the session afresh and look at its log (the events are all "
        "there, or none are) before running anything again"
        if fenced
        else "they stay buffered and the next flush settles it"
    )
    return FlushOutcomeUnknownError(
        f"session {session_id!r}: the flush of seq {first}..{last} may or may "
        f"not be stored in {backend!r} ({cause}){rest}; {what}. Do not store "
        "these events anywhere else.",
        session_id=session_id,
        first_seq=first,
        last_seq=last,
        fenced=fenced,
    )


def deleted(session_id: str, count: int, first: int | None) -> FlushSessionDeletedError:
    """The error of a flush whose session was deleted (a forced delete)."""
    what = f"{count} event(s) from seq {first}" if count else "its summary"
    return FlushSessionDeletedError(
        f"session {session_id!r} was deleted from the store (a forced delete) "
        f"while this process held it, so {what} cannot be stored; close it (a "
        "report says what stayed unsaved): nothing is left to resume",
        session_id=session_id,
    )
