"""The run context: what a turn runs with, recorded when it changes, checked on resume.

A turn's context is its standing instructions, its model's description
(`Model.describe`), its tools (name, replay policy, a hash of each schema)
and its budgets (`turnkeep.agent.budgets`). Used by `AgentLoop` and
`turnkeep.agent.steps`:

- before a turn's first model call, `ContextPlan.pending` says what to
  append: a `run/context` event when the context differs from the last one
  the session recorded (nothing when it is the same), preceded, for
  instructions longer than `INLINE_INSTRUCTIONS_BYTES`, by one
  `run/instructions` event holding their text, once per session and hash
  (the context then names them by SHA-256 only);
- `AgentLoop.resume` reads the recorded context (`recorded_context`),
  fills in what the caller left to it (`RECORDED`), and refuses a context
  that differs (`differences`) unless told `context="override"`.

What the session recorded is kept per live session and read incrementally,
like the model history (`turnkeep.agent.history`): each turn reads only the
events appended since the previous one, so checking the context costs the
same at turn 1,000 as at turn 10.
"""

from __future__ import annotations

import enum
import hashlib
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs
import msgspec

from turnkeep.agent.auditnotes import refuse_resume
from turnkeep.agent.budgets import DEFAULT_MAX_STEPS, check_budgets, output_reserve
from turnkeep.agent.models import describe_model
from turnkeep.agent.tools import Tool, replay_policy, validate_tools
from turnkeep.errors import ConfigurationError, ContextMismatchError, TurnkeepError
from turnkeep.events import (
    AssistantChunk,
    BudgetsInfo,
    ModelInfo,
    RunContext,
    RunContextData,
    RunInstructions,
    RunInstructionsData,
    SessionEvent,
    ToolInfo,
)
from turnkeep.host import Host
from turnkeep.session import Session

__all__ = [
    "INLINE_INSTRUCTIONS_BYTES",
    "RECORDED",
    "ContextMode",
    "ContextPlan",
    "Recorded",
    "RecordedContext",
    "Settings",
    "adopt_context",
    "check_setup",
    "differences",
    "recorded_context",
    "resolve",
    "sha256_text",
    "tool_info",
]

INLINE_INSTRUCTIONS_BYTES: Final = 2048
"""Instructions up to this many UTF-8 bytes are kept inside `run/context`;
longer ones are stored once per session in `run/instructions`."""

ContextMode: TypeAlias = Literal["check", "override"]
"""What `resume` does with a context that differs from the recorded one:
refuse it (`check`) or run with it and record the change (`override`)."""


class Recorded(enum.Enum):
    """The type of `RECORDED`."""

    RECORDED = "recorded"


RECORDED: Final = Recorded.RECORDED
"""A `resume` argument left to the session: the value its log recorded (or
the default, for a session that recorded none)."""

_canonical: Final = msgspec.json.Encoder(order="sorted").encode


def sha256_text(text: str) -> str:
    """SHA-256 (hex) of `text` in UTF-8 (lone surrogates kept)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def tool_info(tool: Tool) -> ToolInfo:
    """Describe a tool for the run context (its schema by hash)."""
    schema = {"description": tool.description, "parameters": dict(tool.parameters)}
    digest = hashlib.sha256(_canonical(schema)).hexdigest()
    return ToolInfo(name=tool.name, replay=replay_policy(tool), schema_sha256=digest)


def check_setup(agent_id: Any, model: object, tools: Iterable[Tool]) -> dict[str, Tool]:
    """Check what a loop is built with and index its tools by name.

    Raises:
        ConfigurationError: the agent id, model or tools are invalid.
    """
    if not callable(getattr(model, "stream", None)):
        raise ConfigurationError(
            f"{type(model).__name__} is not a Model: it has no `stream` method"
        )
    if not isinstance(agent_id, str) or not agent_id or "\x00" in agent_id:
        raise ConfigurationError(
            f"an agent id must be non-empty text without NUL, got {agent_id!r}"
        )
    return validate_tools(tools)


@attrs.define(eq=False)
class RecordedContext:
    """What one session's log recorded: its last context and long instructions.

    Attributes:
        context: the last `run/context` (`None`: none recorded).
        texts: the text of each `run/instructions`, by SHA-256.
    """

    context: RunContextData | None = None
    texts: dict[str, str] = attrs.field(factory=dict[str, str])
    _read: int = 0
    _last: SessionEvent | None = None

    def follows(self, log: Sequence[SessionEvent]) -> bool:
        """Whether `log` continues the log read so far."""
        read = self._read
        return read == 0 or (len(log) >= read and log[read - 1] is self._last)

    def read(self, log: Sequence[SessionEvent]) -> None:
        """Read the events appended since the last call."""
        for event in log[self._read :]:
            if type(event) is AssistantChunk:
                continue  # half of a turn's events; the checks below cost more
            if isinstance(event, RunContext):
                self.context = event.data
            elif isinstance(event, RunInstructions):
                self.texts.setdefault(event.data.sha256, event.data.text)
        if log:
            self._read = len(log)
            self._last = log[-1]

    def instructions(self) -> str | None:
        """The recorded instructions' text, as stored (`None`: none)."""
        context = self.context
        if context is None or context.instructions_sha256 is None:
            return None
        if context.instructions is not None:
            return context.instructions
        return self.texts.get(context.instructions_sha256)


Settings: TypeAlias = tuple[str | None, int, int | None, float | None]
"""A loop's instructions, `max_steps`, `max_tokens` and `deadline`."""


def resolve(
    recorded: RecordedContext,
    *,
    instructions: str | Recorded | None = RECORDED,
    max_steps: int | Recorded = RECORDED,
    max_tokens: int | Recorded | None = RECORDED,
    deadline: float | Recorded | None = RECORDED,
) -> Settings:
    """Fill in the arguments left to the session with what its log recorded.

    A session that recorded no context gives the defaults (no instructions,
    `DEFAULT_MAX_STEPS`, no token or time budget).
    """
    context = recorded.context
    budgets = (
        BudgetsInfo(max_steps=DEFAULT_MAX_STEPS) if context is None else context.budgets
    )
    return (
        recorded.instructions() if instructions is RECORDED else instructions,
        budgets.max_steps if max_steps is RECORDED else max_steps,
        budgets.max_tokens if max_tokens is RECORDED else max_tokens,
        budgets.deadline if deadline is RECORDED else deadline,
    )


_recorded: Final = weakref.WeakKeyDictionary[Session, RecordedContext]()


def recorded_context(session: Session) -> RecordedContext:
    """The recorded context of a live session, read incrementally."""
    log = session.events
    recorded = _recorded.get(session)
    if recorded is None or not recorded.follows(log):
        # First use, or the log is not the one read (trimmed after a
        # rejected flush, reloaded): read it afresh.
        recorded = _recorded[session] = RecordedContext()
    recorded.read(log)
    return recorded


@attrs.define(eq=False)
class ContextPlan:
    """Builds a loop's current context and says what a turn must record.

    Caches what is costly to recompute each turn (each tool's schema hash,
    the instructions' hash), keyed by the objects they came from.
    """

    _tools: dict[str, tuple[Tool, ToolInfo]] = attrs.field(
        factory=dict[str, tuple[Tool, ToolInfo]]
    )
    _hashed: tuple[str, str] | None = None
    _last: tuple[Settings, ModelInfo, tuple[Tool, ...], RunContextData] | None = None

    def current(
        self, settings: Settings, model: object, tools: Mapping[str, Tool]
    ) -> RunContextData:
        """The context of a loop with these settings, budgets checked.

        Raises:
            ConfigurationError: a budget is invalid, or a token budget is set
                for a model that declares no output cap.
        """
        info = describe_model(model)
        last = self._last
        if (
            last is not None
            and last[0] == settings
            and last[1] == info
            and len(last[2]) == len(tools)
            and all(a is b for a, b in zip(last[2], tools.values(), strict=False))
        ):
            return last[3]  # the same as last turn: nothing to build or check
        instructions, max_steps, max_tokens, deadline = settings
        budgets = check_budgets(max_steps, max_tokens, deadline)
        context = self.build(
            instructions=instructions, model=info, tools=tools, budgets=budgets
        )
        output_reserve(context.model, budgets)
        self._last = (settings, info, tuple(tools.values()), context)
        return context

    def build(
        self,
        *,
        instructions: str | None,
        model: object,
        tools: Mapping[str, Tool],
        budgets: BudgetsInfo,
    ) -> RunContextData:
        """The context of a turn run with these (instructions inline if short)."""
        sha = None if instructions is None else self._sha(instructions)
        inline = (
            instructions
            if instructions is not None
            and len(instructions.encode("utf-8", "surrogatepass"))
            <= INLINE_INSTRUCTIONS_BYTES
            else None
        )
        return RunContextData(
            instructions_sha256=sha,
            instructions=inline,
            model=model if isinstance(model, ModelInfo) else describe_model(model),
            tools=[self._tool(t) for t in tools.values()],
            budgets=budgets,
        )

    def pending(
        self, session: Session, current: RunContextData, instructions: str | None
    ) -> list[RunContextData | RunInstructionsData]:
        """The payloads to append before a model call (none if unchanged)."""
        recorded = recorded_context(session)
        last = recorded.context
        # `==` first: the common case, cheap; `differences` compares
        # instructions by hash only (their stored text may be redacted).
        if last is not None and (last == current or not differences(last, current)):
            return []
        out: list[RunContextData | RunInstructionsData] = []
        sha = current.instructions_sha256
        if (
            sha is not None
            and instructions is not None
            and current.instructions is None
            and sha not in recorded.texts
        ):
            out.append(RunInstructionsData(sha256=sha, text=instructions))
        out.append(current)
        return out

    def _sha(self, text: str) -> str:
        hashed = self._hashed
        if hashed is None or hashed[0] != text:
            hashed = self._hashed = (text, sha256_text(text))
        return hashed[1]

    def _tool(self, tool: Tool) -> ToolInfo:
        cached = self._tools.get(tool.name)
        if cached is None or cached[0] is not tool:
            cached = self._tools[tool.name] = (tool, tool_info(tool))
        return cached[1]


async def adopt_context(
    session: Session,
    host: Host,
    plan: ContextPlan,
    model: object,
    tools: Mapping[str, Tool],
    mode: ContextMode,
    given: tuple[Any, Any, Any, Any],
) -> Settings:
    """Restore a loaded session's context and check the caller's against it.

    `given` are the caller's instructions, `max_steps`, `max_tokens` and
    `deadline`, each possibly `RECORDED`. Returns the settings to run with
    (`RECORDED` ones filled in from the log).

    Raises:
        ContextMismatchError: the context differs and `mode` is `check`.
        ConfigurationError: `mode` or a budget is invalid.
        In both cases nothing was appended and the session was closed.
    """
    recorded = recorded_context(session)
    try:
        if mode not in ("check", "override"):
            raise ConfigurationError(
                f"context must be 'check' or 'override', got {mode!r}"
            )
        instructions, max_steps, max_tokens, deadline = given
        settings = resolve(
            recorded,
            instructions=instructions,
            max_steps=max_steps,
            max_tokens=max_tokens,
            deadline=deadline,
        )
        current = plan.current(settings, model, tools)
        if recorded.context is not None and mode == "check":
            found = differences(recorded.context, current)
            if found:
                raise ContextMismatchError(session.id, found)
    except TurnkeepError as exc:
        # Nothing was appended: let the session go as it was loaded.
        why = "context mismatch" if isinstance(exc, ContextMismatchError) else None
        await refuse_resume(host, session.id, exc, why)
        raise
    return settings


def differences(recorded: RunContextData, given: RunContextData) -> list[str]:
    """Each way `given` differs from `recorded`, in words (none: `[]`).

    Instructions are compared by hash (their stored text may be redacted).
    """
    out: list[str] = []
    if recorded.instructions_sha256 != given.instructions_sha256:
        out.append(
            f"instructions: recorded {_short(recorded.instructions_sha256)}, "
            f"given {_short(given.instructions_sha256)}"
        )
    out.extend(_model_differences(recorded.model, given.model))
    was = {t.name: t for t in recorded.tools}
    now = {t.name: t for t in given.tools}
    for name in sorted(was.keys() | now.keys()):
        before, after = was.get(name), now.get(name)
        if before is None:
            out.append(f"tool {name!r}: not recorded, given")
        elif after is None:
            out.append(f"tool {name!r}: recorded, not given")
        else:
            if before.replay != after.replay:
                out.append(
                    f"tool {name!r}: replay recorded {before.replay}, "
                    f"given {after.replay}"
                )
            if before.schema_sha256 != after.schema_sha256:
                out.append(
                    f"tool {name!r}: schema recorded "
                    f"{_short(before.schema_sha256)}, given "
                    f"{_short(after.schema_sha256)}"
                )
    for field in ("max_steps", "max_tokens", "deadline"):
        before_value = getattr(recorded.budgets, field)
        after_value = getattr(given.budgets, field)
        if before_value != after_value:
            out.append(
                f"budget {field}: recorded {before_value!r}, given {after_value!r}"
            )
    return out


def _model_differences(recorded: ModelInfo, given: ModelInfo) -> list[str]:
    out: list[str] = []
    if recorded.name != given.name:
        out.append(f"model name: recorded {recorded.name!r}, given {given.name!r}")
    if recorded.provider != given.provider:
        out.append(
            f"model provider: recorded {recorded.provider!r}, given {given.provider!r}"
        )
    for key in sorted(recorded.settings.keys() | given.settings.keys()):
        before = recorded.settings.get(key)
        after = given.settings.get(key)
        if before != after:
            out.append(f"model setting {key}: recorded {before!r}, given {after!r}")
    return out


def _short(sha: str | None) -> str:
    return "none" if sha is None else f"sha256 {sha[:12]}"
