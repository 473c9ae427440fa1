"""Crash sweep: no consumer of a committed stream sees a seq a crash reuses.

A child process (`_committed_agent.py`) streams its turns with
`stream_turn(text, committed=True)` over a real backend, reporting each
yielded event on a pipe, and is killed with SIGKILL when the session's
N-th event is appended (between flushes, or with an unsafe call's intent
just appended). This process then resumes the session (recovery appends
its own events at the seqs the killed child had not made durable) and runs
one more turn. Every seq the child reported must hold, in the log, exactly
the event it reported.

Kill points (`STOP_POINTS`): before the first flush, inside turns before
and after an unsafe call's intent flush, with a `turn/end` appended but not
flushed, and a run to the end; deterministic (a scripted model, the stop
counted in appended events). `TURNKEEP_SWEEP_LIVE=1` makes the child stream
live instead, which this test must catch (reused seqs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.loop._committed_agent import SESSION, TURNS, tools
from tests.loop.support import (
    BACKENDS,
    backend_host_config,
    backend_ready_async,
    stored_events,
)

from turnkeep import AgentLoop, Host
from turnkeep.agent.recovery import open_turn, pairing_problems
from turnkeep.testing import EchoModel

CHILD = Path(__file__).with_name("_committed_agent.py")
EVENTS_PER_TURN = 17  # with the script's streamed chunks
CONTEXT_EVENTS = 1  # the first turn's `run/context` (seq 2)
NEVER = 0
# The child is stopped when the session's N-th event is appended:
#  7: turn 1's unsafe call (seq 6), before its intent flush: nothing durable;
# 13: turn 1's safe call (seq 12): durable up to its unsafe call's checkpoint
#     (the run context included);
# 25: turn 2's checkpoint (seq 24), appended, not flushed;
# 35: turn 2's `turn/end` (seq 34), appended, its flush not begun;
# never: all three turns end.
STOP_POINTS = (7, 13, 25, 35, NEVER)


def run_child(backend: str, root: Path, stop_after: int) -> tuple[bool, list[Any]]:
    """Run the child to its stop point and kill it; what it reported."""
    cmd = {
        "backend": backend,
        "root": str(root),
        "stop_after": stop_after,
        "committed": os.environ.get("TURNKEEP_SWEEP_LIVE") != "1",
    }
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), msgspec.json.encode(cmd).decode()],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    reported: list[Any] = []
    stopped = done = False
    try:
        for line in proc.stdout:
            message = msgspec.json.decode(line)
            if message.get("stop"):
                stopped = True
                proc.send_signal(signal.SIGKILL)
                break
            if message.get("done"):
                done = True
                break
            reported.append(message)
    finally:
        proc.stdout.close()
        proc.wait(timeout=60)
    assert stopped or done, f"the child died before its stop point ({proc.returncode})"
    return stopped, reported


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stop_after", STOP_POINTS)
async def test_no_committed_seq_is_reused_after_a_kill(
    backend: str, stop_after: int, tmp_path: Path
) -> None:
    await backend_ready_async(backend, tmp_path / "probe")
    killed, reported = run_child(backend, tmp_path, stop_after)
    assert killed == (stop_after != NEVER)
    seqs = [m["seq"] for m in reported]
    assert seqs == list(range(len(seqs)))  # in seq order, without a gap
    async with Host(backend_host_config(backend, tmp_path)) as host:
        if not await host.require_persistence().has(SESSION):
            assert reported == []  # nothing was durable, nothing was reported
            return
        loop = await AgentLoop.resume(
            "sweep",
            SESSION,
            host=host,
            model=EchoModel(),
            tools=tools(),
            context="override",  # another model than the child's, on purpose
        )
        await loop.run_turn("after the crash")
        await loop.close()
        log = await stored_events(host, SESSION)
        for message in reported:
            seq = message["seq"]
            assert host.codec.encode(log[seq]).decode() == message["event"], (
                f"seq {seq} was reported committed, and now holds another event"
            )
    assert open_turn(log) is None
    assert pairing_problems(log) == []
    if not killed:
        # all, once durable
        assert len(reported) == TURNS * EVENTS_PER_TURN + CONTEXT_EVENTS
