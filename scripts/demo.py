"""The main job (`make demo`): a coding agent is killed mid-tool and resumes.

1. The coding agent (`examples/coding_agent`, scripted model, offline) starts
   a task in a fresh workspace: add `greet.py` with a test, run the test.
2. While its `run_command` tool is in flight (the test has run, its result
   is not in the session yet), the process is killed with SIGKILL.
3. A new process resumes the session from the store. turnkeep reports the
   cut-off call as interrupted, outcome unknown, and does not run it again.
   The command may have written to the workspace, so the session is blocked
   until a person says whether it took effect.
4. The demo plays that person: it reads the test report the run left and
   records with `turnkeep resolve` that the run took effect. A third
   process goes on; the model takes that word and finishes the task. The
   demo checks that the test ran exactly once and says so.
5. A fourth process tries to continue the session with other instructions:
   turnkeep refuses, because the session recorded what it ran with, and
   says what differs.

Nothing is configured here, so the agent uses turnkeep's embedded default
store (the `jsonl` plugin, under the user data directory); `turnkeep.toml`
or `TURNKEEP_PERSISTENCE` would choose another one with no code change.
"""

from __future__ import annotations

import asyncio
import io
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, cast

from turnkeep import AgentLoop, Host, load_config
from turnkeep.errors import ContextMismatchError
from turnkeep.events import ToolCall, ToolResult, TurnEnd

RULE = "-" * 72


def say(text: str = "") -> None:
    """Print one line of narration."""
    print(text, flush=True)


def agent(
    workspace: Path, *arguments: str, hold: bool = False
) -> subprocess.Popen[str]:
    """Start the coding agent in its own process group, output piped."""
    env = dict(os.environ)
    env.pop("CODING_AGENT_HOLD_AFTER", None)
    if hold:
        env["CODING_AGENT_HOLD_AFTER"] = "run_command"
    return subprocess.Popen(  # noqa: S603 - our own interpreter and module, fixed argv
        [
            sys.executable,
            "-m",
            "coding_agent",
            "--workspace",
            str(workspace),
            *arguments,
        ],
        cwd=workspace.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # so the kill takes its children too
    )


def _out(process: subprocess.Popen[str]) -> IO[str]:
    if process.stdout is None:
        raise RuntimeError("the agent's output is not piped")
    return process.stdout


def relay(stream: IO[str], until: str | None = None) -> list[str]:
    """Echo the agent's lines (indented) until one starts with `until`."""
    seen: list[str] = []
    for line in stream:
        line = line.rstrip("\n")
        seen.append(line)
        print(f"    | {line}", flush=True)
        if until is not None and line.startswith(until):
            break
    return seen


def times(count: int) -> str:
    """`once`, `twice`, `3 times`."""
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


def value(lines: Sequence[str], prefix: str) -> str:
    """The rest of the first line starting with `prefix`."""
    for line in lines:
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    raise SystemExit(f"demo: the agent never printed {prefix!r}")


async def _backend_path(workspace: Path) -> object:
    async with Host(load_config(workspace.parent)) as host:
        if host.persistence_name is None:
            return None
        return getattr(host.require_persistence(), "path", None)


def store_path(workspace: Path) -> Path | None:
    """Where the agents' store keeps its files, if it keeps files."""
    path = asyncio.run(_backend_path(workspace))
    if not isinstance(path, str | os.PathLike):
        return None
    return Path(os.fspath(cast("str | os.PathLike[str]", path))).resolve()


def show_command(
    store: str, path: Path | None, session_id: str, started_in: Path
) -> str:
    """The `turnkeep show` command that reads the demo's session back."""
    turnkeep = Path(sys.executable).parent / "turnkeep"
    try:
        shown = turnkeep.relative_to(started_in)
    except ValueError:
        shown = turnkeep
    spec = ["--store", f"{store}:{path}"] if path is not None else []
    return shlex.join([str(shown), *spec, "show", session_id])


async def audit(session_id: str, workspace: Path) -> tuple[int, int, str]:
    """Read the session back: run_command calls, interrupted results, last status."""
    async with Host(load_config(workspace.parent)) as host:
        session = await host.sessions.resume(session_id)
        events = list(session.events)
        await host.sessions.close(session_id)
    runs = sum(
        1 for e in events if isinstance(e, ToolCall) and e.data.name == "run_command"
    )
    interrupted = sum(
        1
        for e in events
        if isinstance(e, ToolResult) and e.data.status == "interrupted"
    )
    ends = [e for e in events if isinstance(e, TurnEnd)]
    return runs, interrupted, ends[-1].data.status if ends else "none"


async def blocked_call(session_id: str, workspace: Path) -> str | None:
    """The call that blocks the session (the interrupted test run), if any."""
    from turnkeep.agent.effects import unknown_calls

    async with Host(load_config(workspace.parent)) as host:
        session = await host.sessions.resume(session_id)
        blocking = [c.call_id for c in unknown_calls(session) if c.blocks]
        await host.sessions.close(session_id)
    return blocking[0] if blocking else None


async def other_instructions(session_id: str, workspace: Path) -> list[str]:
    """Resume with the agent's tools and model but other instructions.

    Returns what turnkeep said differs (nothing if it was not refused).
    """
    from coding_agent.agent import AGENT_ID, choose_model
    from coding_agent.tools import workspace_tools
    from coding_agent.workspace import Workspace

    async with Host(load_config(workspace.parent)) as host:
        try:
            loop = await AgentLoop.resume(
                AGENT_ID,
                session_id,
                host=host,
                model=choose_model()[0],
                tools=workspace_tools(Workspace(workspace)),
                instructions="Skip the tests and just write the files.",
            )
        except ContextMismatchError as exc:
            return list(exc.differences)
        await loop.close()
    return []


def main() -> int:
    """Run the demo in a temporary folder; keep the store, remove the folder.

    The store is the user's (the configured one, or the default under the
    user data directory), so the session stays there to look at with
    `turnkeep show`; only the demo's own workspace goes. A store configured
    inside that folder (a relative path) keeps the folder.
    """
    root = Path(tempfile.mkdtemp(prefix="turnkeep-demo-"))
    workspace = root / "workspace"
    workspace.mkdir()
    started_in = Path.cwd()
    # The agents run in `root`; the demo's own hosts read the same store
    # only if a relative store path means the same to them.
    os.chdir(root)
    try:
        return demo(workspace, started_in)
    finally:
        store = store_path(workspace)
        os.chdir(started_in)
        if store is not None and store.is_relative_to(root.resolve()):
            say(f"The store is inside {root}, so that folder is kept.")
        else:
            shutil.rmtree(root)


def demo(workspace: Path, started_in: Path) -> int:
    """Run the demo; exit non-zero if anything did not happen as promised."""
    (workspace / "README.md").write_text("# A tiny project\n", encoding="utf-8")
    say(RULE)
    say("turnkeep demo: a coding agent is killed in the middle of a tool call,")
    say("and a new process picks the session up from disk.")
    say(f"Workspace: {workspace}")
    say(RULE)
    say("1. The agent starts its task. Each tool that changes something is")
    say("   saved in the session log before it runs.")
    first = agent(workspace, hold=True)
    lines = relay(_out(first), until="[hold]")
    if not lines or not lines[-1].startswith("[hold]"):
        first.wait()
        say(f"demo: the agent stopped early (exit status {first.returncode}).")
        return 1
    session_id = value(lines, "session:")
    store = value(lines, "store:").split(";")[0]
    if store.startswith("none"):
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        say("demo: no persistence plugin is active, so nothing would survive a")
        say("crash. Install turnkeep-jsonl (make install), or check the")
        say("`persistence` setting (turnkeep.toml, TURNKEEP_PERSISTENCE).")
        return 1
    say()
    say("2. The test command has run, but its result has not reached the")
    say("   session yet. Now the process is killed (SIGKILL, no cleanup).")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    _out(first).close()
    runs_before = (workspace / "test-runs.log").read_text().count("run")
    ran = times(runs_before)
    say(f"   Killed. The workspace's test-runs.log says the test ran {ran};")
    say("   the session does not know how that run ended.")
    say()
    say(f"3. A new process resumes session {session_id} from the {store} store.")
    second = agent(workspace, "--session", session_id, "--continue")
    relay(_out(second))
    _out(second).close()
    if second.wait() != 0:
        say(f"demo: the resumed agent failed (exit status {second.returncode}).")
        return 1
    call_id = asyncio.run(blocked_call(session_id, workspace))
    if call_id is None:
        say("demo: the interrupted test run did not block the session.")
        return 1
    say()
    say("4. The test command may have written to the workspace, so the session")
    say("   refuses new turns until someone says whether it took effect. The")
    report_file = workspace / "test-report.txt"
    report = report_file.read_text().strip() if report_file.exists() else ""
    if not report:
        say("demo: the interrupted run left no test report to go by.")
        return 1
    say(f"   test report says {report!r}, so the demo records that it did:")
    resolve = [
        "turnkeep",
        "resolve",
        session_id,
        call_id,
        "--done",
        "--result",
        report,
        "--reason",
        f"test-report.txt says {report}",
    ]
    say(f"   $ {shlex.join(resolve)}")
    resolve[0] = str(Path(sys.executable).parent / "turnkeep")
    resolved = subprocess.run(  # noqa: S603 - our own console script, fixed argv
        resolve, cwd=workspace.parent, capture_output=True, text=True, check=False
    )
    relay(io.StringIO(resolved.stdout + resolved.stderr))
    if resolved.returncode != 0:
        say(f"demo: turnkeep resolve failed (exit status {resolved.returncode}).")
        return 1
    say("   A new process goes on with the session:")
    third = agent(workspace, "--session", session_id, "Go on.")
    relay(_out(third))
    _out(third).close()
    if third.wait() != 0:
        say(f"demo: the agent failed to go on (exit status {third.returncode}).")
        return 1
    runs, interrupted, status = asyncio.run(audit(session_id, workspace))
    runs_after = (workspace / "test-runs.log").read_text().count("run")
    say()
    say(RULE)
    ok = runs_after == runs_before == 1 and interrupted == 1 and status == "completed"
    if not ok:
        # Say what was found, not what should have been.
        say("demo: that is not what should have happened:")
        say(f"- the test ran {times(runs_after)} in all (should be once);")
        say(f"- {interrupted} interrupted result(s) in the log (should be 1);")
        say(f"- the turn ended {status!r} (should be 'completed').")
        say(RULE)
        return 1
    say("5. Another process tries to continue the session with different")
    say('   instructions ("Skip the tests and just write the files.").')
    refused = asyncio.run(other_instructions(session_id, workspace))
    if not refused:
        say("demo: the session was continued with other instructions, unchecked.")
        say(RULE)
        return 1
    say("   turnkeep refused: the session recorded the context it ran with,")
    say("   and this one differs in:")
    for difference in refused:
        say(f"   - {difference}")
    say("   Nothing was written; the session is as it was.")
    say(RULE)
    say("What happened:")
    say(f"- The session was stored by the {store!r} plugin and survived the kill.")
    say(
        f"- The interrupted run_command was reported as interrupted "
        f"({interrupted} interrupted result in the log), not repeated."
    )
    say(
        "- The command may have written, so the session waited for a person; "
        "turnkeep resolve recorded who said it took effect and why, and the "
        f"model finished the task on that word (the turn ended {status!r})."
    )
    say(
        f"- The test ran {times(runs_after)} in all, although the process died "
        f"while running it ({runs} run_command call in the log)."
    )
    say(
        "- A process with other instructions was refused before it could "
        'run a turn (pass context="override" to accept a change on purpose).'
    )
    path = store_path(workspace)
    where = f" at {path}" if path is not None else ""
    say(f"- The session stays in the {store} store{where}; read it back with")
    say(f"  {show_command(store, path, session_id, started_in)}")
    say("  (or `source .venv/bin/activate`, then `turnkeep show ...`).")
    say(RULE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
