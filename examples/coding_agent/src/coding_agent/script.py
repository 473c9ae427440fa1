"""The scripted model's part: the demo task, as a function of the history.

The offline model plays one task: add `greet.py` with a test and run the
test. Each reply depends only on the history (the last tool call and its
result), never on state kept in the process, so a new process that resumes
the session continues the script where the log ends. When the test run was
interrupted by a crash, the script does what a careful model should: it
inspects the workspace before deciding whether to run the tests again. When
the session was blocked on that run and a person resolved it, the next turn
goes by their word.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from typing import Final

from turnkeep.agent.messages import Message
from turnkeep.agent.models import ModelRequest, Reply, ScriptedCall, ScriptedModel

__all__ = ["GREET_PY", "TASK", "TEST_GREET_PY", "scripted_model"]

TASK: Final = "Add a greet(name) function in greet.py with a test, and run the test."

GREET_PY: Final = '''\
def greet(name: str) -> str:
    """Return a friendly greeting."""
    return f"Hello, {name}!"
'''

TEST_GREET_PY: Final = '''\
"""Test greet(); every run is logged in test-runs.log, the result in test-report.txt."""

import pathlib

from greet import greet


def main() -> None:
    with open("test-runs.log", "a", encoding="utf-8") as log:
        log.write("run\\n")
    assert greet("Ada") == "Hello, Ada!"
    assert greet("") == "Hello, !"
    pathlib.Path("test-report.txt").write_text("2 passed\\n", encoding="utf-8")
    print("2 passed")


if __name__ == "__main__":
    main()
'''


def _test_command() -> str:
    return f"{shlex.quote(sys.executable)} test_greet.py"


def _last_call(
    messages: Sequence[Message],
) -> tuple[str | None, dict[str, object], Message | None]:
    """The last tool call since the user's last message, and its result."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    for index in range(len(messages) - 1, last_user, -1):
        message = messages[index]
        if message.role == "assistant" and message.tool_calls:
            call = message.tool_calls[-1]
            result = next(
                (
                    m
                    for m in messages[index + 1 :]
                    if m.role == "tool" and m.tool_call_id == call.id
                ),
                None,
            )
            return call.name, dict(call.arguments), result
    return None, {}, None


def _resolution(messages: Sequence[Message]) -> str | None:
    """The `[resolved]` note said about the last call before the user's message."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    for message in reversed(messages[:last_user]):
        if message.role == "user" and message.content.startswith("[resolved]"):
            return message.content
        if message.role != "user":
            return None
    return None


def pick(request: ModelRequest) -> Reply:
    """The next reply of the demo task for this history."""
    name, arguments, result = _last_call(request.messages)
    status = result.status if result is not None else None
    content = result.content if result is not None else ""
    resolved = _resolution(request.messages) if name is None else None
    if resolved is not None and "DID take effect" in resolved:
        return Reply(
            "The interrupted test run was checked and did take effect, so there "
            "is no need to run it again. greet.py and test_greet.py are in place."
        )
    if resolved is not None:
        return Reply(
            "The interrupted test run did not take effect. Running the test again.",
            (ScriptedCall("run_command", {"command": _test_command()}),),
        )
    if name is None:
        return Reply(
            "I'll look at the workspace first.",
            (ScriptedCall("list_dir", {"path": "."}),),
        )
    if name == "list_dir":
        return Reply(
            "I'll add the greeting module.",
            (ScriptedCall("write_file", {"path": "greet.py", "content": GREET_PY}),),
        )
    if name == "write_file" and arguments.get("path") == "greet.py":
        return Reply(
            "Now a test for it.",
            (
                ScriptedCall(
                    "write_file", {"path": "test_greet.py", "content": TEST_GREET_PY}
                ),
            ),
        )
    if name == "write_file":
        return Reply(
            "Running the test.",
            (ScriptedCall("run_command", {"command": _test_command()}),),
        )
    if name == "run_command" and status == "interrupted":
        return Reply(
            "The test run was interrupted and its outcome is unknown, so I will "
            "not just run it again: first I check whether it left a report.",
            (ScriptedCall("read_file", {"path": "test-report.txt"}),),
        )
    if name == "run_command":
        return Reply("The test passes. greet.py and test_greet.py are in place.")
    if name == "read_file" and status == "ok" and "passed" in content:
        return Reply(
            "The report shows the interrupted run had passed, so there is no "
            "need to run it again. greet.py and test_greet.py are in place."
        )
    if name == "read_file":
        return Reply(
            "There is no report, so the run never finished. Running the test again.",
            (ScriptedCall("run_command", {"command": _test_command()}),),
        )
    return Reply(f"I did not expect a {name} call here; stopping.")


def scripted_model() -> ScriptedModel:
    """The offline model of the coding agent."""
    return ScriptedModel(pick)
