"""The OpenAI-compatible model against a real server: LiteLLM's proxy.

The suite starts the proxy on 127.0.0.1 (`tests/support/litellm_proxy.py`)
with replies LiteLLM mocks itself and, through its `CustomLLM` hook,
replies and faults scripted in `tests/support/litellm/faults.py`: a tool
call whose arguments arrive in pieces, an error in the middle of a stream,
HTTP 429, 503 and 400, a server that is slow to answer. The proxy's own
retries are off, and the handler logs every request, so a test counts the
requests its turn made. The master key is a canary that must reach no
stored byte.

Where the proxy cannot start the tests skip with the reason; where it is
required (`TURNKEEP_REQUIRE_LITELLM=1`, as `.ci/run` sets) such a skip
fails the run. The wire faults no real server sends are in
`tests/loop/test_openai.py`, against a hand-made stub.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
import pytest_asyncio
from tests.loop.support import SpyTool, backend_host_config, backend_ready_async
from tests.support.litellm_proxy import Proxy, ProxyUnavailable, start_proxy

from turnkeep import AgentLoop, Host
from turnkeep.agent.openai_compat import OpenAIConfig, OpenAIModel
from turnkeep.events import AssistantMessage, TurnEnd, TurnFailure

pytestmark = [
    pytest.mark.litellm,
    pytest.mark.slow,  # the proxy takes 10-50 s to start: not in `make test-fast`
]


class MakeModel(Protocol):
    def __call__(self, name: str = "faults", **settings: Any) -> OpenAIModel: ...


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """One proxy per worker process that runs tests of this module.

    It takes 10-50 s to start. xdist's `--dist loadgroup` would keep the
    module on one worker, but with pytest 9 its group marks have no effect
    (it renames `item._nodeid`, which pytest no longer reads), so under
    `-n 2` the module may start two.
    """
    try:
        with start_proxy(tmp_path_factory.mktemp("litellm")) as running:
            yield running
    except ProxyUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def sleeps() -> list[float]:
    """The waits the model asked for between retries."""
    return []


@pytest_asyncio.fixture
async def model_factory(proxy: Proxy, sleeps: list[float]) -> AsyncIterator[MakeModel]:
    made: list[OpenAIModel] = []

    async def record(seconds: float) -> None:
        sleeps.append(seconds)

    def make(name: str = "faults", **settings: Any) -> OpenAIModel:
        config = OpenAIConfig(
            model=name, base_url=proxy.base_url, api_key=proxy.key, **settings
        )
        model = OpenAIModel(config, sleep=record, jitter=lambda: 0.0)
        made.append(model)
        return model

    yield make
    for model in made:
        await model.aclose()


def leaks(root: Path, key: str) -> list[Path]:
    return [
        p for p in root.rglob("*") if p.is_file() and key.encode() in p.read_bytes()
    ]


@pytest.mark.asyncio
async def test_mocked_reply_with_usage_and_a_split_tool_call(
    proxy: Proxy, model_factory: MakeModel, tmp_path: Path
) -> None:
    await backend_ready_async("sqlite", tmp_path)
    mocked = model_factory("mocked")
    async with Host(backend_host_config("sqlite", tmp_path)) as host:
        loop = AgentLoop.create("a", host=host, model=mocked)
        result = await loop.run_turn("hi")
        assert (result.status, result.text) == ("completed", "Hello from the proxy.")
        end = host.sessions.get(loop.session_id).events[-1]
        assert isinstance(end, TurnEnd)
        assert end.data.usage is not None
        assert end.data.usage.output_tokens
        await loop.close()

        look = SpyTool("look", replay="safe", output="contents")
        loop = AgentLoop.create("b", host=host, model=model_factory(), tools=[look])
        result = await loop.run_turn("tools:split")
        assert (result.status, result.text) == ("completed", "All done.")
        assert look.arguments == [{"path": "a.txt"}]
        await loop.close()
    assert leaks(tmp_path, proxy.key) == []


@pytest.mark.asyncio
async def test_an_error_inside_the_stream_fails_the_turn_and_keeps_the_partial(
    proxy: Proxy, model_factory: MakeModel, tmp_path: Path
) -> None:
    await backend_ready_async("jsonl", tmp_path)
    async with Host(backend_host_config("jsonl", tmp_path)) as host:
        loop = AgentLoop.create("a", host=host, model=model_factory())
        result = await loop.run_turn("cut:stream")
        assert result.status == "failed"
        assert result.error is not None
        assert "reported an error in the stream" in result.error
        assert "the upstream model broke off" in result.error
        events = list(host.sessions.get(loop.session_id).events)
        replies = [e for e in events if isinstance(e, AssistantMessage)]
        assert [(r.data.text, r.data.partial) for r in replies] == [
            ("partial reply", True)
        ]
        # LiteLLM's code for it is "500": retryable, but a delta had arrived
        # and is in the log, so the model did not ask again.
        assert result.failure == TurnFailure(
            code="model", server_code="500", retryable=True, attempts=1
        )
        end = events[-1]
        assert isinstance(end, TurnEnd)
        assert end.data.failure == result.failure
        assert proxy.requests("cut:stream") == 1
        # The session goes on.
        after = await loop.run_turn("hello:after-cut")
        assert (after.status, after.text) == ("completed", "echo: hello:after-cut")
        await loop.close()
    assert leaks(tmp_path, proxy.key) == []


@pytest.mark.asyncio
async def test_a_rate_limit_is_retried_then_reported_as_data(
    proxy: Proxy, model_factory: MakeModel, sleeps: list[float], host: Host
) -> None:
    loop = AgentLoop.create("a", host=host, model=model_factory(max_retries=2))
    result = await loop.run_turn("rate-limited:turn")
    assert result.status == "failed"
    assert result.failure == TurnFailure(
        code="model", status_code=429, server_code="429", retryable=True, attempts=3
    )
    assert result.error is not None
    assert "HTTP 429" in result.error
    assert "gave up after 3 attempts" in result.error
    assert proxy.requests("rate-limited:turn") == 3
    assert sleeps == [0.5, 1.0]  # backoff, no jitter in this test
    end = host.sessions.get(loop.session_id).events[-1]
    assert isinstance(end, TurnEnd)
    assert end.data.failure == result.failure
    await loop.close()


@pytest.mark.asyncio
async def test_a_server_error_before_any_delta_is_retried(
    proxy: Proxy, model_factory: MakeModel, sleeps: list[float], host: Host
) -> None:
    loop = AgentLoop.create("a", host=host, model=model_factory())
    result = await loop.run_turn("unavailable-once:x")
    assert (result.status, result.text) == ("completed", "echo: unavailable-once:x")
    assert result.failure is None
    assert proxy.requests("unavailable-once:x") == 2
    assert len(sleeps) == 1
    await loop.close()


@pytest.mark.asyncio
async def test_a_bad_request_is_not_retried(
    proxy: Proxy, model_factory: MakeModel, sleeps: list[float], host: Host
) -> None:
    loop = AgentLoop.create("a", host=host, model=model_factory())
    result = await loop.run_turn("bad-request:x")
    assert result.failure == TurnFailure(
        code="model", status_code=400, server_code="400", retryable=False, attempts=1
    )
    assert proxy.requests("bad-request:x") == 1
    assert sleeps == []
    await loop.close()


@pytest.mark.asyncio
async def test_retries_off(proxy: Proxy, model_factory: MakeModel, host: Host) -> None:
    loop = AgentLoop.create("a", host=host, model=model_factory(max_retries=0))
    result = await loop.run_turn("rate-limited:no-retries")
    assert result.failure is not None
    assert (result.failure.status_code, result.failure.attempts) == (429, 1)
    assert proxy.requests("rate-limited:no-retries") == 1
    await loop.close()


@pytest.mark.asyncio
async def test_a_timeout_says_how_long_it_waited(
    proxy: Proxy, model_factory: MakeModel, host: Host
) -> None:
    model = model_factory(timeout=0.5, max_retries=0)
    loop = AgentLoop.create("a", host=host, model=model)
    result = await loop.run_turn("slow:timeout")
    assert result.status == "failed"
    assert result.error is not None
    assert "sent nothing within 0.5 s (ReadTimeout)" in result.error
    assert result.failure == TurnFailure(code="model", retryable=True, attempts=1)
    await loop.close()


@pytest.mark.asyncio
async def test_a_wrong_key_is_refused_and_never_stored(
    proxy: Proxy, tmp_path: Path
) -> None:
    await backend_ready_async("jsonl", tmp_path)
    wrong = "sk-wrong-canary-0123456789abcdef"
    model = OpenAIModel(
        OpenAIConfig(model="faults", base_url=proxy.base_url, api_key=wrong)
    )
    async with Host(backend_host_config("jsonl", tmp_path)) as host:
        loop = AgentLoop.create("a", host=host, model=model)
        result = await loop.run_turn("hello:wrong-key")
        assert result.status == "failed"
        assert result.failure is not None
        assert result.failure.status_code in (400, 401)
        assert result.failure.retryable is False
        assert wrong not in (result.error or "")
        await loop.close()
    await model.aclose()
    assert leaks(tmp_path, wrong) == []
    assert proxy.requests("hello:wrong-key") == 0


def test_the_coding_agent_says_why_a_turn_failed_and_exits_1(
    proxy: Proxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.examples.support import configure

    from coding_agent import cli

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    monkeypatch.chdir(tmp_path)
    configure(tmp_path, "jsonl", tmp_path)
    monkeypatch.setenv("TURNKEEP_OPENAI_MODEL", "faults")
    monkeypatch.setenv("TURNKEEP_OPENAI_BASE_URL", proxy.base_url)
    monkeypatch.setenv("TURNKEEP_OPENAI_API_KEY", proxy.key)
    monkeypatch.setenv("TURNKEEP_OPENAI_MAX_RETRIES", "0")
    status = cli.main(["--workspace", str(workspace), "rate-limited:coding-agent"])
    captured = capsys.readouterr()
    assert status == cli.EXIT_TURN_FAILED, captured.out + captured.err
    assert "-- turn 1 failed --" in captured.out
    assert "   why: the model server answered HTTP 429: " in captured.out
    assert proxy.key not in captured.out + captured.err
    assert proxy.requests("rate-limited:coding-agent") == 1
    assert leaks(tmp_path, proxy.key) == []
