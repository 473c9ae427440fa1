"""The workspace tools never wait on a special file (R23).

A FIFO in the workspace made `read_file` and `search` hang for good: the
open waited for a writer, in a thread that no cancel or timeout can stop,
so the process could not even exit. FIFOs, sockets and devices are refused
by `read_file` and `apply_patch` and skipped, named, by `search`; a FIFO
swapped in after the type check opens without waiting and is refused too.

Should a tool block after all, the test opens the FIFO for writing, which
releases the stuck open, and fails instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support import needs

from coding_agent import Workspace, workspace_tools
from turnkeep import Tool, ToolContext
from turnkeep.errors import ToolError

CONTEXT = ToolContext(call_id="call_test", session_id="s", agent_id="a", turn=1)
PATIENCE = 10.0


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    root = tmp_path / "workspace"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("answer = 42\n")
    os.mkfifo(root / "src" / "pipe")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(root / "src" / "sock"))
        yield Workspace(root)


def tool(workspace: Workspace, name: str) -> Tool:
    return {t.name: t for t in workspace_tools(workspace)}[name]


async def run(workspace: Workspace, name: str, **arguments: Any) -> str:
    """Run a tool; if it blocks, release the FIFO and fail."""
    try:
        return await asyncio.wait_for(
            tool(workspace, name).run(arguments, CONTEXT), PATIENCE
        )
    except TimeoutError:
        fd = os.open(workspace.root / "src" / "pipe", os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)  # the blocked open returns, its read sees end of file
        pytest.fail(f"{name} blocked on the FIFO")


@pytest.mark.asyncio
@pytest.mark.parametrize("name", ["read_file", "apply_patch"])
async def test_reading_a_fifo_is_refused_at_once(
    workspace: Workspace, name: str
) -> None:
    with pytest.raises(ToolError, match="FIFO"):
        await run(workspace, name, path="src/pipe", old="a", new="b")
    with pytest.raises(ToolError, match="socket"):
        await run(workspace, name, path="src/sock", old="a", new="b")


@pytest.mark.asyncio
async def test_search_skips_special_files_and_says_so(workspace: Workspace) -> None:
    found = await run(workspace, "search", text="answer")
    assert found.splitlines() == [
        "src/app.py:1: answer = 42",
        "[skipped, not regular files: src/pipe (a FIFO (named pipe)), "
        "src/sock (a socket)]",
    ]


@pytest.mark.asyncio
async def test_a_fifo_swapped_in_after_the_check_opens_without_waiting(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.lstat
    regular = real(workspace.root / "src" / "app.py")

    def looks_regular(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        info = real(path, *args, **kwargs)
        if stat.S_ISFIFO(info.st_mode):  # as if it were swapped in just after
            return regular
        return info

    monkeypatch.setattr(os, "lstat", looks_regular)
    with pytest.raises(ToolError, match="FIFO"):
        await run(workspace, "read_file", path="src/pipe")


@pytest.mark.asyncio
async def test_a_device_is_refused(workspace: Workspace) -> None:
    needs.root("to make a device node")
    os.mknod(workspace.root / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    with pytest.raises(ToolError, match="device"):
        await run(workspace, "read_file", path="zero")
