"""Crafted logs of other agents, in their own on-disk shapes, for `import` tests.

`PI_SESSION` is a pi coding-agent session file (format version 3): a header,
then entries linked by `id`/`parentId`, with a branch the user went back
from, thinking blocks, tool calls and results (one failed), model and
thinking-level changes, a compaction, a label, a name, an extension record,
a shell command the user ran, an extension message and a reply the user
aborted. `CODEX_ROLLOUT` is a Codex rollout: `{timestamp, type, payload}`
lines with the session's meta, developer and context messages, turn
contexts, reasoning, function, custom-tool and local-shell calls with their
outputs, event messages, hosted tools, an aborted turn, a compaction and a
record type from the future.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

PI_CWD = "/home/me/app"
PI_FIRST_PROMPT = "Why does the test in tests/test_io.py fail?"
PI_FIRST_PROMPT_MS = 1_764_493_201_000  # the message's own `timestamp`


def lines(records: Iterable[dict[str, Any]]) -> bytes:
    """Records as a JSON-lines file."""
    return b"".join(msgspec.json.encode(r) + b"\n" for r in records)


def _at(second: int) -> str:
    return f"2025-11-30T09:00:{second:02d}.000Z"


def _entry(
    kind: str, ident: str, parent: str | None, second: int, **fields: Any
) -> dict[str, Any]:
    return {
        "type": kind,
        "id": ident,
        "parentId": parent,
        "timestamp": _at(second),
        **fields,
    }


_USAGE: dict[str, Any] = {
    "input": 812,
    "output": 64,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 876,
    "cost": {"input": 0.0, "output": 0.0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}


def _assistant(
    content: list[dict[str, Any]], stop: str = "stop", **extra: Any
) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "api": "anthropic-messages",
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "usage": _USAGE,
        "stopReason": stop,
        "timestamp": PI_FIRST_PROMPT_MS + 5_000,
        **extra,
    }


def _result(
    call_id: str, tool: str, text: str, *, error: bool = False
) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": tool,
        "content": [{"type": "text", "text": text}],
        "details": {"truncated": False},
        "isError": error,
        "timestamp": PI_FIRST_PROMPT_MS + 6_000,
    }


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}


PI_SESSION: list[dict[str, Any]] = [
    {
        "type": "session",
        "version": 3,
        "id": "6f1d2c3b-0e4a-4b59-9a77-1f0c5d8e2a11",
        "timestamp": _at(0),
        "cwd": PI_CWD,
    },
    _entry(
        "model_change",
        "a0000001",
        None,
        1,
        provider="anthropic",
        modelId="claude-sonnet-4-5",
    ),
    _entry("thinking_level_change", "a0000002", "a0000001", 1, thinkingLevel="medium"),
    _entry(
        "message",
        "a0000003",
        "a0000002",
        1,
        message={
            "role": "user",
            "content": [{"type": "text", "text": PI_FIRST_PROMPT}],
            "timestamp": PI_FIRST_PROMPT_MS,
        },
    ),
    _entry(
        "message",
        "a0000004",
        "a0000003",
        3,
        message=_assistant(
            [
                {
                    "type": "thinking",
                    "thinking": "Read the test first.",
                    "thinkingSignature": "EuYBCkQ",
                },
                {"type": "text", "text": "Let me read the test."},
                _call("toolu_01", "read", path="tests/test_io.py"),
            ],
            stop="toolUse",
        ),
    ),
    _entry(
        "message",
        "a0000005",
        "a0000004",
        4,
        message=_result(
            "toolu_01", "read", "def test_read():\n    assert read('data.txt') == 'x'\n"
        ),
    ),
    _entry(
        "message",
        "a0000006",
        "a0000005",
        5,
        message=_assistant(
            [_call("toolu_02", "bash", command="pytest -q tests/test_io.py")],
            stop="toolUse",
        ),
    ),
    _entry(
        "message",
        "a0000007",
        "a0000006",
        7,
        message=_result(
            "toolu_02",
            "bash",
            "FileNotFoundError: data.txt\n\nCommand exited with code 1",
            error=True,
        ),
    ),
    _entry(
        "message",
        "a0000008",
        "a0000007",
        8,
        message=_assistant(
            [{"type": "text", "text": "The fixture file data.txt is missing."}]
        ),
    ),
    # A branch the user left: they went back to a0000008 and asked otherwise.
    _entry(
        "message",
        "b0000001",
        "a0000008",
        9,
        message={
            "role": "user",
            "content": "Delete the test instead",
            "timestamp": PI_FIRST_PROMPT_MS + 9_000,
        },
    ),
    _entry(
        "message",
        "b0000002",
        "b0000001",
        10,
        message=_assistant(
            [_call("toolu_09", "bash", command="rm tests/test_io.py")], stop="toolUse"
        ),
    ),
    _entry(
        "branch_summary",
        "a0000009",
        "a0000008",
        11,
        fromId="b0000002",
        summary="The user considered deleting the test, then went back.",
    ),
    _entry(
        "model_change", "a0000010", "a0000009", 12, provider="openai", modelId="gpt-5"
    ),
    _entry(
        "message",
        "a0000011",
        "a0000010",
        13,
        message={
            "role": "user",
            "content": "Add the fixture file then.",
            "timestamp": PI_FIRST_PROMPT_MS + 13_000,
        },
    ),
    _entry(
        "message",
        "a0000012",
        "a0000011",
        14,
        message=_assistant(
            [
                {"type": "thinking", "thinking": "One line is enough."},
                _call("call_w1|fc_1", "write", path="data.txt", content="x"),
            ],
            stop="toolUse",
        ),
    ),
    _entry(
        "message",
        "a0000013",
        "a0000012",
        15,
        message=_result("call_w1|fc_1", "write", "Wrote 1 bytes to data.txt"),
    ),
    _entry(
        "compaction",
        "a0000014",
        "a0000013",
        16,
        summary="Fixed a missing fixture.",
        firstKeptEntryId="a0000011",
        tokensBefore=48213,
    ),
    _entry("label", "a0000015", "a0000014", 17, targetId="a0000011", label="fix"),
    _entry("session_info", "a0000016", "a0000015", 18, name="Fix test_io"),
    _entry(
        "message",
        "a0000017",
        "a0000016",
        19,
        message={
            "role": "bashExecution",
            "command": "pytest -q",
            "output": "1 passed in 0.01s",
            "exitCode": 0,
            "cancelled": False,
            "truncated": False,
            "timestamp": PI_FIRST_PROMPT_MS + 19_000,
        },
    ),
    _entry("custom", "a0000018", "a0000017", 20, customType="todo", data={"items": []}),
    _entry(
        "custom_message",
        "a0000019",
        "a0000018",
        21,
        customType="reminder",
        content="Remember to commit.",
        display=True,
    ),
    _entry(
        "message",
        "a0000020",
        "a0000019",
        22,
        message=_assistant([{"type": "text", "text": "Done: the test passes."}]),
    ),
    _entry(
        "message",
        "a0000021",
        "a0000020",
        23,
        message={
            "role": "user",
            "content": [{"type": "text", "text": "And push it"}],
            "timestamp": PI_FIRST_PROMPT_MS + 23_000,
        },
    ),
    _entry(
        "message",
        "a0000022",
        "a0000021",
        24,
        message=_assistant([], stop="aborted", errorMessage="Request was aborted"),
    ),
]

PI_SKIPPED = {
    "model changes": 2,
    "thinking level changes": 1,
    "thinking blocks": 2,
    "entries on other branches": 2,
    "compaction summaries": 1,
    "labels": 1,
    "extension records": 1,
}

CODEX_CWD = "/home/me/svc"
CODEX_PROMPT = "List the failing tests and fix them"


def _rollout(second: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "timestamp": f"2025-11-30T10:00:{second:02d}.250Z",
        "type": kind,
        "payload": payload,
    }


def _item(second: int, **payload: Any) -> dict[str, Any]:
    return _rollout(second, "response_item", payload)


def _message(second: int, role: str, *texts: str) -> dict[str, Any]:
    part = "output_text" if role == "assistant" else "input_text"
    return _item(
        second,
        type="message",
        role=role,
        content=[{"type": part, "text": text} for text in texts],
    )


_TURN_CONTEXT: dict[str, Any] = {
    "cwd": CODEX_CWD,
    "approval_policy": "on-request",
    "sandbox_policy": {"type": "workspace-write", "network_access": False},
    "model": "gpt-5-codex",
    "effort": "medium",
    "summary": "auto",
}

CODEX_ROLLOUT: list[dict[str, Any]] = [
    _rollout(
        0,
        "session_meta",
        {
            "id": "0199d4c1-7a2e-7f00-9c1b-3e5a8d2f4b60",
            "timestamp": "2025-11-30T10:00:00.100Z",
            "cwd": CODEX_CWD,
            "originator": "codex_cli_rs",
            "cli_version": "0.63.0",
            "instructions": None,
            "source": "cli",
            "model_provider": "openai",
            "git": {"commit_hash": "4be1c2d", "branch": "main", "repository_url": None},
        },
    ),
    _message(
        0,
        "developer",
        "<permissions instructions>\nApprovals: on-request.\n"
        "</permissions instructions>",
    ),
    _message(
        0,
        "user",
        "# AGENTS.md instructions for /home/me/svc\n\n"
        "<INSTRUCTIONS>\nUse uv.\n</INSTRUCTIONS>",
        "<environment_context>\n  <cwd>/home/me/svc</cwd>\n"
        "  <shell>bash</shell>\n</environment_context>",
    ),
    _rollout(1, "turn_context", _TURN_CONTEXT),
    _message(1, "user", CODEX_PROMPT),
    _rollout(
        1, "event_msg", {"type": "user_message", "message": CODEX_PROMPT, "images": []}
    ),
    _item(
        2,
        type="reasoning",
        summary=[{"type": "summary_text", "text": "**Running the tests**"}],
        content=None,
        encrypted_content="gAAAAABpLq0",
    ),
    _item(
        3,
        type="function_call",
        name="shell",
        arguments='{"command":["bash","-lc","pytest -q"],"workdir":"/home/me/svc"}',
        call_id="call_A",
    ),
    _item(
        5,
        type="function_call_output",
        call_id="call_A",
        output='{"output":"2 failed, 8 passed",'
        '"metadata":{"exit_code":1,"duration_seconds":1.2}}',
    ),
    _rollout(
        5, "event_msg", {"type": "token_count", "info": None, "rate_limits": None}
    ),
    _item(
        6,
        type="custom_tool_call",
        status="completed",
        call_id="call_B",
        name="apply_patch",
        input="*** Begin Patch\n*** Update File: src/app.py\n@@\n"
        "-    return None\n+    return 0\n*** End Patch\n",
    ),
    _item(
        7,
        type="custom_tool_call_output",
        call_id="call_B",
        output="Success. Updated the following files:\nM src/app.py\n",
    ),
    _item(
        8,
        type="local_shell_call",
        call_id="call_C",
        status="completed",
        action={
            "type": "exec",
            "command": ["git", "status", "--short"],
            "timeout_ms": None,
            "working_directory": None,
            "env": None,
            "user": None,
        },
    ),
    _item(
        9,
        type="function_call_output",
        call_id="call_C",
        output=[{"type": "input_text", "text": " M src/app.py"}],
    ),
    _item(
        9,
        type="function_call_output",
        call_id="call_Z",  # answers no call: skipped
        output={"content": "stray", "success": False},
    ),
    _message(10, "assistant", "Two tests failed; I patched src/app.py."),
    _rollout(
        10,
        "event_msg",
        {"type": "agent_message", "message": "Two tests failed; I patched src/app.py."},
    ),
    _item(
        11,
        type="web_search_call",
        status="completed",
        action={"type": "search", "query": "pytest fixtures"},
    ),
    _item(
        11,
        type="ghost_snapshot",
        ghost_commit={
            "id": "9c0ffee",
            "parent": None,
            "preexisting_untracked_files": [],
        },
    ),
    _rollout(12, "turn_context", _TURN_CONTEXT),
    _message(12, "user", "Run them again"),
    _item(
        13,
        type="function_call",
        name="shell",
        arguments='{"command":["pytest"]}',
        call_id="call_D",
    ),
    _item(
        14, type="function_call", name="shell", arguments="not json", call_id="call_E"
    ),
    _item(
        14,
        type="function_call_output",
        call_id="call_E",
        output={"content": "sandbox denied", "success": False},
    ),
    _rollout(15, "event_msg", {"type": "turn_aborted", "reason": "interrupted"}),
    _message(
        15,
        "user",
        "<turn_aborted>\nThe user interrupted the previous turn.\n</turn_aborted>",
    ),
    _rollout(16, "compacted", {"message": "Patched src/app.py; tests were re-run."}),
    _rollout(17, "world_state", {"files": 3}),
]

CODEX_SKIPPED = {
    "developer messages": 1,
    "Codex context messages": 2,
    "turn contexts": 2,
    "event messages": 3,
    "reasoning items": 1,
    "`web_search_call` items": 1,
    "`ghost_snapshot` items": 1,
    "compaction summaries": 1,
    "unknown `world_state` records": 1,
    "tool results without a matching call": 1,
}
