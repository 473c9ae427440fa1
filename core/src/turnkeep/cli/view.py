"""Reading one session: `show` (the transcript) and `tail` (events as they land).

Both only read. `tail` loads the session once (so damage anywhere in it is
reported, as `show` does). `--follow` then waits for the session's next
commit (`turnkeep.follow.wait_for_commit`: the backend's own notification,
or a poll of the last durable seq for a backend without one) and fetches
only seqs it has not printed (`read_after`: a backend's incremental read,
or a sliced `load` for one without it), so each wake costs the new
events, not the session's size, and it keeps going
while the writer crashes, restarts, or hands the session to another
process: whatever becomes durable shows up once.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import Sequence

import click
import msgspec
from rich.console import Console
from rich.text import Text

from turnkeep.agent.effects import blocking_calls
from turnkeep.agent.messages import Message, derive_messages
from turnkeep.agent.recovery import open_turn
from turnkeep.agent.usage import UsageTotals, total_usage
from turnkeep.cli.output import (
    clean,
    clean_id,
    console,
    emit_json,
    emit_raw_line,
    format_time,
)
from turnkeep.cli.runtime import about, common_options, execute, open_store
from turnkeep.cli.sessions import SessionRow, row
from turnkeep.cli.transcript import event_line, render_entries, render_transcript
from turnkeep.codec import EventCodec
from turnkeep.errors import SessionNotFoundError, StorageError, UnknownEventTypeError
from turnkeep.eventreads import read_after
from turnkeep.events import SessionEvent
from turnkeep.follow import has_commit_waiter, poll_for_commit, wait_for_commit
from turnkeep.ids import validate_session_id
from turnkeep.listing import with_liveness
from turnkeep.packs import expand_all
from turnkeep.persistence import LoadedSession, SessionPersistence

__all__ = ["register"]

_PAGE = 1000
"""Events fetched per `read_after` while catching up."""
_WAIT = 5.0
"""Seconds per wait for a commit (then the session is looked at anew)."""


class _Blocked(msgspec.Struct, frozen=True, kw_only=True):
    call_id: str
    tool: str
    resolve: str
    """The command that unblocks the session (with `--done` or `--not-done`)."""


class _Shown(msgspec.Struct, frozen=True, kw_only=True):
    session: SessionRow
    messages: list[Message]
    open_turn: int | None
    interrupted_calls: list[str]
    blocked_calls: list[_Blocked]
    usage: UsageTotals


def _blocked(session_id: str, events: Sequence[SessionEvent]) -> list[_Blocked]:
    return [
        _Blocked(
            call_id=c.call_id,
            tool=c.name,
            resolve=shlex.join(["turnkeep", "resolve", session_id, c.call_id])
            + " --done|--not-done",
        )
        for c in blocking_calls(events)
    ]


@click.command(
    "show",
    epilog="\b\nExamples:\n"
    "  turnkeep show 01jx...\n"
    "  turnkeep show 01jx... --events | jq .type\n"
    "  turnkeep show 01jx... --messages > history.json",
)
@click.argument("session_id", metavar="ID")
@click.option(
    "--events", "raw", is_flag=True, help="Print the stored events, one JSON line each."
)
@click.option(
    "--messages",
    is_flag=True,
    help="Print the model history (derive_messages) as JSON.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print metadata and history as JSON."
)
@click.option("--full", is_flag=True, help="Do not shorten long texts.")
@common_options
def show(session_id: str, raw: bool, messages: bool, as_json: bool, full: bool) -> None:
    """Show a session's transcript: messages, tool calls and their results.

    Tool calls whose result was never recorded are marked INTERRUPTED: the
    session stopped while they ran, and their outcome is unknown. A session
    whose turn is still open but that no live process holds shows status
    interrupted.
    """
    if raw + messages + as_json > 1:
        raise click.UsageError("choose one of --events, --messages and --json")

    async def body() -> int:
        async with open_store() as store, about(session_id):
            loaded = await store.backend.load(validate_session_id(session_id))
            # A turn its crashed process left running shows as interrupted.
            (meta,) = await with_liveness(store.backend, [loaded.meta])
            # One entry per event: a packed record prints as its events.
            events_ = expand_all(loaded.events)
            loaded = msgspec.structs.replace(loaded, meta=meta, events=events_)
            codec = store.host.codec
            if raw:
                for event in loaded.events:
                    emit_raw_line(event)
                return 0
            events = codec.decode_log(loaded.events, session_id=session_id)
            # Asked while the host runs: closing it unregisters the plugins.
            entries = store.host.render_transcript(events)
        if messages:
            emit_json(derive_messages(events))
            return 0
        cut = open_turn(events)
        blocked = _blocked(session_id, events)
        if as_json:
            emit_json(
                _Shown(
                    session=row(loaded.meta),
                    messages=derive_messages(events),
                    open_turn=cut.turn if cut is not None else None,
                    interrupted_calls=[c.data.call_id for c in cut.unanswered]
                    if cut is not None
                    else [],
                    blocked_calls=blocked,
                    usage=total_usage(events),
                )
            )
            return 0
        out = console()
        _header(out, loaded, total_usage(events))
        for call in blocked:
            out.print(
                Text(
                    f"BLOCKED  call {clean_id(call.call_id)} ({clean(call.tool)}): its "
                    f"outcome is unknown and the session takes no new turn until "
                    f"someone says; {clean(call.resolve)}",
                    "bold red",
                )
            )
        if entries is not None:
            render_entries(entries, out, full=full)
        else:
            render_transcript(events, out, session_id=session_id, full=full)
        return 0

    execute(body)


def _header(out: Console, loaded: LoadedSession, usage: UsageTotals) -> None:
    meta = loaded.meta
    summary, header = meta.summary, meta.header
    lines = [
        f"session  {clean_id(header.id)}",
        f"title    {clean(summary.title) if summary.title else '(none)'}",
        f"status   {summary.status}, {len(loaded.events)} events",
        f"created  {format_time(header.created_at)}   updated "
        f"{format_time(summary.updated_at)}",
    ]
    if header.parent is not None:
        lines.append(
            f"forked   from {clean_id(header.parent.session_id)} "
            f"at seq {header.parent.seq}"
        )
    if usage.turns:
        lines.append(f"usage    {_usage_line(usage)}")
    for line in lines:
        out.print(Text(line, "bold"))


def _usage_line(usage: UsageTotals) -> str:
    def tokens(count: int | None) -> str:
        return "not reported" if count is None else f"{count:,}"

    return (
        f"{usage.turns} turn(s): tokens in {tokens(usage.input_tokens)}, out "
        f"{tokens(usage.output_tokens)}; model {usage.model_ms / 1000:.1f} s, "
        f"tools {usage.tool_ms / 1000:.1f} s; {usage.events:,} events, "
        f"{usage.bytes:,} bytes"
    )


@click.command(
    "tail",
    epilog="\b\nExamples:\n"
    "  turnkeep tail 01jx...\n"
    "  turnkeep tail -f 01jx...            # follow until Ctrl-C\n"
    "  turnkeep tail -f --json -n 0 01jx... | jq -c .",
)
@click.argument("session_id", metavar="ID")
@click.option(
    "-n",
    "--lines",
    "count",
    type=click.IntRange(0),
    default=10,
    show_default=True,
    help="Print the last N events first.",
)
@click.option("-f", "--follow", is_flag=True, help="Keep printing events as they land.")
@click.option(
    "--interval",
    type=click.FloatRange(0.01),
    default=0.5,
    show_default=True,
    help="Seconds between polls in follow mode, for a store that cannot say "
    "when a commit lands (and between retries while the session is missing).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the stored event JSON lines."
)
@common_options
def tail(
    session_id: str, count: int, follow: bool, interval: float, as_json: bool
) -> None:
    """Print a session's last committed events; with -f, follow new ones.

    Only durable (committed) events are printed, each once; follow mode
    survives the writer crashing, restarting or moving to another process.
    """

    async def body() -> int:
        validate_session_id(session_id)
        async with open_store() as store, about(session_id):
            events = expand_all((await store.backend.load(session_id)).events)
            _print(events[max(len(events) - count, 0) :], store.host.codec, as_json)
            printed = len(events)
            if follow:
                await _follow(
                    store.backend,
                    session_id,
                    printed,
                    store.host.codec,
                    as_json,
                    interval,
                )
        return 0

    execute(body, interrupted=0)


async def _catch_up(
    backend: SessionPersistence,
    session_id: str,
    printed: int,
    codec: EventCodec,
    as_json: bool,
) -> int:
    """Print the durable events from seq `printed` on; return the next seq."""
    while True:
        raws = await read_after(backend, session_id, printed - 1, _PAGE)
        _print(raws, codec, as_json)
        printed += len(raws)
        if len(raws) < _PAGE:
            return printed


def _print(raws: list[bytes], codec: EventCodec, as_json: bool) -> None:
    for raw in raws:
        if as_json:
            emit_raw_line(raw)
            continue
        try:
            line = event_line(codec.decode(raw))
        except UnknownEventTypeError as exc:
            line = f"{'?':>6}  {clean(str(exc))}"
        click.echo(line)
    sys.stdout.flush()


async def _follow(
    backend: SessionPersistence,
    session_id: str,
    printed: int,
    codec: EventCodec,
    as_json: bool,
    interval: float,
) -> None:
    notice: str | None = None
    while True:
        try:
            if has_commit_waiter(backend):
                last = await wait_for_commit(backend, session_id, printed - 1, _WAIT)
            else:
                last = await poll_for_commit(
                    backend, session_id, printed - 1, _WAIT, interval=interval
                )
            if last + 1 < printed:
                click.echo(
                    f"turnkeep: {clean_id(session_id)} now has {last + 1} events, "
                    f"fewer than the {printed} printed: it was deleted and stored "
                    "again",
                    err=True,
                )
                printed = 0
            if last + 1 > printed:
                printed = await _catch_up(backend, session_id, printed, codec, as_json)
        except (SessionNotFoundError, StorageError) as exc:
            # The writer may be restarting (or the store briefly unreadable):
            # say so once and keep polling.
            if notice != type(exc).__name__:
                notice = type(exc).__name__
                click.echo(f"turnkeep: waiting: {clean(str(exc))}", err=True)
            await asyncio.sleep(interval)
            continue
        notice = None


def register(group: click.Group) -> None:
    """Add this module's commands to the `turnkeep` group."""
    group.add_command(show)
    group.add_command(tail)
