"""An OpenAI-compatible chat model over HTTP (extra: `turnkeep[openai]`).

Implements `turnkeep.agent.models.Model` against any server that speaks the
`/chat/completions` streaming API (OpenAI, vLLM, llama.cpp, Ollama, LiteLLM,
...). Consumed by the examples when the environment configures it; never
needed by the tests, which use `ScriptedModel`.

Configuration comes from the environment (`OpenAIConfig.from_env`):

- `TURNKEEP_OPENAI_MODEL` (required to enable it), e.g. `gpt-4o-mini`;
- `TURNKEEP_OPENAI_BASE_URL` or `OPENAI_BASE_URL` (default OpenAI's);
- `TURNKEEP_OPENAI_API_KEY` or `OPENAI_API_KEY`;
- `TURNKEEP_OPENAI_TEMPERATURE`, `TURNKEEP_OPENAI_MAX_TOKENS` (optional
  settings sent with every request, and reported by `describe`).

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

import os
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final, cast

import attrs
import msgspec

from turnkeep.agent.messages import Message
from turnkeep.agent.models import (
    ModelOutput,
    ModelRequest,
    ModelToolCall,
    TextDelta,
    Usage,
)
from turnkeep.errors import ConfigurationError, ModelError
from turnkeep.events import ModelInfo

try:
    import httpx
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "the OpenAI-compatible model needs httpx: pip install 'turnkeep[openai]'"
    ) from exc

__all__ = ["DEFAULT_BASE_URL", "OpenAIConfig", "OpenAIModel"]

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
_REDACTED: Final = "[redacted]"


@attrs.frozen
class OpenAIConfig:
    """Where and how to reach the model server.

    Attributes:
        model: the model name the server knows.
        base_url: the API root (without `/chat/completions`).
        api_key: the bearer token, or `None` for servers without auth.
            Never shown by `repr`.
        timeout: seconds to wait for the server between streamed bytes.
        temperature: sent as `temperature` when set.
        max_tokens: sent as `max_tokens` when set: the output cap a token
            budget reserves per call (`turnkeep.agent.budgets`).
        report_usage: ask the server for usage (`stream_options`); turn it
            off for a server that refuses the field.
    """

    model: str
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = attrs.field(default=None, repr=False)
    timeout: float = 120.0
    temperature: float | None = None
    max_tokens: int | None = None
    report_usage: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OpenAIConfig | None:
        """Read the configuration from the environment; `None` if not enabled.

        Raises:
            ConfigurationError: `TURNKEEP_OPENAI_TIMEOUT` or
                `TURNKEEP_OPENAI_TEMPERATURE` is not a number, or
                `TURNKEEP_OPENAI_MAX_TOKENS` not a positive integer.
        """
        env = os.environ if env is None else env
        model = env.get("TURNKEEP_OPENAI_MODEL")
        if not model:
            return None
        timeout_text = env.get("TURNKEEP_OPENAI_TIMEOUT", "120")
        try:
            timeout = float(timeout_text)
        except ValueError as exc:
            raise ConfigurationError(
                f"TURNKEEP_OPENAI_TIMEOUT must be a number of seconds, got "
                f"{timeout_text!r}"
            ) from exc
        temperature = env.get("TURNKEEP_OPENAI_TEMPERATURE")
        max_tokens = env.get("TURNKEEP_OPENAI_MAX_TOKENS")
        try:
            temp = None if temperature is None else float(temperature)
        except ValueError as exc:
            raise ConfigurationError(
                f"TURNKEEP_OPENAI_TEMPERATURE must be a number, got {temperature!r}"
            ) from exc
        if max_tokens is not None and not (
            max_tokens.isdigit() and int(max_tokens) > 0
        ):
            raise ConfigurationError(
                "TURNKEEP_OPENAI_MAX_TOKENS must be a positive integer, got "
                f"{max_tokens!r}"
            )
        return cls(
            model=model,
            base_url=env.get("TURNKEEP_OPENAI_BASE_URL")
            or env.get("OPENAI_BASE_URL")
            or DEFAULT_BASE_URL,
            api_key=env.get("TURNKEEP_OPENAI_API_KEY") or env.get("OPENAI_API_KEY"),
            timeout=timeout,
            temperature=temp,
            max_tokens=None if max_tokens is None else int(max_tokens),
        )


class _Function(msgspec.Struct, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct, omit_defaults=True):
    index: int = 0
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct, omit_defaults=True):
    content: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct, omit_defaults=True):
    delta: _Delta = msgspec.field(default_factory=_Delta)


class _Usage(msgspec.Struct, omit_defaults=True):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Chunk(msgspec.Struct, omit_defaults=True):
    choices: list[_Choice] = msgspec.field(default_factory=list[_Choice])
    model: str | None = None
    usage: _Usage | None = None


_chunk_decoder: Final = msgspec.json.Decoder(_Chunk)
_encoder: Final = msgspec.json.Encoder()


@attrs.define(eq=False)
class OpenAIModel:
    """A `Model` that streams from an OpenAI-compatible `/chat/completions`.

    Args:
        config: the server, model and key.
        transport: an httpx transport to use instead of the network (tests).
    """

    config: OpenAIConfig
    transport: httpx.AsyncBaseTransport | None = attrs.field(default=None, repr=False)
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

        Raises:
            ModelError: the server refused or broke off, or sent tool
                arguments that are not a JSON object.
        """
        body = self._body(request)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        calls: dict[int, list[str]] = {}
        names: dict[int, str] = {}
        usage: _Usage | None = None
        served: str | None = None
        try:
            async with self._http().stream(
                "POST", url, content=_encoder.encode(body), headers=headers
            ) as response:
                if response.status_code >= 400:
                    detail = (await response.aread())[:500].decode("utf-8", "replace")
                    raise ModelError(
                        self._scrub(
                            f"the model server answered HTTP "
                            f"{response.status_code}: {detail}"
                        )
                    )
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        break
                    chunk = _chunk_decoder.decode(payload)
                    served = chunk.model or served
                    if chunk.usage is not None:
                        usage = chunk.usage
                    for choice in chunk.choices:
                        delta = choice.delta
                        if delta.content:
                            yield TextDelta(delta.content)
                        for part in delta.tool_calls or ():
                            function = part.function or _Function()
                            if function.name:
                                names[part.index] = function.name
                            calls.setdefault(part.index, []).append(
                                function.arguments or ""
                            )
        except httpx.HTTPError as exc:
            raise ModelError(
                self._scrub(f"the model server failed: {type(exc).__name__}: {exc}")
            ) from None
        except msgspec.DecodeError as exc:
            raise ModelError(
                self._scrub(f"the model server sent a malformed chunk: {exc}")
            ) from None
        for index in sorted(calls):
            yield ModelToolCall(names.get(index, ""), _arguments("".join(calls[index])))
        if usage is not None:
            yield Usage(
                input_tokens=usage.prompt_tokens,
                output_tokens=usage.completion_tokens,
                model=served,
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
