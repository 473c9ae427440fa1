"""`turnkeep backup` knows what was running: turns in flight during the copy.

A process of its own (`_turn.py`) holds a session inside an unsafe tool, its
call durable: the backup lists that session (its copy ends on the tool's
stored call, the last whole flush) and `--require-idle` refuses with exit
4, writing nothing. A turn that starts while the copy is being made is
caught by the check after it: the copy is removed. A session whose process
was killed (SIGKILL) is no turn in flight. Run on JSONL and SQLite.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.cli.conftest import make_store
from tests.cli.support import Store, cli, converse
from tests.serve.conftest import killed_in_turn

import turnkeep.cli.backup as command
from turnkeep.backup import BackupReport
from turnkeep.cli.backup import EXIT_BUSY

TURN = Path(__file__).parent / "_turn.py"
BACKENDS = ("jsonl", "sqlite")


@contextmanager
def turn_running(store: Store, session_id: str) -> Generator[subprocess.Popen[bytes]]:
    """A live process inside an unsafe tool of `session_id` (its call durable)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(TURN),
            store.name,
            msgspec.json.encode(store.options()).decode(),
            session_id,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"in tool\n", "the turn did not start"
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the tool returns; the turn ends
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()


def report_of(output: str) -> BackupReport:
    return msgspec.json.decode(output, type=BackupReport)


def copy_events(report: BackupReport, session_id: str) -> list[bytes]:
    assert report.store is not None
    name, _, path = report.store.partition(":")
    copy = Store(name, Path(path))
    return asyncio.run(copy.load(session_id)).events


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_running_turn_is_listed_and_require_idle_refuses(
    backend: str, tmp_path: Path
) -> None:
    store = make_store(backend, tmp_path)
    asyncio.run(converse(store, "quiet", prompts=("hello",)))
    with turn_running(store, "busy"):
        refused = cli(
            "backup", str(tmp_path / "refused"), "--require-idle", store=store
        )
        assert refused.exit_code == EXIT_BUSY, refused.stderr
        assert "busy" in refused.stderr
        assert "nothing was written" in refused.stderr
        assert not (tmp_path / "refused").exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".refused")]

        taken = cli("backup", str(tmp_path / "during"), "--json", store=store)
        assert taken.exit_code == 0, taken.stderr
        during = report_of(taken.stdout)
        assert during.in_flight == ["busy"]
        text = cli("backup", str(tmp_path / "during-text"), store=store)
        assert "a turn was running during the copy in: busy" in text.stdout
    # The copy holds the busy session's last whole flush: its stored call.
    held = copy_events(during, "busy")
    assert b'"type":"tool/call"' in held[-1] or b'"type":"turn/checkpoint"' in held[-1]
    assert not any(b'"type":"turn/end"' in e for e in held)
    # Once the turn ended, the store is idle: the backup is taken.
    idle = cli(
        "backup", str(tmp_path / "idle"), "--require-idle", "--json", store=store
    )
    assert idle.exit_code == 0, idle.stderr
    assert report_of(idle.stdout).in_flight == []
    assert any(
        b'"type":"turn/end"' in e for e in copy_events(report_of(idle.stdout), "busy")
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_turn_started_during_the_copy_removes_it(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(backend, tmp_path)
    asyncio.run(converse(store, "quiet", prompts=("hello",)))
    real = command._in_flight  # pyright: ignore[reportPrivateUsage]
    looks: list[int] = []

    with contextlib.ExitStack() as stack:

        async def in_flight(backend: Any) -> list[str]:
            looks.append(len(looks))
            if len(looks) == 2:  # after the copy: a turn started meanwhile
                stack.enter_context(turn_running(store, "late"))
            return await real(backend)

        monkeypatch.setattr(command, "_in_flight", in_flight)
        refused = cli("backup", str(tmp_path / "dest"), "--require-idle", store=store)
    assert looks == [0, 1]
    assert refused.exit_code == EXIT_BUSY, refused.stderr
    assert "late" in refused.stderr
    assert "the copy was removed" in refused.stderr
    assert not (tmp_path / "dest").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".dest")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_turn_is_not_in_flight(backend: str, tmp_path: Path) -> None:
    store = make_store(backend, tmp_path)
    killed_in_turn(store, "crashed")
    taken = cli(
        "backup", str(tmp_path / "dest"), "--require-idle", "--json", store=store
    )
    assert taken.exit_code == 0, taken.stderr
    assert report_of(taken.stdout).in_flight == []
