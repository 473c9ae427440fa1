"""An OpenAI-compatible chat model over HTTP (extra: `turnkeep[openai]`).

Implements `turnkeep.agent.models.Model` against any server that speaks the
`/chat/completions` streaming API (OpenAI, vLLM, llama.cpp, Ollama, LiteLLM,
...). Consumed by the examples when the environment configures it; the
loop's own tests use `ScriptedModel`, this adapter's run against LiteLLM's
proxy.

Configuration comes from the environment (`OpenAIConfig.from_env`, in
`turnkeep.agent.openai_config`):

- `TURNKEEP_OPENAI_MODEL` (required to enable it), e.g. `gpt-4o-mini`;
- `TURNKEEP_OPENAI_BASE_URL` or `OPENAI_BASE_URL` (default OpenAI's);
- `TURNKEEP_OPENAI_API_KEY` or `OPENAI_API_KEY`;
- `TURNKEEP_OPENAI_TEMPERATURE`, `TURNKEEP_OPENAI_MAX_TOKENS` (optional
  settings sent with every request, and reported by `describe`);
- `TURNKEEP_OPENAI_TIMEOUT`, `TURNKEEP_OPENAI_MAX_RETRIES`.

A reply is finished only when the stream says so: `data: [DONE]`, or a
chunk with a `finish_reason` before the server closed it. An error the
server sends inside the stream (`data: {"error": ...}`, as LiteLLM does
after HTTP 200), and a stream closed before either, raise `ModelError`, so
the loop fails the turn and keeps what was streamed as a partial reply. A
server that ignored `stream: true` and answered one JSON body is read as
the whole reply; any other content type is an error naming it.

Failures carry data (`ModelError.status_code`, `server_code`, `retryable`,
`attempts`), which the loop records as the turn's `TurnFailure`. What the
OpenAI client libraries retry is retried (`turnkeep.agent.openai_wire`),
with backoff or after the server's `Retry-After`, but only while nothing
of the reply has arrived: once a delta arrived, the loop has logged it.

Usage comes from the server: each request asks for it
(`stream_options.include_usage`), and the `usage` chunk the server sends
(prompt and completion tokens) is streamed on as a `Usage`, with the model
name the server says served the call. A server that reports none gives
none; nothing is estimated.

The API key is runtime configuration only: it is sent in the
`Authorization` header and nowhere else. It is not part of any request the
loop records, is hidden from `repr`, and is scrubbed from error messages
(which become `turn/end` errors) in case a server echoes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final, cast

import attrs
import msgspec

from turnkeep.agent import openai_wire as wire
from turnkeep.agent.messages import Message
from turnkeep.agent.models import (
    ModelOutput,
    ModelRequest,
    ModelToolCall,
    TextDelta,
    Usage,
)
from turnkeep.agent.openai_config import DEFAULT_BASE_URL, OpenAIConfig
from turnkeep.errors import ModelError
from turnkeep.events import ModelInfo

try:
    import httpx
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "the OpenAI-compatible model needs httpx: pip install 'turnkeep[openai]'"
    ) from exc

__all__ = ["DEFAULT_BASE_URL", "OpenAIConfig", "OpenAIModel"]

_REDACTED: Final = "[redacted]"


_encoder: Final = msgspec.json.Encoder()
_TIMEOUT_WHAT: Final = {
    "ConnectTimeout": "could not connect",
    "ReadTimeout": "sent nothing",
    "WriteTimeout": "did not take the request",
    "PoolTimeout": "had no free connection",
}


@attrs.define
class _Progress:
    """Whether any part of the reply arrived (then no retry: it is logged)."""

    received: bool = False


@attrs.define(eq=False)
class OpenAIModel:
    """A `Model` that streams from an OpenAI-compatible `/chat/completions`.

    Args:
        config: the server, model, key and retry policy.
        transport: an httpx transport to use instead of the network (tests).
        sleep: waits between retries (`asyncio.sleep`; tests record it).
        jitter: a number in [0, 1) that spreads backoff delays
            (`random.random`).
    """

    config: OpenAIConfig
    transport: httpx.AsyncBaseTransport | None = attrs.field(default=None, repr=False)
    sleep: Callable[[float], Awaitable[None]] = attrs.field(
        default=asyncio.sleep, repr=False
    )
    jitter: Callable[[], float] = attrs.field(default=random.random, repr=False)
    _client: httpx.AsyncClient | None = attrs.field(
        init=False, default=None, repr=False
    )

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                transport=self.transport, timeout=self.config.timeout
            )
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def describe(self) -> ModelInfo:
        """The configured model name and the settings sent (never the key)."""
        config = self.config
        settings: dict[str, Any] = {}
        if config.temperature is not None:
            settings["temperature"] = config.temperature
        if config.max_tokens is not None:
            settings["max_tokens"] = config.max_tokens
        return ModelInfo(
            name=config.model, provider="openai-compatible", settings=settings
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        """Stream the reply from the server, then its usage if it reports one.

        A failure before any part of the reply arrived is retried when it
        may pass (`OpenAIConfig.max_retries`); once a part arrived it is
        never retried, because the loop has already logged it.

        Raises:
            ModelError: the server refused, broke off, reported an error,
                ended the stream before the reply was finished, answered
                with something that is neither a stream nor a JSON reply,
                or sent tool arguments that are not a JSON object; its
                fields say the HTTP status, the server's code, whether a
                retry may help and how many requests were made.
        """
        body = _encoder.encode(self._body(request))
        attempt = 0
        while True:
            attempt += 1
            progress = _Progress()
            try:
                # Closed here, not left to the garbage collector, when the
                # caller stops early: it holds the connection.
                async with contextlib.aclosing(self._attempt(body, progress)) as items:
                    async for item in items:
                        yield item
                return
            except ModelError as exc:
                wait = self._wait(exc, attempt, progress)
                if wait is None:
                    raise self._final(exc, attempt) from None
            await self.sleep(wait)

    def _wait(self, exc: ModelError, attempt: int, progress: _Progress) -> float | None:
        """Seconds to wait before the next attempt, or `None`: give up."""
        config = self.config
        if progress.received or not exc.retryable or attempt > config.max_retries:
            return None
        if exc.retry_after is not None:
            return exc.retry_after if exc.retry_after <= config.retry_max_wait else None
        delay = min(config.retry_delay * 2 ** (attempt - 1), config.retry_max_delay)
        return delay * (1 - 0.25 * self.jitter())

    def _final(self, exc: ModelError, attempt: int) -> ModelError:
        notes: list[str] = []
        wait = exc.retry_after
        if wait is not None and wait > self.config.retry_max_wait and exc.retryable:
            notes.append(
                f"the server asked to wait {wait:g} s, more than retry_max_wait "
                f"({self.config.retry_max_wait:g} s)"
            )
        if attempt > 1:
            notes.append(f"gave up after {attempt} attempts")
        message = str(exc) + (f" ({'; '.join(notes)})" if notes else "")
        return ModelError(
            message,
            status_code=exc.status_code,
            server_code=exc.server_code,
            retryable=exc.retryable,
            attempts=attempt,
            retry_after=exc.retry_after,
        )

    async def _attempt(
        self, body: bytes, progress: _Progress
    ) -> AsyncGenerator[ModelOutput]:
        """One request: its reply streamed, or a `ModelError`."""
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        try:
            async with self._http().stream(
                "POST", url, content=body, headers=headers
            ) as response:
                status = response.status_code
                if status >= 400:
                    detail, code = wire.error_of_body(await response.aread())
                    raise self._error(
                        f"the model server answered HTTP {status}: {detail}",
                        status_code=status,
                        server_code=code,
                        retryable=wire.retryable_status(status, response.headers),
                        retry_after=wire.retry_after(response.headers),
                    )
                kind = response.headers.get("content-type", "")
                kind = kind.split(";")[0].strip().lower()
                if kind == "application/json":
                    reply = wire.reply_decoder.decode(await response.aread())
                    for item in self._whole(reply, progress):
                        yield item
                    return
                if kind not in ("", "text/event-stream"):
                    raise self._error(
                        f"the model server answered HTTP {status} with content "
                        f"type {kind!r}, neither a stream (text/event-stream) "
                        "nor a JSON reply"
                    )
                async with contextlib.aclosing(
                    self._events(response, progress)
                ) as events:
                    async for item in events:
                        yield item
        except httpx.TimeoutException as exc:
            what = _TIMEOUT_WHAT.get(type(exc).__name__, "did not answer")
            raise self._error(
                f"the model server {what} within {self.config.timeout:g} s "
                f"({type(exc).__name__})",
                retryable=True,
            ) from None
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise self._error(
                f"the model server failed: {type(exc).__name__}: {exc}",
                retryable=True,
            ) from None
        except httpx.HTTPError as exc:
            raise self._error(
                f"the model server failed: {type(exc).__name__}: {exc}"
            ) from None
        except msgspec.DecodeError as exc:
            raise self._error(
                f"the model server sent a malformed chunk: {exc}"
            ) from None

    async def _events(
        self, response: httpx.Response, progress: _Progress
    ) -> AsyncGenerator[ModelOutput]:
        """The reply of a `text/event-stream` answer, text as it arrives."""
        calls: dict[int, list[str]] = {}
        names: dict[int, str] = {}
        usage: wire.Usage | None = None
        served: str | None = None
        finished = False
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                finished = True
                break
            if not payload:
                continue
            chunk = wire.chunk_decoder.decode(payload)
            if chunk.error is not None:
                code = wire.server_code(chunk.error)
                raise self._error(
                    "the model server reported an error in the stream: "
                    + wire.describe(chunk.error),
                    server_code=code,
                    retryable=wire.retryable_code(code),
                )
            served = chunk.model or served
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                finished = finished or choice.finish_reason is not None
                delta = choice.delta
                if delta.content:
                    progress.received = True
                    yield TextDelta(delta.content)
                for part in delta.tool_calls or ():
                    progress.received = True
                    function = part.function or wire.Function()
                    if function.name:
                        names[part.index] = function.name
                    calls.setdefault(part.index, []).append(function.arguments or "")
        if not finished:
            raise self._error(
                "the model server ended the stream before the reply was "
                "finished (no [DONE] and no finish_reason)",
                retryable=True,
            )
        for index in sorted(calls):
            yield ModelToolCall(names.get(index, ""), _arguments("".join(calls[index])))
        if usage is not None:
            yield _usage(usage, served)

    def _whole(
        self, reply: wire.FullReply, progress: _Progress
    ) -> Iterator[ModelOutput]:
        """The reply of a server that answered with one JSON body."""
        if reply.error is not None:
            code = wire.server_code(reply.error)
            raise self._error(
                "the model server reported an error: " + wire.describe(reply.error),
                server_code=code,
                retryable=wire.retryable_code(code),
            )
        if not reply.choices:
            raise self._error("the model server answered JSON without a reply")
        message = reply.choices[0].message
        if message.content:
            progress.received = True
            yield TextDelta(message.content)
        for call in message.tool_calls or ():
            progress.received = True
            function = call.function
            yield ModelToolCall(
                function.name or "", _arguments(function.arguments or "")
            )
        if reply.usage is not None:
            yield _usage(reply.usage, reply.model)

    def _error(
        self,
        message: str,
        *,
        status_code: int | None = None,
        server_code: str | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> ModelError:
        return ModelError(
            self._scrub(message),
            status_code=status_code,
            server_code=None if server_code is None else self._scrub(server_code),
            retryable=retryable,
            retry_after=retry_after,
        )

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.instructions:
            messages.append({"role": "system", "content": request.instructions})
        messages.extend(_wire_message(m) for m in request.messages)
        config = self.config
        body: dict[str, Any] = {
            "model": config.model,
            "messages": messages,
            "stream": True,
        }
        if config.report_usage:
            body["stream_options"] = {"include_usage": True}
        if config.temperature is not None:
            body["temperature"] = config.temperature
        if config.max_tokens is not None:
            body["max_tokens"] = config.max_tokens
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        return body

    def _scrub(self, text: str) -> str:
        key = self.config.api_key
        return text.replace(key, _REDACTED) if key else text


def _wire_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "content": message.content,
        }
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": _encoder.encode(call.arguments).decode(),
                },
            }
            for call in message.tool_calls
        ]
    return wire


def _usage(usage: wire.Usage, served: str | None) -> Usage:
    return Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        model=served,
    )


def _arguments(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        value: object = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise ModelError(
            f"the model sent tool arguments that are not JSON: {exc}"
        ) from None
    if not isinstance(value, dict):
        raise ModelError("the model sent tool arguments that are not a JSON object")
    items = cast("dict[object, Any]", value)
    return {str(k): v for k, v in items.items()}
