"""turnkeep: durable agent sessions.

Every conversation is an append-only log of events; persistence plugins keep
it durable, the host runs the plugins, and the model's history is derived
from the log. The names below are the public API; everything else is an
implementation detail.
"""

from __future__ import annotations

from turnkeep import errors
from turnkeep.clock import Clock, now_ms
from turnkeep.codec import DEFAULT_MAX_EVENT_BYTES, EventCodec, EventRecord
from turnkeep.config import Config, load_config
from turnkeep.events import (
    VOCABULARY,
    AssistantChunk,
    AssistantChunkData,
    AssistantMessage,
    AssistantMessageData,
    ReplayPolicy,
    SessionEvent,
    ToolCall,
    ToolCallData,
    ToolResult,
    ToolResultData,
    TurnCheckpoint,
    TurnCheckpointData,
    TurnEnd,
    TurnEndData,
    TurnStart,
    TurnStartData,
    UserMessage,
    UserMessageData,
    define_event_type,
)
from turnkeep.hookspecs import hookimpl
from turnkeep.host import Host
from turnkeep.ids import new_session_id, validate_session_id
from turnkeep.loop import AgentLoop
from turnkeep.memory import MemoryPersistence, MemoryStorage
from turnkeep.messages import Message, ToolCallRequest, derive_messages, encode_messages
from turnkeep.meta import (
    FORMAT_VERSION,
    ForkPoint,
    SessionHeader,
    SessionMeta,
    SessionSummary,
)
from turnkeep.models import (
    EchoModel,
    Model,
    ModelOutput,
    ModelRequest,
    Reply,
    ScriptedCall,
    ScriptedModel,
    TextDelta,
    ToolCallRequested,
)
from turnkeep.persistence import (
    LoadedSession,
    SessionPage,
    SessionPersistence,
    validate_backend,
)
from turnkeep.recovery import RecoveryReport
from turnkeep.session import Session, SessionStore
from turnkeep.tools import (
    FunctionTool,
    Tool,
    ToolContext,
    ToolSpec,
    function_tool,
    replay_policy,
)
from turnkeep.turns import TurnResult, TurnStream
from turnkeep.writebehind import WriteBehind

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "FORMAT_VERSION",
    "VOCABULARY",
    "AgentLoop",
    "AssistantChunk",
    "AssistantChunkData",
    "AssistantMessage",
    "AssistantMessageData",
    "Clock",
    "Config",
    "EchoModel",
    "EventCodec",
    "EventRecord",
    "ForkPoint",
    "FunctionTool",
    "Host",
    "LoadedSession",
    "MemoryPersistence",
    "MemoryStorage",
    "Message",
    "Model",
    "ModelOutput",
    "ModelRequest",
    "RecoveryReport",
    "ReplayPolicy",
    "Reply",
    "ScriptedCall",
    "ScriptedModel",
    "Session",
    "SessionEvent",
    "SessionHeader",
    "SessionMeta",
    "SessionPage",
    "SessionPersistence",
    "SessionStore",
    "SessionSummary",
    "TextDelta",
    "Tool",
    "ToolCall",
    "ToolCallData",
    "ToolCallRequest",
    "ToolCallRequested",
    "ToolContext",
    "ToolResult",
    "ToolResultData",
    "ToolSpec",
    "TurnCheckpoint",
    "TurnCheckpointData",
    "TurnEnd",
    "TurnEndData",
    "TurnResult",
    "TurnStart",
    "TurnStartData",
    "TurnStream",
    "UserMessage",
    "UserMessageData",
    "WriteBehind",
    "define_event_type",
    "derive_messages",
    "encode_messages",
    "errors",
    "function_tool",
    "hookimpl",
    "load_config",
    "new_session_id",
    "now_ms",
    "replay_policy",
    "validate_backend",
    "validate_session_id",
]
