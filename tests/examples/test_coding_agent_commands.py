"""The coding agent's `run_command`: its whole process tree ends with it, and an
interrupted command that may write blocks the session until it is resolved."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from pathlib import Path

import pytest
from tests.loop.support import backend_host_config

from coding_agent import Workspace, workspace_tools
from coding_agent.readonly import command_writes
from coding_agent.tools import RunCommand
from turnkeep import AgentLoop, Host, ToolContext
from turnkeep.agent.tools import unknown_policy
from turnkeep.agent.watchdog import Watch
from turnkeep.errors import EffectBlockedError, ToolError
from turnkeep.events import ToolCall, ToolResult
from turnkeep.testing import Reply, ScriptedCall, ScriptedModel

pytestmark = pytest.mark.timeout(60)  # a command that failed leaves a fifo waiting

linux = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the subreaper is Linux's"
)


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "workspace"
    root.mkdir()
    return Workspace(root)


def daemons(pids: Path, ready: Path, count: int = 2, *, stay: bool = True) -> str:
    """A command whose grandchildren leave its group and session (`setsid`).

    Each of `count` children calls `setsid` and forks a daemon, then exits, so
    the daemon is an orphan in a session of its own; the daemon writes its
    pid to `pids/<n>.pid` and sleeps. Once every pid is written, the command
    opens the fifo `ready`, then sleeps if `stay`, else exits.
    """
    script = f"""
import os, time
for n in range({count}):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            path = os.path.join({str(pids)!r}, str(n))
            with open(path + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(path + ".tmp", path + ".pid")
            time.sleep(120)
        os._exit(0)
while sum(p.endswith(".pid") for p in os.listdir({str(pids)!r})) < {count}:
    time.sleep(0.01)
open({str(ready)!r}, "w").close()
if {stay!r}:
    time.sleep(120)
"""
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(script)}"


def started(pids: Path, ready: Path) -> list[int]:
    """Wait until the `daemons` command says its daemons run; their pids."""
    with open(ready):  # blocks until the command opens the fifo
        pass
    return [int(p.read_text()) for p in sorted(pids.glob("*.pid"))]


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie has ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat.rsplit(b")", 1)[1].split()[0] != b"Z"


def gone(pids: list[int]) -> bool:
    """No process of `pids` exists any more: killed and reaped, not a zombie."""
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


def fifo_pair(tmp_path: Path) -> tuple[Path, Path]:
    pids = tmp_path / "pids"
    pids.mkdir(parents=True)
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    return pids, ready


@linux
@pytest.mark.asyncio
async def test_a_timed_out_turn_reaps_grandchildren_that_left_with_setsid(
    workspace: Workspace, tmp_path: Path
) -> None:
    pids, ready = fifo_pair(tmp_path)
    model = ScriptedModel(
        [
            Reply(
                "running",
                (ScriptedCall("run_command", {"command": daemons(pids, ready)}),),
            ),
            Reply("checked: nothing runs any more"),
        ]
    )
    async with Host(backend_host_config("memory", tmp_path)) as host:
        loop = AgentLoop.create(
            "coding",
            host=host,
            model=model,
            tools=workspace_tools(workspace),
            watch=Watch(stall_seconds=5),  # room for a slow start
        )
        turn = asyncio.create_task(loop.run_turn("start the daemons"))
        daemon_pids = await asyncio.to_thread(started, pids, ready)
        assert len(daemon_pids) == 2
        assert all(alive(pid) for pid in daemon_pids)
        result = await turn
        assert result.status == "timed_out"
        # The supervisor reaped them before the tool returned: no waiting.
        assert gone(daemon_pids), [p for p in daemon_pids if alive(p)]

        # A Python command may write: the next turn waits for a person.
        events = host.sessions.get(loop.session_id).events
        call = next(e for e in events if isinstance(e, ToolCall))
        assert call.data.on_unknown == "block"
        with pytest.raises(EffectBlockedError) as blocked:
            await loop.run_turn("and now?")
        assert blocked.value.call_ids == (call.data.call_id,)
        await loop.resolve(call.data.call_id, done=False, reason="nothing runs")
        after = await loop.run_turn("and now?")
        assert after.status == "completed"
        assert after.text == "checked: nothing runs any more"
        await loop.close()


@linux
@pytest.mark.asyncio
async def test_a_cancelled_turn_reaps_grandchildren_that_left_with_setsid(
    workspace: Workspace, tmp_path: Path
) -> None:
    pids, ready = fifo_pair(tmp_path)
    model = ScriptedModel(
        [
            Reply(
                "running",
                (ScriptedCall("run_command", {"command": daemons(pids, ready)}),),
            ),
        ]
    )
    async with Host(backend_host_config("memory", tmp_path)) as host:
        loop = AgentLoop.create(
            "coding", host=host, model=model, tools=workspace_tools(workspace)
        )
        turn = asyncio.create_task(loop.run_turn("start the daemons"))
        daemon_pids = await asyncio.to_thread(started, pids, ready)
        assert all(alive(pid) for pid in daemon_pids)
        cancelled = await loop.cancel()
        assert cancelled is not None
        assert cancelled.status == "cancelled"
        assert (await turn).status == "cancelled"
        assert gone(daemon_pids)


@linux
@pytest.mark.asyncio
async def test_the_tool_s_own_timeout_and_a_normal_exit_leave_nothing_running(
    workspace: Workspace, tmp_path: Path
) -> None:
    command = RunCommand(workspace)
    context_pids, ready = fifo_pair(tmp_path)
    running = asyncio.create_task(
        command.run(
            {"command": daemons(context_pids, ready), "timeout": 2},
            _context(),
        )
    )
    daemon_pids = await asyncio.to_thread(started, context_pids, ready)
    with pytest.raises(ToolError, match="did not finish within 2 s"):
        await running
    assert gone(daemon_pids)

    # A command that exits leaves its daemons behind: they end with it.
    pids, ready = fifo_pair(tmp_path / "again")
    running = asyncio.create_task(
        command.run({"command": daemons(pids, ready, stay=False)}, _context())
    )
    daemon_pids = await asyncio.to_thread(started, pids, ready)
    assert (await running).startswith("exit status 0")
    assert gone(daemon_pids)


def _context() -> ToolContext:
    return ToolContext(call_id="call_t", session_id="s", agent_id="a", turn=1)


@pytest.mark.asyncio
async def test_a_program_that_cannot_start_is_the_model_s_error(
    workspace: Workspace,
) -> None:
    command = RunCommand(workspace)
    with pytest.raises(ToolError, match="cannot start 'no-such-program-x'"):
        await command.run({"command": "no-such-program-x --flag"}, _context())
    output = await command.run(
        {
            "command": f"{sys.executable} -c 'import os, signal; "
            "os.kill(os.getpid(), signal.SIGTERM)'"
        },
        _context(),
    )
    assert output.startswith("exit status -15")


@pytest.mark.parametrize(
    ("command", "writes"),
    [
        ("ls -la src", False),
        ("cat notes.txt", False),
        ("grep -rn 'a|b' src", False),
        ("grep -- '->' src", False),
        ("rg answer", False),
        ("rg --pre ./x answer", True),
        ("find . -name '*.py'", False),
        ("find . -name '*.pyc' -delete", True),
        ("find . -exec rm {} ;", True),
        ("git status", False),
        ("git diff --stat", False),
        ("git diff --output=patch.txt", True),
        ("git -c core.pager=x log", True),
        ("git commit -m x", True),
        ("git", True),
        ("echo hi", False),
        ("echo hi > out.txt", True),
        ("echo hi 2>&1", True),
        ("cat notes.txt | tee copy", True),
        ("ls && rm x", True),
        ("./ls", True),
        ("python test.py", True),
        ("make", True),
        ("sed -n 1p f", True),
        ("rm -rf build", True),
        ("", True),
        ("cat 'unclosed", True),
    ],
)
def test_which_commands_count_as_writing(command: str, writes: bool) -> None:
    assert command_writes(command) is writes


def test_run_command_blocks_on_unknown_for_commands_that_write(
    workspace: Workspace,
) -> None:
    command = RunCommand(workspace)
    assert unknown_policy(command, {"command": "git log -3"}) == "report"
    assert unknown_policy(command, {"command": "pytest -q"}) == "block"
    assert unknown_policy(command, {}) == "block"
    assert unknown_policy(command, {"command": 3}) == "block"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("program", "blocks"), [("cat", False), (sys.executable, True)]
)
async def test_an_interrupted_command_blocks_the_next_turn_only_if_it_may_write(
    workspace: Workspace, tmp_path: Path, program: str, blocks: bool
) -> None:
    # Both read a fifo that stays empty: they hang until the turn is cancelled.
    fifo = workspace.root / "never"
    os.mkfifo(fifo)
    command = (
        "cat never" if program == "cat" else f"{program} -c 'open(\"never\").read()'"
    )
    model = ScriptedModel(
        [
            Reply("running", (ScriptedCall("run_command", {"command": command}),)),
            Reply("fine"),
        ]
    )
    async with Host(backend_host_config("memory", tmp_path)) as host:
        loop = AgentLoop.create(
            "coding", host=host, model=model, tools=workspace_tools(workspace)
        )
        turn = asyncio.create_task(loop.run_turn("go"))
        # Opening the fifo's other end returns once the command has opened it.
        writer = await asyncio.to_thread(open, fifo, "w")
        await loop.cancel()
        writer.close()
        session = host.sessions.get(loop.session_id)
        assert (await turn).status == "cancelled"
        call = next(e for e in session.events if isinstance(e, ToolCall))
        result = next(e for e in session.events if isinstance(e, ToolResult))
        assert result.data.status == "interrupted"
        assert call.data.on_unknown == ("block" if blocks else "report")
        if blocks:
            with pytest.raises(EffectBlockedError):
                await loop.run_turn("next")
            await loop.resolve(call.data.call_id, done=True, reason="looked")
        assert (await loop.run_turn("next")).status == "completed"
        await loop.close()
