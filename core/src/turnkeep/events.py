"""Session events: the envelope, the agent loop's vocabulary, and custom types.

Every entry of a session's log is a `SessionEvent`: `{type, seq, time, data}`.
`type` is the wire tag (`"user/message"`), `seq` counts from 0 without gaps
within a session, `time` is epoch milliseconds from `turnkeep.clock`, and
`data` is the event's JSON-serialisable payload. Events are persisted
verbatim, streamed chunks included; there is no second "stored message" type.

The loop's vocabulary is a set of tagged msgspec Structs (`UserMessage` with
payload `UserMessageData`, ...). Plugins add types by subclassing
`SessionEvent` with their own tag, or with `define_event_type`, and
contributing them through the `register_event_types` hook. A type whose
readers may safely skip it when its plugin is absent is *ignorable*: its
events carry `"ignorable": true` on the wire, and a reader without the type
keeps them opaque instead of refusing the log.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeAlias, cast

import msgspec

from turnkeep.effectdata import EffectResolvedData, UnknownPolicy
from turnkeep.failuredata import TurnFailure
from turnkeep.manifestdata import Manifest, ManifestDifference, RunDriftData
from turnkeep.runcontextdata import (
    BudgetsInfo,
    ModelInfo,
    RunContextData,
    RunInstructionsData,
    ToolInfo,
)

__all__ = [
    "VOCABULARY",
    "AssistantChunk",
    "AssistantChunkData",
    "AssistantMessage",
    "AssistantMessageData",
    "BudgetsInfo",
    "EffectResolved",
    "EffectResolvedData",
    "Manifest",
    "ManifestDifference",
    "ModelInfo",
    "ReplayPolicy",
    "RunContext",
    "RunContextData",
    "RunDrift",
    "RunDriftData",
    "RunInstructions",
    "RunInstructionsData",
    "SessionEvent",
    "ToolCall",
    "ToolCallData",
    "ToolInfo",
    "ToolResult",
    "ToolResultData",
    "ToolResultStatus",
    "TurnCheckpoint",
    "TurnCheckpointData",
    "TurnEnd",
    "TurnEndData",
    "TurnFailure",
    "TurnStart",
    "TurnStartData",
    "TurnStatus",
    "TurnUsage",
    "UserMessage",
    "UserMessageData",
    "define_event_type",
    "event_type_name",
    "is_ignorable",
    "make_event_class",
]


class EventMeta(msgspec.StructMeta):
    """Metaclass of events: exposes each class's wire tag as `cls.type`.

    A plain class attribute (rather than a property over
    `__struct_config__`) because `event.type` is read on the hot path.
    """

    def __new__(
        mcls,
        name: str,
        bases: tuple[type, ...],
        namespace: dict[str, Any],
        **kwargs: Any,
    ) -> EventMeta:
        cls = super().__new__(mcls, name, bases, namespace, **kwargs)
        tag = cls.__struct_config__.tag  # pyright: ignore[reportAttributeAccessIssue]
        if isinstance(tag, str):
            type.__setattr__(cls, "type", tag)
        return cls


class SessionEvent(
    msgspec.Struct,
    metaclass=EventMeta,
    frozen=True,
    kw_only=True,
    tag_field="type",
    gc=False,
):
    """One entry of a session's append-only log.

    Subclasses set a `tag` (the wire `type`) and narrow `data`. Instances are
    immutable; their payloads should be too (the write-behind plugin encodes
    each event when it is appended, so a later mutation of a nested dict
    cannot change what is stored, but it would make the live log disagree
    with the stored one).

    Attributes:
        seq: position in the session's log, contiguous from 0.
        time: epoch milliseconds when the event was appended.
        data: the JSON-serialisable payload.
    """

    seq: int
    time: int
    data: Any

    type: ClassVar[str] = ""
    """The wire tag of this event's class (`"user/message"`, ...)."""

    redact: ClassVar[bool] = False
    """Whether the builtin secret redactor scans every string of this type's
    payload. The vocabulary's text fields are always scanned; a plugin type
    opts in (`redact = True` in its class body, or `define_event_type(...,
    redact=True)`); otherwise its payload is stored exactly as given."""


def event_type_name(cls: type[SessionEvent]) -> str:
    """Return the wire tag of an event class.

    Raises:
        TypeError: if `cls` has no string tag.
    """
    tag = cls.__struct_config__.tag
    if not isinstance(tag, str) or not tag:
        raise TypeError(f"{cls.__qualname__} has no event type tag")
    return tag


def is_ignorable(cls: type[SessionEvent]) -> bool:
    """Whether events of `cls` are marked ignorable on the wire."""
    return "ignorable" in cls.__struct_fields__


def define_event_type(
    name: str, data_type: Any = Any, *, ignorable: bool = False, redact: bool = False
) -> type[SessionEvent]:
    """Create an event class for a plugin-defined type without writing one.

    Args:
        name: the wire tag, e.g. `"myplugin/note"`. By convention it is
            `<owner>/<what>`.
        data_type: the payload type msgspec decodes `data` into (any type
            msgspec supports; `Any` keeps plain JSON values).
        ignorable: mark events of this type ignorable: a reader that does not
            know the type keeps them opaque instead of refusing the log.
        redact: let the secret redactor (`redact_secrets`) scan every string
            of the payload. Off by default, so a payload (an encrypted blob,
            a checkpoint) round-trips exactly.

    Returns:
        A frozen `SessionEvent` subclass tagged `name`.
    """
    if not name or "\x00" in name:
        raise ValueError("an event type name must be non-empty text without NUL")
    return make_event_class(name, data_type, ignorable=ignorable, redact=redact)


def make_event_class(
    name: str,
    data_type: Any,
    *,
    ignorable: bool,
    module: str = __name__,
    redact: bool = False,
) -> type[SessionEvent]:
    """Build a tagged `SessionEvent` subclass (the engine of `define_event_type`)."""
    annotations: dict[str, Any] = {"data": data_type}
    namespace: dict[str, Any] = {"__module__": module, "__annotations__": annotations}
    if redact:
        namespace["redact"] = True
    if ignorable:
        # Always encoded (no omit_defaults), so the mark survives on disk.
        annotations["ignorable"] = bool
        namespace["ignorable"] = True
    cls = EventMeta(
        _class_name(name),
        (SessionEvent,),
        namespace,
        tag=name,
        frozen=True,
        kw_only=True,
        gc=False,
    )
    return cast("type[SessionEvent]", cls)


def _class_name(tag: str) -> str:
    parts = [p for p in tag.replace("-", "/").replace("_", "/").split("/") if p]
    return "".join(p[:1].upper() + p[1:] for p in parts if p.isidentifier()) or "Event"


# -- the agent loop's vocabulary -----------------------------------------------

ReplayPolicy: TypeAlias = Literal["safe", "unsafe"]
"""Whether a tool may be re-run after a crash (`safe`) or never (`unsafe`)."""

TurnStatus: TypeAlias = Literal[
    "completed", "failed", "cancelled", "interrupted", "budget_exhausted", "timed_out"
]
"""How a turn ended; `budget_exhausted` (format version 2) when a step, token
or time budget would have been exceeded by the next model or tool call;
`timed_out` (format version 2) when the turn's deadline passed, or nothing
happened for the stall limit, while a model call or tool ran."""
ToolResultStatus: TypeAlias = Literal["ok", "error", "interrupted"]


class _Payload(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    pass


class TurnStartData(_Payload, frozen=True, kw_only=True, gc=False):
    """Payload of `turn/start`.

    Attributes:
        turn: the turn number, from 1 within a session.
    """

    turn: int


class UserMessageData(_Payload, frozen=True, kw_only=True, gc=False):
    """Payload of `user/message`.

    Attributes:
        text: what the user said.
        untrusted: the text came from an import or another outside source
            and must not be treated as the user's own instruction.
    """

    text: str
    untrusted: bool = False


class AssistantChunkData(_Payload, frozen=True, kw_only=True, gc=False):
    """Payload of `assistant/chunk`: one streamed piece of the reply."""

    text: str


class AssistantMessageData(
    _Payload, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """Payload of `assistant/message`: the assembled reply of one model call.

    Attributes:
        text: the reply's text.
        partial: the call was cut off (cancelled, failed, timed out, or the
            process stopped) and `text` is what it streamed until then
            (format version 2; encoded only when true).
    """

    text: str
    partial: bool = False


class ToolCallData(_Payload, frozen=True, kw_only=True, gc=False):
    """Payload of `tool/call`: the model asked for a tool to run.

    Attributes:
        call_id: stable id of this call; tools use it as an idempotency key.
        name: the tool's name.
        arguments: the JSON arguments the model gave.
        replay: the tool's declared replay policy when the call was made.
        on_unknown: what follows while its outcome is unknown (`report`,
            or `block` the next turn until it is resolved).
    """

    call_id: str
    name: str
    arguments: dict[str, Any]
    replay: ReplayPolicy = "unsafe"
    on_unknown: UnknownPolicy = "report"


class ToolResultData(_Payload, frozen=True, kw_only=True, gc=False):
    """Payload of `tool/result`: what one tool call produced.

    Attributes:
        call_id: the `tool/call` this result answers (exactly one).
        output: the text handed back to the model.
        status: `ok`, `error`, or `interrupted` (written by recovery for an
            unsafe call whose outcome is unknown).
    """

    call_id: str
    output: str
    status: ToolResultStatus = "ok"


class TurnCheckpointData(_Payload, frozen=True, kw_only=True, gc=False):
    """Payload of `turn/checkpoint`: a durability point inside a turn.

    Attributes:
        turn: the turn number.
        reason: why the loop flushed here (e.g. `"unsafe-tool"`).
    """

    turn: int
    reason: str


class TurnUsage(_Payload, frozen=True, kw_only=True, gc=False):
    """What a turn used, in its `turn/end` (format version 2).

    Attributes:
        input_tokens: model input tokens the model reported (`None`: it
            reported none).
        output_tokens: model output tokens it reported (`None`: none).
        model_ms: milliseconds spent in model calls.
        tool_ms: milliseconds spent running tools.
        events: events the turn appended before its `turn/end`.
        bytes: their stored size in bytes (as encoded).
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    model_ms: int = 0
    tool_ms: int = 0
    events: int = 0
    bytes: int = 0


class TurnEndData(_Payload, frozen=True, kw_only=True, gc=False):
    """Payload of `turn/end`.

    Attributes:
        turn: the turn number.
        status: how the turn ended.
        error: a short description when `status` is not `completed`.
        usage: what the turn used in the process that ended it (for a turn
            recovery closed, only what recovery did); `None` in logs written
            before format version 2.
        manifest: the versions of outside state the turn leaves behind, by
            name (the `turn_manifest` hook; format version 2); `UNSET`, and
            absent on the wire, when no plugin names any.
        failure: why a `failed` turn failed, as data (`TurnFailure`: the
            error's code, a model server's HTTP status and error code,
            whether a retry may help); `UNSET`, and absent on the wire, for
            other turns and in logs written before it existed.
    """

    turn: int
    status: TurnStatus
    error: str | None = None
    usage: TurnUsage | None = None
    manifest: Manifest | msgspec.UnsetType = msgspec.UNSET
    failure: TurnFailure | msgspec.UnsetType = msgspec.UNSET


class TurnStart(SessionEvent, tag="turn/start", frozen=True, kw_only=True, gc=False):
    """A turn began."""

    data: TurnStartData


class UserMessage(
    SessionEvent, tag="user/message", frozen=True, kw_only=True, gc=False
):
    """The user said something."""

    data: UserMessageData


class AssistantChunk(
    SessionEvent, tag="assistant/chunk", frozen=True, kw_only=True, gc=False
):
    """A streamed piece of the model's reply (skipped by `derive_messages`)."""

    data: AssistantChunkData


class AssistantMessage(
    SessionEvent, tag="assistant/message", frozen=True, kw_only=True, gc=False
):
    """The model's assembled reply for one call."""

    data: AssistantMessageData


class ToolCall(SessionEvent, tag="tool/call", frozen=True, kw_only=True, gc=False):
    """The model asked for a tool call."""

    data: ToolCallData


class ToolResult(SessionEvent, tag="tool/result", frozen=True, kw_only=True, gc=False):
    """A tool call's result (or its recorded interruption)."""

    data: ToolResultData


class TurnCheckpoint(
    SessionEvent, tag="turn/checkpoint", frozen=True, kw_only=True, gc=False
):
    """The loop made the turn durable so far (e.g. before an unsafe tool)."""

    data: TurnCheckpointData


class TurnEnd(SessionEvent, tag="turn/end", frozen=True, kw_only=True, gc=False):
    """A turn ended; the loop flushes right after it."""

    data: TurnEndData


class RunContext(SessionEvent, tag="run/context", frozen=True, kw_only=True, gc=False):
    """The context turns run with, recorded before a model call when it changed."""

    data: RunContextData


class RunInstructions(
    SessionEvent, tag="run/instructions", frozen=True, kw_only=True, gc=False
):
    """Long instructions, recorded once per session and named by their hash."""

    data: RunInstructionsData


class EffectResolved(SessionEvent, tag="effect/resolved", frozen=True, kw_only=True):
    """A call whose outcome was unknown was settled (format version 2)."""

    data: EffectResolvedData


class RunDrift(SessionEvent, tag="run/drift", frozen=True, kw_only=True, gc=False):
    """A resume found outside state changed since the last manifest (version 2)."""

    data: RunDriftData


VOCABULARY: tuple[type[SessionEvent], ...] = (
    TurnStart,
    UserMessage,
    AssistantChunk,
    AssistantMessage,
    ToolCall,
    ToolResult,
    TurnCheckpoint,
    TurnEnd,
    RunContext,
    RunInstructions,
    EffectResolved,
    RunDrift,
)
"""The event types every turnkeep reader knows."""
