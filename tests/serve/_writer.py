"""Write a session turn by turn in a process of its own, on cue.

Run as `python _writer.py BACKEND OPTIONS_JSON SESSION_ID`: runs turn 1,
prints `ready`, and runs one more turn (with a tool call) for each line
read from standard input, printing `turn N` after each; ends at EOF.
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
    """Deploy somewhere."""
    del context
    return f"deployed to {arguments.get('env', '?')}"


async def main(name: str, options: str, session_id: str) -> None:
    config = Config(
        persistence=name, plugins=(name,), backends={name: msgspec.json.decode(options)}
    )
    replies: list[Reply | str] = ["Hello! What should I deploy?"]
    for n in range(2, 12):
        replies.append(
            Reply(f"Deploying round {n}.", (ScriptedCall("deploy", {"env": "prod"}),))
        )
        replies.append(f"Round {n} is out.")
    async with Host(config) as host:
        loop = AgentLoop.create(
            "writer",
            host=host,
            model=ScriptedModel(replies),
            tools=[deploy],
            session_id=session_id,
        )
        await loop.run_turn("Live session: say hello")
        print("ready", flush=True)
        turn = 1
        while await asyncio.to_thread(sys.stdin.readline):
            turn += 1
            await loop.run_turn(f"deploy round {turn}")
            print(f"turn {turn}", flush=True)
        await loop.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
