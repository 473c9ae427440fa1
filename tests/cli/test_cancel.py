"""`turnkeep cancel`: a turn running in another process ends cancelled.

The turn runs in a real second process (`_slow_turn.py`, inside a safe tool
that sleeps a minute); the command records the request and follows the
session until the turn's `turn/end` lands.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

import msgspec
import pytest
from tests.cli.support import Store, cli, converse, one_line_error

from turnkeep.cli.cancel import EXIT_NOT_ENDED, EXIT_NOT_RUNNING

SLOW_TURN = Path(__file__).parent / "_slow_turn.py"

pytestmark = pytest.mark.timeout(120)


@contextlib.contextmanager
def slow_turn(store: Store, session_id: str) -> Generator[subprocess.Popen[bytes]]:
    """Session `session_id`: its second turn sits in a slow tool in another process."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(SLOW_TURN),
            store.name,
            msgspec.json.encode(store.options()).decode(),
            session_id,
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"in tool\n", "the turn did not start"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def running_turn(store: Store) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A session whose second turn is inside a slow tool in another process."""
    with slow_turn(store, "busy") as proc:
        yield "busy", proc


def test_cancel_ends_the_turn_running_in_another_process(
    store: Store, running_turn: tuple[str, subprocess.Popen[bytes]]
) -> None:
    session_id, proc = running_turn
    result = cli("cancel", "--yes", "--wait", "30", session_id, store=store)
    assert result.exit_code == 0, result.output
    assert "cancel requested (busy, request 1)" in result.stdout
    assert "the turn ended: cancelled" in result.stdout
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"turn ended cancelled\n"
    assert proc.wait(timeout=60) == 0


def test_a_refused_question_requests_nothing_and_wait_zero_only_records(
    store: Store, running_turn: tuple[str, subprocess.Popen[bytes]]
) -> None:
    session_id, proc = running_turn
    refused = cli("cancel", session_id, store=store, input="n\n")
    assert refused.exit_code == 1
    assert "not confirmed; nothing was requested" in refused.stderr
    assert proc.poll() is None  # the turn runs on
    recorded = cli("cancel", "--yes", "--wait", "0", session_id, store=store)
    assert recorded.exit_code == EXIT_NOT_ENDED, recorded.output
    assert "request 1" in recorded.stdout  # the refused one recorded nothing
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"turn ended cancelled\n"


def test_without_a_live_owner_nothing_is_requested(store: Store) -> None:
    asyncio.run(converse(store, "idle"))
    result = cli("cancel", "--yes", "idle", store=store)
    assert result.exit_code == EXIT_NOT_RUNNING, result.output
    assert "no live process holds idle" in result.stdout
    unknown = cli("cancel", "--yes", "never-stored", store=store)
    assert unknown.exit_code == 1
    assert "never-stored" in one_line_error(unknown)
