"""The agent: a scripted model, one tool, and a `TurnkeepSession`.

`run_turn` runs one turn with `Runner.run_sync` (a new event loop per call,
as the SDK does); the session keeps the history in the turnkeep store the
spec names. The `lookup` tool sleeps `SDK_AGENT_TOOL_SECONDS` (default 0)
after saying it started, so a test can kill the process mid-run.
"""

from __future__ import annotations

import os
import time

import agents
from agents import Agent, Runner, function_tool

from turnkeep_openai_agents import TurnkeepSession

from .model import ScriptedModel

__all__ = ["make_agent", "run_turn"]

agents.set_tracing_disabled(True)  # offline: no trace export


@function_tool
def lookup(topic: str) -> str:
    """Look a topic up (slowly, when SDK_AGENT_TOOL_SECONDS says so)."""
    print(f"tool running: {topic}", flush=True)
    time.sleep(float(os.environ.get("SDK_AGENT_TOOL_SECONDS", "0")))
    return f"three trains a day to {topic}"


def make_agent() -> Agent[None]:
    """The example's agent."""
    return Agent(
        name="assistant",
        instructions="Answer briefly.",
        model=ScriptedModel(),
        tools=[lookup],
    )


def run_turn(store: str | None, session_id: str, text: str) -> str:
    """Run one turn of `session_id` on `store`; return the final reply."""
    session = TurnkeepSession(session_id, store)
    try:
        result = Runner.run_sync(make_agent(), text, session=session)
    finally:
        session.close()
    return str(result.final_output)
