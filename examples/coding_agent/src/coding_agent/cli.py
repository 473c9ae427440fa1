"""The coding agent's command line.

    coding-agent --workspace DIR [TASK ...]                 start a task
    coding-agent --workspace DIR --session ID [--continue]  resume after a crash
        [--accept-context-change]  resume with another model or tool set
        [--accept-drift]           resume although the workspace changed

Progress is printed in plain words as events are appended. On resume, what
recovery found is printed first; with `--continue` a turn cut off by a crash
is continued (the model sees which calls were interrupted), otherwise it is
closed as interrupted. A call that blocks the session (an interrupted
command that may write) is printed with the `turnkeep resolve` command that
settles it; until then a new task is refused. A session recorded with
another model, tool set or instructions than this process has is refused
(nothing is changed) unless `--accept-context-change`, which records the
change and goes on. Each turn's end names the workspace's tree hash; a
session whose workspace was changed since (by hand, by another program) is
refused the same way unless `--accept-drift`, which records the drift and
goes on. The
persistence plugin comes from configuration (`turnkeep.toml`,
`TURNKEEP_PERSISTENCE`), never from flags.

A turn that did not complete prints why under its end line (`why: the
model server answered HTTP 429: ...`). Exit status: 0 when the last turn
this process ran completed, or was closed as interrupted by recovery, or
no turn ran; 1 when it failed, timed out or ran out of budget
(`EXIT_TURN_FAILED`); 2 when the session was refused (another run context,
a changed workspace, a blocked call, any other turnkeep error); 130 on
Ctrl-C.

For the crash demo, `CODING_AGENT_HOLD_AFTER=<tool>` makes that tool hold
still after it has done its work, before its result reaches the session, as
if the machine froze there; the line `[hold] ...` announces it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from coding_agent.agent import choose_model, open_agent
from coding_agent.script import TASK
from coding_agent.workspace import Workspace
from turnkeep import Host, Model, SessionEvent, Tool, ToolContext, load_config
from turnkeep.agent import replay_policy
from turnkeep.agent.tools import unknown_policy
from turnkeep.errors import ContextMismatchError, ManifestDriftError, TurnkeepError
from turnkeep.events import (
    AssistantMessage,
    RunDrift,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnStart,
    UserMessage,
)

__all__ = ["EXIT_TURN_FAILED", "describe", "main", "run"]

HOLD_VARIABLE = "CODING_AGENT_HOLD_AFTER"
EXIT_TURN_FAILED: Final = 1
"""The exit status when the last turn failed, timed out or ran out of budget."""
_UNFINISHED: Final = frozenset({"failed", "timed_out", "budget_exhausted"})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coding-agent", description="A durable coding agent over a workspace."
    )
    parser.add_argument("--workspace", required=True, type=Path)
    parser.add_argument("--session", help="resume this stored session")
    parser.add_argument(
        "--continue",
        dest="continue_turn",
        action="store_true",
        help="continue a turn a crash cut off (instead of closing it)",
    )
    parser.add_argument(
        "--accept-context-change",
        action="store_true",
        help="resume even if the model, tools or instructions differ from the "
        "recorded run (the change is recorded)",
    )
    parser.add_argument(
        "--accept-drift",
        action="store_true",
        help="resume even if the workspace changed since the session's last "
        "turn (the drift is recorded)",
    )
    parser.add_argument("task", nargs="*", help="what to do (a new turn)")
    return parser


def describe(event: SessionEvent) -> str | None:
    """A plain line for an event (`None`: not worth a line).

    A turn's end that did not complete gets a second line saying why.
    """
    if isinstance(event, TurnStart):
        return f"-- turn {event.data.turn} --"
    if isinstance(event, UserMessage):
        return f"you:   {event.data.text}"
    if isinstance(event, AssistantMessage) and event.data.text:
        return f"agent: {event.data.text}"
    if isinstance(event, ToolCall):
        note = (
            " (saved before it runs: it changes things)"
            if event.data.replay == "unsafe"
            else ""
        )
        return f"  -> {event.data.name} {_brief(event.data.arguments)}{note}"
    if isinstance(event, ToolResult):
        if event.data.status == "interrupted":
            return f"  <- interrupted: {event.data.output}"
        first = event.data.output.strip().splitlines()[0] if event.data.output else ""
        return f"  <- {event.data.status}: {first[:100]}"
    if isinstance(event, TurnEnd):
        line = f"-- turn {event.data.turn} {event.data.status} --"
        if event.data.status != "completed" and event.data.error:
            line += f"\n   why: {event.data.error}"
        return line
    if isinstance(event, RunDrift):
        changed = "; ".join(d.describe() for d in event.data.differences)
        return f"drift recorded (changed since the last turn): {changed}"
    return None


def _brief(arguments: Mapping[str, Any]) -> str:
    parts = [
        f"{k}={v!r}" if len(repr(v)) <= 60 else f"{k}=<{len(str(v))} chars>"
        for k, v in arguments.items()
    ]
    return " ".join(parts)


def _print_event(event: SessionEvent) -> None:
    line = describe(event)
    if line is not None:
        print(line, flush=True)


@attrs.frozen
class _Held:
    """Runs a tool, then never returns (the crash demo's frozen moment)."""

    tool: Tool

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def description(self) -> str:
        return self.tool.description

    @property
    def parameters(self) -> Mapping[str, Any]:
        return self.tool.parameters

    @property
    def replay(self) -> str:
        return replay_policy(self.tool)

    def on_unknown(self, arguments: Mapping[str, Any]) -> str:
        return unknown_policy(self.tool, arguments)

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        await self.tool.run(arguments, context)
        print(
            f"[hold] {self.name} has done its work; its result is not saved yet",
            flush=True,
        )
        await asyncio.Event().wait()  # until the process is killed
        raise AssertionError("unreachable")


def _hold(tools: Sequence[Tool]) -> Sequence[Tool]:
    held = os.environ.get(HOLD_VARIABLE)
    return [_Held(t) if t.name == held else t for t in tools]


async def run(argv: Sequence[str]) -> int:
    """Run the command line with `argv`; return the exit status."""
    args = _parser().parse_args(argv)
    task = " ".join(args.task)
    if args.session is None and not task:
        task = TASK
    workspace = Workspace(args.workspace)
    model, model_name = choose_model()
    ended: list[TurnEnd] = []

    def on_event(event: SessionEvent) -> None:
        if isinstance(event, TurnEnd):
            ended.append(event)
        _print_event(event)

    # The model's HTTP connections close with the command, refused or not.
    async with contextlib.AsyncExitStack() as stack:
        aclose = getattr(model, "aclose", None)
        if aclose is not None:
            stack.push_async_callback(aclose)
        await _run(args, task, workspace, model, model_name, on_event)
    if ended and ended[-1].data.status in _UNFINISHED:
        last = ended[-1].data
        print(
            f"coding-agent: turn {last.turn} {last.status.replace('_', ' ')}",
            file=sys.stderr,
        )
        return EXIT_TURN_FAILED
    return 0


async def _run(
    args: argparse.Namespace,
    task: str,
    workspace: Workspace,
    model: Model,
    model_name: str,
    on_event: Callable[[SessionEvent], None],
) -> None:
    async with Host(load_config()) as host:
        store = host.persistence_name or "none (nothing outlives this process)"
        print(f"store: {store}; model: {model_name}; workspace: {workspace.root}")
        if args.session is not None:
            print(f"resuming session {args.session} from the store", flush=True)
        agent = await open_agent(
            host,
            workspace,
            model=model,
            session_id=args.session,
            continue_turn=args.continue_turn,
            accept_context_change=args.accept_context_change,
            accept_drift=args.accept_drift,
            on_event=on_event,
            wrap=_hold,
        )
        print(f"session: {agent.session_id}", flush=True)
        if agent.recovery is not None:
            print("recovery: " + agent.recovery.describe(), flush=True)
            for call_id in agent.recovery.settled.blocked:
                print(
                    f"to go on: turnkeep resolve {agent.session_id} {call_id} "
                    "--done|--not-done --reason '...'",
                    flush=True,
                )
        if task:
            await agent.run_turn(task)
        await agent.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `coding-agent`."""
    try:
        return asyncio.run(run(sys.argv[1:] if argv is None else argv))
    except ContextMismatchError as exc:
        print(f"coding-agent: {exc}", file=sys.stderr)
        print(
            "coding-agent: to resume with this process's context, pass "
            "--accept-context-change",
            file=sys.stderr,
        )
        return 2
    except ManifestDriftError as exc:
        print(f"coding-agent: {exc}", file=sys.stderr)
        print(
            "coding-agent: the workspace changed since the session's last turn; "
            "to resume with it as it is, pass --accept-drift",
            file=sys.stderr,
        )
        return 2
    except TurnkeepError as exc:
        print(f"coding-agent: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
