"""Cold and warm continuation give byte-identical model histories.

For every example transcript (the echo agent's, the coding agent's demo
task, and a mixed one with tool errors, unknown tools and a failed model
call) on each durable backend: the transcript runs in host A; the store is
copied; host B loads the copy from disk (cold) while A keeps the session in
memory (warm). Their `derive_messages` outputs are compared byte for byte
(`encode_messages`), then both continue with the same next turn and are
compared again, in memory and after reloading each from disk.
The crash-and-resume transcript of the coding agent is covered the same way
in `tests/examples/test_coding_agent.py`, after a real kill.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import pytest
from tests.loop.support import (
    BACKENDS,
    SpyTool,
    backend_host_config,
    backend_ready_async,
)

from coding_agent.script import TASK, scripted_model
from coding_agent.tools import workspace_tools
from coding_agent.workspace import Workspace
from turnkeep import (
    AgentLoop,
    Host,
    Model,
    ModelRequest,
    SessionEvent,
    Tool,
    derive_messages,
)
from turnkeep.agent import encode_messages
from turnkeep.errors import ToolError
from turnkeep.testing import EchoModel, Reply, ScriptedCall, ScriptedModel


@attrs.frozen
class Transcript:
    """An example conversation: its agent and its user messages."""

    name: str
    agent: Callable[[Path], tuple[Model, Sequence[Tool]]]
    inputs: tuple[str, ...]
    continuation: str


def _echo(_root: Path) -> tuple[Model, Sequence[Tool]]:
    return EchoModel(), ()


def _coding(root: Path) -> tuple[Model, Sequence[Tool]]:
    workspace = root / "workspace"
    if not workspace.exists():
        workspace.mkdir()
        (workspace / "README.md").write_text("# tiny project\n")
    return scripted_model(), workspace_tools(Workspace(workspace))


def _mixed_pick(request: ModelRequest) -> Reply:
    user = next(m.content for m in reversed(request.messages) if m.role == "user")
    steps = 0
    for message in reversed(request.messages):
        if message.role == "user":
            break
        steps += message.role == "assistant"
    if user == "fail":
        raise ToolError("the provider refused (simulated)")
    if steps == 0:
        return Reply(
            f"Working on {user!r}.",
            (
                ScriptedCall("look", {"what": user}),
                ScriptedCall("act", {"n": len(user)}),
                ScriptedCall("broken"),
                ScriptedCall("missing"),
            ),
        )
    return Reply(f"Done with {user!r}, \u00e9t\u00e9 \u2603.")


def _mixed(_root: Path) -> tuple[Model, Sequence[Tool]]:
    return ScriptedModel(_mixed_pick), (
        SpyTool("look", replay="safe", output="seen"),
        SpyTool("act", output="acted"),
        SpyTool("broken", fail=ToolError("it broke")),
    )


TRANSCRIPTS = (
    Transcript("echo", _echo, ("hello", "how are you?", "bye"), "one more"),
    Transcript("coding", _coding, (TASK,), "Thanks. Check again."),
    Transcript("mixed", _mixed, ("first", "fail", "second"), "third"),
)


def history(events: Sequence[SessionEvent]) -> bytes:
    return encode_messages(derive_messages(events))


async def _reload(backend: str, root: Path, session_id: str) -> bytes:
    async with Host(backend_host_config(backend, root)) as host:
        session = await host.sessions.resume(session_id)
        return history(session.events)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("transcript", TRANSCRIPTS, ids=lambda t: t.name)
@pytest.mark.asyncio
async def test_cold_and_warm_continuation_give_identical_histories(
    backend: str, transcript: Transcript, tmp_path: Path
) -> None:
    await backend_ready_async(backend, tmp_path)
    warm_root, cold_root = tmp_path / "warm", tmp_path / "cold"
    warm_root.mkdir()
    async with Host(backend_host_config(backend, warm_root)) as warm_host:
        model, tools = transcript.agent(warm_root)
        warm = AgentLoop.create("agent", host=warm_host, model=model, tools=tools)
        sid = warm.session_id
        for text in transcript.inputs:
            await warm.run_turn(text)
        live = warm_host.sessions.get(sid)
        assert live.settled
        shutil.copytree(warm_root, cold_root)

        async with Host(backend_host_config(backend, cold_root)) as cold_host:
            cold_model, cold_tools = transcript.agent(cold_root)
            # The copy names this (live) process as its owner: take it over.
            cold = await AgentLoop.resume(
                "agent",
                sid,
                host=cold_host,
                model=cold_model,
                tools=cold_tools,
                steal=True,
            )
            loaded = cold_host.sessions.get(sid)
            assert list(loaded.events) == list(live.events)
            assert history(loaded.events) == history(live.events)

            warm_result = await warm.run_turn(transcript.continuation)
            cold_result = await cold.run_turn(transcript.continuation)
            assert warm_result.turn == cold_result.turn == len(transcript.inputs) + 1
            warm_bytes = history(live.events)
            assert history(loaded.events) == warm_bytes
            await cold.close()
        await warm.close()
    assert await _reload(backend, warm_root, sid) == warm_bytes
    assert await _reload(backend, cold_root, sid) == warm_bytes
