"""`turnkeep resolve`: settle a tool call whose outcome is unknown, by hand.

A call cut off by a crash whose tool blocks turns while its outcome is
unknown (`on_unknown = "block"`) keeps the session's next turn refused
until someone finds out whether it took effect and says so here (or through
`AgentLoop.resolve`). The answer is a durable `effect/resolved` event with
who said it, when and why; the model is told at the next turn.
"""

from __future__ import annotations

import click

from turnkeep.agent import AgentLoop
from turnkeep.agent.effects import unknown_calls
from turnkeep.cli.checks import CLI_AGENT_ID, NoModel
from turnkeep.cli.output import clean, clean_id
from turnkeep.cli.runtime import about, common_options, execute, open_store

__all__ = ["register", "resolve"]


@click.command(
    "resolve",
    epilog="\b\nExamples:\n"
    "  turnkeep resolve 01jx... call_01jx... --done --result 'wrote notes.txt'\n"
    "  turnkeep resolve 01jx... call_01jx... --not-done --reason 'no such file'",
)
@click.argument("session_id", metavar="ID")
@click.argument("call_id", metavar="CALL")
# Two flags rather than click's `--done/--not-done` pair, with which the
# last one given wins: giving both must be refused, since the answer is
# recorded for good.
@click.option("--done", "said_done", is_flag=True, help="The call took effect.")
@click.option(
    "--not-done",
    "said_not_done",
    is_flag=True,
    help="The call did not take effect (the model may make it again).",
)
@click.option("--result", help="With --done: what the model is told it returned.")
@click.option("--reason", default="", help="Why you know (recorded).")
@click.option("--by", help="Who resolves it (default: user@host pid).")
@common_options
def resolve(
    session_id: str,
    call_id: str,
    said_done: bool,
    said_not_done: bool,
    result: str | None,
    reason: str,
    by: str | None,
) -> None:
    """Record whether a tool call of unknown outcome took effect.

    A turn the log ends inside (a crash) is recovered first, as `turnkeep
    recover` does. Refused, changing nothing, when the session has no such
    call or its outcome is not unknown.
    """
    if said_done and said_not_done:
        raise click.UsageError(
            "--done and --not-done are mutually exclusive; give one of them"
        )
    if not (said_done or said_not_done):
        raise click.UsageError("say --done or --not-done")
    done = said_done
    if result is not None and not done:
        raise click.UsageError("--result goes with --done only")

    async def body() -> int:
        async with open_store() as store:
            with about(session_id):
                # Not the session's agent: its context differs by design,
                # and a loop that asks no model records none.
                loop = await AgentLoop.resume(
                    CLI_AGENT_ID,
                    session_id,
                    host=store.host,
                    model=NoModel(),
                    context="override",
                )
                try:
                    event = await loop.resolve(
                        call_id, done=done, result=result, by=by, reason=reason
                    )
                    left = [
                        c.call_id
                        for c in unknown_calls(store.host.sessions.get(session_id))
                        if c.blocks
                    ]
                finally:
                    await loop.close()
        said = "took effect" if done else "did NOT take effect"
        click.echo(
            f"{clean_id(session_id)}: call {clean_id(call_id)} {said} "
            f"(recorded by {clean(event.data.by)})"
        )
        if left:
            click.echo(f"  still blocked by: {', '.join(clean_id(c) for c in left)}")
        else:
            click.echo("  the session accepts new turns")
        return 0

    execute(body)


def register(group: click.Group) -> None:
    """Add this module's commands to the `turnkeep` group."""
    group.add_command(resolve)
