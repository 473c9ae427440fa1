"""`turnkeep-openai-agents` installs alone, with one backend, into a fresh venv.

The wheels of `turnkeep`, `turnkeep-sqlite` and this package are built
from the repository; a new virtual environment gets them and their
dependencies (from uv's cache when it holds them all, else from the package
index, pinned to `uv.lock`). It pulls in no other backend and no other
peer framework, its plugin loads without importing the SDK, and a session
round-trips on SQLite.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

REPO = Path(__file__).resolve().parents[3]
UV = REPO / "scripts" / "uv"
BUILT = ("turnkeep", "turnkeep-sqlite", "turnkeep-openai-agents")
NEVER = {
    "turnkeep-jsonl",
    "turnkeep-postgres",
    "psycopg",
    "psycopg-binary",
    "langgraph",
    "langchain-core",
    "matplotlib",
    "sdk-agent",
}

_CHECK = textwrap.dedent(
    """
    import asyncio, importlib.metadata, json, sys

    import turnkeep_openai_agents.plugin
    plugin_alone = "agents" not in sys.modules
    from turnkeep_openai_agents import TurnkeepSession, shutdown

    async def main(path):
        session = TurnkeepSession("fresh", f"sqlite:{path}")
        await session.add_items([{"role": "user", "content": "hello"}])
        await session.add_items([{"role": "assistant", "content": "hi"}])
        assert await session.pop_item() == {"role": "assistant", "content": "hi"}
        return await session.get_items()

    items = asyncio.run(main(sys.argv[1]))
    shutdown()
    groups = importlib.metadata.entry_points()
    print(json.dumps({
        "items": items,
        "plugin_alone": plugin_alone,
        "turnkeep": sorted(e.name for e in groups.select(group="turnkeep")),
        "event_types": sorted(
            e.name for e in groups.select(group="turnkeep.event_types")
        ),
    }))
    """
)


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        timeout=600,
        check=False,
    )


@pytest.mark.slow  # builds three wheels and a virtual environment
def test_the_package_installs_alone_into_a_fresh_venv(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    for package in BUILT:
        built = run(UV, "build", "--offline", "--wheel", "--package", package,
                    "--out-dir", wheels)  # fmt: skip
        assert built.returncode == 0, built.stderr
    pins = run(UV, "export", "--frozen", "--package", "turnkeep-openai-agents",
               "--no-emit-workspace", "--no-hashes", "--no-dev",
               "--no-default-groups", "--no-header", "--no-annotate")  # fmt: skip
    assert pins.returncode == 0, pins.stderr
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(pins.stdout)
    venv = tmp_path / "venv"
    made = run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    install = [UV, "pip", "install", "--python", python, "--find-links", wheels,
               "-c", constraints, "turnkeep-openai-agents",
               "turnkeep-sqlite"]  # fmt: skip
    done = run(*install, "--offline")  # uv's cache, when it holds everything
    if done.returncode != 0:
        done = run(*install)  # else the package index, pinned to uv.lock
    assert done.returncode == 0, done.stderr

    listed = run(UV, "pip", "list", "--python", python, "--format", "json")
    assert listed.returncode == 0, listed.stderr
    names = {p["name"] for p in msgspec.json.decode(listed.stdout)}
    assert {*BUILT, "openai-agents"} <= names
    assert not names & NEVER, names & NEVER

    checked = run(python, "-c", _CHECK, tmp_path / "s.db", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    report = msgspec.json.decode(checked.stdout)
    assert report["items"] == [{"role": "user", "content": "hello"}]
    assert report["plugin_alone"] is True
    assert report["turnkeep"] == ["openai-agents", "sqlite"]
    assert report["event_types"] == ["openai-agents"]
