"""Errors as the service answers them: JSON with a stable `code`.

Every failure an endpoint can meet becomes `{"code": ..., "message": ...}`
(a turnkeep error's own `code`, such as `session-not-found`; the service's
own in the same style, such as `bad-parameter`) with a status that says
whose fault it is: bad input 400 or 422, an unknown
id 404, a missing token 401, a budget spent 429, a damaged or unreadable
store 5xx. A failure nobody expected is logged here with its traceback and
answered `500 internal_error` without one: what the server knows about
its own code never reaches a client.
"""

from __future__ import annotations

import logging
from typing import Final

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from turnkeep.errors import (
    CancelUnsupportedError,
    EventDecodeError,
    InvalidCursorError,
    InvalidListFilterError,
    InvalidSessionIdError,
    SessionCorruptError,
    SessionNotFoundError,
    StorageError,
    TurnkeepError,
    UnsupportedFormatError,
)

__all__ = ["Problem", "ProblemBody", "json_response", "on_exception", "on_http"]

_log: Final = logging.getLogger("turnkeep.serve")
_encoder: Final = msgspec.json.Encoder()


class ProblemBody(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What an error response holds.

    Attributes:
        code: a stable machine-readable name (`session-not-found`, ...).
        message: what went wrong, for a person.
        session_id: the session the request was about, when there is one.
    """

    code: str
    message: str
    session_id: str | None = None


class Problem(Exception):
    """An error response an endpoint decided on (bad input, auth, budgets)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def json_response(
    content: object, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """A JSON response encoded by msgspec (it owns turnkeep's wire format)."""
    return Response(
        _encoder.encode(content),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _answer(
    status: int,
    code: str,
    message: str,
    session_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body = ProblemBody(code=code, message=message, session_id=session_id)
    return json_response(body, status, headers)


# The status of each turnkeep error a request can meet, most specific first;
# the response's `code` is the error's own (`TurnkeepError.code`).
_STATUS: Final[tuple[tuple[type[TurnkeepError], int], ...]] = (
    (InvalidSessionIdError, 400),
    (InvalidCursorError, 400),
    (InvalidListFilterError, 400),
    (SessionNotFoundError, 404),
    (CancelUnsupportedError, 501),
    (SessionCorruptError, 500),
    (UnsupportedFormatError, 500),
    (EventDecodeError, 500),
    (StorageError, 503),
)


def _session_of(request: Request) -> str | None:
    value = request.path_params.get("session_id")
    return value if isinstance(value, str) else None


async def on_exception(request: Request, exc: Exception) -> Response:
    """Answer any exception an endpoint raised (the app's catch-all handler)."""
    if isinstance(exc, Problem):
        return _answer(
            exc.status, exc.code, exc.message, _session_of(request), exc.headers
        )
    if isinstance(exc, TurnkeepError):
        for kind, status in _STATUS:
            if isinstance(exc, kind):
                return _answer(status, exc.code, str(exc), _session_of(request))
        _log.warning("%s %s: %s", request.method, request.url.path, exc)
        return _answer(500, exc.code, str(exc), _session_of(request))
    _log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
    return _answer(
        500,
        "internal-error",
        "the server failed to answer this request; its log has the details",
        _session_of(request),
    )


_HTTP_CODES: Final = {
    404: "not-found",
    405: "method-not-allowed",
    413: "body-too-large",
}


async def on_http(request: Request, exc: Exception) -> Response:
    """Answer Starlette's own HTTP errors (unknown route, wrong method)."""
    assert isinstance(exc, HTTPException)  # noqa: S101 - registered for it only
    code = _HTTP_CODES.get(exc.status_code, f"http-{exc.status_code}")
    headers = dict(exc.headers) if exc.headers else None
    return _answer(exc.status_code, code, str(exc.detail), None, headers)
