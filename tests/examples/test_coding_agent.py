"""The coding agent: confined tools, and a real kill in the middle of a tool."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.examples.support import Agent, configure, example_env, value
from tests.loop.support import BACKENDS, backend_host_config, backend_ready

from coding_agent import Workspace, choose_model, open_agent, workspace_tools
from coding_agent.script import scripted_model
from coding_agent.tools import DEFAULT_INHERITED, RunCommand
from turnkeep import AgentLoop, Host, SessionEvent, Tool, ToolContext, derive_messages
from turnkeep.agent import encode_messages
from turnkeep.agent.openai_compat import OpenAIModel
from turnkeep.agent.recovery import pairing_problems
from turnkeep.errors import ContextMismatchError, ToolError
from turnkeep.events import EffectResolved, RunContext, ToolCall, ToolResult, TurnEnd
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel

CONTEXT = ToolContext(call_id="call_test", session_id="s", agent_id="a", turn=1)


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "workspace"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\nanswer = 42\n")
    (root / "notes.txt").write_text("remember the answer\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    return Workspace(root)


def tools(workspace: Workspace) -> dict[str, Tool]:
    return {t.name: t for t in workspace_tools(workspace)}


async def run(tool: Tool, **arguments: Any) -> str:
    return await tool.run(arguments, CONTEXT)


@pytest.mark.asyncio
async def test_the_tools_declare_their_replay_policy(workspace: Workspace) -> None:
    policy = {name: getattr(t, "replay", None) for name, t in tools(workspace).items()}
    assert policy == {
        "read_file": "safe",
        "list_dir": "safe",
        "search": "safe",
        "write_file": "unsafe",
        "apply_patch": "unsafe",
        "run_command": "unsafe",
    }


@pytest.mark.asyncio
async def test_paths_that_leave_the_workspace_are_refused(
    workspace: Workspace, tmp_path: Path
) -> None:
    by_name = tools(workspace)
    root = workspace.root
    (root / "out-file").symlink_to(tmp_path / "secret.txt")
    (root / "out-dir").symlink_to(tmp_path)
    (root / "in-file").symlink_to(root / "notes.txt")
    escapes = [
        "../secret.txt",
        "src/../../secret.txt",
        str(tmp_path / "secret.txt"),
        "out-file",
        "out-dir/secret.txt",
        "",
        "a\x00b",
    ]
    for path in escapes:
        with pytest.raises(ToolError):
            await run(by_name["read_file"], path=path)
        with pytest.raises(ToolError):
            await run(by_name["write_file"], path=path, content="x")
        with pytest.raises(ToolError):
            await run(by_name["list_dir"], path=path)
    with pytest.raises(ToolError):
        await run(by_name["write_file"], path="out-dir/new.txt", content="x")
    with pytest.raises(ToolError):
        await run(by_name["write_file"], path=".", content="x")
    assert (tmp_path / "secret.txt").read_text() == "outside\n"
    assert not (tmp_path / "new.txt").exists()
    # A symlink that stays inside is fine.
    assert await run(by_name["read_file"], path="in-file") == "remember the answer\n"


@pytest.mark.asyncio
async def test_reading_listing_and_searching(workspace: Workspace) -> None:
    by_name = tools(workspace)
    (workspace.root / "link").symlink_to(workspace.root / "notes.txt")
    assert await run(by_name["list_dir"]) == "link@\nnotes.txt\nsrc/"
    assert await run(by_name["list_dir"], path="src") == "app.py"
    found = await run(by_name["search"], text="answer")
    assert found == "notes.txt:1: remember the answer\nsrc/app.py:2: answer = 42"
    assert await run(by_name["search"], text="nowhere") == "no matches"
    with pytest.raises(ToolError):
        await run(by_name["search"], text="")
    with pytest.raises(ToolError):
        await run(by_name["read_file"], path="missing.txt")
    with pytest.raises(ToolError):
        await run(by_name["read_file"], path="src")  # not a regular file
    with pytest.raises(ToolError):
        await run(by_name["list_dir"], path="notes.txt")
    big = "x" * (70 * 1024)
    (workspace.root / "big.txt").write_text(big)
    text = await run(by_name["read_file"], path="big.txt")
    assert text.endswith("[... cut at 65536 bytes]")


@pytest.mark.asyncio
async def test_writing_and_patching(workspace: Workspace) -> None:
    by_name = tools(workspace)
    said = await run(by_name["write_file"], path="pkg/new/mod.py", content="a = 1\n")
    assert said == "wrote 6 bytes to pkg/new/mod.py"
    assert (workspace.root / "pkg" / "new" / "mod.py").read_text() == "a = 1\n"
    assert await run(by_name["apply_patch"], path="pkg/new/mod.py", old="1", new="2")
    assert (workspace.root / "pkg" / "new" / "mod.py").read_text() == "a = 2\n"
    (workspace.root / "twice.txt").write_text("x x\n")
    with pytest.raises(ToolError, match="occurs 2 times"):
        await run(by_name["apply_patch"], path="twice.txt", old="x", new="y")
    with pytest.raises(ToolError, match="occurs 0 times"):
        await run(by_name["apply_patch"], path="twice.txt", old="z", new="y")
    with pytest.raises(ToolError):
        await run(by_name["apply_patch"], path="twice.txt", old="", new="y")
    leftovers = [p.name for p in workspace.root.rglob(".*.tmp")]
    assert leftovers == []


@pytest.mark.asyncio
async def test_run_command_in_the_workspace(workspace: Workspace) -> None:
    command = tools(workspace)["run_command"]
    script = "import os; print(os.getcwd()); print(os.environ['TURNKEEP_CALL_ID'])"
    output = await run(command, command=f"{sys.executable} -c {script!r}")
    assert output == f"exit status 0\n{workspace.root}\ncall_test\n"
    failing = await run(command, command=f"{sys.executable} -c 'raise SystemExit(3)'")
    assert failing.startswith("exit status 3")
    for bad in ("", "'unclosed", "no-such-program-here"):
        with pytest.raises(ToolError):
            await run(command, command=bad)
    with pytest.raises(ToolError):
        await run(command, command="true", timeout=0)


@pytest.mark.asyncio
async def test_run_command_arguments_that_name_paths_stay_inside(
    workspace: Workspace,
) -> None:
    command = tools(workspace)["run_command"]
    (workspace.root / "sub").mkdir()
    (workspace.root / "lnk").symlink_to(workspace.root.parent)
    (workspace.root / "in").symlink_to(workspace.root / "sub")
    for outside in (
        "cat /etc/passwd",
        "ls ..",
        "ls sub/../..",
        "cp notes.txt --target-directory=/tmp",
        "dd if=/etc/passwd",
        "tar -C/ -xf x.tar",
        "cc -o/tmp/out main.c",
        "cmd --x=a=/etc",
        "curl file:///etc/passwd",
        "touch /tmp/new-file-here",  # does not exist, but /tmp does
        f"ls {workspace.root.parent}",
        # through a symlink inside the workspace that leads out
        "cat lnk/secret.txt",
        "ls lnk",
        "touch lnk/new-file-here",
        "cp notes.txt --target-directory=lnk",
        # glued to the last of a cluster of short options
        "sort -uo/tmp/sorted notes.txt",
        "sort -ruo../out notes.txt",
        "sort -uolnk/out notes.txt",
    ):
        with pytest.raises(ToolError, match="names a path outside the workspace"):
            await run(command, command=outside)
    for inside in (
        "ls sub/..",
        f"ls {workspace.root / 'sub'}",
        "ls -a sub",
        # Patterns that look like absolute paths but name nothing there.
        "sed -n /def-main/,/^$/p sub",
        "grep -rn /api/v1 sub",
        # a symlink that stays inside, and clusters whose values stay inside
        "ls in",
        "sort -uosub/sorted notes.txt",
        "sort -ruo./sub/x notes.txt",
        "grep -rn5 answer sub",
    ):
        assert (await run(command, command=inside)).startswith("exit status")


@pytest.mark.asyncio
async def test_run_command_sees_none_of_this_process_s_secrets(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNKEEP_OPENAI_API_KEY", "sk-canary-run-command")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "canary-aws")
    command = tools(workspace)["run_command"]
    script = "import os, json; print(json.dumps(dict(os.environ), sort_keys=True))"
    output = await run(command, command=f"{sys.executable} -c {script!r}")
    assert "canary" not in output
    environment = msgspec.json.decode(output.split("\n", 1)[1], type=dict[str, str])
    assert environment["HOME"] == str(workspace.root)
    assert environment["TURNKEEP_CALL_ID"] == "call_test"
    assert environment["PATH"] == os.environ["PATH"]
    # What else a command needs (a proxy, say) is passed by name.
    monkeypatch.setenv("https_proxy", "http://proxy.invalid:3128")
    chosen = RunCommand(workspace, inherit=DEFAULT_INHERITED | {"https_proxy"})
    output = await run(chosen, command=f"{sys.executable} -c {script!r}")
    assert "proxy.invalid" in output
    assert "canary" not in output


@pytest.mark.asyncio
async def test_run_command_kills_what_runs_too_long(
    workspace: Workspace, tmp_path: Path
) -> None:
    command = tools(workspace)["run_command"]
    pid_file = tmp_path / "pid"
    script = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
        "time.sleep(60)"
    )
    # On CI's busy machine Python may take more than the second to start,
    # and be killed before it wrote its pid: then again, with more time.
    for limit in (1, 5, 30):
        with pytest.raises(ToolError, match=f"did not finish within {limit} s"):
            await run(command, command=f"{sys.executable} -c {script!r}", timeout=limit)
        if pid_file.exists() and pid_file.read_text():
            break
    else:
        pytest.fail("the command never wrote its pid")
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


@pytest.mark.asyncio
async def test_cancelling_the_turn_kills_the_running_command(
    workspace: Workspace, tmp_path: Path
) -> None:
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    script = (
        f"import os, time; f = open({str(fifo)!r}, 'w'); f.write(str(os.getpid())); "
        "f.close(); time.sleep(60)"
    )
    model = ScriptedModel(
        [
            Reply(
                "running",
                (
                    ScriptedCall(
                        "run_command", {"command": f"{sys.executable} -c {script!r}"}
                    ),
                ),
            )
        ]
    )
    async with Host(backend_host_config("memory", tmp_path)) as host:
        loop = AgentLoop.create(
            "coding", host=host, model=model, tools=workspace_tools(workspace)
        )
        running = asyncio.create_task(loop.run_turn("go"))
        pid = int(await asyncio.to_thread(fifo.read_text))  # the command started
        result = await loop.cancel()
        assert result is not None
        assert result.status == "cancelled"
        assert (await running).status == "cancelled"
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        answer = host.sessions.get(loop.session_id).events[-2]
        assert isinstance(answer, ToolResult)
        assert answer.data.status == "interrupted"


def test_the_model_is_scripted_unless_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TURNKEEP_OPENAI_MODEL", raising=False)
    model, name = choose_model()
    assert isinstance(model, ScriptedModel)
    assert name == "scripted (offline)"
    monkeypatch.setenv("TURNKEEP_OPENAI_MODEL", "some-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:1/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-shown")
    model, name = choose_model()
    assert isinstance(model, OpenAIModel)
    assert name == "some-model at http://localhost:1/v1"
    assert "sk-not-shown" not in name


# -- a real kill in the middle of an unsafe tool -------------------------------


def crash_mid_command(backend: str, tmp_path: Path) -> tuple[Path, Path, str]:
    """Run the agent until `run_command` has run, then SIGKILL it."""
    cwd = tmp_path / "run"
    configure(cwd, backend, tmp_path)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("# tiny\n")
    env = example_env(tmp_path, CODING_AGENT_HOLD_AFTER="run_command")
    agent = Agent.start(
        "coding_agent", ["--workspace", str(workspace)], cwd=cwd, env=env
    )
    session_id = value(agent.read_until("session:"), "session:")
    agent.read_until("[hold]")
    agent.kill()
    assert (workspace / "test-runs.log").read_text().split() == ["run"]
    return cwd, workspace, session_id


def load(backend: str, store: Path, session_id: str) -> list[SessionEvent]:
    async def read() -> list[SessionEvent]:
        async with Host(backend_host_config(backend, store)) as host:
            return list((await host.sessions.resume(session_id)).events)

    return asyncio.run(read())


@pytest.mark.crash
@pytest.mark.parametrize("backend", BACKENDS)
def test_killed_mid_command_then_resumed_by_a_new_process(
    backend: str, tmp_path: Path
) -> None:
    backend_ready(backend, tmp_path)
    cwd, workspace, session_id = crash_mid_command(backend, tmp_path)
    crashed = load(backend, tmp_path, session_id)
    assert pairing_problems(crashed) == []
    commands = [
        e for e in crashed if isinstance(e, ToolCall) and e.data.name == "run_command"
    ]
    assert len(commands) == 1  # its intent was durable before it ran
    assert not any(isinstance(e, ToolResult) for e in crashed[commands[0].seq :])

    resumed = Agent.start(
        "coding_agent",
        ["--workspace", str(workspace), "--session", session_id, "--continue"],
        cwd=cwd,
        env=example_env(tmp_path),
    )
    output = resumed.finish()
    assert resumed.proc.returncode == 0, output
    assert "<- interrupted: [interrupted]" in output
    assert "It was NOT run again." in output
    # The test command may write: the session waits for a person's word.
    call_id = commands[0].data.call_id
    assert f"BLOCKED: the outcome of {call_id} is unknown" in output
    assert f"to go on: turnkeep resolve {session_id} {call_id} --done" in output
    assert "-- turn 1 interrupted --" in output
    refused = Agent.start(
        "coding_agent",
        ["--workspace", str(workspace), "--session", session_id, "go on"],
        cwd=cwd,
        env=example_env(tmp_path),
    )
    output = refused.finish()
    assert refused.proc.returncode == 2, output
    assert "turnkeep resolve" in output

    report = (workspace / "test-report.txt").read_text().strip()
    resolve = subprocess.run(
        [
            str(Path(sys.executable).parent / "turnkeep"),
            "resolve",
            session_id,
            call_id,
            "--done",
            "--result",
            report,
            "--reason",
            f"test-report.txt says {report}",
        ],
        cwd=cwd,
        env=example_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert resolve.returncode == 0, resolve.stdout + resolve.stderr
    going_on = Agent.start(
        "coding_agent",
        ["--workspace", str(workspace), "--session", session_id, "go on"],
        cwd=cwd,
        env=example_env(tmp_path),
    )
    output = going_on.finish()
    assert going_on.proc.returncode == 0, output
    assert "did take effect, so there is no need to run it again" in output
    assert "-- turn 2 completed --" in output
    assert (workspace / "test-runs.log").read_text().split() == ["run"]

    final = load(backend, tmp_path, session_id)
    assert final[: len(crashed)] == crashed
    assert pairing_problems(final) == []
    answers = {e.data.call_id: e.data for e in final if isinstance(e, ToolResult)}
    assert answers[call_id].status == "interrupted"
    names = [e.data.name for e in final if isinstance(e, ToolCall)]
    assert names == ["list_dir", "write_file", "write_file", "run_command"]
    resolved = [e for e in final if isinstance(e, EffectResolved)]
    assert [(e.data.call_id, e.data.outcome) for e in resolved] == [(call_id, "done")]
    ends = [(e.data.turn, e.data.status) for e in final if isinstance(e, TurnEnd)]
    assert ends == [(1, "interrupted"), (2, "completed")]


@pytest.mark.crash
@pytest.mark.parametrize("backend", BACKENDS)
def test_cold_and_warm_histories_agree_after_a_real_kill(
    backend: str, tmp_path: Path
) -> None:
    backend_ready(backend, tmp_path)
    _cwd, workspace, session_id = crash_mid_command(backend, tmp_path)

    async def continue_warm() -> bytes:
        async with Host(backend_host_config(backend, tmp_path)) as host:
            loop = await open_agent(
                host,
                Workspace(workspace),
                model=scripted_model(),
                session_id=session_id,
                continue_turn=True,
            )
            assert loop.recovery is not None
            assert len(loop.recovery.interrupted) == 1
            assert loop.recovery.settled.blocked == loop.recovery.interrupted
            warm = encode_messages(
                derive_messages(host.sessions.get(session_id).events)
            )
            (call_id,) = loop.recovery.interrupted
            await loop.resolve(call_id, done=True, reason="test-report.txt")
            await loop.run_turn("Thanks. Anything else?")
            warm_after = encode_messages(
                derive_messages(host.sessions.get(session_id).events)
            )
            await loop.close()
            return warm + b"\n" + warm_after

    warm = asyncio.run(continue_warm())
    events = load(backend, tmp_path, session_id)
    cold_after = encode_messages(derive_messages(events))
    ends = [e.seq for e in events if isinstance(e, TurnEnd)]
    cold = encode_messages(derive_messages(events[: ends[0] + 1]))
    assert warm == cold + b"\n" + cold_after


def test_tool_arguments_shape(workspace: Workspace) -> None:
    for tool in workspace_tools(workspace):
        parameters: Mapping[str, Any] = tool.parameters
        assert parameters["type"] == "object"
        assert set(parameters["required"]) <= set(parameters["properties"])


def test_a_changed_model_is_refused_on_resume_unless_accepted(
    workspace: Workspace, tmp_path: Path
) -> None:
    config = backend_host_config("jsonl", tmp_path)
    other = ScriptedModel([Reply(text="hello"), Reply(text="again")], name="two")

    async def first() -> str:
        async with Host(config) as host:
            loop = await open_agent(
                host, workspace, model=ScriptedModel([Reply(text="hello")], name="one")
            )
            await loop.run_turn("hi")
            await loop.close()
            return loop.session_id

    async def refused(session_id: str) -> None:
        async with Host(config) as host:
            with pytest.raises(ContextMismatchError, match="one"):
                await open_agent(host, workspace, model=other, session_id=session_id)
            assert not host.sessions.list()  # refused and let go

    async def accepted(session_id: str) -> None:
        async with Host(config) as host:
            loop = await open_agent(
                host,
                workspace,
                model=other,
                session_id=session_id,
                accept_context_change=True,
            )
            result = await loop.run_turn("again?")
            assert (result.status, result.text) == ("completed", "again")
            await loop.close()

    session_id = asyncio.run(first())
    before = load("jsonl", tmp_path, session_id)
    asyncio.run(refused(session_id))
    assert load("jsonl", tmp_path, session_id) == before  # nothing appended
    asyncio.run(accepted(session_id))
    events = load("jsonl", tmp_path, session_id)
    contexts = [e for e in events if isinstance(e, RunContext)]
    assert [c.data.model.name for c in contexts] == ["one", "two"]


def test_the_command_line_refuses_a_changed_context_and_names_the_flag(
    workspace: Workspace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from coding_agent import cli

    monkeypatch.chdir(tmp_path)
    configure(tmp_path, "jsonl", tmp_path)
    models = iter(
        [
            ScriptedModel([], name="one"),  # the refused resume of an unknown id
            ScriptedModel([Reply(text="hello")], name="one"),
            ScriptedModel([], name="two"),
            # Its reply #2 answers the resumed session's second turn.
            ScriptedModel([Reply(text="hello"), Reply(text="again")], name="two"),
        ]
    )
    monkeypatch.setattr(cli, "choose_model", lambda: (next(models), "test"))
    root = str(workspace.root)
    assert cli.main(["--workspace", root, "--session", "s1", "hi"]) == 2  # not stored
    assert cli.main(["--workspace", root, "hi"]) == 0
    out = capsys.readouterr().out
    [session_id] = [
        line[9:] for line in out.splitlines() if line.startswith("session: ")
    ]
    assert cli.main(["--workspace", root, "--session", session_id, "more"]) == 2
    assert "--accept-context-change" in capsys.readouterr().err
    flag = ["--accept-context-change"]
    assert cli.main(["--workspace", root, "--session", session_id, *flag, "more"]) == 0
    events = load("jsonl", tmp_path, session_id)
    assert [e.data.model.name for e in events if isinstance(e, RunContext)] == [
        "one",
        "two",
    ]


def test_a_failed_turn_says_why_and_exits_1(
    workspace: Workspace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from coding_agent import cli

    monkeypatch.chdir(tmp_path)
    configure(tmp_path, "jsonl", tmp_path)
    models = iter([ScriptedModel([]), ScriptedModel([Reply(text="hello")])])
    monkeypatch.setattr(cli, "choose_model", lambda: (next(models), "test"))
    root = str(workspace.root)
    assert cli.main(["--workspace", root, "hi"]) == cli.EXIT_TURN_FAILED == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    end = lines.index("-- turn 1 failed --")
    assert lines[end + 1] == (
        "   why: the scripted model has 0 replies and was asked for reply #1"
    )
    assert "coding-agent: turn 1 failed" in captured.err
    assert cli.main(["--workspace", root, "hi"]) == 0
    assert "why:" not in capsys.readouterr().out
