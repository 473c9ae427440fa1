"""The durability gate (R7, plan item 34) and write-ahead unsafe tools (R8).

Item 34: a 200 ms delay is injected into every acknowledged append (the
ACK comes late, as with a slow fsync), and each of 100 trials (sessions run
side by side, so the delays overlap and the test stays fast) records, on
one logical clock, when each flush returned, when each model call started
and when each tool started. The first model call and first tool call of turn
N+1 must come strictly after the flush that made turn N durable returned.
With an injected flush error, turn N+1 never starts.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from tests.loop.support import (
    GatedPlugin,
    SpyTool,
    backend_ready_async,
    gated_host,
    inner_factory,
    stored_events,
)
from tests.support.writes import write_state

from turnkeep import AgentLoop, Host, ModelOutput, ModelRequest, Session
from turnkeep.agent.recovery import pairing_problems
from turnkeep.agent.turns import NOT_DURABLE_OUTPUT
from turnkeep.errors import FlushError, TurnNotDurableError
from turnkeep.events import (
    ModelInfo,
    ToolCall,
    ToolResult,
    TurnCheckpoint,
    TurnEnd,
    TurnStart,
)
from turnkeep.persistence import EventRecord
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel

TRIALS = 100


@attrs.define(eq=False)
class Clock:
    """One logical clock for every observation (strict order, no ties)."""

    ticks: itertools.count[int] = attrs.field(factory=itertools.count)
    flushes: list[tuple[str, int, str, int, bool]] = attrs.field(factory=list)
    models: list[tuple[str, int, int]] = attrs.field(factory=list)
    tools: list[tuple[str, int, int]] = attrs.field(factory=list)

    def tick(self) -> int:
        return next(self.ticks)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Record when every `session.flush()` returns (and whether it failed)."""
    observed = Clock()
    original = Host.flush_session

    async def flush_session(self: Host, session: Session) -> None:
        count = len(session.events)
        last = session.events[-1].type if count else ""
        try:
            await original(self, session)
        except FlushError:
            observed.flushes.append((session.id, count, last, observed.tick(), False))
            raise
        observed.flushes.append((session.id, count, last, observed.tick(), True))

    monkeypatch.setattr(Host, "flush_session", flush_session)
    return observed


@attrs.define(eq=False)
class TimedModel:
    """The scripted model, noting when each call starts."""

    inner: ScriptedModel
    clock: Clock

    def describe(self) -> ModelInfo:
        """A test double: named by its class."""
        return ModelInfo(name="TimedModel", provider="test")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        self.clock.models.append((request.session_id, request.turn, self.clock.tick()))
        async for item in self.inner.stream(request):
            yield item


def _tools(clock: Clock) -> list[SpyTool]:
    def note(tool: str) -> Any:
        return lambda context: clock.tools.append(
            (context.session_id, context.turn, clock.tick())
        )

    return [
        SpyTool("look", replay="safe", on_call=note("look")),
        SpyTool("act", on_call=note("act")),
    ]


def _script(rng: random.Random) -> ScriptedModel:
    """Per turn: a random mix of safe and unsafe calls, then an answer."""

    def pick(request: ModelRequest) -> Reply:
        since_user = 0
        for message in reversed(request.messages):
            if message.role == "user":
                break
            since_user += message.role == "assistant"
        local = random.Random(f"{request.session_id}:{request.turn}:{since_user}")
        if since_user >= local.randint(1, 3):
            return Reply("done")
        names = local.sample(["look", "act"], k=local.randint(1, 2))
        return Reply("working", tuple(ScriptedCall(n) for n in names))

    del rng
    return ScriptedModel(pick)


async def _trial(
    host: Host, clock: Clock, rng: random.Random, index: int
) -> tuple[str, int]:
    turns = rng.randint(2, 4)
    loop = AgentLoop.create(
        "gate",
        host=host,
        model=TimedModel(_script(rng), clock),
        tools=_tools(clock),
        session_id=f"trial-{index}",
    )
    for number in range(1, turns + 1):
        result = await loop.run_turn(f"turn {number}")
        assert result.status == "completed", result
    return loop.session_id, turns


def _check_gating(clock: Clock, sessions: Sequence[tuple[str, int]]) -> int:
    """Every turn N+1's first model and tool call came after turn N's flush."""
    checked = 0
    for session_id, turns in sessions:
        ends = [
            tick
            for sid, _count, last, tick, ok in clock.flushes
            if sid == session_id and ok and last == "turn/end"
        ]
        assert len(ends) == turns
        for turn in range(2, turns + 1):
            durable = ends[turn - 2]  # the flush that made turn-1 durable
            models = [t for s, n, t in clock.models if s == session_id and n == turn]
            tools = [t for s, n, t in clock.tools if s == session_id and n == turn]
            assert models, f"{session_id} turn {turn} called no model"
            assert min(models) > durable, (session_id, turn, models, durable)
            if tools:
                assert min(tools) > durable, (session_id, turn, tools, durable)
            checked += 1
    return checked


@pytest.mark.parametrize("backend", ["memory", "jsonl", "sqlite"])
@pytest.mark.asyncio
async def test_item_34_next_turn_starts_only_after_the_slow_flush_returned(
    backend: str, clock: Clock, rng: random.Random, tmp_path: Path
) -> None:
    await backend_ready_async(backend, tmp_path)
    plugin = GatedPlugin(inner_factory(backend, tmp_path), delay=0.2)
    async with gated_host(plugin) as host:
        sessions = await asyncio.gather(
            *(
                _trial(host, clock, random.Random(rng.random()), i)
                for i in range(TRIALS)
            )
        )
        checked = _check_gating(clock, sessions)
        assert checked >= TRIALS
        for session_id, _turns in sessions:
            stored = await stored_events(host, session_id)
            assert stored == list(host.sessions.get(session_id).events)
    gate = plugin.gate
    assert gate is not None
    assert all(ok for *_rest, ok in gate.appends)


def _fail_when(failing: set[str], kind: str) -> Any:
    """Refuse appends of sessions in `failing` whose batch ends with `kind`."""

    def rule(session_id: str, events: Sequence[EventRecord]) -> bool:
        if session_id not in failing or not events:
            return False
        return kind == "*" or events[-1].type == kind

    return rule


@pytest.mark.parametrize("backend", ["memory", "jsonl", "sqlite"])
@pytest.mark.asyncio
async def test_item_34_a_failed_flush_keeps_the_next_turn_from_starting(
    backend: str, clock: Clock, rng: random.Random, tmp_path: Path
) -> None:
    await backend_ready_async(backend, tmp_path)
    failing: set[str] = set()
    plugin = GatedPlugin(
        inner_factory(backend, tmp_path), fail=_fail_when(failing, "*")
    )
    async with gated_host(plugin) as host:

        async def trial(index: int, local: random.Random) -> None:
            model = TimedModel(_script(local), clock)
            tools = _tools(clock)
            loop = AgentLoop.create(
                "gate", host=host, model=model, tools=tools, session_id=f"t{index}"
            )
            sid = loop.session_id
            n = local.randint(1, 3)
            for number in range(1, n):
                await loop.run_turn(f"turn {number}")
            # Turn N's durability points fail from here on.
            failing.add(sid)
            try:
                result = await loop.run_turn(f"turn {n}")
            except FlushError:
                pass  # its final flush failed: the turn is not durable
            else:
                raise AssertionError(f"turn {n} reported {result} without a flush")
            session = host.sessions.get(sid)
            kept = list(session.events)
            assert isinstance(kept[-1], TurnEnd)
            assert kept[-1].data.turn == n
            pending = len(write_state(host, session).pending)
            assert pending > 0
            models_before = len(model.inner.requests)
            for _ in range(2):
                with pytest.raises(TurnNotDurableError):
                    await loop.run_turn(f"turn {n + 1}")
            # Turn N+1 never started: no model call, no tool, no event.
            assert len(model.inner.requests) == models_before
            assert all(turn <= n for s, turn, _t in clock.models if s == sid)
            assert all(turn <= n for s, turn, _t in clock.tools if s == sid)
            assert list(session.events) == kept
            assert (
                len(write_state(host, session).pending) == pending
            )  # still there, in order
            # Unsafe tools of turn N did not run once their intent failed.
            act = tools[1]
            assert all(c.turn < n for c in act.calls)
            # The storage heals: turn N+1 runs, and everything is stored.
            failing.discard(sid)
            result = await loop.run_turn(f"turn {n + 1}")
            assert result.status == "completed"
            assert result.turn == n + 1
            stored = await stored_events(host, sid)
            assert stored == list(session.events)
            assert pairing_problems(stored) == []

        await asyncio.gather(
            *(trial(i, random.Random(rng.random())) for i in range(TRIALS))
        )


@pytest.mark.asyncio
async def test_the_next_turn_retries_a_failed_flush_once(tmp_path: Path) -> None:
    outcomes = iter([False, True])  # the end flush fails, its retry lands
    plugin = GatedPlugin(
        inner_factory("memory", tmp_path),
        fail=lambda _sid, events: (
            events[-1].type == "turn/end" and not next(outcomes, True)
        ),
    )
    async with gated_host(plugin) as host:
        loop = AgentLoop.create("a", host=host, model=ScriptedModel([Reply("one")] * 2))
        with pytest.raises(FlushError):
            await loop.run_turn("first")
        result = await loop.run_turn("second")
        assert result.turn == 2
        gate = plugin.gate
        assert gate is not None
        assert [ok for *_rest, ok in gate.appends] == [False, True, True]


@pytest.mark.asyncio
async def test_an_unsafe_tool_does_not_run_when_its_intent_cannot_be_saved(
    tmp_path: Path,
) -> None:
    failing: set[str] = set()
    plugin = GatedPlugin(
        inner_factory("memory", tmp_path),
        fail=_fail_when(failing, "turn/checkpoint"),
    )
    act = SpyTool("act")
    look = SpyTool("look", replay="safe")
    model = ScriptedModel(
        [
            Reply("first", (ScriptedCall("look"), ScriptedCall("act"))),
            Reply("never asked"),
            Reply("recovered"),
        ]
    )
    async with gated_host(plugin) as host:
        loop = AgentLoop.create("a", host=host, model=model, tools=[act, look])
        failing.add(loop.session_id)
        result = await loop.run_turn("go")
        assert result.status == "failed"
        assert result.error is not None
        assert "could not be made durable before it ran" in result.error
        assert act.calls == []  # never executed
        assert len(look.calls) == 1  # safe tools need no durability point
        events = list(host.sessions.get(loop.session_id).events)
        call, checkpoint, answer = events[-4:-1]
        assert isinstance(call, ToolCall)
        assert isinstance(checkpoint, TurnCheckpoint)
        assert isinstance(answer, ToolResult)
        assert answer.data.call_id == call.data.call_id
        assert (answer.data.status, answer.data.output) == ("error", NOT_DURABLE_OUTPUT)
        # Its turn/end landed (only checkpoints fail), and so did everything.
        stored = await stored_events(host, loop.session_id)
        assert stored == events
        assert pairing_problems(stored) == []
        failing.clear()
        loop.model = ScriptedModel(lambda _request: Reply("fine"))
        assert (await loop.run_turn("again")).status == "completed"


@pytest.mark.asyncio
async def test_a_storage_that_never_heals_never_lets_a_turn_start(
    tmp_path: Path,
) -> None:
    plugin = GatedPlugin(inner_factory("memory", tmp_path), fail=lambda _s, _e: True)
    model = ScriptedModel([Reply("a", (ScriptedCall("act"),)), Reply("b")])
    act = SpyTool("act")
    async with gated_host(plugin) as host:
        loop = AgentLoop.create("a", host=host, model=model, tools=[act])
        with pytest.raises(FlushError):
            await loop.run_turn("go")
        assert act.calls == []
        starts = [e for e in host.sessions.get(loop.session_id).events]
        gate = plugin.gate
        assert gate is not None
        for _ in range(3):
            attempts = len(gate.appends)
            with pytest.raises(TurnNotDurableError) as raised:
                await loop.run_turn("go on")
            assert isinstance(raised.value.__cause__, FlushError)
            # The refused turn retried the unsaved flush once, not more.
            assert len(gate.appends) == attempts + 1
        assert list(host.sessions.get(loop.session_id).events) == starts
        assert len([e for e in starts if isinstance(e, TurnStart)]) == 1
        with pytest.raises(TurnNotDurableError):
            await loop.recover()
        stream = loop.stream_turn("streamed")
        with pytest.raises(TurnNotDurableError):
            await anext(stream)  # a refused turn yields no event
        # Closing the host cannot drain it either: a report says so, and the
        # shutdown itself does not fail.
        unsaved = host.unsaved(host.sessions.get(loop.session_id))
        reports = await host.aclose()
        assert [(r.outcome, r.unsaved) for r in reports] == [("abandoned", unsaved)]
