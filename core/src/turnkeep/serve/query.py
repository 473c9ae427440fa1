"""Reading a request's parameters and body, within bounds.

Each helper raises `Problem` 400 for a parameter that is not what it must
be (naming the parameter), 413 for a body over the limit, 422 for a body
that is JSON of the wrong shape.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final, cast, get_args

import msgspec
from starlette.requests import Request

from turnkeep.ids import validate_session_id
from turnkeep.meta import SessionStatus
from turnkeep.serve.paths import decode_segment
from turnkeep.serve.problems import Problem

__all__ = [
    "STATUSES",
    "int_param",
    "json_body",
    "path_session_id",
    "status_param",
    "time_param",
]

STATUSES: Final[frozenset[str]] = frozenset(get_args(SessionStatus))


def _bad(name: str, why: str) -> Problem:
    return Problem(400, "bad-parameter", f"query parameter {name!r}: {why}")


def path_session_id(request: Request) -> str:
    """The session id the path names, plain or encoded (`turnkeep.serve.paths`).

    Raises:
        Problem: 400 `invalid-session-id`, a `~` segment that is not base64url
            of UTF-8.
        InvalidSessionIdError: the id is not one a session may have.
    """
    segment = str(request.path_params["session_id"])
    session_id = decode_segment(segment)
    if session_id is None:
        raise Problem(
            400,
            "invalid-session-id",
            f"{segment[:60]!r} starts with '~' but is not an encoded session id "
            "(base64url of its UTF-8 bytes)",
        )
    return validate_session_id(session_id)


def int_param(
    request: Request, name: str, default: int, *, minimum: int, maximum: int
) -> int:
    """An integer query parameter between `minimum` and `maximum`."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _bad(name, f"{raw[:40]!r} is not an integer") from None
    if not minimum <= value <= maximum:
        raise _bad(name, f"must be between {minimum} and {maximum}, not {value}")
    return value


def status_param(request: Request) -> frozenset[SessionStatus] | None:
    """`status=a,b`: the statuses to keep (`None`: all)."""
    raw = request.query_params.get("status")
    if raw is None or raw == "":
        return None
    wanted = frozenset(s.strip() for s in raw.split(",") if s.strip())
    unknown = sorted(wanted - STATUSES)
    if unknown or not wanted:
        raise _bad(
            "status",
            f"unknown status {', '.join(unknown) or raw!r}; "
            f"expected some of {', '.join(sorted(STATUSES))}",
        )
    return cast("frozenset[SessionStatus]", wanted)


def time_param(request: Request, name: str) -> int | None:
    """A time: epoch milliseconds, or ISO 8601 (UTC unless it says otherwise)."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if raw.isdigit():
        return int(raw)
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise _bad(
            name, f"{raw[:40]!r} is neither epoch milliseconds nor ISO 8601"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    ms = int(moment.timestamp() * 1000)
    if ms < 0:
        raise _bad(name, f"{raw[:40]!r} is before 1970")
    return ms


async def json_body(request: Request, max_body: int) -> object:
    """The request's JSON body (`None` when empty), at most `max_body` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body:
        raise _too_large(max_body)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_body:
            raise _too_large(max_body)
    if not body.strip():
        return None
    try:
        return msgspec.json.decode(bytes(body))
    except msgspec.DecodeError as exc:
        raise Problem(400, "bad-json", f"the body is not JSON: {exc}") from None
    except RecursionError:
        # msgspec decodes nested arrays and objects recursively (R15).
        raise Problem(
            400, "bad-json", "the body is JSON nested too deep to read"
        ) from None


def _too_large(max_body: int) -> Problem:
    return Problem(413, "body-too-large", f"the body is over {max_body} bytes")
