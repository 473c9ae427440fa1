"""Why a turn failed, as data: the `failure` of `turn/end` and of `TurnResult`.

A failed turn's `error` is a sentence for people; `TurnFailure` is the same
failure for programs: the error's stable `code` (`"model"`, ...), and for a
model server's failure its HTTP status, the server's own error code,
whether trying again may help, and how many requests were made. Kept apart
from `turnkeep.events` (which re-exports it) so the vocabulary module stays
one screenful per idea. Written by `turnkeep.agent.steps`; read by callers
of `run_turn` and by anything that reads a log.
"""

from __future__ import annotations

import msgspec

__all__ = ["TurnFailure"]


class TurnFailure(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """A failed turn's cause, for a program to act on.

    Attributes:
        code: the stable code of the error that failed the turn (the
            `code` of its `turnkeep.errors` class: `"model"` for the
            model, `"event-rejected"` for an event refused at its source,
            `"not-durable"` for a durability point before an unsafe tool,
            `"internal"` for an unexpected exception).
        status_code: the HTTP status the model server answered, when it
            answered one (`None` for an error inside a stream, a broken
            connection or a timeout).
        server_code: the server's own error code (`"rate_limit_exceeded"`,
            `"429"`, ...), when it sent one.
        retryable: trying the turn again may succeed (a rate limit, a
            server error, a broken connection, a timeout); `False` for a
            refusal that will not change (a bad request, a bad key).
        attempts: the requests the model call made, retries included
            (`None`: not a model server's failure).
    """

    code: str
    status_code: int | None = None
    server_code: str | None = None
    retryable: bool = False
    attempts: int | None = None
