"""turnkeep: durable agent sessions.

Every conversation is an append-only log of events; persistence plugins keep
it durable, the host runs the plugins, and the model's history is derived
from the log. The names below are what a user of the loop and the store
needs; the rest lives in its layer: the event vocabulary in
`turnkeep.events`, the seam for backend authors in `turnkeep.persistence`
(and `turnkeep.backendkit`), the agent loop's parts in `turnkeep.agent`,
test doubles in `turnkeep.testing`.
"""

from __future__ import annotations

from turnkeep import errors
from turnkeep._deprecated import renamed
from turnkeep.agent.loop import AgentLoop
from turnkeep.agent.messages import Message, derive_messages
from turnkeep.agent.models import (
    Model,
    ModelOutput,
    ModelRequest,
    ModelToolCall,
    TextDelta,
)
from turnkeep.agent.recovery import RecoveryReport
from turnkeep.agent.streams import TurnStream
from turnkeep.agent.tools import Tool, ToolContext, ToolSpec, function_tool
from turnkeep.agent.turns import TurnResult
from turnkeep.config import Config, load_config
from turnkeep.events import SessionEvent, define_event_type
from turnkeep.hookspecs import hookimpl
from turnkeep.host import Host
from turnkeep.meta import SessionMeta, SessionSummary
from turnkeep.session import Session

__version__ = "0.1.0"

__all__ = [
    "AgentLoop",
    "Config",
    "Host",
    "Message",
    "Model",
    "ModelOutput",
    "ModelRequest",
    "ModelToolCall",
    "RecoveryReport",
    "Session",
    "SessionEvent",
    "SessionMeta",
    "SessionSummary",
    "TextDelta",
    "Tool",
    "ToolContext",
    "ToolSpec",
    "TurnResult",
    "TurnStream",
    "define_event_type",
    "derive_messages",
    "errors",
    "function_tool",
    "hookimpl",
    "load_config",
]

_EVENTS = "turnkeep.events"
_PERSISTENCE = "turnkeep.persistence"
_TESTING = "turnkeep.testing"
_AGENT = "turnkeep.agent"

# Names `turnkeep` exported before 0.2, and where they live now.
_MOVED: dict[str, str] = {
    **{
        name: f"{_EVENTS}:{name}"
        for name in (
            "VOCABULARY",
            "AssistantChunk",
            "AssistantChunkData",
            "AssistantMessage",
            "AssistantMessageData",
            "ReplayPolicy",
            "ToolCall",
            "ToolCallData",
            "ToolResult",
            "ToolResultData",
            "TurnCheckpoint",
            "TurnCheckpointData",
            "TurnEnd",
            "TurnEndData",
            "TurnStart",
            "TurnStartData",
            "UserMessage",
            "UserMessageData",
        )
    },
    **{
        name: f"{_PERSISTENCE}:{name}"
        for name in (
            "DEFAULT_MAX_EVENT_BYTES",
            "FORMAT_VERSION",
            "EventCodec",
            "EventRecord",
            "ForkPoint",
            "LoadedSession",
            "SessionHeader",
            "SessionPage",
            "SessionPersistence",
            "validate_backend",
        )
    },
    **{
        name: f"{_TESTING}:{name}"
        for name in (
            "EchoModel",
            "MemoryPersistence",
            "MemoryStorage",
            "Reply",
            "ScriptedCall",
            "ScriptedModel",
        )
    },
    **{
        name: f"{_AGENT}:{name}"
        for name in ("FunctionTool", "encode_messages", "replay_policy")
    },
    "ToolCallRequest": f"{_AGENT}:HistoryToolCall",
    "ToolCallRequested": f"{_AGENT}:ModelToolCall",
    "Clock": "turnkeep.clock:Clock",
    "now_ms": "turnkeep.clock:now_ms",
    "new_session_id": "turnkeep.ids:new_session_id",
    "validate_session_id": "turnkeep.ids:validate_session_id",
    "SessionStore": "turnkeep.store:SessionStore",
    "WriteBehind": "turnkeep.writebehind:WriteBehind",
}

__getattr__ = renamed(__name__, _MOVED)
