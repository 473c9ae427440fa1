"""Run one agent turn in a process of its own and stay inside its unsafe tool.

Run as `python _turn.py BACKEND OPTIONS_JSON SESSION_ID`; prints `in tool`
once the tool's call is durable and the tool runs, then waits for standard
input to end (a kill test ends the process with SIGKILL first).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from typing import Any

import msgspec

from turnkeep import AgentLoop, Config, Host, ToolContext, function_tool
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel


@function_tool(replay="unsafe")
async def deploy(arguments: Mapping[str, Any], context: ToolContext) -> str:
    """Deploy (blocks until standard input ends)."""
    del arguments, context
    print("in tool", flush=True)
    await asyncio.to_thread(sys.stdin.read)
    return "deployed"


async def main(name: str, options: str, session_id: str) -> None:
    config = Config(
        persistence=name, plugins=(name,), backends={name: msgspec.json.decode(options)}
    )
    async with Host(config) as host:
        loop = AgentLoop.create(
            "worker",
            host=host,
            model=ScriptedModel([Reply("on it", (ScriptedCall("deploy"),)), "done"]),
            tools=[deploy],
            session_id=session_id,
        )
        await loop.run_turn("deploy it")
        await loop.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
