"""`turnkeep export` and `turnkeep import` (exports, OpenAI chat, Agents SDK)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.cli.conftest import make_store
from tests.cli.support import Store, cli, converse, crash_in_turn, one_line_error

from turnkeep import AgentLoop, ToolContext, function_tool
from turnkeep.agent.messages import derive_messages
from turnkeep.agent.recovery import open_turn, pairing_problems
from turnkeep.cli.importers import NO_RESULT_OUTPUT
from turnkeep.codec import EventCodec
from turnkeep.events import (
    AssistantMessage,
    SessionEvent,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from turnkeep.testing import Reply, ScriptedModel

OPENAI_CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "delete_files", "arguments": "{}"},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18C, cloudy"},
    {"role": "assistant", "content": "18C and cloudy."},
    {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]},
    {"role": "assistant", "content": "You're welcome."},
]

AGENTS_SDK: list[dict[str, Any]] = [
    {"role": "user", "content": "Find the report"},
    {
        "type": "function_call",
        "call_id": "fc_1",
        "name": "search",
        "arguments": '{"q": "report"}',
    },
    {"type": "function_call_output", "call_id": "fc_1", "output": "report.pdf"},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "Found report.pdf", "annotations": []}
        ],
    },
]


def decoded(store: Store, session_id: str) -> list[SessionEvent]:
    stored = asyncio.run(store.load(session_id)).events
    return EventCodec().decode_log(stored, session_id=session_id)


def test_export_is_a_header_then_the_stored_lines_verbatim(
    store: Store, tmp_path: Path
) -> None:
    asyncio.run(converse(store, "s"))
    loaded = asyncio.run(store.load("s"))
    result = cli("export", "s", store=store)
    assert result.exit_code == 0
    first, *lines = result.stdout_bytes.splitlines()
    header: dict[str, Any] = msgspec.json.decode(first)
    assert header["format"] == "turnkeep-export"
    assert header["version"] == 1
    assert header["meta"]["header"]["id"] == "s"
    assert header["events"] == len(loaded.events)
    assert lines == loaded.events
    body = b"".join(line + b"\n" for line in lines)
    assert header["sha256"] == hashlib.sha256(body).hexdigest()
    out = tmp_path / "s.jsonl"
    assert cli("export", "s", "-o", str(out), store=store).exit_code == 0
    assert out.read_bytes().splitlines()[1:] == lines


def test_export_then_import_into_another_backend(store: Store, tmp_path: Path) -> None:
    asyncio.run(crash_in_turn(store, "s"))
    asyncio.run(converse(store, "talk"))
    other = make_store("sqlite" if store.name == "jsonl" else "jsonl", tmp_path / "b")
    for sid in ("s", "talk"):
        exported = tmp_path / f"{sid}.jsonl"
        assert cli("export", sid, "-o", str(exported), store=store).exit_code == 0
        result = cli("import", str(exported), "--id", f"{sid}-copy", store=other)
        assert result.exit_code == 0, result.stderr
        assert result.stdout.strip() == f"{sid}-copy"
        original = decoded(store, sid)
        copy = decoded(other, f"{sid}-copy")
        if sid == "s":  # the export ended inside a turn: the import ended it
            closing = copy[len(original) :]
            assert [type(e) for e in closing] == [ToolResult, ToolResult, TurnEnd]
            copy = copy[: len(original)]
        assert len(copy) == len(original)
        for a, b in zip(original, copy, strict=True):
            assert (type(a), a.seq, a.time) == (type(b), b.seq, b.time)
            if isinstance(a, UserMessage):
                assert isinstance(b, UserMessage)
                assert b.data.text == a.data.text
                assert b.data.untrusted
            else:
                assert b.data == a.data
    meta = asyncio.run(other.load("talk-copy")).meta
    assert meta.summary.title == asyncio.run(store.load("talk")).meta.summary.title


def test_import_openai_chat_messages(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "chat.json"
    source.write_bytes(msgspec.json.encode(OPENAI_CHAT))
    result = cli("import", str(source), "--id", "chat", "--json", store=store)
    assert result.exit_code == 0, result.stderr
    report: dict[str, Any] = msgspec.json.decode(result.stdout)
    assert report["format"] == "openai-chat"
    assert report["skipped"] == {"system messages": 1}
    events = decoded(store, "chat")
    assert pairing_problems(events) == []
    kinds = [type(e) for e in events]
    assert kinds.count(TurnStart) == kinds.count(TurnEnd) == 2
    users = [e for e in events if isinstance(e, UserMessage)]
    assert [u.data.text for u in users] == ["What is the weather in Paris?", "Thanks!"]
    assert all(u.data.untrusted for u in users)
    calls = {e.data.call_id: e.data for e in events if isinstance(e, ToolCall)}
    assert calls["call_1"].arguments == {"city": "Paris"}
    results = {e.data.call_id: e.data for e in events if isinstance(e, ToolResult)}
    assert results["call_1"].output == "18C, cloudy"
    # The source recorded no result for call_2: recorded as unknown, not run.
    assert results["call_2"].status == "interrupted"
    assert results["call_2"].output == NO_RESULT_OUTPUT
    history = derive_messages(events)
    assert [m.role for m in history] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert history[0].untrusted
    assert cli("verify", "chat", store=store).exit_code == 0
    meta = asyncio.run(store.load("chat")).meta
    assert meta.summary.title == "What is the weather in Paris?"
    assert meta.summary.status == "idle"


def test_import_agents_sdk_items_from_stdin(store: Store) -> None:
    result = cli(
        "import",
        "-",
        "--id",
        "agents",
        "--title",
        "SDK run",
        input=msgspec.json.encode(AGENTS_SDK).decode(),
        store=store,
    )
    assert result.exit_code == 0, result.stderr
    assert "openai-agents" in result.stderr
    assert "1 reasoning items" in result.stderr
    events = decoded(store, "agents")
    assert [type(e) for e in events] == [
        TurnStart,
        UserMessage,
        ToolCall,
        ToolResult,
        AssistantMessage,
        TurnEnd,
    ]
    call = events[2]
    assert isinstance(call, ToolCall)
    assert (call.data.name, call.data.arguments) == ("search", {"q": "report"})
    assert isinstance(events[4], AssistantMessage)
    assert events[4].data.text == "Found report.pdf"
    assert asyncio.run(store.load("agents")).meta.summary.title == "SDK run"


def test_import_goes_through_redaction(store: Store, isolated: Path) -> None:
    (isolated / "turnkeep.toml").write_text("redact_secrets = true\n")
    secret = "sk-" + "a1B2c3D4e5F6g7H8i9J0" * 2
    chat = [{"role": "user", "content": f"my key is {secret}"}]
    result = cli(
        "import",
        "-",
        "--id",
        "r",
        input=msgspec.json.encode(chat).decode(),
        store=store,
    )
    assert result.exit_code == 0, result.stderr
    stored = b"".join(asyncio.run(store.load("r")).events)
    assert secret.encode() not in stored
    assert b"[REDACTED:api-token]" in stored


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"this is not json", "line 1: not JSON"),
        (b'{"just": "an object"}', "found an object; expected"),
        (b"[1, 2]", "item #0 is a number, not a JSON object"),
    ],
)
def test_import_refuses_what_it_cannot_read(
    store: Store, tmp_path: Path, content: bytes, expected: str
) -> None:
    source = tmp_path / "in.json"
    source.write_bytes(content)
    result = cli("import", str(source), store=store)
    assert result.exit_code == 1
    assert expected in one_line_error(result)
    assert asyncio.run(store.ids()) == []


def test_import_refuses_a_damaged_or_newer_export(store: Store, tmp_path: Path) -> None:
    asyncio.run(converse(store, "s"))
    data = cli("export", "s", store=store).stdout_bytes
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(data.replace(b"reply 0", b"reply X"))
    result = cli("import", str(damaged), store=store)
    assert result.exit_code == 1
    line = one_line_error(result)
    events = len(data.splitlines()) - 1
    # The count matches: the message says the content changed, not the count.
    assert "was changed after it was written" in line
    assert f"its {events} events do not match the checksum" in line
    truncated = tmp_path / "truncated.jsonl"
    truncated.write_bytes(b"\n".join(data.splitlines()[:-2]) + b"\n")
    cut = cli("import", str(truncated), store=store)
    assert cut.exit_code == 1
    assert (
        f"its header says {events} events, the file holds {events - 2}"
        in one_line_error(cut)
    )
    newer = tmp_path / "newer.jsonl"
    newer.write_bytes(data.replace(b'"version":1', b'"version":99', 1))
    result = cli("import", str(newer), store=store)
    assert result.exit_code == 1
    assert "upgrade" in one_line_error(result)
    assert asyncio.run(store.ids()) == ["s"]


def test_import_does_not_overwrite(store: Store, tmp_path: Path) -> None:
    asyncio.run(converse(store, "s", prompts=("hi",)))
    before = asyncio.run(store.load("s")).events
    source = tmp_path / "chat.json"
    source.write_bytes(msgspec.json.encode(OPENAI_CHAT))
    result = cli("import", str(source), "--id", "s", store=store)
    assert result.exit_code == 1
    assert "'s' already exists" in one_line_error(result)
    assert asyncio.run(store.load("s")).events == before


def test_importing_an_export_that_ends_inside_a_turn_runs_nothing(
    store: Store, tmp_path: Path
) -> None:
    # A crafted export can end inside a turn with an unanswered `safe` call;
    # left open, resuming the imported session re-ran it (recovery runs safe
    # calls again), with arguments the export's author chose.
    asyncio.run(crash_in_turn(store, "s"))
    exported = tmp_path / "s.jsonl"
    assert cli("export", "s", "-o", str(exported), store=store).exit_code == 0
    result = cli("import", str(exported), "--id", "copy", store=store)
    assert result.exit_code == 0, result.stderr
    assert "ended it as interrupted" in result.stderr
    assert "2 call(s) without a result answered `interrupted`" in result.stderr
    result = cli("import", str(exported), "--id", "copy2", "--json", store=store)
    report: dict[str, Any] = msgspec.json.decode(result.stdout)
    assert report["interrupted"] == ["c-deploy", "c-ls"]
    assert report["closed_turn"] is True
    events = decoded(store, "copy")
    assert open_turn(events) is None
    assert pairing_problems(events) == []
    results = {e.data.call_id: e.data for e in events if isinstance(e, ToolResult)}
    assert {c: r.status for c, r in results.items()} == {
        "c-deploy": "interrupted",
        "c-ls": "interrupted",
    }
    end = events[-1]
    assert isinstance(end, TurnEnd)
    assert end.data.status == "interrupted"
    ran: list[str] = []

    @function_tool(replay="safe")
    async def ls(arguments: Mapping[str, Any], context: ToolContext) -> str:
        """List files."""
        del arguments
        ran.append(context.call_id)
        return "secret.txt"

    async def resume() -> None:
        async with store.host() as host:
            loop = await AgentLoop.resume(
                "test-agent",
                "copy",
                host=host,
                model=ScriptedModel([Reply("ok")]),
                tools=[ls],
                context="override",
            )
            await loop.run_turn("go on")
            await loop.close()

    asyncio.run(resume())
    assert ran == []
    # A chat import says so too.
    chat = tmp_path / "chat.json"
    chat.write_bytes(msgspec.json.encode(OPENAI_CHAT))
    result = cli("import", str(chat), "--id", "chat", store=store)
    assert "1 call(s) without a result answered `interrupted`" in result.stderr
