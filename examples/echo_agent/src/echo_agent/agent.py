"""The echo agent: an `AgentLoop` with the `EchoModel` and no tools."""

from __future__ import annotations

from typing import Final

from turnkeep import AgentLoop, Host
from turnkeep.testing import EchoModel

__all__ = ["AGENT_ID", "open_agent"]

AGENT_ID: Final = "echo-agent"


async def open_agent(host: Host, session_id: str | None) -> AgentLoop:
    """Resume `session_id` from storage, or start a new session if `None`.

    Raises:
        PersistenceNotConfiguredError: resuming needs a persistence backend.
        SessionNotFoundError: nothing is stored under `session_id`.
    """
    model = EchoModel()
    if session_id is None:
        return AgentLoop.create(AGENT_ID, host=host, model=model)
    return await AgentLoop.resume(AGENT_ID, session_id, host=host, model=model)
