"""A command's processes end with it even when it kills its supervisor (R23).

`kill -9 $PPID` inside `run_command` killed the supervisor; `stop()` then
skipped the group kill (the supervisor had exited) and the command's
processes lived on, re-parented past it. Now the group is killed whether or
not the supervisor lives, and where a cgroup v2 is delegated to this process
the processes that also left the group with `setsid` are killed through it.
That test needs the delegation (`tests.support.needs.cgroup`): it skips
where the system gives none, and fails there when
`TURNKEEP_REQUIRE_CGROUP=1` (which `.ci/run` sets where the machine
delegates one). And a 550-process tree is ended by the supervisor itself
within `STOP_GRACE`, not by the kill that follows it.

"Gone" here means not alive: a process re-parented to init is reaped by
init, which some containers' init never does (a zombie holds no resources
but its pid).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest
from tests.support import needs

from coding_agent import Workspace, cgroups, reaper
from coding_agent.tools import RunCommand
from turnkeep import ToolContext
from turnkeep.errors import ToolError

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="the supervisor is Linux's"
    ),
]

CONTEXT = ToolContext(call_id="call_t", session_id="s", agent_id="a", turn=1)


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat.rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")


def pids_in(path: Path) -> list[int]:
    try:
        return [int(line) for line in path.read_text().split()]
    except FileNotFoundError:
        return []


async def written(path: Path, lines: int) -> list[int]:
    """Wait until the command wrote `lines` pids to `path`."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(found := pids_in(path)) >= lines:
            return found
        await asyncio.sleep(0.02)
    pytest.fail(f"the command did not write {lines} pids to {path}")


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "workspace"
    root.mkdir()
    return Workspace(root)


@pytest.mark.asyncio
async def test_a_command_that_kills_its_supervisor_leaves_no_group_member(
    workspace: Workspace,
) -> None:
    # The shell keeps the output pipe open, so the tool times out and stops.
    script = "sleep 300 & echo $! > pids; echo $$ >> pids; kill -9 $PPID; sleep 300"
    command = RunCommand(workspace)
    with pytest.raises(ToolError, match="did not finish within 3 s"):
        await command.run({"command": f"sh -c '{script}'", "timeout": 3}, CONTEXT)
    left = pids_in(workspace.root / "pids")
    assert len(left) == 2
    assert [pid for pid in left if alive(pid)] == []


@pytest.mark.asyncio
async def test_a_command_that_exits_after_killing_its_supervisor_leaves_nothing(
    workspace: Workspace,
) -> None:
    # Its processes do not hold the output: the tool returns at once.
    script = "sleep 300 >/dev/null 2>&1 & echo $! > pids; kill -9 $PPID"
    said = await RunCommand(workspace).run({"command": f"sh -c '{script}'"}, CONTEXT)
    assert said.startswith("exit status -9")
    left = pids_in(workspace.root / "pids")
    assert [pid for pid in left if alive(pid)] == []


@pytest.mark.asyncio
async def test_processes_that_left_with_setsid_die_with_a_killed_supervisor(
    workspace: Workspace,
) -> None:
    needs.cgroup()
    script = (
        "setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo $! > pids; "
        'setsid sh -c "sleep 300 & echo \\$! >> pids; wait" & '
        "while [ $(wc -l < pids) -lt 2 ]; do sleep 0.01; done; "
        "kill -9 $PPID; sleep 300"
    )
    command = RunCommand(workspace)
    with pytest.raises(ToolError, match="did not finish within 3 s"):
        await command.run({"command": f"sh -c '{script}'", "timeout": 3}, CONTEXT)
    left = pids_in(workspace.root / "pids")
    assert len(left) == 2
    assert [pid for pid in left if alive(pid)] == []
    base = cgroups.base()
    assert base is not None
    mine = f"turnkeep-command-{os.getpid()}-"
    assert [p for p in base.iterdir() if p.name.startswith(mine)] == []


@pytest.mark.asyncio
async def test_a_550_process_tree_is_ended_within_the_grace_period(
    workspace: Workspace,
) -> None:
    script = (
        "for i in $(seq 549); do sleep 300 & echo $! >> pids; done; "
        "echo $$ >> pids; wait"
    )
    env = {"PATH": os.environ["PATH"]}
    process = await reaper.start(["sh", "-c", script], cwd=workspace.root, env=env)
    tree = await written(workspace.root / "pids", 550)
    assert await reaper.stop(process), "the supervisor was killed, out of time"
    assert [pid for pid in tree if alive(pid)] == []
