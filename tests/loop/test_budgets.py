"""Per-turn budgets are paid before the call: a turn ends `budget_exhausted` first.

Steps (model calls), model output tokens (the model's own cap reserved before
each call, what the provider reported charged after it, the whole reserve
when it reported nothing) and time (no model or tool call starts after the
deadline). Each ends the turn before the call that would exceed it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
from tests.loop.support import SpyTool, stored_events

from turnkeep import AgentLoop, Host, ToolContext
from turnkeep.agent.budgets import BudgetExhausted, TurnBudget, check_budgets
from turnkeep.agent.models import Usage
from turnkeep.agent.recovery import pairing_problems
from turnkeep.errors import ConfigurationError
from turnkeep.events import BudgetsInfo, TurnEnd
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel


def looping(usage: Usage | None, cap: int = 100) -> ScriptedModel:
    """A model that always calls `look`, reporting `usage`, output cap `cap`."""
    return ScriptedModel(
        lambda _request: Reply("again", (ScriptedCall("look"),), usage=usage),
        settings={"max_tokens": cap},
    )


@pytest.mark.asyncio
async def test_the_token_budget_stops_before_a_call_that_might_exceed_it(
    host: Host,
) -> None:
    model = looping(Usage(input_tokens=900, output_tokens=30), cap=100)
    look = SpyTool("look", replay="safe")
    loop = AgentLoop.create(
        "a", host=host, model=model, tools=[look], max_tokens=200, max_steps=50
    )
    result = await loop.run_turn("go")
    # 0+100, 30+100, 60+100, 90+100 fit; 120+100 > 200: four calls, not five.
    assert result.status == "budget_exhausted"
    assert len(model.requests) == 4
    assert result.error is not None
    assert "120 of 200 output tokens used" in result.error
    assert "may use 100" in result.error
    events = await stored_events(host, loop.session_id)
    assert pairing_problems(events) == []
    end = events[-1]
    assert isinstance(end, TurnEnd)
    assert end.data.status == "budget_exhausted"
    stored = await host.require_persistence().load(loop.session_id)
    assert stored.meta.summary.status == "idle"  # the session is fine
    # The next turn has its own budget.
    model.script = lambda _request: Reply("done", usage=Usage(output_tokens=5))
    assert (await loop.run_turn("and now?")).status == "completed"


@pytest.mark.asyncio
async def test_a_call_without_reported_usage_is_charged_its_whole_reserve(
    host: Host,
) -> None:
    model = looping(None, cap=100)
    loop = AgentLoop.create(
        "a",
        host=host,
        model=model,
        tools=[SpyTool("look", replay="safe")],
        max_tokens=250,
    )
    result = await loop.run_turn("go")
    assert result.status == "budget_exhausted"
    assert len(model.requests) == 2  # 100 + 100 charged; a third would be 300


def test_a_token_budget_needs_a_model_that_declares_its_cap(host: Host) -> None:
    with pytest.raises(ConfigurationError, match="no positive integer `max_tokens`"):
        AgentLoop.create("a", host=host, model=ScriptedModel(["x"]), max_tokens=10)
    with pytest.raises(ConfigurationError, match="exceeds the turn's token budget"):
        AgentLoop.create(
            "a",
            host=host,
            model=ScriptedModel(["x"], settings={"max_tokens": 11}),
            max_tokens=10,
        )
    assert host.sessions.list() == []  # nothing was created


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_steps": 0}, "max_steps must be positive"),
        ({"max_steps": True}, "max_steps must be positive"),
        ({"max_tokens": -1}, "max_tokens must be positive"),
        ({"max_tokens": 1.5}, "max_tokens must be positive"),
        ({"deadline": 0}, "deadline must be a positive number"),
        ({"deadline": float("inf")}, "deadline must be a positive number"),
        ({"deadline": "soon"}, "deadline must be a positive number"),
    ],
)
def test_invalid_budgets_are_refused(
    host: Host, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        AgentLoop.create("a", host=host, model=ScriptedModel(["x"]), **values)


class _Slow:
    """A safe tool that takes `seconds`, blocking (no await to cancel it at).

    So the deadline, enforced while a tool waits (`tests/loop/test_watchdog.py`),
    cannot cut it short, and is met at the next call boundary instead.
    """

    name = "slow"
    description = "waits"
    parameters: Mapping[str, Any] = {"type": "object", "properties": {}}
    replay = "safe"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.runs = 0

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        self.runs += 1
        time.sleep(self.seconds)  # noqa: ASYNC251 - blocking on purpose (see above)
        return "waited"


@pytest.mark.asyncio
async def test_no_call_starts_after_the_deadline(host: Host) -> None:
    # The first call must start within the deadline: half a second leaves
    # room for CI's busy machine (it takes a millisecond or so when idle).
    slow = _Slow(0.6)
    model = ScriptedModel(
        [Reply("first", (ScriptedCall("slow"), ScriptedCall("slow"))), "never"]
    )
    loop = AgentLoop.create("a", host=host, model=model, tools=[slow], deadline=0.5)
    result = await loop.run_turn("go")
    assert result.status == "budget_exhausted"
    assert result.error is not None
    assert "time budget (0.5 s)" in result.error
    assert "next tool call was not made" in result.error
    assert slow.runs == 1  # the second call of the same reply did not start
    assert len(model.requests) == 1
    events = await stored_events(host, loop.session_id)
    # The call that did not start has no `tool/call` at all; pairing holds.
    assert pairing_problems(events) == []


def test_turn_budget_accounting() -> None:
    now = [0.0]
    budget = TurnBudget(
        BudgetsInfo(max_steps=2, max_tokens=10, deadline=5.0),
        reserve=4,
        clock=lambda: now[0],
    )
    budget.start()
    budget.before_model_call()
    budget.charge(Usage(output_tokens=1))
    budget.before_model_call()
    budget.charge(Usage(input_tokens=7))  # output not reported: the reserve
    assert (budget.steps, budget.tokens) == (2, 5)
    with pytest.raises(BudgetExhausted, match="step budget is spent"):
        budget.before_model_call()
    budget.start()
    assert (budget.steps, budget.tokens) == (0, 0)
    now[0] = 5.0
    with pytest.raises(BudgetExhausted, match="time budget"):
        budget.before_tool()
    assert check_budgets(3, None, 2) == BudgetsInfo(max_steps=3, deadline=2.0)
