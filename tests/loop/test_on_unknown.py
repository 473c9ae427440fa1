"""Who resolves an unknown effect is the tool's choice: `on_unknown`.

`function_tool(on_unknown="block" | "report" | f(arguments))` says it for
one tool; `[agent] on_unknown` is the default for tools that say nothing
(itself `report`). The choice is recorded in the `tool/call` before the
tool runs, so a process killed mid-call (a real SIGKILL, on JSONL and
SQLite) leaves a session every later process treats the same way, whatever
its own configuration says.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from tests.loop.support import BACKENDS, backend_host_config, backend_ready

from turnkeep import AgentLoop, Config, Host, function_tool, load_config
from turnkeep.agent import ToolContext
from turnkeep.agent.tools import unknown_policy, validate_tools
from turnkeep.config import AgentConfig
from turnkeep.errors import ConfigurationError, EffectBlockedError
from turnkeep.events import ToolCall, ToolResult
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel

REPO = Path(__file__).resolve().parents[2]


async def _never(arguments: Mapping[str, Any], context: ToolContext) -> str:
    raise AssertionError("not run in these tests")


def test_function_tool_takes_the_policy_and_refuses_a_misspelt_one() -> None:
    for declared in ("block", "report"):
        tool = function_tool(name="t", on_unknown=declared)(_never)
        assert tool.on_unknown == declared
        assert unknown_policy(tool, {}) == declared
        assert unknown_policy(tool, {}, "block") == declared  # the tool wins
    silent = function_tool(name="t")(_never)
    assert silent.on_unknown is None
    assert unknown_policy(silent, {}) == "report"
    assert unknown_policy(silent, {}, "block") == "block"  # the default applies
    by_arguments = function_tool(
        name="t", on_unknown=lambda a: "block" if a.get("write") else "report"
    )(_never)
    assert unknown_policy(by_arguments, {"write": True}) == "block"
    assert unknown_policy(by_arguments, {}, "block") == "report"
    # A safe tool's calls are run again, never unknown.
    safe = function_tool(name="t", replay="safe", on_unknown="block")(_never)
    assert unknown_policy(safe, {}) == "report"
    with pytest.raises(ConfigurationError, match="on_unknown must be"):
        function_tool(name="t", on_unknown="blok")(_never)  # type: ignore[arg-type]


def test_a_tool_declaring_an_unknown_policy_is_refused_by_the_loop() -> None:
    class Odd:
        name = "odd"
        description = "d"
        parameters: Mapping[str, Any] = {"type": "object"}
        on_unknown = "stop"

        async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
            return ""

    with pytest.raises(ConfigurationError, match=r"'odd'.*on_unknown must be"):
        validate_tools([Odd()])


def test_the_agent_table_sets_the_default(tmp_path: Path) -> None:
    assert Config().agent.on_unknown == "report"
    configured, bare = tmp_path / "configured", tmp_path / "bare"
    configured.mkdir()
    bare.mkdir()
    (configured / "turnkeep.toml").write_text('[agent]\non_unknown = "block"\n')
    assert load_config(start=configured, env={}).agent.on_unknown == "block"
    env = {"TURNKEEP_AGENT__ON_UNKNOWN": "block"}
    assert load_config(start=bare, env=env).agent.on_unknown == "block"
    assert load_config(start=bare, env={}).agent.on_unknown == "report"
    (configured / "turnkeep.toml").write_text('[agent]\non_unknown = "ask"\n')
    with pytest.raises(ConfigurationError, match=r"ask .*agent\.on_unknown"):
        load_config(start=configured, env={})
    with pytest.raises(ConfigurationError, match="on_unknown must be"):
        AgentConfig(on_unknown="ask")  # type: ignore[arg-type]


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from tests.loop.support import backend_host_config
    from turnkeep import AgentLoop, Host, function_tool
    from turnkeep.config import AgentConfig
    from turnkeep.testing import Reply, ScriptedCall, ScriptedModel

    backend, root, declared, default = sys.argv[1:5]

    async def main() -> None:
        started = asyncio.Event()
        options = {} if declared == "-" else {"on_unknown": declared}

        @function_tool(name="act", **options)
        async def act(arguments, context):
            \"\"\"Write something outside.\"\"\"
            started.set()
            await asyncio.Event().wait()  # runs until the process is killed
            return "never"

        config = backend_host_config(
            backend, Path(root), agent=AgentConfig(on_unknown=default)
        )
        model = ScriptedModel([Reply("writing", (ScriptedCall("act", {}),))])
        async with Host(config) as host:
            loop = AgentLoop.create(
                "agent", host=host, model=model, tools=[act], session_id="s"
            )
            turn = asyncio.create_task(loop.run_turn("write it"))
            await started.wait()  # its intent is durable; it runs
            print("started", flush=True)
            await turn

    asyncio.run(main())
    """
)


def kill_mid_call(backend: str, root: Path, declared: str, default: str) -> None:
    """A child runs `act` (declaring `declared`, `-` for nothing); SIGKILL it."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, backend, str(root), declared, default],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "started"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL


@pytest.mark.crash
@pytest.mark.parametrize(
    ("declared", "default", "expected"),
    [
        ("block", "report", "block"),  # the tool says block
        ("-", "block", "block"),  # the tool says nothing: [agent] decides
        ("report", "block", "report"),  # the tool's word beats the default
    ],
    ids=["tool-blocks", "default-blocks", "tool-reports"],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_call_follows_the_policy_in_every_later_process(
    backend: str, tmp_path: Path, declared: str, default: str, expected: str
) -> None:
    backend_ready(backend, tmp_path)
    kill_mid_call(backend, tmp_path, declared, default)
    # Later processes run with the default configuration (report): what the
    # call recorded decides.
    config = backend_host_config(backend, tmp_path)

    @function_tool(name="act")
    async def act(arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Write something outside."""
        raise AssertionError("an unknown call is never run again")

    async def attempt(resolve: bool) -> str:
        model = ScriptedModel([Reply("x"), Reply("after the crash"), Reply("more")])
        async with Host(config) as host:
            loop = await AgentLoop.resume(
                "agent", "s", host=host, model=model, tools=[act], context="override"
            )
            try:
                events = host.sessions.get("s").events
                [call] = [e for e in events if isinstance(e, ToolCall)]
                assert call.data.on_unknown == expected
                [answer] = [e for e in events if isinstance(e, ToolResult)]
                assert answer.data.status == "interrupted"
                if resolve:
                    await loop.resolve(call.data.call_id, done=False, by="test")
                if expected == "block" and not resolve:
                    with pytest.raises(EffectBlockedError) as refused:
                        await loop.run_turn("again")
                    assert refused.value.call_ids == (call.data.call_id,)
                    assert model.requests == []
                    return "blocked"
                return (await loop.run_turn("again")).status
            finally:
                await loop.close()

    if expected == "block":
        assert asyncio.run(attempt(resolve=False)) == "blocked"
        assert asyncio.run(attempt(resolve=False)) == "blocked"
        assert asyncio.run(attempt(resolve=True)) == "completed"
    else:
        assert asyncio.run(attempt(resolve=False)) == "completed"


def test_the_loop_hands_the_configured_default_to_its_turns(
    tmp_path: Path,
) -> None:
    async def run() -> list[str]:
        policies: list[str] = []
        for default in ("report", "block"):
            config = backend_host_config(
                "memory", tmp_path, agent=AgentConfig(on_unknown=default)
            )

            @function_tool(name="act", replay="unsafe")
            async def act(arguments: Mapping[str, Any], context: ToolContext) -> str:
                """Write something outside."""
                return "done"

            model = ScriptedModel([Reply("w", (ScriptedCall("act", {}),)), "ok"])
            async with Host(config) as host:
                loop = AgentLoop.create("agent", host=host, model=model, tools=[act])
                await loop.run_turn("go")
                events = host.sessions.get(loop.session_id).events
                policies += [
                    e.data.on_unknown for e in events if isinstance(e, ToolCall)
                ]
                await loop.close()
        return policies

    assert asyncio.run(run()) == ["report", "block"]
