"""Ctrl-C at any moment of `turnkeep` exits 130 with one line, no traceback.

Issue 12 point 13. Each case runs the installed console script in a real
subprocess that stops at a chosen point (`tests/cli/sigint`: while a module
is imported, while a plugin is imported or started, in the middle of an
`import`), sends it SIGINT once it says it stopped, and checks the status
and stderr. Nothing is timed: the process waits for the signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
from tests.cli.support import SCRIPT, Store

SIGINT_DIR = Path(__file__).parent / "sigint"
MARKER = "tk-test-paused"

ROLE_PLAY = [
    {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
    for i in range(20)
]


def slow_plugin(root: Path) -> Path:
    """A folder holding the `slowplug` distribution's metadata (entry point)."""
    info = root / "slowplug-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: slowplug\nVersion: 0\n"
    )
    (info / "entry_points.txt").write_text("[turnkeep]\nslow = slowplug\n")
    return root


def interrupt(
    args: list[str], pause_at: str, cwd: Path, extra_path: Path
) -> tuple[int, str]:
    """Run `turnkeep ARGS`, SIGINT it where it pauses; its status and stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEP_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SIGINT_DIR), str(extra_path)])
    env["TK_TEST_PAUSE_AT"] = pause_at
    proc = subprocess.Popen(
        [str(SCRIPT), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline().decode()
    if not first.startswith(MARKER):
        proc.kill()
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"never paused at {pause_at}: {first}{err.decode()}{out.decode()}")
    assert first.split()[1] == pause_at
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    return proc.returncode, rest.decode()


def assert_interrupted(status: int, stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines == ["turnkeep: interrupted"], stderr
    assert status == 130, stderr


@pytest.fixture
def workdir(jsonl_store: Store, tmp_path: Path) -> Path:
    """A folder whose turnkeep.toml selects the store and the slow plugin."""
    work = tmp_path / "cwd"
    work.mkdir()
    (work / "turnkeep.toml").write_text(
        'persistence = "jsonl"\nplugins = ["jsonl", "slow"]\n'
        f"[backends.jsonl]\npath = {str(jsonl_store.path)!r}\n"
    )
    (work / "chat.json").write_bytes(msgspec.json.encode(ROLE_PLAY))
    return work


@pytest.mark.parametrize(
    "pause_at",
    [
        "import:turnkeep.agent.loop",  # `import turnkeep`, before any CLI code
        "import:turnkeep.cli.app",  # the command's own modules
        "import:rich",  # the cli extra's dependencies
        "plugin-import",  # the host imports a plugin
        "plugin-apply",  # the host starts a plugin
    ],
)
def test_ctrl_c_during_start_up(workdir: Path, tmp_path: Path, pause_at: str) -> None:
    status, stderr = interrupt(["ls"], pause_at, workdir, slow_plugin(tmp_path / "p"))
    assert_interrupted(status, stderr)


def test_ctrl_c_while_a_command_works_stores_nothing(
    workdir: Path, tmp_path: Path, jsonl_store: Store
) -> None:
    status, stderr = interrupt(
        ["import", "chat.json", "--id", "cut"],
        "session-event",
        workdir,
        slow_plugin(tmp_path / "p"),
    )
    assert_interrupted(status, stderr)
    listed = subprocess.run(
        [str(SCRIPT), "--store", jsonl_store.spec, "ls", "--json"],
        capture_output=True,
        check=True,
    )
    assert b'"cut"' not in listed.stdout


def sleeping_in_read(pid: int) -> bool:
    """Whether `pid` sleeps in a read of a pipe (where the wchan is known)."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    if stat.rsplit(b")", 1)[1].split()[0] != b"S":
        return False
    wchan = Path(f"/proc/{pid}/wchan").read_text()
    return wchan in ("", "0") or "pipe_read" in wchan


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the process's /proc entry"
)
def test_ctrl_c_while_reading_the_input(workdir: Path, tmp_path: Path) -> None:
    """Outside the command's event loop: click would say "Aborted!", status 1."""
    fifo = tmp_path / "input.fifo"
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEP_")}
    proc = subprocess.Popen(
        [str(SCRIPT), "import", str(fifo)],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Opening the writing end returns once the command opened the reading
        # end; nothing is ever written. The signal waits until the command
        # sleeps in its read: one that lands after Python's last check for
        # signals but before the read begins is only seen when the read
        # returns, which would be never (a person presses Ctrl-C again).
        with fifo.open("wb"):
            deadline = time.monotonic() + 120
            while not sleeping_in_read(proc.pid):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the command never read the input"
                time.sleep(0.01)
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert_interrupted(proc.returncode, stderr.decode())
