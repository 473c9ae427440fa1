"""`make demo` (scripts/demo.py) runs end to end: kill, resume, plain words."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.examples.support import REPO, example_env
from tests.loop.support import backend_ready


def demo(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.crash
@pytest.mark.slow
def test_the_demo_runs_on_the_default_store(tmp_path: Path) -> None:
    backend_ready("jsonl", tmp_path)
    # Nothing configured: the embedded default (jsonl, in the user data dir).
    result = demo(example_env(tmp_path, TMPDIR=str(tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "Now the process is killed (SIGKILL, no cleanup)." in out
    assert "<- interrupted: [interrupted]" in out
    assert "It was NOT run again." in out
    assert "The session was stored by the 'jsonl' plugin and survived the kill." in out
    assert "The test ran once in all" in out
    assert "turnkeep refused: the session recorded the context it ran with" in out
    assert "   - instructions: recorded sha256 " in out
    stored = [p for p in (tmp_path / "data").rglob("*") if p.is_file()]
    assert stored, "the default store lives in the user data directory"
    # It says where the session stays and how to read it back; its
    # temporary workspace is gone, the store is not.
    store = (tmp_path / "data" / "turnkeep" / "sessions").resolve()
    assert f"- The session stays in the jsonl store at {store}; read" in out
    show = next(line for line in out.splitlines() if " show " in line).split()
    assert show[0].endswith("turnkeep")
    assert show[1:4] == ["--store", f"jsonl:{store}", "show"]
    shown = subprocess.run(
        [
            str(REPO / show[0]) if not Path(show[0]).is_absolute() else show[0],
            *show[1:],
        ],
        cwd=REPO,
        env=example_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert show[4] in shown.stdout
    assert not list(tmp_path.glob("turnkeep-demo-*")), "the workspace is removed"


@pytest.mark.crash
@pytest.mark.slow
def test_the_demo_follows_the_configuration(tmp_path: Path) -> None:
    backend_ready("sqlite", tmp_path)
    env = example_env(
        tmp_path,
        TMPDIR=str(tmp_path),
        TURNKEEP_PERSISTENCE="sqlite",
        TURNKEEP_SQLITE__PATH=str(tmp_path / "store" / "demo.sqlite3"),
    )
    result = demo(env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "stored by the 'sqlite' plugin" in result.stdout
    assert (tmp_path / "store" / "demo.sqlite3").exists()
    assert not list(tmp_path.glob("turnkeep-demo-*")), "the workspace is removed"


@pytest.mark.crash
@pytest.mark.slow
def test_a_store_inside_the_demo_folder_keeps_the_folder(tmp_path: Path) -> None:
    backend_ready("sqlite", tmp_path)
    # A relative path is relative to where the agents run: the demo's folder.
    env = example_env(
        tmp_path,
        TMPDIR=str(tmp_path),
        TURNKEEP_PERSISTENCE="sqlite",
        TURNKEEP_SQLITE__PATH="demo.sqlite3",
    )
    result = demo(env)
    assert result.returncode == 0, result.stdout + result.stderr
    (folder,) = tmp_path.glob("turnkeep-demo-*")
    assert (folder / "demo.sqlite3").exists()
    assert f"The store is inside {folder}, so that folder is kept." in result.stdout


def test_the_demo_refuses_to_pretend_without_persistence(tmp_path: Path) -> None:
    env = example_env(tmp_path, TMPDIR=str(tmp_path), TURNKEEP_PERSISTENCE="none")
    result = demo(env)
    assert result.returncode == 1
    assert "no persistence plugin is active" in result.stdout
