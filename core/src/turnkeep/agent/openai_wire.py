"""What an OpenAI-compatible server sends, and what its failures mean.

Owned here for `turnkeep.agent.openai_compat`: the msgspec shapes of a
streamed chunk, of a whole (non-streamed) reply and of an error; how an
HTTP answer's error body and its `Retry-After` are read; and which
failures are worth another request. The model adapter decides what to do
with them; this module only reads.

Which failures are retried follows the OpenAI client libraries: HTTP 408,
409, 429 and every 5xx, a broken or refused connection and a timeout, unless
the server says otherwise with `x-should-retry`.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from typing import Final

import msgspec

__all__ = [
    "Chunk",
    "FullReply",
    "ServerError",
    "Usage",
    "chunk_decoder",
    "describe",
    "error_of_body",
    "reply_decoder",
    "retry_after",
    "retryable_code",
    "retryable_status",
    "server_code",
]

DETAIL_CHARS: Final = 500
"""How much of a server's error text goes into an error message."""


class Function(msgspec.Struct, omit_defaults=True):
    """A tool call's name and (a piece of) its JSON arguments."""

    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct, omit_defaults=True):
    """A piece of a streamed tool call, by its index in the reply."""

    index: int = 0
    id: str | None = None
    function: Function | None = None


class Delta(msgspec.Struct, omit_defaults=True):
    """What one streamed chunk adds to a choice."""

    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class Choice(msgspec.Struct, omit_defaults=True):
    """One choice of a streamed chunk."""

    delta: Delta = msgspec.field(default_factory=Delta)
    finish_reason: str | None = None


class Usage(msgspec.Struct, omit_defaults=True):
    """The tokens a call used, as the server reports them."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class ServerError(msgspec.Struct, omit_defaults=True):
    """An error object (`{"error": {"message", "type", "code"}}`)."""

    message: str | None = None
    type: str | None = None
    code: str | int | None = None


class Chunk(msgspec.Struct, omit_defaults=True):
    """One `data:` line of a stream: a piece of the reply, or an error."""

    choices: list[Choice] = msgspec.field(default_factory=list[Choice])
    model: str | None = None
    usage: Usage | None = None
    error: ServerError | str | None = None


class ToolCall(msgspec.Struct, omit_defaults=True):
    """A whole tool call of a non-streamed reply."""

    function: Function = msgspec.field(default_factory=Function)


class Message(msgspec.Struct, omit_defaults=True):
    """The assistant message of a non-streamed reply."""

    content: str | None = None
    tool_calls: list[ToolCall] | None = None


class FullChoice(msgspec.Struct, omit_defaults=True):
    """One choice of a non-streamed reply."""

    message: Message = msgspec.field(default_factory=Message)


class FullReply(msgspec.Struct, omit_defaults=True):
    """A whole reply, sent as one JSON body (a server that did not stream)."""

    choices: list[FullChoice] = msgspec.field(default_factory=list[FullChoice])
    model: str | None = None
    usage: Usage | None = None
    error: ServerError | str | None = None


class _ErrorBody(msgspec.Struct):
    error: ServerError | str | None = None


chunk_decoder: Final = msgspec.json.Decoder(Chunk)
reply_decoder: Final = msgspec.json.Decoder(FullReply)
_error_decoder: Final = msgspec.json.Decoder(_ErrorBody)


def describe(error: ServerError | str) -> str:
    """The server's message for an error, cut to `DETAIL_CHARS`."""
    if isinstance(error, str):
        text = error
    else:
        text = error.message or error.type or msgspec.json.encode(error).decode()
    return text[:DETAIL_CHARS]


def server_code(error: ServerError | str | None) -> str | None:
    """The server's own code for an error (its `code`, else its `type`)."""
    if error is None or isinstance(error, str):
        return None
    if error.code is not None:
        return str(error.code)
    return error.type


def error_of_body(body: bytes) -> tuple[str, str | None]:
    """The message and server code of an HTTP error answer's body.

    A body that is not the usual `{"error": ...}` JSON is quoted as text.
    """
    try:
        error = _error_decoder.decode(body).error
    except msgspec.DecodeError:
        error = None
    if error is None:
        return body[:DETAIL_CHARS].decode("utf-8", "replace"), None
    return describe(error), server_code(error)


def retryable_status(status: int, headers: Mapping[str, str]) -> bool:
    """Whether an HTTP error status is worth another request.

    `x-should-retry: true|false` from the server decides first, as in the
    OpenAI client libraries.
    """
    should = headers.get("x-should-retry", "").strip().lower()
    if should in ("true", "false"):
        return should == "true"
    return status in (408, 409, 429) or status >= 500


def retryable_code(code: str | None) -> bool:
    """Whether an error sent inside a stream is worth another request.

    Only a numeric code that an HTTP answer would have retried counts
    (LiteLLM sends `"429"`, `"500"`); anything else is taken as final.
    """
    if code is None or not code.isdigit():
        return False
    return retryable_status(int(code), {})


def retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The seconds the server asked to wait (`retry-after-ms`, `Retry-After`).

    `Retry-After` may be seconds or an HTTP date. `None` when neither header
    is present or readable, or the value is negative or not finite.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        seconds = _number(millis)
        if seconds is not None:
            return seconds / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    wait = when.timestamp() - (time.time() if now is None else now)
    return max(wait, 0.0)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None
