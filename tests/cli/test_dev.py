"""`turnkeep dev`: a plugin file edited during a scripted conversation is reloaded.

The plugin under edit (`tkprobe`, installed through a `.dist-info` on
`PYTHONPATH` as the entry point `probe`) provides the active backend (a
JSONL store) and marks every user message with its `VERSION`. A conversation
runs in `turnkeep dev`; between turns the test rewrites the plugin and waits
for dev to say it reloaded it. Afterwards the stored log shows every turn
exactly once, in order, each marked by the plugin version that was live.
"""

from __future__ import annotations

import asyncio
import os
import queue
import subprocess
import textwrap
import threading
from pathlib import Path
from typing import IO

import pytest
from tests.cli.support import SCRIPT, cli, one_line_error

from turnkeep.agent.recovery import pairing_problems
from turnkeep.codec import EventCodec
from turnkeep.events import TurnEnd, UserMessage
from turnkeep_jsonl import JsonlPersistence

PLUGIN = """
from pathlib import Path

import attrs
import msgspec

from turnkeep import hookimpl
from turnkeep_jsonl import JsonlPersistence

VERSION = {version}


@attrs.frozen
class ProbeConfig:
    path: Path = Path("probe-store")


@hookimpl
def register_persistence(register):
    register("probe", lambda config: JsonlPersistence(config.path), ProbeConfig)


@hookimpl
def redact_event(session, event):
    if event.type != "user/message":
        return None
    text = f"{{event.data.text}} [v{{VERSION}}]"
    data = msgspec.structs.replace(event.data, text=text)
    return msgspec.structs.replace(event, data=data)
"""

APP = """
import asyncio
import sys

from turnkeep import AgentLoop
from turnkeep.testing import EchoModel


async def run(host):
    loop = AgentLoop.create("dev-app", host=host, model=EchoModel(), session_id="app")
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line or line.strip() == "/exit":
            break
        result = await loop.run_turn(line.strip())
        print(result.text, flush=True)
    await loop.close()
"""


class Lines:
    """The lines of a pipe, read by a thread, awaited with a bound."""

    def __init__(self, stream: IO[str]) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []

        def pump() -> None:
            for line in stream:
                self.queue.put(line)
            self.queue.put("")

        threading.Thread(target=pump, daemon=True).start()

    def wait_for(self, text: str) -> str:
        while True:
            line = self.queue.get(timeout=60)
            self.seen.append(line)
            assert line, f"ended before {text!r}: {''.join(self.seen)}"
            if text in line:
                return line


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    """The plugin package on disk, installed as entry point `probe`."""
    site = tmp_path / "site"
    (site / "tkprobe").mkdir(parents=True)
    dist = site / "tkprobe-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: tkprobe\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text("[turnkeep]\nprobe = tkprobe\n")
    (site / "devapp.py").write_text(textwrap.dedent(APP))
    write_plugin(site, "1")
    return site


def write_plugin(site: Path, version: str) -> None:
    (site / "tkprobe" / "__init__.py").write_text(PLUGIN.format(version=version))


def start(site: Path, store: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(site),
        PYTHONDONTWRITEBYTECODE="1",
        TURNKEEP_PERSISTENCE="probe",
        TURNKEEP_PROBE__PATH=str(store),
    )
    return subprocess.Popen(
        [str(SCRIPT), "dev", "--debounce", "50", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def say(proc: subprocess.Popen[str], text: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(text + "\n")
    proc.stdin.flush()


def stored_log(store: Path, session_id: str) -> list[object]:
    async def load() -> list[bytes]:
        backend = JsonlPersistence(store)
        try:
            return (await backend.load(session_id)).events
        finally:
            await backend.aclose()

    raws = asyncio.run(load())
    return list(EventCodec().decode_log(raws, session_id=session_id))


def check_log(events: list[object], texts: list[str]) -> None:
    users = [e.data.text for e in events if isinstance(e, UserMessage)]
    assert users == texts
    ends = [e.data for e in events if isinstance(e, TurnEnd)]
    assert [(e.turn, e.status) for e in ends] == [
        (n, "completed") for n in range(1, len(texts) + 1)
    ]
    assert pairing_problems(events) == []  # type: ignore[arg-type]


def finish(proc: subprocess.Popen[str], err: Lines) -> None:
    say(proc, "/exit")
    assert proc.wait(timeout=60) == 0, "".join(err.seen)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def test_dev_reloads_an_edited_backend_plugin_mid_conversation(
    probe: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    proc = start(probe, store, "--", "echo-agent")
    try:
        assert proc.stdout is not None
        assert proc.stderr is not None
        out, err = Lines(proc.stdout), Lines(proc.stderr)
        say(proc, "first")
        out.wait_for("You said: first [v1]")
        err.wait_for("watching")
        write_plugin(probe, "22")
        err.wait_for("reloaded probe (1 live session(s) kept)")
        say(proc, "second")
        out.wait_for("You said: second [v22]")
        finish(proc, err)
        session_id = err.wait_for("session: ").split("session: ", 1)[1].strip()
    finally:
        stop(proc)
    check_log(stored_log(store, session_id), ["first [v1]", "second [v22]"])


def test_dev_app_keeps_the_old_plugin_when_an_edit_breaks_it(
    probe: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    proc = start(probe, store, "--app", "devapp:run")
    try:
        assert proc.stdout is not None
        assert proc.stderr is not None
        out, err = Lines(proc.stdout), Lines(proc.stderr)
        err.wait_for("watching")
        say(proc, "one")
        out.wait_for("You said: one [v1]")
        write_plugin(probe, "1\nthis is not python")
        err.wait_for("reloading probe failed")
        say(proc, "two")
        out.wait_for("You said: two [v1]")
        write_plugin(probe, "333")
        err.wait_for("reloaded probe")
        say(proc, "three")
        out.wait_for("You said: three [v333]")
        finish(proc, err)
    finally:
        stop(proc)
    check_log(stored_log(store, "app"), ["one [v1]", "two [v1]", "three [v333]"])


def test_dev_usage_and_programs_it_cannot_run() -> None:
    assert cli("dev").exit_code == 2
    assert cli("dev", "--app", "x:y", "--", "echo-agent").exit_code == 2
    result = cli("dev", "--", "no-such-program-here")
    assert result.exit_code == 1
    assert "not a Python program" in result.stderr
    missing = cli("dev", "--app", "no_such_module:run")
    assert missing.exit_code == 1
    assert "no_such_module" in missing.stderr


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (("/no/such/file.py",), "cannot run '/no/such/file.py': not found"),
        (("python", "/no/such/file.py"), "cannot run '/no/such/file.py': not found"),
        (
            ("python", "-m", "no_such_module_here"),
            "no module named 'no_such_module_here'",
        ),
        (("python", "-m", "no_such_pkg.mod"), "no module named 'no_such_pkg.mod'"),
    ],
)
def test_a_program_that_is_not_there_is_one_line(
    command: tuple[str, ...], says: str
) -> None:
    result = cli("dev", "--", *command)
    assert result.exit_code == 1
    assert says in one_line_error(result)


def test_an_error_inside_the_program_keeps_its_traceback(tmp_path: Path) -> None:
    # Only a program that is not there is the command's error; a program
    # that fails is the user's to debug.
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_inside\n")
    with pytest.raises(ModuleNotFoundError, match="no_such_module_inside"):
        cli("dev", "--", str(broken))
