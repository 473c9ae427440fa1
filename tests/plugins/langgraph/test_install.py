"""`turnkeep-langgraph` installs alone, with one backend, into a fresh venv.

Wheels of `turnkeep`, `turnkeep-sqlite` and `turnkeep-langgraph` are built
from this checkout and installed with uv into an empty virtual environment,
offline (every dependency comes from uv's cache, as `make install` left
it). The environment then holds exactly those three turnkeep distributions,
`langgraph-checkpoint` but not `langgraph`, and no other backend's driver;
a saver on SQLite stores and reads a checkpoint there, and a host started
with the installed plugins reads the thread's events (the entry point).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

ROOT = Path(__file__).resolve().parents[3]
UV = ROOT / "scripts" / "uv"

PROBE = """
import asyncio, sys
from turnkeep_langgraph import TurnkeepSaver
from turnkeep import Host

store = sys.argv[1]
config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
from langgraph.checkpoint.base import empty_checkpoint
checkpoint = empty_checkpoint()
checkpoint["channel_values"] = {"messages": ["hello"]}
checkpoint["channel_versions"] = {"messages": 1}
with TurnkeepSaver(store="sqlite:" + store) as saver:
    saver.put(config, checkpoint, {"source": "input", "step": -1}, {"messages": 1})
    got = saver.get_tuple(config)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"messages": ["hello"]}

async def read():
    # The default plugin selection ("all") loads the entry points.
    options = {"persistence": "sqlite", "backends": {"sqlite": {"path": store}}}
    async with Host(options) as host:
        loaded = await host.sessions.resume("lg-t")
        print(" ".join(e.type for e in loaded.events))

asyncio.run(read())
"""


def _run_uv(args: tuple[str, ...], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
    return subprocess.run(
        [str(UV), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _uv(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    done = _run_uv(args, cwd)
    assert done.returncode == 0, f"uv {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def _uv_status(*args: str, cwd: Path) -> int:
    return _run_uv(args, cwd).returncode


@pytest.mark.slow
def test_the_package_installs_with_one_backend_and_nothing_else(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    for member in ("core", "plugins/sqlite", "plugins/langgraph"):
        _uv("build", "--offline", "--wheel", "--out-dir", str(wheels), member)
    built = sorted(p.name.split("-")[0] for p in wheels.glob("*.whl"))
    assert built == ["turnkeep", "turnkeep_langgraph", "turnkeep_sqlite"]

    venv = tmp_path / "venv"
    _uv("venv", "--offline", "--python", sys.executable, str(venv), cwd=tmp_path)
    python = venv / "bin" / "python"
    install = [
        "pip",
        "install",
        "--python",
        str(python),
        *map(str, wheels.glob("*.whl")),
    ]
    # Offline where uv's cache can resolve the dependencies; else from the
    # package index (the dependencies' own metadata decides what comes in).
    if _uv_status("--offline", *install, cwd=tmp_path) != 0:
        _uv(*install, cwd=tmp_path)

    listed = _uv(
        "pip", "list", "--format", "json", "--python", str(python), cwd=tmp_path
    )
    names = {
        p["name"].lower().replace("_", "-") for p in msgspec.json.decode(listed.stdout)
    }
    assert {n for n in names if n.startswith("turnkeep")} == {
        "turnkeep",
        "turnkeep-sqlite",
        "turnkeep-langgraph",
    }
    assert "langgraph-checkpoint" in names
    for absent in ("langgraph", "psycopg", "psycopg-binary", "openai-agents"):
        assert absent not in names, absent

    store = tmp_path / "threads.db"
    done = subprocess.run(
        [str(python), "-c", PROBE, str(store)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "langgraph/thread",
        "langgraph/blob",
        "langgraph/checkpoint",
    ]
