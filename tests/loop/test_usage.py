"""Usage per turn in `turn/end`: reported tokens, model and tool time, events, bytes.

Tokens are only what the model reported (`None` when it reported none);
events and bytes are those the turn appended before its `turn/end`, bytes as
stored; `total_usage` sums a session's turns (what `turnkeep show` prints).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from tests.loop.support import backend_host_config, backend_ready_async

from turnkeep import AgentLoop, Host, ToolContext
from turnkeep.agent.models import ModelOutput, ModelRequest, Usage
from turnkeep.agent.usage import total_usage
from turnkeep.events import TurnEnd, TurnStart
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel


class _Wait:
    name = "wait"
    description = "waits a little"
    parameters: Mapping[str, Any] = {"type": "object", "properties": {}}
    replay = "safe"

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        await asyncio.sleep(0.03)
        return "waited"


_MODEL_SECONDS = 0.05
"""How long each call of `_SlowModel` takes before it streams anything."""


class _SlowModel(ScriptedModel):
    """A scripted model that thinks for `_MODEL_SECONDS` on each call."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        await asyncio.sleep(_MODEL_SECONDS)
        async for item in super().stream(request):
            yield item


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
async def test_turn_end_holds_the_turns_usage(backend: str, tmp_path: Path) -> None:
    await backend_ready_async(backend, tmp_path / "probe")
    model = _SlowModel(
        [
            Reply("a", (ScriptedCall("wait"),), usage=Usage(10, 3)),
            Reply("done", usage=Usage(input_tokens=15, output_tokens=2)),
            "second turn, no usage reported",
        ]
    )
    async with Host(backend_host_config(backend, tmp_path)) as host:
        loop = AgentLoop.create("a", host=host, model=model, tools=[_Wait()])
        await loop.run_turn("go")
        await loop.run_turn("again")
        await loop.close()
        loaded = await host.require_persistence().load(loop.session_id)
        events = host.codec.decode_log(loaded.events, session_id=loop.session_id)
    ends = [e for e in events if isinstance(e, TurnEnd)]
    starts = [e for e in events if isinstance(e, TurnStart)]
    first = ends[0].data.usage
    assert first is not None
    assert (first.input_tokens, first.output_tokens) == (25, 5)
    assert first.tool_ms >= 30
    # Both model calls of the first turn, summed (sleeps last at least as
    # long as they were asked to, so these are lower bounds).
    assert first.model_ms >= 2 * _MODEL_SECONDS * 1000
    # Everything from turn/start to just before turn/end, as stored.
    assert first.events == ends[0].seq - starts[0].seq
    stored = loaded.events[starts[0].seq : ends[0].seq]
    assert first.bytes == sum(len(raw) for raw in stored)
    second = ends[1].data.usage
    assert second is not None
    assert (second.input_tokens, second.output_tokens) == (None, None)
    assert second.tool_ms == 0
    assert second.model_ms >= _MODEL_SECONDS * 1000
    assert second.events == ends[1].seq - starts[1].seq
    totals = total_usage(events)
    assert totals.turns == 2
    assert (totals.input_tokens, totals.output_tokens) == (25, 5)
    assert totals.events == first.events + second.events
    assert totals.model_ms == first.model_ms + second.model_ms
    assert totals.tool_ms == first.tool_ms + second.tool_ms
    assert totals.bytes == first.bytes + second.bytes


def test_totals_of_a_log_without_usage() -> None:
    totals = total_usage([])
    assert (totals.turns, totals.input_tokens, totals.events) == (0, None, 0)
