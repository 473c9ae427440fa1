"""`turnkeep import` of other agents' logs: pi session files and Codex rollouts.

The logs are crafted in their programs' shapes (`tests/cli/agent_logs.py`).
An import is checked end to end: detected without `--format` (and with it),
every mapped record where the docs say, skipped ones counted in the report,
user content untrusted, tool calls recorded and paired, never run; then the
session loads, continues under the agent loop, shows and verifies. Bad
lines (cut short, garbage, wrong shapes) are one typed error naming the
line, and nothing is stored.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.cli.agent_logs import (
    CODEX_CWD,
    CODEX_PROMPT,
    CODEX_ROLLOUT,
    CODEX_SKIPPED,
    PI_CWD,
    PI_FIRST_PROMPT,
    PI_FIRST_PROMPT_MS,
    PI_SESSION,
    PI_SKIPPED,
    lines,
)
from tests.cli.support import Store, cli, converse, one_line_error

from turnkeep import AgentLoop
from turnkeep.agent.messages import derive_messages
from turnkeep.agent.models import ModelRequest
from turnkeep.agent.recovery import pairing_problems
from turnkeep.cli.importplan import NO_RESULT_OUTPUT
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


def decoded(store: Store, session_id: str) -> list[SessionEvent]:
    stored = asyncio.run(store.load(session_id)).events
    return EventCodec().decode_log(stored, session_id=session_id)


def imported(
    store: Store, path: Path, session_id: str, *options: str
) -> dict[str, Any]:
    result = cli(
        "import", str(path), "--id", session_id, "--json", *options, store=store
    )
    assert result.exit_code == 0, result.output
    return msgspec.json.decode(result.stdout)


def continues(store: Store, session_id: str) -> ModelRequest:
    """Resume the imported session with the loop; the model's first request."""

    async def run() -> ModelRequest:
        model = ScriptedModel(lambda request: Reply("picked up"))
        async with store.host() as host:
            loop = await AgentLoop.resume("agent", session_id, host=host, model=model)
            await loop.run_turn("carry on")
            await loop.close()
        return model.requests[0]

    return asyncio.run(run())


def checked(store: Store, session_id: str) -> list[SessionEvent]:
    """The imported log: paired, whole turns, verified and shown by the command."""
    events = decoded(store, session_id)
    assert pairing_problems(events) == []
    starts = [e for e in events if isinstance(e, TurnStart)]
    ends = [e for e in events if isinstance(e, TurnEnd)]
    assert [s.data.turn for s in starts] == [e.data.turn for e in ends]
    assert all(
        isinstance(e, UserMessage) and e.data.untrusted
        for e in events
        if isinstance(e, UserMessage)
    )
    verified = cli("verify", session_id, store=store)
    assert verified.exit_code == 0, verified.output
    shown = cli("show", session_id, store=store)
    assert shown.exit_code == 0, shown.output
    assert "untrusted" in shown.stdout
    return events


def test_a_pi_session_imports_its_current_branch(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "2025-11-30T09-00-00-000Z_6f1d2c3b.jsonl"
    source.write_bytes(lines(PI_SESSION))
    report = imported(store, source, "from-pi")
    assert report["format"] == "pi"
    assert report["skipped"] == PI_SKIPPED
    events = checked(store, "from-pi")
    users = [e.data.text for e in events if isinstance(e, UserMessage)]
    assert users == [
        PI_FIRST_PROMPT,
        "[summary of an abandoned branch]\n"
        "The user considered deleting the test, then went back.",
        "Add the fixture file then.",
        "[shell command run by the user] $ pytest -q\n1 passed in 0.01s",
        "Remember to commit.",
        "And push it",
    ]
    assert "Delete the test instead" not in users  # the branch left behind
    calls = [e.data for e in events if isinstance(e, ToolCall)]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("toolu_01", "read", {"path": "tests/test_io.py"}),
        ("toolu_02", "bash", {"command": "pytest -q tests/test_io.py"}),
        ("call_w1|fc_1", "write", {"path": "data.txt", "content": "x"}),
    ]
    results = {e.data.call_id: e.data for e in events if isinstance(e, ToolResult)}
    assert results["toolu_01"].status == "ok"
    assert results["toolu_02"].status == "error"
    assert "FileNotFoundError" in results["toolu_02"].output
    replies = [e.data.text for e in events if isinstance(e, AssistantMessage)]
    assert replies == [
        "Let me read the test.",
        "The fixture file data.txt is missing.",
        "Done: the test passes.",
    ]
    assert not any("Read the test first" in r for r in replies)  # thinking left out
    ends = [e.data for e in events if isinstance(e, TurnEnd)]
    assert [e.status for e in ends[:-1]] == ["completed"] * (len(ends) - 1)
    assert (ends[-1].status, ends[-1].error) == ("cancelled", "Request was aborted")
    first = next(e for e in events if isinstance(e, UserMessage))
    assert first.time == PI_FIRST_PROMPT_MS
    meta = asyncio.run(store.load("from-pi")).meta
    assert meta.summary.title == "Fix test_io"
    assert meta.summary.first_prompt == PI_FIRST_PROMPT
    assert meta.header.cwd == PI_CWD
    request = continues(store, "from-pi")
    history = request.messages
    assert (history[0].content, history[0].untrusted) == (PI_FIRST_PROMPT, True)
    assert (history[-1].content, history[-1].untrusted) == ("carry on", False)


def test_a_codex_rollout_imports_its_conversation(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "rollout-2025-11-30T10-00-00-0199d4c1.jsonl"
    source.write_bytes(lines(CODEX_ROLLOUT))
    report = imported(store, source, "from-codex")
    assert report["format"] == "codex"
    assert report["skipped"] == CODEX_SKIPPED
    events = checked(store, "from-codex")
    users = [e.data.text for e in events if isinstance(e, UserMessage)]
    assert users == [CODEX_PROMPT, "Run them again"]
    calls = {e.data.call_id: e.data for e in events if isinstance(e, ToolCall)}
    assert calls["call_A"].name == "shell"
    assert calls["call_A"].arguments["command"] == ["bash", "-lc", "pytest -q"]
    assert calls["call_B"].name == "apply_patch"
    assert calls["call_B"].arguments["input"].startswith("*** Begin Patch")
    assert calls["call_C"].name == "local_shell"
    assert calls["call_C"].arguments["command"] == ["git", "status", "--short"]
    assert calls["call_E"].arguments == {"raw": "not json"}
    results = {e.data.call_id: e.data for e in events if isinstance(e, ToolResult)}
    assert "2 failed" in results["call_A"].output
    assert results["call_B"].output.startswith("Success.")
    assert results["call_C"].output == " M src/app.py"
    assert (results["call_E"].output, results["call_E"].status) == (
        "sandbox denied",
        "error",
    )
    # The aborted turn's call has no output: recorded as unknown, never run.
    assert (results["call_D"].output, results["call_D"].status) == (
        NO_RESULT_OUTPUT,
        "interrupted",
    )
    assert "call_Z" not in results
    replies = [e.data.text for e in events if isinstance(e, AssistantMessage)]
    assert replies == ["Two tests failed; I patched src/app.py."]
    ends = [e.data for e in events if isinstance(e, TurnEnd)]
    assert [(e.status, e.error) for e in ends] == [
        ("completed", None),
        ("cancelled", "aborted: interrupted"),
    ]
    meta = asyncio.run(store.load("from-codex")).meta
    assert meta.header.cwd == CODEX_CWD
    assert meta.summary.title == CODEX_PROMPT
    history = derive_messages(events)
    assert (history[0].role, history[0].untrusted) == ("user", True)
    request = continues(store, "from-codex")
    assert request.messages[0].content == CODEX_PROMPT


@pytest.mark.parametrize(
    ("records", "fmt"), [(PI_SESSION, "pi"), (CODEX_ROLLOUT, "codex")]
)
def test_format_can_be_named_and_the_report_counts_what_was_skipped(
    jsonl_store: Store, tmp_path: Path, records: list[dict[str, Any]], fmt: str
) -> None:
    source = tmp_path / "log.jsonl"
    source.write_bytes(lines(records))
    result = cli("import", str(source), "--format", fmt, "--id", "x", store=jsonl_store)
    assert result.exit_code == 0, result.output
    assert f"({fmt})" in result.stderr
    assert (
        "user content marked untrusted, tool calls recorded, never run" in result.stderr
    )
    skipped = PI_SKIPPED if fmt == "pi" else CODEX_SKIPPED
    for what, n in skipped.items():
        assert f"{n} {what}" in result.stderr


def test_a_version_1_pi_session_is_one_line_of_entries(
    jsonl_store: Store, tmp_path: Path
) -> None:
    records = [
        {
            "type": "session",
            "id": "old",
            "timestamp": "2025-01-02T03:04:05Z",
            "cwd": "/w",
        },
        {
            "type": "message",
            "timestamp": "2025-01-02T03:04:06Z",
            "message": {"role": "user", "content": "hi"},
        },
        {
            "type": "message",
            "timestamp": "2025-01-02T03:04:07Z",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "hello"},
                    {"type": "image", "data": "AA==", "mimeType": "image/png"},
                ],
                "stopReason": "stop",
            },
        },
        {"type": "future_thing", "timestamp": "2025-01-02T03:04:08Z"},
    ]
    source = tmp_path / "v1.jsonl"
    source.write_bytes(lines(records))
    report = imported(jsonl_store, source, "v1")
    assert report["skipped"] == {"unknown `future_thing` records": 1}
    events = decoded(jsonl_store, "v1")
    assert [type(e) for e in events] == [
        TurnStart,
        UserMessage,
        AssistantMessage,
        TurnEnd,
    ]
    reply = events[2]
    assert isinstance(reply, AssistantMessage)
    assert reply.data.text == "hello\n[image omitted]"
    assert events[0].time == 1_735_787_046_000  # the entry's ISO time


PI_HEAD = lines(PI_SESSION[:6])  # header .. the first tool result (lines 1-6)
CODEX_HEAD = lines(CODEX_ROLLOUT[:5])  # meta .. the first user prompt (lines 1-5)


def pi_message(message: object) -> bytes:
    """Line 7 after `PI_HEAD`: a message entry continuing the branch."""
    entry = {"type": "message", "id": "z", "parentId": "a0000006", "message": message}
    return lines([entry])


def codex_item(payload: object, kind: str = "response_item") -> bytes:
    """Line 6 after `CODEX_HEAD`."""
    return lines(
        [{"timestamp": "2025-11-30T10:00:06Z", "type": kind, "payload": payload}]
    )


BAD: dict[str, tuple[bytes, tuple[str, ...], int, str]] = {
    # name: (file, --format options, line named, words in the message)
    "pi-last-line-cut-short": (
        PI_HEAD + lines(PI_SESSION[6:7])[:70],
        (),
        7,
        "the last line is cut short",
    ),
    "pi-garbage-line": (
        PI_HEAD + b"\x1b[2K}{ garbage\n" + lines(PI_SESSION[6:8]),
        (),
        7,
        "not JSON",
    ),
    "pi-line-a-list": (PI_HEAD + b'["message"]\n', (), 7, "found a list"),
    "pi-entry-without-type": (
        PI_HEAD + b'{"id": "z", "parentId": null}\n',
        (),
        7,
        "`type` is missing",
    ),
    "pi-entry-without-id": (
        PI_HEAD + b'{"type": "label", "parentId": null}\n',
        (),
        7,
        "`id` is missing",
    ),
    "pi-message-a-string": (
        PI_HEAD + pi_message("hi"),
        (),
        7,
        "`message` must be an object, not a string",
    ),
    "pi-tool-call-without-id": (
        PI_HEAD
        + pi_message(
            {
                "role": "assistant",
                "content": [{"type": "toolCall", "name": "bash", "arguments": {}}],
            }
        ),
        (),
        7,
        "`message.content[0].id` is missing",
    ),
    "pi-tool-call-arguments-a-string": (
        PI_HEAD
        + pi_message(
            {
                "role": "assistant",
                "content": [
                    {"type": "toolCall", "id": "t", "name": "bash", "arguments": "ls"}
                ],
            }
        ),
        (),
        7,
        "`message.content[0].arguments` must be an object, not a string",
    ),
    "pi-tool-result-without-call-id": (
        PI_HEAD + pi_message({"role": "toolResult", "content": []}),
        (),
        7,
        "`message.toolCallId` is missing",
    ),
    "pi-user-content-a-number": (
        PI_HEAD + pi_message({"role": "user", "content": 3}),
        (),
        7,
        "`message.content` must be a string or a list of parts, not a number",
    ),
    "pi-header-only": (
        lines(PI_SESSION[:2]),
        (),
        1,
        "holds no conversation to import (skipped 1 model changes)",
    ),
    "pi-named-but-no-header": (
        lines(PI_SESSION[1:4]),
        ("--format", "pi"),
        1,
        "not a pi session",
    ),
    "pi-named-but-codex": (CODEX_HEAD, ("--format", "pi"), 1, "not a pi session"),
    "pi-named-but-empty": (b"", ("--format", "pi"), 1, "the file is empty"),
    "codex-last-line-cut-short": (
        CODEX_HEAD + lines(CODEX_ROLLOUT[5:6])[:60],
        (),
        6,
        "the last line is cut short",
    ),
    "codex-garbage-line": (
        CODEX_HEAD + b"Traceback (most recent call last):\n" + CODEX_HEAD,
        (),
        6,
        "not JSON",
    ),
    "codex-garbage-first-line": (
        b"<<<<<<< HEAD\n" + CODEX_HEAD,
        ("--format", "codex"),
        1,
        "not JSON",
    ),
    "codex-payload-a-string": (
        CODEX_HEAD + codex_item("x"),
        (),
        6,
        "`payload` must be an object, not a string",
    ),
    "codex-record-without-type": (
        CODEX_HEAD + b'{"timestamp": "t", "payload": {}}\n',
        (),
        6,
        "`type` is missing",
    ),
    "codex-arguments-nested-too-deep": (
        CODEX_HEAD
        + codex_item(
            {
                "type": "function_call",
                "name": "f",
                "call_id": "c",
                "arguments": "[" * 1000 + "]" * 1000,
            }
        ),
        (),
        6,
        "arguments are JSON text nested more than 200 deep",
    ),
    "codex-call-without-call-id": (
        CODEX_HEAD
        + codex_item({"type": "function_call", "name": "shell", "arguments": "{}"}),
        (),
        6,
        "`payload.call_id` is missing",
    ),
    "codex-content-a-number": (
        CODEX_HEAD + codex_item({"type": "message", "role": "user", "content": 5}),
        (),
        6,
        "`payload.content` must be a list of parts, not a number",
    ),
    "codex-event-without-type": (
        CODEX_HEAD + codex_item({"message": "hi"}, kind="event_msg"),
        (),
        6,
        "`payload.type` is missing",
    ),
    "codex-meta-only": (
        lines(CODEX_ROLLOUT[:1]),
        (),
        1,
        "holds no conversation to import",
    ),
    "codex-named-but-pi": (
        lines(PI_SESSION[:2]),
        ("--format", "codex"),
        1,
        "(skipped 1 unknown `model_change` records, 1 unknown `session` records)",
    ),
    "codex-named-but-empty": (b"\n\n", ("--format", "codex"), 1, "the file is empty"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_line_is_one_typed_error_naming_it(
    jsonl_store: Store, tmp_path: Path, case: str
) -> None:
    content, options, line, words = BAD[case]
    asyncio.run(converse(jsonl_store, "kept", prompts=("hi",)))
    before = jsonl_store.digest()
    source = tmp_path / f"{case}.jsonl"
    source.write_bytes(content)
    result = cli("import", str(source), "--id", "new", *options, store=jsonl_store)
    assert result.exit_code == 1, result.output
    message = one_line_error(result)
    assert message.startswith(f"turnkeep: {source}, line {line}: "), message
    assert words in message, message
    assert jsonl_store.digest() == before
    assert asyncio.run(jsonl_store.ids()) == ["kept"]


def test_a_codex_rollback_drops_the_turns_it_undid(
    jsonl_store: Store, tmp_path: Path
) -> None:
    def item(payload: dict[str, Any], kind: str = "response_item") -> dict[str, Any]:
        return {"timestamp": "2025-11-30T10:00:00Z", "type": kind, "payload": payload}

    def user(text: str) -> dict[str, Any]:
        part = {"type": "input_text", "text": text}
        return item({"type": "message", "role": "user", "content": [part]})

    records = [
        item({"id": "s", "cwd": "/w"}, kind="session_meta"),
        user("first"),
        user("second"),
        item({"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"}),
        item({"type": "thread_rolled_back", "num_turns": 1}, kind="event_msg"),
        # An output of the undone call: it answers nothing that is kept.
        item({"type": "function_call_output", "call_id": "c", "output": "late"}),
        user("third"),
    ]
    source = tmp_path / "rollback.jsonl"
    source.write_bytes(lines(records))
    report = imported(jsonl_store, source, "rb")
    assert report["skipped"] == {
        "turns undone by a rollback": 1,
        "tool results without a matching call": 1,
    }
    events = checked(jsonl_store, "rb")
    assert [e.data.text for e in events if isinstance(e, UserMessage)] == [
        "first",
        "third",
    ]
    assert [e.data.turn for e in events if isinstance(e, TurnStart)] == [1, 2]
    assert not any(isinstance(e, ToolCall | ToolResult) for e in events)


def test_an_older_codex_rollout_of_bare_items_imports(
    jsonl_store: Store, tmp_path: Path
) -> None:
    records: list[dict[str, Any]] = [
        {
            "id": "5973b6c0-94b8-487b-a530-2aeb6098ae0e",
            "timestamp": "2025-06-01T08:00:00.000Z",
            "instructions": None,
            "git": {"commit_hash": "1f2e3d", "branch": "main"},
        },
        {"record_type": "state"},
        {
            "type": "message",
            "id": None,
            "role": "user",
            "content": [{"type": "input_text", "text": "what is in here?"}],
        },
        {
            "type": "function_call",
            "name": "shell",
            "arguments": '{"command":["ls"]}',
            "call_id": "c1",
        },
        {"type": "function_call_output", "call_id": "c1", "output": "README.md"},
        {"record_type": "state"},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Only a README."}],
        },
    ]
    source = tmp_path / "rollout-2025-06-01T08-00-00-5973b6c0.jsonl"
    source.write_bytes(lines(records))
    report = imported(jsonl_store, source, "old-codex")
    assert report["format"] == "codex"
    assert report["skipped"] == {"state records": 2}
    events = checked(jsonl_store, "old-codex")
    assert [type(e) for e in events] == [
        TurnStart,
        UserMessage,
        ToolCall,
        ToolResult,
        AssistantMessage,
        TurnEnd,
    ]
    assert events[0].time == 1_748_764_800_000  # the header's time
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(lines([*records[:3], {"type": "message", "content": []}]))
    result = cli("import", str(bad), "--id", "nope", store=jsonl_store)
    assert result.exit_code == 1
    assert one_line_error(result).startswith(
        f"turnkeep: {bad}, line 4: `role` is missing"
    )
