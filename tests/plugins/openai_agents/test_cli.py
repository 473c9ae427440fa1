"""The `turnkeep` command reads Agents SDK sessions: show, verify, export, ls.

With only `--store` given, the command loads the store's backend and the
event-type plugins, so `oai/*` events decode; `show` prints the items the
session holds now (after pops and clears), not one line per event.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.cli.support import cli
from tests.plugins.openai_agents.corpus import ITEMS

from turnkeep_openai_agents import TurnkeepSession, shutdown


@pytest.fixture(params=["jsonl", "sqlite"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "jsonl":
        return f"jsonl:{tmp_path / 'store'}"
    return f"sqlite:{tmp_path / 's.db'}"


def written(spec: str) -> None:
    asyncio.run(write(spec))
    shutdown()  # the writer role is released; the command reads the store


async def write(spec: str) -> None:
    session = TurnkeepSession("conv", spec)
    await session.add_items([{"role": "user", "content": "first question"}])
    await session.add_items([{"role": "assistant", "content": "first answer"}])
    await session.clear_session()
    plan: Any = [{"role": "user", "content": "plan a trip"}, *ITEMS[4:8]]
    await session.add_items(plan)
    await session.add_items([{"role": "assistant", "content": "wrong turn"}])
    assert await session.pop_item() is not None


def test_show_prints_the_items_the_session_holds_now(spec: str) -> None:
    written(spec)
    shown = cli("--store", spec, "show", "conv")
    assert shown.exit_code == 0, shown.stderr
    out = " ".join(shown.stdout.split())
    assert "5 item(s) in the session" in out
    assert "1 clear_session call(s) (2 items)" in out
    assert "1 pop_item call(s)" in out
    assert "plan a trip" in out
    assert "tool call get_weather" in out
    assert "reasoning The user wants trains." in out
    assert "first question" not in out  # cleared
    assert "wrong turn" not in out  # popped
    assert "unknown" not in out


def test_verify_export_and_ls_read_the_session(spec: str) -> None:
    written(spec)
    verified = cli("--store", spec, "verify", "conv")
    assert verified.exit_code == 0, verified.stderr
    assert "no problems" in verified.stdout
    exported = cli("--store", spec, "export", "conv")
    assert exported.exit_code == 0, exported.stderr
    lines = exported.stdout_bytes.split(b"\n")[:-1]  # text may hold U+2028
    events = [msgspec.json.decode(line) for line in lines[1:]]
    assert [e["type"] for e in events] == [
        "oai/items",
        "oai/items",
        "oai/clear",
        "oai/items",
        "oai/items",
        "oai/pop",
    ]
    assert events[3]["data"]["items"][1:] == ITEMS[4:8]
    listed = cli("--store", spec, "ls", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert "conv" in listed.stdout
    assert "first question" in listed.stdout  # the first prompt, for ls
