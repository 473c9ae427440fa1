"""A blocking effect cut off by SIGKILL keeps the session blocked after restart."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.loop.support import BACKENDS, SpyTool, backend_host_config, backend_ready
from tests.loop.test_effects import BlockingTool

from turnkeep import AgentLoop, Host
from turnkeep.errors import EffectBlockedError
from turnkeep.events import ToolCall
from turnkeep.testing import Reply, ScriptedModel

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from tests.loop.support import backend_host_config
    from tests.loop.test_effects import BlockingTool
    from turnkeep import AgentLoop, Host
    from turnkeep.testing import Reply, ScriptedCall, ScriptedModel

    async def main() -> None:
        tool = BlockingTool("act", block=True)
        model = ScriptedModel([Reply("writing", (ScriptedCall("act", {}),))])
        async with Host(backend_host_config(sys.argv[1], Path(sys.argv[2]))) as host:
            loop = AgentLoop.create(
                "agent", host=host, model=model, tools=[tool], session_id="s"
            )
            turn = asyncio.create_task(loop.run_turn("write the file"))
            await tool.started.wait()  # its intent is durable; it runs
            print("started", flush=True)
            await turn

    asyncio.run(main())
    """
)


@pytest.mark.crash
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_blocking_call_blocks_every_later_process(
    backend: str, tmp_path: Path
) -> None:
    backend_ready(backend, tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, backend, str(tmp_path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "started"
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    child.stdout.close()
    config = backend_host_config(backend, tmp_path)

    async def attempt(resolve: bool) -> str:
        act = SpyTool("act")
        model = ScriptedModel([Reply("x"), Reply("x"), Reply("after")])
        async with Host(config) as host:
            loop = await AgentLoop.resume(
                "agent",
                "s",
                host=host,
                model=model,
                tools=[BlockingTool("act")],
                continue_turn=True,
            )
            try:
                (call,) = [
                    e for e in host.sessions.get("s").events if isinstance(e, ToolCall)
                ]
                if resolve:
                    await loop.resolve(call.data.call_id, done=False, by="test")
                return (await loop.run_turn("again")).status
            except EffectBlockedError:
                assert model.requests == []
                assert act.calls == []
                return "blocked"
            finally:
                await loop.close()

    assert asyncio.run(attempt(resolve=False)) == "blocked"
    assert asyncio.run(attempt(resolve=False)) == "blocked"
    assert asyncio.run(attempt(resolve=True)) == "completed"
