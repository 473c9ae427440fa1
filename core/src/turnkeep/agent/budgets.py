"""Per-turn budgets: steps, model output tokens and time, paid for before use.

`TurnBudget` is what `turnkeep.agent.steps` asks before each model call and
each tool call. A budget is reserved before the effect it pays for, never
found exceeded after it:

- steps: a turn makes at most `max_steps` model calls; the call that would
  be one more is not made;
- tokens: `max_tokens` bounds the model *output* tokens of a turn. Before
  each call the loop reserves the model's own output cap (its `max_tokens`
  setting, which the provider enforces), and makes the call only if what
  the turn used plus that reserve fits. After the call it charges what the
  provider reported, or the whole reserve when it reported nothing (tokens
  are never estimated from characters). Input tokens are reported but not
  budgeted: their count is known only after the call;
- time: `deadline` is the seconds a turn may run; no model or tool call
  starts after it has passed.

A budget that would be exceeded raises `BudgetExhausted`, and the turn ends
with status `budget_exhausted` before the call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import attrs

from turnkeep.agent.models import Usage
from turnkeep.errors import ConfigurationError
from turnkeep.events import BudgetsInfo, ModelInfo

__all__ = [
    "DEFAULT_MAX_STEPS",
    "BudgetExhausted",
    "TurnBudget",
    "check_budgets",
    "output_reserve",
]

DEFAULT_MAX_STEPS: Final = 16
"""Model calls allowed in one turn before it ends as `budget_exhausted`."""


class BudgetExhausted(Exception):
    """The next call would exceed a budget; the message says which."""


def check_budgets(
    max_steps: object, max_tokens: object, deadline: object
) -> BudgetsInfo:
    """Validate budgets and return them as the run context records them.

    Raises:
        ConfigurationError: a budget is not a positive number (`max_steps`
            and `max_tokens` integers, `deadline` finite seconds).
    """
    if not _positive_int(max_steps):
        raise ConfigurationError(f"max_steps must be positive, got {max_steps!r}")
    if max_tokens is not None and not _positive_int(max_tokens):
        raise ConfigurationError(f"max_tokens must be positive, got {max_tokens!r}")
    if deadline is not None and not (
        isinstance(deadline, int | float)
        and not isinstance(deadline, bool)
        and 0 < deadline < float("inf")
    ):
        raise ConfigurationError(
            f"deadline must be a positive number of seconds, got {deadline!r}"
        )
    assert isinstance(max_steps, int)  # noqa: S101 - checked above
    return BudgetsInfo(
        max_steps=max_steps,
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
        deadline=float(deadline) if isinstance(deadline, int | float) else None,
    )


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def output_reserve(model: ModelInfo, budgets: BudgetsInfo) -> int | None:
    """The output tokens to reserve per model call (`None`: no token budget).

    Raises:
        ConfigurationError: a token budget is set but the model declares no
            positive integer `max_tokens` setting, or one above the budget,
            so no call could be paid for in advance.
    """
    if budgets.max_tokens is None:
        return None
    cap: object = model.settings.get("max_tokens")
    if not isinstance(cap, int) or not _positive_int(cap):
        raise ConfigurationError(
            f"a token budget (max_tokens={budgets.max_tokens}) needs a model that "
            f"declares its output cap: {model.name!r} has no positive integer "
            "`max_tokens` setting"
        )
    if cap > budgets.max_tokens:
        raise ConfigurationError(
            f"the model's output cap ({cap} tokens) exceeds the turn's token "
            f"budget ({budgets.max_tokens}): not one call would fit"
        )
    return cap


@attrs.define(eq=False)
class TurnBudget:
    """What one turn has spent of its budgets.

    Attributes:
        limits: the budgets.
        reserve: output tokens reserved per model call (`None`: no token
            budget).
        clock: monotonic seconds.
    """

    limits: BudgetsInfo
    reserve: int | None = None
    clock: Callable[[], float] = time.monotonic
    steps: int = 0
    tokens: int = 0
    _started: float = 0.0

    def start(self) -> None:
        """Begin a turn's accounting (its model calls start from here)."""
        self.steps = 0
        self.tokens = 0
        self._started = self.clock()

    def before_model_call(self) -> None:
        """Reserve the next model call, or raise `BudgetExhausted`."""
        limits = self.limits
        if self.steps >= limits.max_steps:
            raise BudgetExhausted(
                f"the step budget is spent: {limits.max_steps} model calls made "
                "and the model still called tools; the next call was not made"
            )
        reserve, tokens = self.reserve, limits.max_tokens
        if (
            reserve is not None
            and tokens is not None
            and self.tokens + reserve > tokens
        ):
            raise BudgetExhausted(
                f"the token budget would be exceeded: {self.tokens} of {tokens} "
                f"output tokens used and the next call may use {reserve}; it "
                "was not made"
            )
        self._check_time("model call")
        self.steps += 1

    def before_tool(self) -> None:
        """Raise `BudgetExhausted` if the turn's time is up."""
        self._check_time("tool call")

    def charge(self, usage: Usage | None) -> None:
        """Charge a finished model call: its reported output, else the reserve."""
        if self.reserve is None:
            return
        reported = None if usage is None else usage.output_tokens
        self.tokens += self.reserve if reported is None else reported

    def _check_time(self, what: str) -> None:
        deadline = self.limits.deadline
        if deadline is None:
            return
        spent = self.clock() - self._started
        if spent >= deadline:
            raise BudgetExhausted(
                f"the turn's time budget ({deadline:g} s) is spent "
                f"({spent:.1f} s); the next {what} was not made"
            )
