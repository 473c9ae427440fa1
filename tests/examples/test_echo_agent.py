"""The echo agent end to end: real processes, persistence by configuration."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.examples.support import Agent, configure, example_env, value
from tests.loop.support import BACKENDS, backend_host_config, backend_ready

from turnkeep import Host, SessionEvent, derive_messages
from turnkeep.agent.recovery import pairing_problems
from turnkeep.events import TurnEnd, TurnStart


def stored(backend: str, store: Path, session_id: str) -> list[SessionEvent]:
    async def load() -> list[SessionEvent]:
        async with Host(backend_host_config(backend, store)) as host:
            session = await host.sessions.resume(session_id)
            return list(session.events)

    return asyncio.run(load())


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_shot_turns_continue_a_stored_session(backend: str, tmp_path: Path) -> None:
    backend_ready(backend, tmp_path)
    cwd = tmp_path / "run"
    configure(cwd, backend, tmp_path)
    env = example_env(tmp_path)
    first = Agent.start("echo_agent", ["hello", "there"], cwd=cwd, env=env).finish()
    assert "You said: hello there" in first
    session_id = value(first, "session:")
    again = Agent.start(
        "echo_agent", ["--session", session_id, "again"], cwd=cwd, env=env
    ).finish()
    assert "You said: again" in again
    assert value(again, "session:") == session_id
    events = stored(backend, tmp_path, session_id)
    assert [e.data.turn for e in events if isinstance(e, TurnStart)] == [1, 2]
    assert [m.content for m in derive_messages(events)] == [
        "hello there",
        "You said: hello there",
        "again",
        "You said: again",
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_repl_loses_no_finished_turn(backend: str, tmp_path: Path) -> None:
    backend_ready(backend, tmp_path)
    cwd = tmp_path / "run"
    configure(cwd, backend, tmp_path)
    env = example_env(tmp_path)
    repl = Agent.start("echo_agent", [], cwd=cwd, env=env, stdin=True)
    repl.send("first message\n")
    # The reply's line ends only after the turn's flush returned.
    repl.read_until("> You said: first message")
    repl.send("second message\n")
    repl.read_until("> You said: second message")
    repl.kill()  # SIGKILL: no close, no drain

    log = stored(backend, tmp_path, _session_of(backend, tmp_path))
    assert [e.data.status for e in log if isinstance(e, TurnEnd)] == ["completed"] * 2
    assert pairing_problems(log) == []

    session_id = _session_of(backend, tmp_path)
    resumed = Agent.start(
        "echo_agent", ["--session", session_id], cwd=cwd, env=env, stdin=True
    )
    resumed.send("third message\n/exit\n")
    output = resumed.finish()
    assert "You said: third message" in output
    events = stored(backend, tmp_path, session_id)
    assert [e.data.turn for e in events if isinstance(e, TurnStart)] == [1, 2, 3]


def _session_of(backend: str, store: Path) -> str:
    async def only() -> str:
        async with Host(backend_host_config(backend, store)) as host:
            page = await host.require_persistence().list()
            (meta,) = page.items
            return meta.id

    return asyncio.run(only())


def test_resuming_without_persistence_is_a_clear_error(tmp_path: Path) -> None:
    env = example_env(tmp_path, TURNKEEP_PERSISTENCE="none")
    agent = Agent.start("echo_agent", ["--session", "abc", "hi"], cwd=tmp_path, env=env)
    output = agent.finish()
    assert agent.proc.returncode == 2
    assert "no persistence backend is active" in output


def test_the_example_configuration_picks_the_shared_plugin() -> None:
    from tests.examples.support import REPO

    from turnkeep import load_config

    for example in ("echo_agent", "coding_agent"):
        config = load_config(REPO / "examples" / example, env={})
        assert config.persistence == "jsonl"
