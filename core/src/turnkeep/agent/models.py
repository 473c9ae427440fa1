"""Models: the `Model` protocol, what it streams, and two offline models.

Implemented by model adapters: `ScriptedModel` (deterministic replies, for
tests and examples), `EchoModel` (repeats the user), and the optional
OpenAI-compatible HTTP model (`turnkeep.agent.openai_compat`, extra
`turnkeep[openai]`). Consumed by `AgentLoop`, which turns every streamed
`TextDelta` into an `assistant/chunk` event, the assembled text into an
`assistant/message`, and every `ModelToolCall` into a `tool/call`.

A model sees only the history derived from the log (`derive_messages`), so
the same log gives the same request whether the session was continued in
memory or loaded from disk. A model keeps no state between calls that the
log does not hold; `ScriptedModel` picks its reply from the history for
exactly that reason, so a new process continues the script where the log
ends.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final, Protocol, TypeAlias

import attrs

from turnkeep._deprecated import renamed
from turnkeep.agent.messages import Message
from turnkeep.agent.tools import ToolSpec
from turnkeep.errors import ConfigurationError, ModelError
from turnkeep.events import ModelInfo

__all__ = [
    "EchoModel",
    "Model",
    "ModelInfo",
    "ModelOutput",
    "ModelRequest",
    "ModelToolCall",
    "Reply",
    "ScriptedCall",
    "ScriptedModel",
    "TextDelta",
    "Usage",
    "describe_model",
    "split_words",
]


@attrs.frozen
class TextDelta:
    """A streamed piece of the reply's text."""

    text: str


@attrs.frozen
class ModelToolCall:
    """A tool call as the model streams it (before it has an id or an event).

    The loop turns it into a `tool/call` event (`turnkeep.events.ToolCall`);
    the history sent back to the model shows it as a `HistoryToolCall`.

    The loop assigns the call its stable id; a provider's own id is not
    needed, because history sent back to the model is derived from the log.

    Attributes:
        name: the tool's name.
        arguments: the JSON arguments (an object).
    """

    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict[str, Any])


@attrs.frozen
class Usage:
    """Tokens one model call used, as its provider reports them.

    Streamed once per call, usually last. Only what the provider reports:
    a model that is not told leaves a count `None` (never estimated from
    characters).

    Attributes:
        input_tokens: tokens of the request (prompt), if reported.
        output_tokens: tokens of the reply, if reported.
        model: the model name the provider says served the call, if given.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None


ModelOutput: TypeAlias = TextDelta | ModelToolCall | Usage
"""What a model streams: text pieces, tool call requests and its usage."""


@attrs.frozen
class ModelRequest:
    """One model call.

    Attributes:
        messages: the history derived from the session's log. The loop
            passes a `turnkeep.agent.historyview.HistoryView`: an immutable
            sequence that costs the same whatever the history's length
            (`tuple(request.messages)` copies it, if a model needs a tuple).
        tools: the tools the model may call.
        instructions: the agent's standing instructions (a system prompt).
        session_id: the session, for adapters that tag requests.
        turn: the turn number.
    """

    messages: Sequence[Message]
    tools: tuple[ToolSpec, ...] = ()
    instructions: str | None = None
    session_id: str = ""
    turn: int = 0


class Model(Protocol):
    """Produces the assistant's reply to a history, streamed.

    `stream` is an async iterator (usually an `async def` generator). Raise
    `ModelError` for a failure the turn should report (the loop records the
    turn as `failed`). The loop closes the iterator (`aclose`) when the turn
    is cancelled. Stream a `Usage` when the provider reports one.

    `describe` says which model this is and how it is set (recorded as the
    run context; a resume with another description is refused unless
    overridden). Settings are JSON values and never hold credentials. A
    model without `describe` (written before it existed) is described by
    its class name with no settings (`describe_model`).
    """

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        """Stream the reply to `request`."""
        ...

    def describe(self) -> ModelInfo:
        """Name, provider and settings of this model."""
        ...


def describe_model(model: object) -> ModelInfo:
    """Return `model.describe()`, or its class name for a model without one.

    Raises:
        ConfigurationError: `describe` did not return a `ModelInfo`.
    """
    describe = getattr(model, "describe", None)
    if describe is None:
        return ModelInfo(name=type(model).__name__, provider="unspecified")
    info = describe()
    if not isinstance(info, ModelInfo):
        raise ConfigurationError(
            f"{type(model).__name__}.describe() returned {type(info).__name__}, "
            "not a ModelInfo"
        )
    # A copy: a model that later changes the dict it returned must not
    # change the context recorded (or compared) under the log's feet.
    return ModelInfo(
        name=info.name, provider=info.provider, settings=dict(info.settings)
    )


_WORD: Final = re.compile(r"\S+\s*|\s+")


def split_words(text: str) -> list[str]:
    """Split text into word-sized chunks that join back to exactly `text`."""
    return _WORD.findall(text)


@attrs.frozen
class ScriptedCall:
    """A tool call in a scripted reply."""

    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict[str, Any])


@attrs.frozen
class Reply:
    """One scripted model call: text (streamed word by word), then tool calls.

    `usage`, if given, is streamed after them, as a provider would report it.
    """

    text: str = ""
    calls: tuple[ScriptedCall, ...] = ()
    usage: Usage | None = None


ReplyPicker: TypeAlias = Callable[[ModelRequest], Reply]


def reply_index(request: ModelRequest) -> int:
    """How many model calls the history already holds (its assistant messages)."""
    return sum(1 for m in request.messages if m.role == "assistant")


@attrs.define(eq=False)
class ScriptedModel:
    """A deterministic model: reply number *n* of the script for call *n*.

    The position is the number of assistant messages in the history, so the
    script is a function of the log: a process that resumes a session picks
    up the script exactly where the durable log ends.

    Args:
        script: the replies in order (a `Reply`, or text for a reply that
            calls no tool), or a function choosing a reply for a request.
        requests: the requests received, oldest first (for tests): the
            latest `keep_requests` of them, so a long run does not keep
            every history it was shown.
        keep_requests: how many requests `requests` keeps.
        stream_words: stream the text word by word (as a real model would,
            in many small deltas); `False` streams each reply as one delta.
        name: the name `describe` reports.
        settings: the settings `describe` reports (e.g. `max_tokens`).

    Raises (from `stream`):
        ModelError: the script has no reply for this call.
    """

    script: Sequence[Reply | str] | ReplyPicker
    requests: list[ModelRequest] = attrs.field(factory=list[ModelRequest])
    keep_requests: int = 1000
    stream_words: bool = True
    name: str = "scripted"
    settings: Mapping[str, Any] = attrs.field(factory=dict[str, Any])

    def describe(self) -> ModelInfo:
        """The name and settings it was given (provider `scripted`)."""
        return ModelInfo(
            name=self.name, provider="scripted", settings=dict(self.settings)
        )

    @staticmethod
    def calling(tool: str, text: str = "", **arguments: Any) -> Reply:
        """A reply that says `text`, then calls `tool` with `arguments`."""
        return Reply(text, (ScriptedCall(tool, arguments),))

    def pick(self, request: ModelRequest) -> Reply:
        """Return the reply for `request`."""
        if callable(self.script):
            return self.script(request)
        index = reply_index(request)
        if index >= len(self.script):
            raise ModelError(
                f"the scripted model has {len(self.script)} replies and was "
                f"asked for reply #{index + 1}"
            )
        reply = self.script[index]
        return Reply(reply) if isinstance(reply, str) else reply

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        """Stream the chosen reply: its words, then its tool calls."""
        requests = self.requests
        requests.append(request)
        if len(requests) > 2 * self.keep_requests:
            # Trimmed in halves so appending stays O(1) amortised.
            del requests[: len(requests) - self.keep_requests]
        reply = self.pick(request)
        if not self.stream_words:
            if reply.text:
                yield TextDelta(reply.text)
        else:
            for piece in split_words(reply.text):
                yield TextDelta(piece)
        for call in reply.calls:
            yield ModelToolCall(call.name, dict(call.arguments))
        if reply.usage is not None:
            yield reply.usage


@attrs.define(eq=False)
class EchoModel:
    """Answers every user message by repeating it (no tools).

    Args:
        prefix: put before the echoed text.
    """

    prefix: str = "You said: "

    def describe(self) -> ModelInfo:
        """Name `echo`, provider `turnkeep`, its prefix as its one setting."""
        return ModelInfo(
            name="echo", provider="turnkeep", settings={"prefix": self.prefix}
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        """Stream `prefix` plus the last user message, word by word."""
        last = next(
            (m.content for m in reversed(request.messages) if m.role == "user"), ""
        )
        for piece in split_words(self.prefix + last):
            yield TextDelta(piece)


__getattr__ = renamed(__name__, {"ToolCallRequested": f"{__name__}:ModelToolCall"})
