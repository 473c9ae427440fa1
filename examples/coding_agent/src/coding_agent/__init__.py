"""coding-agent: a durable coding agent over one workspace directory.

`open_agent` builds its `AgentLoop`; `coding_agent.tools` holds the six
workspace tools; `coding_agent.script` the offline model's demo task;
`coding_agent.cli` the command line used by `make demo`.
"""

from __future__ import annotations

from coding_agent.agent import AGENT_ID, choose_model, open_agent
from coding_agent.tools import workspace_tools
from coding_agent.workspace import Workspace

__all__ = ["AGENT_ID", "Workspace", "choose_model", "open_agent", "workspace_tools"]
