"""echo-agent: the smallest complete durable agent built on turnkeep.

`build` makes its `AgentLoop` (the `EchoModel`, no tools); `echo_agent.cli`
is the command line (one-shot and REPL).
"""

from __future__ import annotations

from echo_agent.agent import AGENT_ID, open_agent

__all__ = ["AGENT_ID", "open_agent"]
