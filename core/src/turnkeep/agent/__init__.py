"""The agent loop: turns, steps, recovery, models, tools and derived history.

Built on the seam (`turnkeep.session`, `turnkeep.host`, the persistence
protocol); the seam never imports this package. `AgentLoop` drives one
session turn by turn, each durable before the next begins; a `Model`
streams `TextDelta`s, `ModelToolCall`s and its `Usage`, and describes
itself (`ModelInfo`, recorded as the run context); a `Tool` declares whether it may
be re-run after a crash; `derive_messages` turns a log into the model's
history. `turnkeep.agent.openai_compat` holds the OpenAI-compatible model
(extra `turnkeep[openai]`).
"""

from __future__ import annotations

from turnkeep.agent.context import RECORDED
from turnkeep.agent.historyview import HistoryView
from turnkeep.agent.loop import DEFAULT_MAX_STEPS, AgentLoop
from turnkeep.agent.messages import (
    HistoryToolCall,
    Message,
    MessageRole,
    derive_messages,
    encode_messages,
)
from turnkeep.agent.models import (
    EchoModel,
    Model,
    ModelInfo,
    ModelOutput,
    ModelRequest,
    ModelToolCall,
    Reply,
    ScriptedCall,
    ScriptedModel,
    TextDelta,
    Usage,
)
from turnkeep.agent.recovery import RecoveryReport
from turnkeep.agent.streams import TurnStream
from turnkeep.agent.tools import (
    FunctionTool,
    Tool,
    ToolContext,
    ToolSpec,
    function_tool,
    replay_policy,
)
from turnkeep.agent.turns import TurnResult

__all__ = [
    "DEFAULT_MAX_STEPS",
    "RECORDED",
    "AgentLoop",
    "EchoModel",
    "FunctionTool",
    "HistoryToolCall",
    "HistoryView",
    "Message",
    "MessageRole",
    "Model",
    "ModelInfo",
    "ModelOutput",
    "ModelRequest",
    "ModelToolCall",
    "RecoveryReport",
    "Reply",
    "ScriptedCall",
    "ScriptedModel",
    "TextDelta",
    "Tool",
    "ToolContext",
    "ToolSpec",
    "TurnResult",
    "TurnStream",
    "Usage",
    "derive_messages",
    "encode_messages",
    "function_tool",
    "replay_policy",
]
