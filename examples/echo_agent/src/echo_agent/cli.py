"""The echo agent's command line: one turn per invocation, or a REPL.

    echo-agent [--session ID] [MESSAGE ...]

With a message, runs one turn and prints the reply and the session id. With
no message, reads one message per line until end of input or `/exit`,
printing each reply as it streams. Configuration (the persistence plugin)
comes from `turnkeep.toml` and the environment, never from flags.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from echo_agent.agent import open_agent
from turnkeep import AgentLoop, Host, load_config
from turnkeep.errors import TurnkeepError
from turnkeep.events import AssistantChunk

__all__ = ["main", "run"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="echo-agent", description="A durable agent that echoes you."
    )
    parser.add_argument("--session", help="continue this stored session")
    parser.add_argument("message", nargs="*", help="one message (omit for a REPL)")
    return parser


async def run(argv: Sequence[str]) -> int:
    """Run the command line with `argv`; return the exit status."""
    args = _parser().parse_args(argv)
    async with Host(load_config()) as host:
        agent = await open_agent(host, args.session)
        if args.message:
            result = await agent.run_turn(" ".join(args.message))
            print(result.text)
        else:
            await _repl(agent)
        print(f"session: {agent.session_id}", file=sys.stderr)
        await agent.close()
    return 0


async def _repl(agent: AgentLoop) -> None:
    loop = asyncio.get_running_loop()
    while True:
        sys.stdout.write("> ")
        sys.stdout.flush()
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line or line.strip() == "/exit":
            print()
            return
        if not line.strip():
            continue
        stream = agent.stream_turn(line.rstrip("\n"))
        async for event in stream:
            if isinstance(event, AssistantChunk):
                sys.stdout.write(event.data.text)
                sys.stdout.flush()
        print()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `echo-agent`."""
    try:
        return asyncio.run(run(sys.argv[1:] if argv is None else argv))
    except TurnkeepError as exc:
        print(f"echo-agent: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
