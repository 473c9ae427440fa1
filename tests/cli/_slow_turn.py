"""Run one agent turn in a process of its own, inside a slow safe tool.

Run as `python _slow_turn.py BACKEND OPTIONS_JSON SESSION_ID`; runs a first
turn (so the session is stored), prints `in tool` once the second turn's
tool runs (it sleeps a minute), and prints the second turn's status when it
ends.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from typing import Any

import msgspec

from turnkeep import AgentLoop, Config, Host, ToolContext, function_tool
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel


@function_tool(replay="safe")
async def survey(arguments: Mapping[str, Any], context: ToolContext) -> str:
    """Look around for a minute."""
    del arguments, context
    print("in tool", flush=True)
    await asyncio.sleep(60)
    return "surveyed"


async def main(name: str, options: str, session_id: str) -> None:
    config = Config(
        persistence=name, plugins=(name,), backends={name: msgspec.json.decode(options)}
    )
    async with Host(config) as host:
        loop = AgentLoop.create(
            "worker",
            host=host,
            model=ScriptedModel(
                ["hello", Reply("looking", (ScriptedCall("survey"),)), "done"]
            ),
            tools=[survey],
            session_id=session_id,
        )
        await loop.run_turn("hi")
        result = await loop.run_turn("survey it")
        print(f"turn ended {result.status}", flush=True)
        await loop.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
