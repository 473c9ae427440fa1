"""The payloads of `run/context` and `run/instructions`: what a turn ran with.

Kept apart from `turnkeep.events` (which names the events and re-exports
these) so the vocabulary module stays one screenful per idea.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = [
    "BudgetsInfo",
    "ModelInfo",
    "RunContextData",
    "RunInstructionsData",
    "ToolInfo",
]


class ModelInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """How a model describes itself (`Model.describe`), as `run/context` records it.

    Attributes:
        name: the model's name (as its provider knows it).
        provider: who serves it (`openai-compatible`, `scripted`, ...).
        settings: what shapes its replies (`temperature`, `max_tokens`, ...):
            JSON values, no credentials.
    """

    name: str
    provider: str = ""
    settings: dict[str, Any] = msgspec.field(default_factory=dict[str, Any])


class ToolInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One tool of a `run/context`: its name, replay policy and schema's hash.

    Attributes:
        name: the tool's name.
        replay: its declared replay policy.
        schema_sha256: SHA-256 (hex) of its description and parameters
            (canonical JSON), so a changed schema is a changed context.
    """

    name: str
    replay: Literal["safe", "unsafe"]  # `turnkeep.events.ReplayPolicy`
    schema_sha256: str


class BudgetsInfo(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The budgets of each turn, as `run/context` records them.

    Attributes:
        max_steps: model calls allowed per turn.
        max_tokens: model output tokens allowed per turn (`None`: no limit).
        deadline: seconds a turn may run (`None`: no limit).
    """

    max_steps: int
    max_tokens: int | None = None
    deadline: float | None = None


class RunContextData(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Payload of `run/context`: what the turns from here on run with.

    Attributes:
        instructions_sha256: SHA-256 (hex) of the standing instructions as
            given (`None`: no instructions).
        instructions: their text when short; `None` when long, the text then
            being in the session's `run/instructions` event of that hash.
        model: the model's description.
        tools: the tools, by name.
        budgets: the per-turn budgets.
    """

    instructions_sha256: str | None = None
    instructions: str | None = None
    model: ModelInfo
    tools: list[ToolInfo] = msgspec.field(default_factory=list[ToolInfo])
    budgets: BudgetsInfo


class RunInstructionsData(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Payload of `run/instructions`: long instructions, stored once per session.

    Attributes:
        sha256: SHA-256 (hex) of `text` as given.
        text: the instructions.
    """

    sha256: str
    text: str
