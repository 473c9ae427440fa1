"""The Agents SDK example: killed mid-run, it continues with its history.

`sdk-agent` runs an SDK agent (scripted model, trace export off, no
network) whose session is a `TurnkeepSession`. A run is killed with
SIGKILL while its tool runs; the next run of the same session, in a new
process, sees every item the SDK had saved before the kill, and the
writer role the dead process held does not stand in its way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.examples.support import example_env

pytestmark = [pytest.mark.slow, pytest.mark.crash]  # each process imports the SDK


def turn(spec: str, text: str, cwd: Path, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "sdk_agent", "--store", spec, "--session", "trip", text],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=example_env(cwd, **env),
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_a_killed_run_continues_with_its_history(backend: str, tmp_path: Path) -> None:
    spec = f"{backend}:{tmp_path / 'store'}"
    assert turn(spec, "hello", tmp_path) == "reply 1: you said 'hello'; before that: []"
    argv = [sys.executable, "-m", "sdk_agent", "--store", spec, "--session", "trip"]
    proc = subprocess.Popen(
        [*argv, "look up Bern"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=example_env(tmp_path, SDK_AGENT_TOOL_SECONDS="600"),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "tool running: Bern", (
            proc.stderr.read() if proc.stderr else ""
        )
        os.kill(proc.pid, signal.SIGKILL)  # mid-run: the tool is running
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    # A new process continues the session: both user messages are in the
    # history the model sees, the killed run's included.
    reply = turn(spec, "what now", tmp_path)
    assert (
        reply == "reply 3: you said 'what now'; before that: ['hello', 'look up Bern']"
    )
    shown = subprocess.run(
        [Path(sys.executable).parent / "turnkeep", "--store", spec, "show", "trip"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=example_env(tmp_path),
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert out.index("hello") < out.index("look up Bern") < out.index("what now")
