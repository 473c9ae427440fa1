"""`docs/cli.md` stays true: every command documented, its examples import."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import msgspec
from tests.cli.support import Store, cli

from turnkeep.cli.app import cli as group
from turnkeep.codec import EventCodec
from turnkeep.events import (
    AssistantMessage,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
    UserMessage,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def block(language: str) -> str:
    (found,) = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)
    return found


def test_every_command_has_a_section() -> None:
    text = DOC.read_text()
    for name in group.commands:
        assert f"### `turnkeep {name}`" in text, name
        assert f"turnkeep {name}" in (group.commands[name].epilog or ""), name


def test_the_export_example_is_a_valid_export(store: Store, tmp_path: Path) -> None:
    example = tmp_path / "demo.jsonl"
    example.write_text(block("jsonl"))
    result = cli("import", str(example), "--id", "from-doc", store=store)
    assert result.exit_code == 0, result.stderr
    events = EventCodec().decode_log(
        asyncio.run(store.load("from-doc")).events, session_id="from-doc"
    )
    lines = block("jsonl").splitlines()[1:]
    assert [e.time for e in events] == [msgspec.json.decode(x)["time"] for x in lines]
    assert asyncio.run(store.load("from-doc")).meta.summary.title == "Greeting"


def test_the_chat_example_becomes_the_turn_described(store: Store) -> None:
    result = cli(
        "import", "-", "--id", "chat", "--json", input=block("json"), store=store
    )
    assert result.exit_code == 0, result.stderr
    assert msgspec.json.decode(result.stdout)["skipped"] == {"system messages": 1}
    events = EventCodec().decode_log(
        asyncio.run(store.load("chat")).events, session_id="chat"
    )
    assert [type(e) for e in events] == [
        TurnStart,
        UserMessage,
        ToolCall,
        ToolResult,
        AssistantMessage,
        TurnEnd,
    ]
