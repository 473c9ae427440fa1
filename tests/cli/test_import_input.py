"""Bad input to `turnkeep import` is one typed line naming file and line.

Issue 12 point 12: deep nesting, malformed JSON, wrong shapes (a list where
an object is expected, missing fields, wrong types), a file that is not
UTF-8, an empty file. Each exits 1 (bad input) with `turnkeep: FILE, line
N: ...`, never an internal error or a traceback, and the store is left
exactly as it was, including when the failure comes after some events were
appended.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import msgspec
import pytest
from tests.cli.support import Store, cli, converse, one_line_error

from turnkeep.cli.jsoninput import MAX_DEPTH, check_text, read_items
from turnkeep.errors import ImportInputError

CASES: dict[str, tuple[bytes, int, str]] = {
    # name: (file content, line named, words in the message)
    "deep-nesting": (b"[" * 100_000, 1, f"nested more than {MAX_DEPTH} deep"),
    "deep-inside-an-item": (
        b'[\n{"role": "user", "content": "hi"},\n{"role": "user", "content": '
        + b"[" * 300
        + b"]" * 300
        + b"}\n]",
        3,
        "nested more than",
    ),
    # JSON text inside a string is nested too: decoding it must not recurse.
    "arguments-nested-too-deep": (
        b'[\n{"role": "user", "content": "hi"},\n{"role": "assistant", '
        b'"tool_calls": [{"id": "c", "type": "function", "function": {"name": '
        b'"f", "arguments": "' + b"[" * 40_000 + b"]" * 40_000 + b'"}}]}\n]',
        3,
        "item #1: a tool call's arguments are JSON text nested more than",
    ),
    "agents-arguments-nested-too-deep": (
        b'[\n{"role": "user", "content": "hi"},\n{"type": "function_call", '
        b'"call_id": "c", "name": "f", "arguments": "{\\"a\\": '
        + b"[" * 460
        + b"]" * 460
        + b'}"}\n]',
        3,
        "nested more than",
    ),
    "malformed": (
        b'[\n  {"role": "user", "content": "hi"},\n  {"role": }\n]',
        3,
        "not JSON",
    ),
    "truncated": (b'[\n  {"role": "user",\n  "content": "h', 3, "not JSON"),
    "bad-json-line": (
        b'{"role": "user", "content": "a"}\n\n'
        b'{"role": "user", "content": "b"}\n{oops}\n',
        4,
        "not JSON",
    ),
    "not-utf8": (b'[\n{"role": "user", "content": "caf\xe9"}]', 2, "not UTF-8"),
    "utf16": ('[{"role": "user", "content": "hi"}]'.encode("utf-16"), 1, "not UTF-8"),
    "empty": (b"", 1, "the file is empty"),
    "blank": (b"\n  \n\t\n", 1, "the file is empty"),
    "a-number": (b"42", 1, "found a number"),
    "list-where-object": (
        b'[\n{"role": "user", "content": "hi"},\n["user", "hi"]\n]',
        3,
        "item #1 is a list, not a JSON object",
    ),
    "messages-not-a-list": (b'{"model": "m",\n "messages": {"a": 1}}', 2, "`messages`"),
    "no-role-nor-type": (
        b'{"messages": [\n{"role": "user", "content": "a"},\n\n  {"content": "b"}]}',
        4,
        "neither `role` nor `type`",
    ),
    "role-not-a-string": (
        b'[{"role": 5, "content": "x"}]',
        1,
        "`role` must be a string",
    ),
    "content-a-number": (
        b'[\n{"role": "user", "content": "hi"},\n{"role": "assistant", "content": 5}]',
        3,
        "`content` must be a string, a list of parts or null, not a number",
    ),
    "content-part-a-number": (
        b'[{"role": "user", "content": ["a", 7]}]',
        1,
        "`content[1]` must be",
    ),
    "tool-calls-not-a-list": (
        b'[{"role": "user", "content": "a"},\n'
        b' {"role": "assistant", "tool_calls": "x"}]',
        2,
        "`tool_calls` must be a list",
    ),
    "tool-call-without-name": (
        b'[{"role": "user", "content": "a"},\n {"role": "assistant", "tool_calls": '
        b'[{"id": "c", "function": {"arguments": "{}"}}]}]',
        2,
        "`tool_calls[0].function.name` is missing",
    ),
    "tool-call-arguments-a-number": (
        b'[{"role": "assistant", "tool_calls": '
        b'[{"id": "c", "function": {"name": "f", "arguments": 3}}]}]',
        1,
        "`tool_calls[0].function.arguments` must be a string or an object",
    ),
    "tool-result-without-id": (
        b'[{"role": "tool", "content": "out"}]',
        1,
        "`tool_call_id` is missing",
    ),
    "function-call-without-call-id": (
        b'{"role": "user", "content": "a"}\n{"type": "function_call", "name": "f"}\n',
        2,
        "`call_id` is missing",
    ),
    "function-call-name-a-list": (
        b'[{"type": "function_call", "call_id": "c", "name": ["f"]}]',
        1,
        "`name` must be a string, not a list",
    ),
    "type-an-object": (b'[{"type": {"a": 1}}]', 1, "`type` must be a string"),
    "nothing-to-import": (
        b'[{"role": "system", "content": "be terse"}]',
        1,
        "holds no conversation to import (skipped 1 system messages)",
    ),
    "export-header-missing-fields": (
        b'{"format": "turnkeep-export", "version": 1}\n',
        1,
        "header is invalid",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_naming_file_and_line(
    store: Store, tmp_path: Path, case: str
) -> None:
    content, line, words = CASES[case]
    asyncio.run(converse(store, "kept", prompts=("hi",)))
    before = store.digest()
    source = tmp_path / f"{case}.json"
    source.write_bytes(content)
    result = cli("import", str(source), "--id", "new", store=store)
    assert result.exit_code == 1, result.output
    message = one_line_error(result)
    assert message.startswith(f"turnkeep: {source}, line {line}: "), message
    assert words in message, message
    assert "internal error" not in message
    assert store.digest() == before
    assert asyncio.run(store.ids()) == ["kept"]


def test_stdin_is_named_stdin(store: Store) -> None:
    result = cli("import", "-", store=store, input="[1]")
    assert result.exit_code == 1
    assert one_line_error(result).startswith("turnkeep: stdin, line 1: item #0")


def test_a_damaged_export_names_the_line_of_the_bad_event(
    store: Store, tmp_path: Path
) -> None:
    asyncio.run(converse(store, "s", prompts=("hi",)))
    lines = cli("export", "s", store=store).stdout_bytes.splitlines()
    header = msgspec.json.decode(lines[0])
    lines[3] = b'{"type":"user/message","seq":2,"time":1,"data":{"text":5}}'
    body = b"".join(line + b"\n" for line in lines[1:])
    header["sha256"] = hashlib.sha256(body).hexdigest()
    source = tmp_path / "bad-event.jsonl"
    source.write_bytes(msgspec.json.encode(header) + b"\n" + body)
    result = cli("import", str(source), "--id", "new", store=store)
    assert result.exit_code == 1
    message = one_line_error(result)
    assert message.startswith(f"turnkeep: {source}, line 4: "), message
    assert "cannot read" in message
    assert asyncio.run(store.ids()) == ["s"]


def test_a_failure_after_appending_leaves_nothing_stored(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event over max_event_bytes, late in a long import: nothing stays."""
    asyncio.run(converse(store, "kept", prompts=("hi",)))
    before = store.digest()
    monkeypatch.setenv("TURNKEEP_MAX_EVENT_BYTES", "4096")
    chat = [{"role": "user", "content": f"message {i}"} for i in range(2000)]
    chat.append({"role": "user", "content": "x" * 8192})
    source = tmp_path / "big.json"
    source.write_bytes(msgspec.json.encode(chat))
    result = cli("import", str(source), "--id", "new", store=store)
    assert result.exit_code == 1, result.output
    assert "4096" in one_line_error(result)
    assert asyncio.run(store.ids()) == ["kept"]
    assert store.digest() == before


def test_the_reader_raises_the_typed_error_with_its_line() -> None:
    with pytest.raises(ImportInputError) as caught:
        check_text(b"\n\n" + b"[" * 1000, "f.json")
    assert (caught.value.path, caught.value.line) == ("f.json", 3)
    items = read_items(b"[\n1,\n\n2]", "f.json")
    assert items.values == [1, 2]
    assert [items.line_of(0), items.line_of(1)] == [2, 4]
    lines = read_items(b'{"a": 1}\n\n{"b": []}', "f.json")
    assert [lines.line_of(0), lines.line_of(1)] == [1, 3]
