"""The OpenAI-compatible model, against a stub server (httpx `MockTransport`).

The stub sends what no real server sends on demand: garbage lines, a stream
that stops without `[DONE]`, a JSON answer to a streamed request, exact
`Retry-After` headers. The same model against a real server is
`tests/loop/test_openai_proxy.py` (LiteLLM's proxy). The API key is a
canary: after real turns on each durable backend, it appears in no event
and in no byte of any file the store wrote, nor in error messages, nor in
`repr`.
"""

from __future__ import annotations

import email.utils
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from tests.loop.support import (
    BACKENDS,
    SpyTool,
    backend_host_config,
    backend_ready_async,
)

from turnkeep import AgentLoop, Host, ModelRequest
from turnkeep.agent.messages import HistoryToolCall, Message
from turnkeep.agent.models import ModelToolCall, TextDelta, Usage
from turnkeep.agent.openai_compat import DEFAULT_BASE_URL, OpenAIConfig, OpenAIModel
from turnkeep.agent.tools import ToolSpec
from turnkeep.errors import ConfigurationError, ModelError
from turnkeep.events import AssistantMessage, TurnEnd, TurnFailure


def sse_open(*chunks: dict[str, Any]) -> bytes:
    """Chunks as a stream that ends without `[DONE]`."""
    lines = [b"data: " + msgspec.json.encode(c) + b"\n\n" for c in chunks]
    return b": keep-alive\n\n" + b"".join(lines)


def sse(*chunks: dict[str, Any]) -> bytes:
    return sse_open(*chunks) + b"data: [DONE]\n\n"


def text(piece: str) -> dict[str, Any]:
    return {"choices": [{"delta": {"content": piece}}]}


def tool_delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"choices": [{"delta": {"tool_calls": [{"index": index, **fields}]}}]}


class Server:
    """A scripted chat-completions server that records what it received."""

    def __init__(self, key: str, replies: list[bytes]) -> None:
        self.key = key
        self.replies = replies
        self.bodies: list[dict[str, Any]] = []
        self.auth: list[str | None] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith("/chat/completions")
        self.auth.append(request.headers.get("authorization"))
        self.bodies.append(msgspec.json.decode(request.content))
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content=self.replies[len(self.bodies) - 1],
        )


def canary() -> str:
    return "sk-canary-" + secrets.token_hex(16)


async def no_wait(_seconds: float) -> None:
    """Retries without waiting (tests that do not look at the waits)."""


def model_for(
    key: str, handler: Callable[[httpx.Request], httpx.Response], **settings: Any
) -> OpenAIModel:
    config = OpenAIConfig(
        model="test-model", base_url="http://mock/v1", api_key=key, **settings
    )
    return OpenAIModel(config, transport=httpx.MockTransport(handler), sleep=no_wait)


def all_bytes(root: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in root.rglob("*") if p.is_file()]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_a_turn_with_tool_calls_and_the_key_never_stored(
    backend: str, tmp_path: Path
) -> None:
    await backend_ready_async(backend, tmp_path)
    key = canary()
    server = Server(
        key,
        [
            sse(
                text("Let me "),
                text("look."),
                tool_delta(0, id="prov_1", function={"name": "look", "arguments": ""}),
                tool_delta(0, function={"arguments": '{"path": '}),
                tool_delta(0, function={"arguments": '"a.txt"}'}),
                tool_delta(1, id="prov_2", function={"name": "act", "arguments": "{}"}),
            ),
            sse(text("All "), text("done.")),
        ],
    )
    model = model_for(key, server.handle)
    look = SpyTool("look", replay="safe", output="contents")
    act = SpyTool("act", output="acted")
    async with Host(backend_host_config(backend, tmp_path)) as host:
        loop = AgentLoop.create(
            "agent", host=host, model=model, tools=[look, act], instructions="be kind"
        )
        result = await loop.run_turn("look at a.txt")
        assert (result.status, result.text) == ("completed", "All done.")
        assert look.arguments == [{"path": "a.txt"}]
        assert len(act.calls) == 1
        events = list(host.sessions.get(loop.session_id).events)
        encoded = b"".join(host.codec.encode(e) for e in events)
        await loop.close()
    await model.aclose()

    assert server.auth == [f"Bearer {key}"] * 2
    first, second = server.bodies
    assert first["model"] == "test-model"
    assert first["stream"] is True
    assert first["messages"][0] == {"role": "system", "content": "be kind"}
    assert first["messages"][1] == {"role": "user", "content": "look at a.txt"}
    assert [t["function"]["name"] for t in first["tools"]] == ["look", "act"]
    assistant = second["messages"][2]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == "Let me look."
    calls = assistant["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["look", "act"]
    assert msgspec.json.decode(calls[0]["function"]["arguments"]) == {"path": "a.txt"}
    # The loop's own stable ids go back to the server, paired with results.
    assert [m["tool_call_id"] for m in second["messages"][3:5]] == [
        c["id"] for c in calls
    ]
    assert second["messages"][3]["content"].startswith("contents")

    assert key.encode() not in encoded
    assert key not in repr(model)
    assert key not in repr(model.config)
    written = all_bytes(tmp_path)
    assert written, "the store wrote files"
    leaks = [p for p, data in written if key.encode() in data]
    assert leaks == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.asyncio
async def test_a_server_that_echoes_the_key_in_an_error_leaks_nothing(
    backend: str, tmp_path: Path
) -> None:
    await backend_ready_async(backend, tmp_path)
    key = canary()

    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": f"Incorrect API key provided: {key}"})

    model = model_for(key, refuse)
    async with Host(backend_host_config(backend, tmp_path)) as host:
        loop = AgentLoop.create("agent", host=host, model=model)
        result = await loop.run_turn("hello")
        assert result.status == "failed"
        assert result.error is not None
        assert "HTTP 401" in result.error
        assert "[redacted]" in result.error
        assert key not in result.error
        await loop.close()
    await model.aclose()
    assert [p for p, data in all_bytes(tmp_path) if key.encode() in data] == []


async def collect(model: OpenAIModel, request: ModelRequest) -> list[Any]:
    return [item async for item in model.stream(request)]


@pytest.mark.asyncio
async def test_failures_become_model_errors_without_the_key() -> None:
    key = canary()
    request = ModelRequest(messages=(Message(role="user", content="hi"),))

    def broken_arguments(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, content=sse(tool_delta(0, function={"name": "x", "arguments": "{"}))
        )

    def not_an_object(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, content=sse(tool_delta(0, function={"name": "x", "arguments": "[1]"}))
        )

    def garbage(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"data: {not json\n\n")

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot connect (key {key})", request=request)

    for handler, expected in [
        (broken_arguments, "not JSON"),
        (not_an_object, "not a JSON object"),
        (garbage, "malformed chunk"),
        (unreachable, "ConnectError"),
    ]:
        model = model_for(key, handler)
        with pytest.raises(ModelError) as raised:
            await collect(model, request)
        assert expected in str(raised.value)
        assert key not in str(raised.value)
        assert raised.value.__cause__ is None  # nothing chained that holds the key
        await model.aclose()


@pytest.mark.asyncio
async def test_history_is_sent_in_the_chat_completions_shape() -> None:
    server = Server("", [sse(text("ok"))])
    model = model_for("", server.handle)
    request = ModelRequest(
        messages=(
            Message(role="user", content="hi"),
            Message(
                role="assistant",
                content="",
                tool_calls=(HistoryToolCall(id="c1", name="t", arguments={"a": 1}),),
            ),
            Message(role="tool", content="out", tool_call_id="c1", status="ok"),
        ),
        tools=(ToolSpec(name="t", description="d", parameters={"type": "object"}),),
    )
    assert await collect(model, request) == [TextDelta("ok")]
    (body,) = server.bodies
    assert server.auth == [None]  # no key configured: no header
    assert body["messages"] == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "t", "arguments": '{"a":1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
    ]
    assert body["tools"][0]["function"]["name"] == "t"
    await model.aclose()


@pytest.mark.asyncio
async def test_tool_calls_without_arguments_are_empty_objects() -> None:
    server = Server("", [sse(tool_delta(0, function={"name": "t"}))])
    model = model_for("", server.handle)
    request = ModelRequest(messages=(Message(role="user", content="hi"),))
    assert await collect(model, request) == [ModelToolCall("t", {})]
    await model.aclose()


def test_configuration_comes_from_the_environment() -> None:
    assert OpenAIConfig.from_env({}) is None
    assert OpenAIConfig.from_env({"OPENAI_API_KEY": "k"}) is None  # no model: off
    config = OpenAIConfig.from_env(
        {"TURNKEEP_OPENAI_MODEL": "m", "OPENAI_API_KEY": "k1", "OPENAI_BASE_URL": "u"}
    )
    assert config == OpenAIConfig(model="m", base_url="u", api_key="k1")
    assert "k1" not in repr(config)
    preferred = OpenAIConfig.from_env(
        {
            "TURNKEEP_OPENAI_MODEL": "m",
            "TURNKEEP_OPENAI_API_KEY": "k2",
            "OPENAI_API_KEY": "k1",
            "TURNKEEP_OPENAI_BASE_URL": "v",
            "OPENAI_BASE_URL": "u",
            "TURNKEEP_OPENAI_TIMEOUT": "5",
        }
    )
    assert preferred is not None
    assert (preferred.api_key, preferred.base_url, preferred.timeout) == ("k2", "v", 5)
    default = OpenAIConfig.from_env({"TURNKEEP_OPENAI_MODEL": "m"})
    assert default is not None
    assert (default.base_url, default.api_key) == (DEFAULT_BASE_URL, None)
    with pytest.raises(ConfigurationError):
        OpenAIConfig.from_env(
            {"TURNKEEP_OPENAI_MODEL": "m", "TURNKEEP_OPENAI_TIMEOUT": "x"}
        )


def usage_chunk(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "choices": [],
        "model": "test-model-2026-01-01",
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    }


@pytest.mark.asyncio
async def test_usage_and_settings_come_from_the_api_and_feed_the_budget(
    host: Host,
) -> None:
    look = SpyTool("look", replay="safe")
    calling = tool_delta(0, id="p", function={"name": "look", "arguments": "{}"})
    server = Server(
        "k", [sse(calling, usage_chunk(12, 40)), sse(calling, usage_chunk(30, 40))]
    )
    config = OpenAIConfig(
        model="test-model",
        base_url="http://mock/v1",
        api_key="k",
        temperature=0.3,
        max_tokens=50,
    )
    model = OpenAIModel(config, transport=httpx.MockTransport(server.handle))
    info = model.describe()
    assert (info.name, info.provider) == ("test-model", "openai-compatible")
    assert info.settings == {"temperature": 0.3, "max_tokens": 50}
    outputs = await collect(model, ModelRequest(messages=()))
    assert outputs[-1] == Usage(
        input_tokens=12, output_tokens=40, model="test-model-2026-01-01"
    )
    assert server.bodies[0]["stream_options"] == {"include_usage": True}
    assert (server.bodies[0]["temperature"], server.bodies[0]["max_tokens"]) == (
        0.3,
        50,
    )
    # 0 + 50 reserved fits 80; then 40 reported + 50 does not: one call only.
    server.bodies.clear()
    server.replies = server.replies[1:]
    loop = AgentLoop.create("a", host=host, model=model, tools=[look], max_tokens=80)
    result = await loop.run_turn("go")
    assert result.status == "budget_exhausted"
    assert len(server.bodies) == 1
    assert "40 of 80 output tokens used" in (result.error or "")
    await model.aclose()


@pytest.mark.asyncio
async def test_a_server_without_usage_reports_none() -> None:
    server = Server("k", [sse(text("hi"))])
    model = OpenAIModel(
        OpenAIConfig(model="m", base_url="http://mock/v1", report_usage=False),
        transport=httpx.MockTransport(server.handle),
    )
    outputs = await collect(model, ModelRequest(messages=()))
    assert outputs == [TextDelta("hi")]
    assert "stream_options" not in server.bodies[0]
    assert model.describe().settings == {}
    await model.aclose()


def test_settings_come_from_the_environment() -> None:
    config = OpenAIConfig.from_env(
        {
            "TURNKEEP_OPENAI_MODEL": "m",
            "TURNKEEP_OPENAI_TEMPERATURE": "0.5",
            "TURNKEEP_OPENAI_MAX_TOKENS": "256",
        }
    )
    assert config is not None
    assert (config.temperature, config.max_tokens) == (0.5, 256)
    for name, value in (
        ("TURNKEEP_OPENAI_TEMPERATURE", "warm"),
        ("TURNKEEP_OPENAI_MAX_TOKENS", "0"),
        ("TURNKEEP_OPENAI_MAX_TOKENS", "-3"),
    ):
        with pytest.raises(ConfigurationError, match=name):
            OpenAIConfig.from_env({"TURNKEEP_OPENAI_MODEL": "m", name: value})


def recorder(sleeps: list[float]) -> Callable[[float], Awaitable[None]]:
    async def record(seconds: float) -> None:
        sleeps.append(seconds)

    return record


def replying(*responses: httpx.Response) -> Callable[[httpx.Request], httpx.Response]:
    """A handler that answers with `responses` in turn, then the last again."""
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return responses[min(len(sent), len(responses)) - 1]

    handle.sent = sent  # type: ignore[attr-defined]
    return handle


def requests_of(handler: Callable[[httpx.Request], httpx.Response]) -> int:
    return len(handler.sent)  # type: ignore[attr-defined]


HI = ModelRequest(messages=(Message(role="user", content="hi"),))
ERROR = {"error": {"message": "the upstream broke", "type": None, "code": "500"}}


@pytest.mark.asyncio
async def test_an_error_chunk_is_an_error_not_the_end_of_the_reply() -> None:
    handler = replying(httpx.Response(200, content=sse_open(text("Hal"), ERROR)))
    model = model_for("sk-test-key-0123456789", handler)
    seen: list[Any] = []

    async def read() -> None:
        async for item in model.stream(HI):
            seen.append(item)

    with pytest.raises(ModelError) as raised:
        await read()
    assert seen == [TextDelta("Hal")]
    assert "reported an error in the stream: the upstream broke" in str(raised.value)
    error = raised.value
    assert (error.server_code, error.retryable, error.attempts) == ("500", True, 1)
    assert requests_of(handler) == 1  # a delta had arrived: no retry
    await model.aclose()


@pytest.mark.asyncio
async def test_an_error_chunk_as_text_or_before_any_delta() -> None:
    # A bare string error, first thing in the stream: nothing arrived, but
    # it names no code that a retry could pass, so it is final.
    handler = replying(
        httpx.Response(200, content=sse_open({"error": "model overloaded"}))
    )
    model = model_for("sk-test-key-0123456789", handler)
    with pytest.raises(ModelError, match="model overloaded") as raised:
        await collect(model, HI)
    assert (raised.value.retryable, requests_of(handler)) == (False, 1)
    await model.aclose()
    # With a retryable code before any delta, it is asked again.
    handler = replying(
        httpx.Response(200, content=sse_open(ERROR)),
        httpx.Response(200, content=sse(text("fine"))),
    )
    model = model_for("sk-test-key-0123456789", handler)
    assert await collect(model, HI) == [TextDelta("fine")]
    assert requests_of(handler) == 2
    await model.aclose()


@pytest.mark.asyncio
async def test_a_stream_without_done_or_finish_reason_is_not_a_reply(
    host: Host,
) -> None:
    cut = httpx.Response(200, content=sse_open(text("Half "), text("a reply")))
    model = model_for("sk-test-key-0123456789", replying(cut), max_retries=0)
    with pytest.raises(ModelError, match="ended the stream before the reply") as raised:
        await collect(model, HI)
    assert raised.value.retryable is True
    # In a turn: failed, and what arrived is kept as a partial reply.
    loop = AgentLoop.create("a", host=host, model=model)
    result = await loop.run_turn("hello")
    assert result.status == "failed"
    assert result.failure == TurnFailure(code="model", retryable=True, attempts=1)
    events = list(host.sessions.get(loop.session_id).events)
    replies = [e.data for e in events if isinstance(e, AssistantMessage)]
    assert [(r.text, r.partial) for r in replies] == [("Half a reply", True)]
    end = events[-1]
    assert isinstance(end, TurnEnd)
    assert end.data.failure == result.failure
    await loop.close()
    await model.aclose()


@pytest.mark.asyncio
async def test_a_finish_reason_without_done_is_a_finished_reply() -> None:
    finished = {"choices": [{"delta": {}, "finish_reason": "stop"}]}
    ok = httpx.Response(200, content=sse_open(text("All of it."), finished))
    model = model_for("sk-test-key-0123456789", replying(ok))
    assert await collect(model, HI) == [TextDelta("All of it.")]
    await model.aclose()


@pytest.mark.asyncio
async def test_a_json_answer_to_a_stream_request_is_the_reply(host: Host) -> None:
    body = {
        "model": "served-model",
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": "Whole answer.",
                    "tool_calls": [
                        {
                            "id": "p1",
                            "type": "function",
                            "function": {"name": "look", "arguments": '{"a": 1}'},
                        }
                    ],
                }
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    }
    model = model_for(
        "sk-test-key-0123456789", replying(httpx.Response(200, json=body))
    )
    assert await collect(model, HI) == [
        TextDelta("Whole answer."),
        ModelToolCall("look", {"a": 1}),
        Usage(input_tokens=5, output_tokens=2, model="served-model"),
    ]
    await model.aclose()
    plain = {"choices": [{"message": {"role": "assistant", "content": "Hi there."}}]}
    model = model_for(
        "sk-test-key-0123456789", replying(httpx.Response(200, json=plain))
    )
    loop = AgentLoop.create("a", host=host, model=model)
    result = await loop.run_turn("hello")
    assert (result.status, result.text) == ("completed", "Hi there.")
    await loop.close()
    await model.aclose()


@pytest.mark.asyncio
async def test_json_errors_and_other_content_types_are_errors() -> None:
    cases = [
        (httpx.Response(200, json=ERROR), "reported an error: the upstream broke"),
        (httpx.Response(200, json={"id": "x", "choices": []}), "JSON without a reply"),
        (
            httpx.Response(
                200,
                content=b"<html>login</html>",
                headers={"content-type": "text/html"},
            ),
            "content type 'text/html'",
        ),
    ]
    for response, expected in cases:
        model = model_for("sk-test-key-0123456789", replying(response), max_retries=0)
        with pytest.raises(ModelError) as raised:
            await collect(model, HI)
        assert expected in str(raised.value)
        await model.aclose()


def too_many(headers: dict[str, str]) -> httpx.Response:
    return httpx.Response(
        429,
        json={"error": {"message": "slow down", "code": "rate_limit_exceeded"}},
        headers=headers,
    )


@pytest.mark.asyncio
async def test_retry_after_is_honoured() -> None:
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    for headers, low, high in [
        ({"retry-after": "2.5"}, 2.5, 2.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5, 1.5),
        ({"retry-after": soon}, 25.0, 30.0),
    ]:
        sleeps: list[float] = []
        handler = replying(
            too_many(headers), httpx.Response(200, content=sse(text("ok")))
        )
        model = OpenAIModel(
            OpenAIConfig(model="m", base_url="http://mock/v1"),
            transport=httpx.MockTransport(handler),
            sleep=recorder(sleeps),
        )
        assert await collect(model, HI) == [TextDelta("ok")]
        assert len(sleeps) == 1
        assert low <= sleeps[0] <= high
        await model.aclose()


@pytest.mark.asyncio
async def test_a_retry_after_over_the_limit_is_not_waited_for() -> None:
    sleeps: list[float] = []
    handler = replying(too_many({"retry-after": "120"}))
    model = OpenAIModel(
        OpenAIConfig(model="m", base_url="http://mock/v1", retry_max_wait=60),
        transport=httpx.MockTransport(handler),
        sleep=recorder(sleeps),
    )
    with pytest.raises(ModelError) as raised:
        await collect(model, HI)
    error = raised.value
    assert "asked to wait 120 s, more than retry_max_wait (60 s)" in str(error)
    assert (error.status_code, error.server_code) == (429, "rate_limit_exceeded")
    assert (error.retryable, error.attempts, error.retry_after) == (True, 1, 120.0)
    assert sleeps == []
    assert requests_of(handler) == 1
    await model.aclose()


@pytest.mark.asyncio
async def test_the_server_can_say_whether_to_retry() -> None:
    refused = httpx.Response(503, text="busy", headers={"x-should-retry": "false"})
    handler = replying(refused)
    model = model_for("sk-test-key-0123456789", handler)
    with pytest.raises(ModelError, match="HTTP 503: busy") as raised:
        await collect(model, HI)
    assert (raised.value.retryable, raised.value.server_code) == (False, None)
    assert requests_of(handler) == 1
    await model.aclose()
    conflict = httpx.Response(400, text="retry me", headers={"x-should-retry": "true"})
    handler = replying(conflict, httpx.Response(200, content=sse(text("ok"))))
    model = model_for("sk-test-key-0123456789", handler)
    assert await collect(model, HI) == [TextDelta("ok")]
    await model.aclose()


@pytest.mark.asyncio
async def test_a_garbage_line_is_not_retried() -> None:
    handler = replying(httpx.Response(200, content=b"data: {not json\n\n"))
    model = model_for("sk-test-key-0123456789", handler)
    with pytest.raises(ModelError, match="malformed chunk") as raised:
        await collect(model, HI)
    assert (raised.value.retryable, raised.value.attempts) == (False, 1)
    assert requests_of(handler) == 1
    await model.aclose()


def test_retry_settings_are_checked() -> None:
    for settings in (
        {"max_retries": -1},
        {"max_retries": 1.5},
        {"retry_delay": -0.1},
        {"retry_max_wait": float("nan")},
        {"timeout": 0},
    ):
        with pytest.raises(ConfigurationError, match="OpenAIConfig"):
            OpenAIConfig(model="m", **settings)  # pyright: ignore[reportArgumentType]
    config = OpenAIConfig.from_env(
        {"TURNKEEP_OPENAI_MODEL": "m", "TURNKEEP_OPENAI_MAX_RETRIES": "0"}
    )
    assert config is not None
    assert config.max_retries == 0
    with pytest.raises(ConfigurationError, match="TURNKEEP_OPENAI_MAX_RETRIES"):
        OpenAIConfig.from_env(
            {"TURNKEEP_OPENAI_MODEL": "m", "TURNKEEP_OPENAI_MAX_RETRIES": "-1"}
        )


@pytest.mark.asyncio
async def test_a_refused_connection_is_retried_with_backoff(host: Host) -> None:
    sleeps: list[float] = []
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens
    model = OpenAIModel(
        OpenAIConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1"),
        sleep=recorder(sleeps),
        jitter=lambda: 1.0,
    )
    loop = AgentLoop.create("a", host=host, model=model)
    result = await loop.run_turn("hello")
    assert result.failure == TurnFailure(code="model", retryable=True, attempts=3)
    assert "ConnectError" in (result.error or "")
    assert sleeps == [0.375, 0.75]  # 0.5 and 1.0, each less a quarter
    await loop.close()
    await model.aclose()
