"""Items of every kind the Agents SDK stores in a session, as it gives them.

Shapes follow the Responses API input items the SDK's `to_input_item()`
produces (messages with text and image parts, function calls and outputs,
reasoning with encrypted content, hosted tool calls, shell, MCP, compaction),
plus values that test an exact round trip: text beyond ASCII and control
characters, floats, large integers, `null`s, deep nesting.
"""

from __future__ import annotations

from typing import Any

ITEMS: list[Any] = [
    {"role": "user", "content": "Plan a trip to Zürich — 3 days, 🚆 only"},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "what is in this image?"},
            {
                "type": "input_image",
                "detail": "auto",
                "image_url": "data:image/png;base64,iVBORw0KGgo=",
            },
        ],
    },
    {"role": "system", "content": "be brief"},
    {"role": "developer", "content": "tools first"},
    {
        "id": "msg_0123",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {
                "type": "output_text",
                "text": 'Here is a plan:\n\t1. train\u2028"quoted" \\ back',
                "annotations": [
                    {
                        "type": "url_citation",
                        "start_index": 0,
                        "end_index": 4,
                        "title": "SBB",
                        "url": "https://www.sbb.ch/",
                    }
                ],
                "logprobs": [],
            }
        ],
    },
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "The user wants trains."}],
        "encrypted_content": "gAAAAABo" + "x" * 64,
    },
    {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_abc",
        "name": "get_weather",
        "arguments": '{"city": "Zürich", "days": 3}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_abc", "output": "12.5°C, rain"},
    {
        "type": "function_call_output",
        "call_id": "call_img",
        "output": [{"type": "input_text", "text": "structured output"}],
    },
    {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "zurich weather"},
    },
    {
        "id": "fs_1",
        "type": "file_search_call",
        "status": "completed",
        "queries": ["itinerary"],
        "results": [
            {
                "file_id": "file_1",
                "filename": "plan.pdf",
                "score": 0.8734567890123,
                "text": "day one",
                "attributes": {"page": 3, "final": True},
            }
        ],
    },
    {
        "id": "cu_1",
        "type": "computer_call",
        "call_id": "call_cu",
        "status": "completed",
        "action": {"type": "click", "button": "left", "x": 10, "y": 20},
        "pending_safety_checks": [],
    },
    {
        "type": "computer_call_output",
        "call_id": "call_cu",
        "output": {
            "type": "computer_screenshot",
            "image_url": "data:image/png;base64,AA==",
        },
    },
    {
        "id": "ci_1",
        "type": "code_interpreter_call",
        "status": "completed",
        "code": "print(2**70)",
        "container_id": "cntr_1",
        "outputs": [{"type": "logs", "logs": "1180591620717411303424"}],
    },
    {
        "id": "ig_1",
        "type": "image_generation_call",
        "status": "completed",
        "result": "iVBORw0KGgoAAAANSUhEUg" * 8,
    },
    {
        "id": "ls_1",
        "type": "local_shell_call",
        "call_id": "call_sh",
        "status": "completed",
        "action": {
            "type": "exec",
            "command": ["ls", "-la"],
            "env": {},
            "timeout_ms": None,
            "working_directory": None,
        },
    },
    {"type": "local_shell_call_output", "id": "call_sh", "output": "total 0"},
    {
        "id": "mcp_1",
        "type": "mcp_call",
        "server_label": "docs",
        "name": "search",
        "arguments": "{}",
        "output": None,
        "error": None,
    },
    {
        "id": "mcpl_1",
        "type": "mcp_list_tools",
        "server_label": "docs",
        "tools": [{"name": "search", "input_schema": {"type": "object"}}],
    },
    {
        "id": "ct_1",
        "type": "custom_tool_call",
        "call_id": "call_ct",
        "name": "grammar",
        "input": "a b c",
    },
    {"type": "custom_tool_call_output", "call_id": "call_ct", "output": "ok"},
    {"id": "cmp_1", "type": "compaction", "encrypted_content": "opaque=="},
    {
        "type": "function_call_output",
        "call_id": "call_values",
        "output": "values",
        "extra": {
            "big": 2**62,
            "negative": -(2**53) - 1,
            "float": 0.1,
            "tiny": 5e-324,
            "exp": 1.5e300,
            "empty": {},
            "list": [[], [[]], None, False, 0],
            "deep": {"a": {"b": {"c": {"d": ["e"]}}}},
            "control": "\x00\x01\x1f nul and friends",
        },
    },
]
"""One of each kind of item, in a plausible order."""
