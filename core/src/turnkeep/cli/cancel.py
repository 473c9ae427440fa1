"""`turnkeep cancel ID`: ask the process running a session's turn to cancel it.

The command does not own the session: it records a cancel request in the
store (`turnkeep.cancelrequest.ask_to_cancel`), which the owner's loop
acts on within a fraction of a second (`turnkeep.agent.remotecancel`),
then follows the session's commits (`turnkeep.follow.wait_for_commit`,
reading only the new records) for at most `--wait` seconds until a
`turn/end` lands, and says how the turn ended. Exit status: 0 the turn
ended (its status is printed), 3 the request was recorded but no turn
ended within `--wait`, 4 no live process holds the session (no turn runs;
nothing was recorded), 1 an error or a refused confirmation.
"""

from __future__ import annotations

import asyncio
from typing import Final

import click

from turnkeep.cancelrequest import ask_to_cancel, cancel_requests
from turnkeep.cli.output import clean_id, confirm
from turnkeep.cli.runtime import about, common_options, execute, open_store
from turnkeep.codec import EventCodec
from turnkeep.errors import SessionNotFoundError
from turnkeep.eventreads import last_durable_seq, read_after
from turnkeep.events import TurnEnd
from turnkeep.follow import wait_for_commit
from turnkeep.ids import validate_session_id
from turnkeep.persistence import SessionPersistence

__all__ = ["EXIT_NOT_ENDED", "EXIT_NOT_RUNNING", "cancel", "register"]

EXIT_NOT_ENDED: Final = 3
"""The request was recorded; no turn ended within `--wait`."""
EXIT_NOT_RUNNING: Final = 4
"""No live process holds the session: nothing runs, nothing was recorded."""

_REASON: Final = "turnkeep cancel"


@click.command(
    "cancel",
    epilog=(
        "\b\nExamples:\n  turnkeep cancel 01jx...\n"
        "  turnkeep cancel --yes --wait 30 01jx...\n"
        "\b\nExit status: 0 the turn ended (its status is printed), 3 no turn "
        "ended within --wait, 4 no live process holds the session (nothing "
        "recorded), 1 an error."
    ),
)
@click.argument("session_id", metavar="ID")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--wait",
    "wait",
    type=click.FloatRange(min=0, max=3600),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the turn to end (0: record the request only).",
)
@click.option(
    "--reason", default=_REASON, show_default=True, help="Why (recorded with it)."
)
@common_options
def cancel(session_id: str, yes: bool, wait: float, reason: str) -> None:
    """Cancel the turn another process is running on a session (asks first).

    The process running the turn ends it with status cancelled, as its own
    cancel would: a model call or a tool in flight is interrupted (a tool
    with outside effects is recorded as interrupted, outcome unknown).
    """

    async def body() -> int:
        async with open_store() as store:
            with about(session_id):
                return await _cancel(
                    store.backend,
                    store.host.codec,
                    store.name,
                    session_id,
                    yes=yes,
                    wait=wait,
                    reason=reason,
                )

    execute(body)


async def _cancel(
    backend: SessionPersistence,
    codec: EventCodec,
    name: str,
    session_id: str,
    *,
    yes: bool,
    wait: float,
    reason: str,
) -> int:
    validate_session_id(session_id)
    cancel_requests(backend, name=name)  # refuse before asking anything
    if not await backend.has(session_id):
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    before = await last_durable_seq(backend, session_id)
    await confirm(
        f"Cancel the running turn of session {clean_id(session_id)}? What its "
        "tools were doing is interrupted.",
        yes=yes,
        nothing_done="nothing was requested",
    )
    answer = await ask_to_cancel(backend, session_id, reason, name=name)
    if answer.request is None:
        click.echo(
            f"no live process holds {clean_id(session_id)}: no turn is running; "
            "nothing was requested"
        )
        return EXIT_NOT_RUNNING
    click.echo(
        f"cancel requested ({clean_id(session_id)}, request {answer.request.number})"
    )
    status = await _turn_end(backend, codec, session_id, before, wait)
    if status is None:
        click.echo(
            f"no turn of {clean_id(session_id)} ended within {wait:g} s; the request "
            "stays recorded for the turn running now"
        )
        return EXIT_NOT_ENDED
    click.echo(f"the turn ended: {status}")
    return 0


async def _turn_end(
    backend: SessionPersistence,
    codec: EventCodec,
    session_id: str,
    after: int,
    within: float,
) -> str | None:
    """The status of the first `turn/end` after seq `after`, within `within` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        remaining = max(deadline - loop.time(), 0.0)
        last = await wait_for_commit(backend, session_id, after, remaining)
        if last > after:
            for raw in await read_after(backend, session_id, after, last - after):
                event = codec.decode(raw)
                if isinstance(event, TurnEnd):
                    return event.data.status
            after = last
        if loop.time() >= deadline:
            return None


def register(group: click.Group) -> None:
    """Add `cancel` to the `turnkeep` group."""
    group.add_command(cancel)
