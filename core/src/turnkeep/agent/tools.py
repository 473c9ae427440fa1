"""Tools: the `Tool` protocol, the context a call runs in, and `function_tool`.

Implemented by applications (the coding agent's file and command tools are
examples). Consumed by `AgentLoop`, which reads each tool's declared replay
policy to decide two things: whether a call must be made durable before it
runs, and whether recovery may run it again after a crash.

- `safe`: running the tool twice has no effect beyond running it once (reads,
  searches). A `safe` call whose result was lost in a crash is run again.
- `unsafe` (the default, also for a tool that declares nothing): the tool
  changes something outside the session (files, commands, payments). Its
  `tool/call` is flushed before it runs, and after a crash a call without a
  result is reported as interrupted, never run again.

Every call receives a `ToolContext` whose `call_id` is stable across crashes
and recovery: an unsafe tool can pass it to the outside system as an
idempotency key.

An unsafe tool also says who settles a call whose outcome a crash left
unknown (`on_unknown`, `unknown_policy`): the model, told the outcome is
unknown (`report`), or a person or program before any further turn
(`block`). A tool that says nothing gets the loop's default (`[agent]
on_unknown`, itself `report`).
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, Protocol, TypeAlias, cast, runtime_checkable

import attrs
import msgspec

from turnkeep.effectdata import UnknownPolicy
from turnkeep.errors import ConfigurationError, ToolError
from turnkeep.events import ReplayPolicy, ToolCallData

__all__ = [
    "UNKNOWN_POLICIES",
    "FunctionTool",
    "OnUnknown",
    "Tool",
    "ToolContext",
    "ToolSpec",
    "check_on_unknown",
    "fresh_arguments",
    "function_tool",
    "int_argument",
    "may_rerun",
    "replay_policy",
    "str_argument",
    "tool_spec",
    "unknown_policy",
    "validate_tools",
]

_TOOL_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""Tool names the common model APIs accept."""

UNKNOWN_POLICIES: Final[tuple[UnknownPolicy, ...]] = ("report", "block")
"""The values `on_unknown` may take (or a function returning one)."""

OnUnknown: TypeAlias = UnknownPolicy | Callable[[Mapping[str, Any]], UnknownPolicy]
"""What a tool may declare as `on_unknown`: a policy, or one per call's arguments."""


def check_on_unknown(value: object, where: str) -> None:
    """Refuse an `on_unknown` that is neither a policy, a function nor `None`.

    Raises:
        ConfigurationError: naming `where` and the values allowed.
    """
    if value is None or value in UNKNOWN_POLICIES or callable(value):
        return
    raise ConfigurationError(
        f"{where}: on_unknown must be 'report' or 'block' (or a function of the "
        f"call's arguments returning one), got {value!r}"
    )


@attrs.frozen
class ToolContext:
    """What a tool knows about the call it is running.

    Attributes:
        call_id: the call's stable id, recorded in its `tool/call` event; the
            same after a crash and in recovery. Use it as an idempotency key.
        session_id: the session the call belongs to.
        agent_id: the agent running the session.
        turn: the turn number.
        rerun: the call is a `safe` call run again by recovery because its
            first result was lost.
    """

    call_id: str
    session_id: str
    agent_id: str
    turn: int
    rerun: bool = False


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """How a tool is described to a model.

    Attributes:
        name: the tool's name.
        description: what it does, for the model.
        parameters: a JSON Schema object of its arguments.
    """

    name: str
    description: str
    parameters: dict[str, Any]


@runtime_checkable
class Tool(Protocol):
    """A tool the model may call.

    Besides the members below, a tool may declare `replay: "safe"` as an
    attribute; without it (or with any other value) the tool is `unsafe`.
    An unsafe tool may declare `on_unknown` (`unknown_policy`).

    `run` returns the text handed back to the model. Raise `ToolError` for a
    failure the model should see and may react to (bad arguments, a missing
    file); the loop records it as a `tool/result` with status `error`. Other
    exceptions are recorded the same way, named by their type.
    """

    @property
    def name(self) -> str:
        """The tool's name (letters, digits, `_` and `-`, up to 64)."""
        ...

    @property
    def description(self) -> str:
        """What the tool does, for the model."""
        ...

    @property
    def parameters(self) -> Mapping[str, Any]:
        """A JSON Schema object describing the arguments."""
        ...

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Run the tool once and return its output text."""
        ...


def replay_policy(tool: object) -> ReplayPolicy:
    """Return the replay policy a tool declares (`unsafe` unless it says `safe`)."""
    return "safe" if getattr(tool, "replay", "unsafe") == "safe" else "unsafe"


def may_rerun(call: ToolCallData, tools: Mapping[str, object]) -> bool:
    """Whether recovery may run a call again that a crash left without result.

    Only when the call was made `safe` and its tool is still there and still
    `safe`: a call made while its tool was `unsafe` stays unsafe.
    """
    tool = tools.get(call.name)
    return call.replay == "safe" and tool is not None and replay_policy(tool) == "safe"


def unknown_policy(
    tool: object, arguments: Mapping[str, Any], default: UnknownPolicy = "report"
) -> UnknownPolicy:
    """What follows a call of `tool` whose outcome stays unknown after a crash.

    A tool may declare `on_unknown`: `"report"` (the model is told the call
    was interrupted, outcome unknown), `"block"` (the session's next turn is
    refused until a person or program resolves the call), or a function of
    the call's arguments returning one of them (a command tool blocks only
    for commands that write). A tool that declares nothing (or `None`, or a
    function answering neither) gets `default`: the loop's `[agent]
    on_unknown`. A `safe` tool's calls are run again, never unknown: always
    `report`.
    """
    if replay_policy(tool) == "safe":
        return "report"
    declared: object = getattr(tool, "on_unknown", None)
    if callable(declared):
        declared = declared(arguments)
    if declared == "block":
        return "block"
    return "report" if declared == "report" else default


def fresh_arguments(value: object) -> Any:
    """A deep copy of a call's arguments, for the tool to own.

    What the log accepted as arguments is JSON (see `turnkeep.lossless`):
    plain dicts and lists are rebuilt and immutable scalars shared, several
    times faster than `copy.deepcopy`; anything else (a dict subclass, an
    enum) goes to `copy.deepcopy`.
    """
    kind = type(value)
    if kind is dict:
        items = cast("dict[object, object]", value).items()
        return {key: fresh_arguments(item) for key, item in items}
    if kind is list:
        return [fresh_arguments(item) for item in cast("list[object]", value)]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return copy.deepcopy(value)


def tool_spec(tool: Tool) -> ToolSpec:
    """Describe a tool for a model."""
    return ToolSpec(
        name=tool.name,
        description=tool.description,
        parameters=dict(tool.parameters),
    )


def validate_tools(tools: Iterable[Tool]) -> dict[str, Tool]:
    """Check a set of tools and index it by name.

    Raises:
        ConfigurationError: a name is invalid or used twice, `run` is not
            a coroutine function, or `on_unknown` is not a policy.
    """
    indexed: dict[str, Tool] = {}
    for tool in tools:
        name: object = getattr(tool, "name", None)
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise ConfigurationError(
                f"tool name {name!r} is not valid: use 1-64 letters, digits, '_' or '-'"
            )
        if name in indexed:
            raise ConfigurationError(f"two tools are named {name!r}")
        if not inspect.iscoroutinefunction(getattr(tool, "run", None)):
            raise ConfigurationError(
                f"tool {name!r}: `run` must be an `async def` method"
            )
        check_on_unknown(getattr(tool, "on_unknown", None), f"tool {name!r}")
        indexed[name] = tool
    return indexed


ToolFunction = Callable[[Mapping[str, Any], ToolContext], Awaitable[str]]


def _valid_policy(tool: FunctionTool, _attribute: object, value: object) -> None:
    check_on_unknown(value, f"tool {tool.name!r}")


@attrs.frozen
class FunctionTool:
    """A `Tool` made from an async function (see `function_tool`).

    Attributes:
        name: the tool's name.
        description: what it does.
        parameters: the JSON Schema of its arguments.
        replay: `safe` or `unsafe` (the default).
        on_unknown: `report`, `block`, a function of a call's arguments
            returning one, or `None` (the loop's default, `[agent]
            on_unknown`); see `unknown_policy`.
        function: `async (arguments, context) -> str`.
    """

    name: str
    description: str
    function: ToolFunction = attrs.field(repr=False)
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )
    replay: ReplayPolicy = "unsafe"
    on_unknown: OnUnknown | None = attrs.field(default=None, validator=_valid_policy)

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Call the function."""
        return await self.function(arguments, context)


def function_tool(
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: Mapping[str, Any] | None = None,
    replay: ReplayPolicy = "unsafe",
    on_unknown: OnUnknown | None = None,
) -> Callable[[ToolFunction], FunctionTool]:
    """Decorate `async def f(arguments, context) -> str` into a `FunctionTool`.

    The name defaults to the function's name and the description to its
    docstring's first paragraph. `on_unknown` says what follows a call a
    crash left with an unknown outcome (`report` it to the model, or
    `block` the session until it is resolved; `None`: the loop's default).

    Raises:
        ConfigurationError: `on_unknown` is not a policy.
    """
    check_on_unknown(on_unknown, f"tool {name or 'function_tool'!r}")

    def wrap(function: ToolFunction) -> FunctionTool:
        doc = inspect.getdoc(function) or ""
        return FunctionTool(
            name=name or getattr(function, "__name__", "tool"),
            description=description or doc.split("\n\n")[0].strip(),
            function=function,
            parameters=dict(parameters)
            if parameters is not None
            else {"type": "object", "properties": {}},
            replay=replay,
            on_unknown=on_unknown,
        )

    return wrap


_MISSING: Final = object()


def str_argument(
    arguments: Mapping[str, Any], key: str, default: str | object = _MISSING
) -> str:
    """Return a text argument, or raise `ToolError` the model can act on."""
    value = arguments.get(key, default)
    if value is _MISSING:
        raise ToolError(f"missing argument {key!r}")
    if not isinstance(value, str):
        raise ToolError(f"argument {key!r} must be text, got {type(value).__name__}")
    return value


def int_argument(
    arguments: Mapping[str, Any], key: str, default: int | object = _MISSING
) -> int:
    """Return an integer argument, or raise `ToolError` the model can act on."""
    value = arguments.get(key, default)
    if value is _MISSING:
        raise ToolError(f"missing argument {key!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError(
            f"argument {key!r} must be an integer, got {type(value).__name__}"
        )
    return value
