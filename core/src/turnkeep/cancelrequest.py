"""Asking a session's owner, from another process, to cancel its running turn.

`CancelRequests` is an optional backend capability (checked like `held`,
`load_after` and `wait_for_commit`: by the methods' presence). A process
that does not own a session (`turnkeep cancel`, `turnkeep serve`) records
a request with `request_cancel(session_id, reason)`; the process that
runs the session's turn asks `cancel_requested(session_id, after)` at each
step and while a model call or a tool runs, and cancels the turn as the
in-process `AgentLoop.cancel` does.

The contract [cancel-request], which the conformance kit checks:

- A request never touches the session's log, takes no lock and needs no
  writer role: it is recorded while another process holds the session
  (JSONL: a small side file replaced atomically next to the log; SQLite
  and PostgreSQL: a row of their own table), and the holder's writes go on
  undisturbed.
- Requests of a session are numbered 1, 2, ... in the order they were
  recorded; `request_cancel` returns the recorded request.
  `cancel_requested(session_id, after)` returns the latest request whose
  number is greater than `after` (any instance, any process, for a shared
  database any machine, sees it at once), else `None`. It is a probe of
  one small record: no log read.
- A session that is not stored raises `SessionNotFoundError` from both
  (and deleting a session deletes its requests); an unstorable id
  `InvalidSessionIdError`; a reason that is not text of at most
  `MAX_REASON_CHARS` characters `ValueError`.

The owner acts only on a request recorded after its turn was admitted (by
`requested_at` against the admission time; `turnkeep.agent.remotecancel`),
so a request recorded while no turn ran never cancels the next turn.
`ask_to_cancel` is what a requester calls: it says truthfully whether
anyone is there to act on the request (a live owner holds the session);
when nobody is, it records nothing. A backend without the capability is
refused with `CancelUnsupportedError` naming it.
"""

from __future__ import annotations

import time
from typing import Final, Protocol, cast

import attrs
import msgspec

from turnkeep.capabilities import probe_held
from turnkeep.errors import CancelUnsupportedError, SessionNotFoundError
from turnkeep.ids import validate_session_id
from turnkeep.persistence import SessionPersistence

__all__ = [
    "MAX_REASON_CHARS",
    "CancelAnswer",
    "CancelRequest",
    "CancelRequests",
    "ask_to_cancel",
    "cancel_requests",
    "check_reason",
    "decode_request",
    "encode_request",
    "has_cancel_requests",
    "next_request",
]

MAX_REASON_CHARS: Final = 500
"""The longest reason a request may carry."""


class CancelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded request to cancel a session's running turn.

    Attributes:
        number: 1 for a session's first request, one more for each next.
        reason: why, in the requester's words.
        requested_at: epoch milliseconds, by the requester's clock.
    """

    number: int
    reason: str
    requested_at: int


class CancelRequests(Protocol):
    """The optional methods that carry cancel requests between processes."""

    async def request_cancel(self, session_id: str, reason: str) -> CancelRequest:
        """Record a request to cancel the session's running turn.

        Raises:
            SessionNotFoundError: the session is not stored.
            InvalidSessionIdError: the id is not storable.
            ValueError: the reason is not text of at most `MAX_REASON_CHARS`.
        """
        ...

    async def cancel_requested(
        self, session_id: str, after: int
    ) -> CancelRequest | None:
        """The latest request numbered above `after`, or `None`.

        Raises:
            SessionNotFoundError: the session is not stored.
            InvalidSessionIdError: the id is not storable.
        """
        ...


@attrs.frozen
class CancelAnswer:
    """What `ask_to_cancel` did.

    Attributes:
        request: the recorded request, or `None` when nothing was recorded.
        owner_alive: whether a live owner holds the session (only it can
            end a running turn; when none does, no turn is running and
            nothing was recorded).
    """

    request: CancelRequest | None
    owner_alive: bool


def has_cancel_requests(backend: object) -> bool:
    """Whether `backend` carries cancel requests (see [cancel-request])."""
    return callable(getattr(backend, "request_cancel", None)) and callable(
        getattr(backend, "cancel_requested", None)
    )


def cancel_requests(backend: object, *, name: str = "backend") -> CancelRequests:
    """`backend` as `CancelRequests`.

    Raises:
        CancelUnsupportedError: it has no `request_cancel`/`cancel_requested`.
    """
    if not has_cancel_requests(backend):
        raise CancelUnsupportedError(
            f"the {name!r} backend ({type(backend).__name__}) cannot record a "
            "cancel request: cancel the turn in the process that runs it"
        )
    return cast("CancelRequests", backend)


def check_reason(reason: object) -> str:
    """Refuse a reason before anything is touched.

    Raises:
        ValueError: not text, or longer than `MAX_REASON_CHARS`.
    """
    if not isinstance(reason, str):
        raise ValueError(f"a cancel reason is text, not {type(reason).__name__}")
    if len(reason) > MAX_REASON_CHARS:
        raise ValueError(
            f"a cancel reason has at most {MAX_REASON_CHARS} characters, "
            f"not {len(reason)}"
        )
    return reason


def next_request(
    previous: CancelRequest | None, reason: str, *, now_ms: int | None = None
) -> CancelRequest:
    """The request that follows `previous` (for backends)."""
    return CancelRequest(
        number=1 if previous is None else previous.number + 1,
        reason=reason,
        requested_at=time.time_ns() // 1_000_000 if now_ms is None else now_ms,
    )


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(CancelRequest)


def encode_request(request: CancelRequest) -> bytes:
    """The request as stored by a backend that stores it as JSON."""
    return _encoder.encode(request)


def decode_request(data: bytes) -> CancelRequest:
    """A request `encode_request` stored.

    Raises:
        msgspec.DecodeError, msgspec.ValidationError: it is not one.
    """
    return _decoder.decode(data)


async def ask_to_cancel(
    backend: SessionPersistence,
    session_id: str,
    reason: str,
    *,
    name: str = "backend",
) -> CancelAnswer:
    """Record a request for the session's owner, if a live one holds it.

    Raises:
        CancelUnsupportedError: the backend cannot record requests.
        SessionNotFoundError: the session is not stored.
        InvalidSessionIdError: the id is not storable.
        ValueError: a bad reason.
    """
    requests = cancel_requests(backend, name=name)
    session_id = validate_session_id(session_id)
    check_reason(reason)
    holds = await probe_held(backend, [session_id])
    if holds is not None and not holds.get(session_id, False):
        if not await backend.has(session_id):
            raise SessionNotFoundError(f"no stored session {session_id!r}")
        return CancelAnswer(request=None, owner_alive=False)
    request = await requests.request_cancel(session_id, reason)
    return CancelAnswer(request=request, owner_alive=True)
