"""The peers `make bench` measures get each turn as their own items.

The stores are the real packages (the `bench` group, installed by `make
install`): what they are handed must read back through their own APIs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
from benchmarks.workload import Workload

from benchmarks import peers


def plain_turns(count: int) -> list[list[dict[str, Any]]]:
    return [[msgspec.to_builtins(e) for e in t] for t in Workload().session(count)]


def test_every_peer_is_installed_for_the_benchmarks() -> None:
    assert peers.missing() == []


def test_a_turn_becomes_the_responses_items_the_sdk_keeps() -> None:
    (turn,) = plain_turns(1)
    items = peers.sdk_items(turn)
    assert [i.get("type", i.get("role")) for i in items] == [
        "user",
        "message",
        "function_call",
        "function_call_output",
    ]
    by_type = {e["type"]: e["data"] for e in turn}
    assert items[0]["content"] == by_type["user/message"]["text"]
    assert items[1]["content"][0]["text"] == by_type["assistant/message"]["text"]
    call = by_type["tool/call"]
    assert msgspec.json.decode(items[2]["arguments"]) == call["arguments"]
    assert items[2]["call_id"] == items[3]["call_id"] == call["call_id"]
    assert items[3]["output"] == by_type["tool/result"]["output"]


def test_a_turn_becomes_the_messages_a_messages_state_holds() -> None:
    (turn,) = plain_turns(1)
    human, ai, tool = peers.langchain_messages(turn)
    by_type = {e["type"]: e["data"] for e in turn}
    assert type(human).__name__ == "HumanMessage"
    assert human.content == by_type["user/message"]["text"]
    assert ai.content == by_type["assistant/message"]["text"]
    call = by_type["tool/call"]
    assert [(c["id"], c["name"], c["args"]) for c in ai.tool_calls] == [
        (call["call_id"], call["name"], call["arguments"])
    ]
    assert tool.tool_call_id == call["call_id"]
    assert tool.content == by_type["tool/result"]["output"]


def test_the_stores_keep_every_turn_and_report_their_bytes(tmp_path: Path) -> None:
    turns = plain_turns(3)

    async def fill() -> tuple[int, int, int, int]:
        openai = peers.OpenAISession(tmp_path / "openai")
        graph = peers.LangGraphSaver(tmp_path / "langgraph")
        for turn in turns:
            await openai.add(openai.convert(turn))
            await graph.add(graph.convert(turn))
        items = len(await openai.session.get_items())
        latest = graph.saver.get_tuple(graph.config)
        messages = len(latest.checkpoint["channel_values"]["messages"])
        return items, messages, openai.close(), graph.close()

    items, messages, openai_bytes, graph_bytes = asyncio.run(fill())
    assert items == 4 * 3
    assert messages == 3 * 3  # every checkpoint holds the whole history
    assert openai_bytes == peers.disk_bytes(tmp_path / "openai") > 0
    assert graph_bytes == peers.disk_bytes(tmp_path / "langgraph") > 0
