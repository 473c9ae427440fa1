"""Errors as the service answers them: JSON with a stable `code`.

Every failure an endpoint can meet becomes `{"code": ..., "message": ...}`
(a turnkeep error's own `code`, such as `session-not-found`; the service's
own in the same style, such as `bad-parameter`) with a status that says
whose fault it is: bad input 400 or 422, an unknown
id 404, a missing token 401, a budget spent 429, a damaged or unreadable
store 5xx. An expected refusal (`Problem`, a `TurnkeepError`) is answered
by the application's own handlers, so the server neither logs it as a
crash nor drops the connection; a turnkeep error without a status of its
own is logged as one line. A failure nobody expected is caught by
`CatchBugs`, logged here once with its traceback and answered
`500 internal-error` without one: what the server knows about its own code
never reaches a client.
"""

from __future__ import annotations

import logging
from typing import Final

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
from turnkeep.serve.paths import decode_segment

__all__ = [
    "CatchBugs",
    "Problem",
    "ProblemBody",
    "json_response",
    "on_http",
    "on_problem",
    "on_turnkeep_error",
]

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
    return decode_segment(value) if isinstance(value, str) else None


async def on_problem(request: Request, exc: Exception) -> Response:
    """Answer a `Problem` an endpoint raised (nothing logged: it is expected)."""
    assert isinstance(exc, Problem)  # noqa: S101 - registered for it only
    return _answer(exc.status, exc.code, exc.message, _session_of(request), exc.headers)


async def on_turnkeep_error(request: Request, exc: Exception) -> Response:
    """Answer a turnkeep error with its status; one without one is one log line."""
    assert isinstance(exc, TurnkeepError)  # noqa: S101 - registered for it only
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return _answer(status, exc.code, str(exc), _session_of(request))
    _log.warning("%s %s: %s", request.method, request.url.path, exc)
    return _answer(500, exc.code, str(exc), _session_of(request))


class CatchBugs:
    """The outermost layer of the application: a bug answers 500, logged once.

    Starlette's own last-resort handler answers and then re-raises, so that
    the server logs the exception a second time and closes the connection;
    this layer answers `500 internal-error` (when the response has not
    started), logs the traceback once, and keeps the connection.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the application; turn an escaped exception into a 500."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            if started:
                raise  # the answer is on its way: only the server can end it
            request = Request(scope)
            _log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
            response = _answer(
                500,
                "internal-error",
                "the server failed to answer this request; its log has the details",
                _session_of(request),
            )
            await response(scope, receive, send)


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
