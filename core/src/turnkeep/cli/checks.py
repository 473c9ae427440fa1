"""Checking and settling stored sessions: `verify`, `repair`, `recover`.

`verify` is read-only (`turnkeep.maintenance.verify_session`) and exits 1
when it finds a problem. `repair` is the explicit form of the torn-tail cut
a backend with `SessionMaintenance` makes on its next write: it shows what
would be cut, asks, and has the backend quarantine and cut it; acknowledged
data is never touched. `repair --salvage` copies the intact prefix of a
session damaged inside acknowledged data to a new session
(`turnkeep.cli.salvage`). `recover` settles turns a crash cut off exactly as
`AgentLoop.resume` does, with no tools and no model: every call left without
a result is recorded as interrupted, outcome unknown, and never run again
(safe calls included: the command line runs no tools), and the turn is
closed as interrupted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Final, cast

import click
import msgspec

from turnkeep.agent.loop import AgentLoop
from turnkeep.agent.models import ModelInfo, ModelOutput, ModelRequest
from turnkeep.agent.recovery import RecoveryReport, open_turn
from turnkeep.auditing import note
from turnkeep.cli.output import clean, clean_id, confirm, emit_json
from turnkeep.cli.runtime import (
    EXIT_PROBLEMS,
    CliError,
    about,
    common_options,
    execute,
    one_line,
    open_store,
)
from turnkeep.cli.salvage import salvage
from turnkeep.errors import ModelError, SessionNotFoundError
from turnkeep.events import ToolCall
from turnkeep.host import Host
from turnkeep.ids import validate_session_id
from turnkeep.maintenance import (
    SessionMaintenance,
    StoreCheck,
    TailReport,
    VerifyReport,
    supports_maintenance,
    verify_session,
)
from turnkeep.persistence import SessionPersistence

__all__ = ["register", "stored_ids"]

CLI_AGENT_ID: Final = "turnkeep-cli"


async def stored_ids(backend: SessionPersistence) -> AsyncIterator[str]:
    """Every stored session's id, page by page."""
    cursor: str | None = None
    while True:
        page = await backend.list(limit=500, cursor=cursor)
        for meta in page.items:
            yield meta.id
        cursor = page.next_cursor
        if cursor is None:
            return


async def _selected(
    backend: SessionPersistence, ids: Sequence[str], every: bool
) -> AsyncIterator[str]:
    if every:
        async for session_id in stored_ids(backend):
            yield session_id
    for session_id in ids:
        yield validate_session_id(session_id)


def _need_selection(ids: Sequence[str], every: bool) -> None:
    if every == bool(ids):
        raise click.UsageError("name session ids or pass --all (not both)")


# -- verify --------------------------------------------------------------------


class _Verified(msgspec.Struct, frozen=True, kw_only=True):
    sessions: list[VerifyReport]
    problems: int
    store: list[str] = msgspec.field(default_factory=list[str])


@click.command(
    "verify",
    epilog="\b\nExamples:\n"
    "  turnkeep verify 01jx...\n"
    "  turnkeep verify --all --json\n"
    "\nExit status 1 when any problem is found.",
)
@click.argument("session_ids", metavar="[ID]...", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Check every stored session.")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
@common_options
def verify(session_ids: tuple[str, ...], every: bool, as_json: bool) -> None:
    """Check stored sessions without changing anything.

    Checksums and commit marks (by the backend), header/id agreement, event
    decoding, seq contiguity, and tool call/result pairing. Each problem is
    reported with its session, its offset and what it means. An unfinished
    tail a crash left is noted but is not a problem: it was never
    acknowledged, and the next write (or `turnkeep repair`) cuts it.
    """
    _need_selection(session_ids, every)

    async def body() -> int:
        reports: list[VerifyReport] = []
        async with open_store() as store:
            async for session_id in _selected(store.backend, session_ids, every):
                report = await verify_session(
                    store.backend, session_id, codec=store.host.codec
                )
                reports.append(report)
                if not as_json:
                    _print_report(report)
            store_problems = (
                await store.backend.store_problems()
                if isinstance(store.backend, StoreCheck)
                else []
            )
        problems = sum(len(r.problems) for r in reports) + len(store_problems)
        if as_json:
            emit_json(
                _Verified(sessions=reports, problems=problems, store=store_problems)
            )
        else:
            for problem in store_problems:
                click.echo(f"PROBLEM  (store)  {one_line(clean(problem))}")
            bad = sum(1 for r in reports if not r.ok)
            click.echo(
                f"{len(reports)} session(s) checked: "
                + (f"{bad} with {problems} problem(s)" if bad else "no problems")
                + (
                    f"; the store has {len(store_problems)} problem(s)"
                    if store_problems
                    else ""
                )
            )
        return EXIT_PROBLEMS if problems else 0

    execute(body)


def _print_report(report: VerifyReport) -> None:
    sid = clean_id(report.session_id)
    if report.ok:
        click.echo(f"ok       {sid}  ({report.events} events)")
    for problem in report.problems:
        where = f" at offset {problem.offset}" if problem.offset is not None else ""
        fatal = " [unloadable]" if problem.fatal else ""
        click.echo(
            f"PROBLEM  {sid}  {problem.kind}{where}{fatal}: "
            f"{one_line(clean(problem.message))}"
        )
    if report.tail is not None:
        click.echo(
            f"note     {sid}  {_tail_text(report.tail)}; "
            f"`turnkeep repair {sid}` cuts it"
        )


def _tail_text(tail: TailReport) -> str:
    return (
        f"unacknowledged tail of {tail.length} bytes at offset {tail.offset} "
        f"({one_line(tail.reason)})"
    )


# -- repair --------------------------------------------------------------------


@click.command(
    "repair",
    epilog="\b\nExamples:\n  turnkeep repair 01jx...\n  turnkeep repair --yes 01jx...\n"
    "  turnkeep repair --salvage 01jx...   # damaged: copy what is intact",
)
@click.argument("session_id", metavar="ID")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@click.option(
    "--salvage",
    "salvaging",
    is_flag=True,
    help="For damage inside acknowledged data: write the intact prefix to a "
    "NEW session (its id is printed) and report what was lost; the damaged "
    "session is left as it is.",
)
@click.option("--id", "new_id", metavar="NEW", help="The salvaged session's id.")
@common_options
def repair(
    session_id: str, yes: bool, as_json: bool, salvaging: bool, new_id: str | None
) -> None:
    """Cut the unacknowledged tail a crash left in a session's log.

    Shows what would be cut, asks, then has the backend copy those bytes to
    a quarantine file (made durable first) and cut them. Acknowledged data
    is never touched; a session damaged inside it is refused. Backends whose
    flushes are transactions (SQLite, PostgreSQL) have no tails to repair.

    With --salvage, a session damaged inside acknowledged data is not
    changed: its intact prefix is copied to a new session instead.
    """
    if new_id is not None and not salvaging:
        raise click.UsageError("--id names the salvaged session: use it with --salvage")

    async def body() -> int:
        if salvaging:
            async with open_store() as store:
                return await salvage(store, session_id, new_id=new_id, as_json=as_json)
        async with open_store() as store, about(session_id):
            backend = store.backend
            validate_session_id(session_id)
            if not await backend.has(session_id):
                raise SessionNotFoundError(f"no stored session {session_id!r}")
            if not supports_maintenance(backend):
                return _nothing(
                    as_json,
                    f"nothing to repair: the {store.name!r} backend keeps no torn "
                    "tails (each flush is one transaction)",
                )
            maintenance = cast("SessionMaintenance", backend)
            tail = await maintenance.inspect_tail(session_id)
            if tail is None:
                return _nothing(
                    as_json,
                    f"nothing to repair: {clean_id(session_id)} ends on an "
                    "acknowledged flush",
                )
            if not yes:
                click.echo(
                    f"{clean_id(session_id)}: {_tail_text(tail)} would be cut", err=True
                )
            await confirm(
                "Quarantine and cut it? Acknowledged events are not touched.",
                yes=yes,
                nothing_done="nothing was cut",
            )
            cut = await maintenance.repair(session_id)
            if cut is not None:
                await note(
                    backend,
                    "repair",
                    session_id,
                    "`turnkeep repair`: the unacknowledged tail was cut",
                    detail={"offset": cut.offset, "length": cut.length},
                )
        if cut is None:
            return _nothing(
                as_json, "nothing left to cut: another process cut it first"
            )
        if as_json:
            emit_json(cut)
        else:
            click.echo(
                f"cut {cut.length} bytes at offset {cut.offset} from "
                f"{clean_id(session_id)}; kept in {cut.quarantine}"
            )
        return 0

    execute(body)


def _nothing(as_json: bool, message: str) -> int:
    if as_json:
        emit_json(None)
    else:
        click.echo(message)
    return 0


# -- recover -------------------------------------------------------------------


class NoModel:
    """The model of the command line's recovery, which never asks one."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        """Refuse: recovery here closes cut-off turns without a model."""
        raise ModelError("the turnkeep command does not call models")
        yield  # pragma: no cover - makes this an async generator

    def describe(self) -> ModelInfo:
        """No model: recovery only."""
        return ModelInfo(name="none", provider="turnkeep-recovery")


class _Recovered(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    turn: int | None
    interrupted: list[str]
    safe_not_rerun: list[str]
    names: dict[str, str] = msgspec.field(default_factory=dict[str, str])
    blocked: list[str] = msgspec.field(default_factory=list[str])
    error: str | None = None


SAFE_NOTE: Final = (
    "The command line runs no tools, so calls declared safe to repeat were "
    "reported as interrupted too; resume the session in its agent to run them."
)


@click.command(
    "recover",
    epilog="\b\nExamples:\n  turnkeep recover 01jx...\n  turnkeep recover --all --json",
)
@click.argument("session_ids", metavar="[ID]...", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Recover every stored session.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@common_options
def recover(session_ids: tuple[str, ...], every: bool, as_json: bool) -> None:
    """Settle turns a crash cut off, as the agent loop's recovery does.

    Each tool call left without a result is recorded as interrupted, outcome
    unknown, and is never run again; then the turn is closed as
    interrupted. The command line runs no tools and no model, so calls
    declared safe to repeat are reported as interrupted too. Sessions that
    ended cleanly are only read.
    """
    _need_selection(session_ids, every)

    async def body() -> int:
        done: list[_Recovered] = []
        async with open_store() as store:
            async for session_id in _selected(store.backend, session_ids, every):
                try:
                    async with about(session_id):
                        done.append(
                            await _recover_one(store.host, store.backend, session_id)
                        )
                except CliError as exc:
                    if not every and len(session_ids) == 1:
                        raise
                    done.append(
                        _Recovered(
                            session_id=session_id,
                            turn=None,
                            interrupted=[],
                            safe_not_rerun=[],
                            error=str(exc),
                        )
                    )
                if not as_json:
                    _print_recovered(done[-1])
        if as_json:
            emit_json(done)
        return EXIT_PROBLEMS if any(r.error for r in done) else 0

    execute(body)


async def _recover_one(
    host: Host, backend: SessionPersistence, session_id: str
) -> _Recovered:
    loaded = await backend.load(session_id)
    events = host.codec.decode_log(loaded.events, session_id=session_id)
    nothing = _Recovered(
        session_id=session_id, turn=None, interrupted=[], safe_not_rerun=[]
    )
    if open_turn(events) is None:
        return nothing  # read only: a clean session is not even claimed
    safe = {
        e.data.call_id
        for e in events
        if isinstance(e, ToolCall) and e.data.replay == "safe"
    }
    # Not the session's agent: its context differs by design, and a
    # recovery that asks no model records none.
    loop = await AgentLoop.resume(
        CLI_AGENT_ID,
        session_id,
        host=host,
        model=NoModel(),
        tools=(),
        context="override",
    )
    report: RecoveryReport | None = loop.recovery
    await loop.close()
    if report is None or report.turn is None:
        return nothing  # another process finished the turn meanwhile
    return _Recovered(
        session_id=session_id,
        turn=report.turn,
        interrupted=list(report.interrupted),
        safe_not_rerun=[c for c in report.interrupted if c in safe],
        names=dict(report.names),
        blocked=list(report.settled.blocked),
    )


def _print_recovered(done: _Recovered) -> None:
    sid = clean_id(done.session_id)
    if done.error is not None:
        click.echo(f"turnkeep: {one_line(done.error)}", err=True)
        return
    if done.turn is None:
        click.echo(f"{sid}: ended cleanly after its last turn; nothing to recover")
        return
    click.echo(f"{sid}: turn {done.turn} was cut off by a crash")
    for call_id in done.interrupted:
        name = clean(done.names.get(call_id, "a tool"))
        click.echo(
            f"  {name} (call {clean_id(call_id)}): its result was never saved; "
            "recorded as interrupted, outcome unknown. It was NOT run again."
        )
    if not done.interrupted:
        click.echo("  no tool call was left without a result")
    click.echo("  the turn was closed as interrupted")
    if done.safe_not_rerun:
        click.echo(f"  {SAFE_NOTE}")
    for call_id in done.blocked:
        click.echo(
            f"  BLOCKED: call {clean_id(call_id)} may have taken effect, so the "
            "session takes no new turn until someone says whether it did: "
            f"turnkeep resolve {sid} {clean_id(call_id)} --done|--not-done"
        )


def register(group: click.Group) -> None:
    """Add this module's commands to the `turnkeep` group."""
    for command in (verify, repair, recover):
        group.add_command(command)
