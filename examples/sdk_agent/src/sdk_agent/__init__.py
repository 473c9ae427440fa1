"""sdk-agent: an OpenAI Agents SDK agent on a turnkeep session, offline."""

from __future__ import annotations

from .agent import make_agent, run_turn
from .model import ScriptedModel

__all__ = ["ScriptedModel", "make_agent", "run_turn"]
