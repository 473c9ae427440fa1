"""Moving one session in and out as a file: `export` and `import`.

The export format (`docs/cli.md`, "Export format") is JSON lines: a header
line carrying the format marker, the session's metadata, the event count
and a SHA-256 of the event lines, then each stored event's JSON exactly as
the backend returned it. `import` reads such exports and conversations of
other programs (`turnkeep.cli.importers`) into a new session: user content
is marked untrusted, tool calls are replayed as records, never executed, and
everything goes through `Session.append`, so redaction hooks see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO, Final, Literal

import attrs
import click
import msgspec

from turnkeep.agent.recovery import open_turn
from turnkeep.auditing import delete_recorded
from turnkeep.cli import import_codex, import_pi
from turnkeep.cli.files import write_private
from turnkeep.cli.importers import plan_messages
from turnkeep.cli.importplan import NO_RESULT_OUTPUT, Plan, Step
from turnkeep.cli.jsoninput import (
    Record,
    check_text,
    first_object,
    input_error,
    read_items,
    read_records,
)
from turnkeep.cli.output import clean_id, emit_json
from turnkeep.cli.runtime import (
    Opened,
    about,
    common_options,
    execute,
    fail,
    open_store,
)
from turnkeep.clock import now_ms
from turnkeep.codec import EventCodec
from turnkeep.errors import (
    EventDecodeError,
    ImportInputError,
    SessionCorruptError,
    SessionNotFoundError,
)
from turnkeep.events import (
    SessionEvent,
    ToolResult,
    ToolResultData,
    TurnEnd,
    TurnEndData,
    UserMessage,
    UserMessageData,
)
from turnkeep.ids import new_session_id, validate_session_id
from turnkeep.meta import SessionHeader, SessionMeta, SessionSummary
from turnkeep.packs import expand_all
from turnkeep.persistence import LoadedSession

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "ExportHeader",
    "export_data",
    "register",
]

EXPORT_FORMAT: Final = "turnkeep-export"
EXPORT_VERSION: Final = 1


class ExportHeader(msgspec.Struct, frozen=True, kw_only=True):
    """The first line of an export.

    Attributes:
        format: always `turnkeep-export`.
        version: the export format's version (1).
        meta: the session's header and summary.
        events: how many event lines follow.
        sha256: hex SHA-256 of the event lines (each with its newline).
        exported_at: epoch milliseconds.
    """

    format: Literal["turnkeep-export"]
    version: int
    meta: SessionMeta
    events: int
    sha256: str
    exported_at: int


_header_decoder: Final = msgspec.json.Decoder(ExportHeader)


class _Probe(msgspec.Struct):
    format: str | None = None
    version: int = 0


@click.command(
    "export",
    epilog="\b\nExamples:\n"
    "  turnkeep export 01jx... > session.jsonl\n"
    "  turnkeep export 01jx... -o session.jsonl",
)
@click.argument("session_id", metavar="ID")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="Write to this file (default, or `-`: stdout).",
)
@common_options
def export(session_id: str, output: Path | None) -> None:
    """Write a session as a portable JSON-lines file (see docs/cli.md)."""

    async def body() -> int:
        async with open_store() as store, about(session_id):
            loaded = await store.backend.load(validate_session_id(session_id))
        data = export_data(loaded)
        if output is None or str(output) == "-":
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            await asyncio.to_thread(write_private, output, data)
            count = loaded.meta.summary.event_count
            click.echo(f"exported {count} events to {output}", err=True)
        return 0

    execute(body)


def export_data(loaded: LoadedSession) -> bytes:
    """A loaded session as the export format's bytes (header line, events)."""
    # One event per line, packs expanded: the format is the events'.
    lines = [raw + b"\n" for raw in expand_all(loaded.events)]
    header = ExportHeader(
        format=EXPORT_FORMAT,
        version=EXPORT_VERSION,
        meta=loaded.meta,
        events=len(lines),
        sha256=hashlib.sha256(b"".join(lines)).hexdigest(),
        exported_at=now_ms(),
    )
    return msgspec.json.encode(header) + b"\n" + b"".join(lines)


@attrs.define
class _ReplayClock:
    """Gives `Session.append` the imported event's own time, when it has one."""

    upcoming: int | None = None

    def __call__(self) -> int:
        value, self.upcoming = self.upcoming, None
        return value if value is not None else now_ms()


_FORMATS: Final = ("auto", import_pi.FORMAT, import_codex.FORMAT)


class _Imported(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    format: str
    events: int
    skipped: dict[str, int]
    interrupted: list[str]
    closed_turn: bool


@click.command(
    "import",
    epilog="\b\nExamples:\n"
    "  turnkeep import session.jsonl                # a turnkeep export\n"
    "  turnkeep import messages.json --id from-chat # OpenAI chat messages\n"
    "  turnkeep import items.json --title 'Agents SDK run'\n"
    "  turnkeep import ~/.pi/agent/sessions/--home-me-app--/2026-...jsonl\n"
    "  turnkeep import ~/.codex/sessions/2026/12/01/rollout-...jsonl\n"
    "  cat messages.json | turnkeep import -",
)
@click.argument("source", metavar="FILE", type=click.File("rb"))
@click.option(
    "--id", "new_id", metavar="ID", help="The new session's id (default: new)."
)
@click.option("--title", help="The new session's title.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(_FORMATS),
    default="auto",
    show_default=True,
    help="Read FILE as a pi session or a Codex rollout (auto: detect).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print what was imported as JSON."
)
@common_options
def import_(
    source: BinaryIO,
    new_id: str | None,
    title: str | None,
    fmt: str,
    as_json: bool,
) -> None:
    """Create a new session from an export or another agent's conversation.

    Accepts turnkeep exports, the OpenAI chat `messages` shape, the OpenAI
    Agents SDK's session items, pi session files and Codex rollouts.
    Imported user content is marked untrusted (context, not the user's
    instruction); imported tool calls are recorded with their results,
    never run.
    """
    data: bytes = source.read()
    name = _source_name(source)

    async def body() -> int:
        target = validate_session_id(new_id or new_session_id())
        clock = _ReplayClock()
        async with open_store(clock=clock, create=True) as store:
            host = store.host
            # Read before anything is stored: bad input changes nothing.
            plan, meta_in = _plan(data, name, host.codec, fmt)
            async with about(target):
                if await store.backend.has(target):
                    fail(f"session {target!r} already exists; choose another --id")
                await _store(store, target, plan, meta_in, title, clock)
        result = _Imported(
            session_id=target,
            format=plan.format,
            events=len(plan.steps),
            skipped=dict(plan.skipped),
            interrupted=plan.interrupted,
            closed_turn=plan.closed_turn,
        )
        if as_json:
            emit_json(result)
            return 0
        click.echo(target)
        skipped = ", ".join(f"{n} {what}" for what, n in sorted(plan.skipped.items()))
        click.echo(
            f"imported {len(plan.steps)} events ({plan.format}) into "
            f"{clean_id(target)}; "
            "user content marked untrusted, tool calls recorded, never run"
            + (f"; skipped {skipped}" if skipped else ""),
            err=True,
        )
        if plan.closed_turn or plan.interrupted:
            click.echo(
                (
                    "the last turn was left open: ended it as interrupted; "
                    if plan.closed_turn
                    else ""
                )
                + f"{len(plan.interrupted)} call(s) without a result answered "
                "`interrupted` (never run)",
                err=True,
            )
        return 0

    execute(body)


async def _store(
    store: Opened,
    target: str,
    plan: Plan,
    meta_in: SessionMeta | None,
    title: str | None,
    clock: _ReplayClock,
) -> None:
    """Create `target` holding the plan's events, or leave nothing at all."""
    host = store.host
    created = now_ms()
    prompt = meta_in.summary.first_prompt if meta_in else plan.first_prompt
    first_line = prompt.strip().splitlines()[0] if prompt and prompt.strip() else ""
    chosen = (
        title or (meta_in.summary.title if meta_in else plan.title) or first_line[:80]
    )
    summary = SessionSummary(
        updated_at=created,
        title=host.redact_text(chosen) if chosen else None,
        first_prompt=host.redact_text(prompt[:500]) if prompt else None,
        status="idle",
    )
    header = SessionHeader(
        id=target, created_at=created, cwd=meta_in.header.cwd if meta_in else plan.cwd
    )
    session = host.sessions.create(
        target, meta=SessionMeta(header=header, summary=summary)
    )
    try:
        times = plan.times or [None] * len(plan.steps)
        for (kind, payload), time in zip(plan.steps, times, strict=True):
            clock.upcoming = time
            if host.codec.kinds.get(type(payload)) is kind:
                session.append(payload)
            else:
                session.append(kind, payload)
        await host.sessions.close(target)
    except BaseException:
        # A half-imported session is not the file: remove what was stored.
        with contextlib.suppress(SessionNotFoundError):
            await host.sessions.abandon(target, reason="import failed")
        with contextlib.suppress(SessionNotFoundError):
            why = "import failed: the half-imported session was removed"
            await delete_recorded(store.backend, target, why)
        raise


def _source_name(source: BinaryIO) -> str:
    name = getattr(source, "name", None)
    return name if isinstance(name, str) and name != "<stdin>" else "stdin"


def _plan(
    data: bytes, name: str, codec: EventCodec, fmt: str = "auto"
) -> tuple[Plan, SessionMeta | None]:
    """What importing `data` (the file `name`) appends, read as `fmt`.

    Raises:
        ImportInputError: the file cannot be read (naming its line).
    """
    data = check_text(data, name)
    opening = first_object(data)
    if fmt == import_pi.FORMAT or (fmt == "auto" and import_pi.is_pi(opening)):
        return _plan_log(data, name, "pi session", import_pi.plan_pi), None
    if fmt == import_codex.FORMAT or (fmt == "auto" and import_codex.is_codex(opening)):
        return _plan_log(data, name, "Codex rollout", import_codex.plan_codex), None
    first, _, rest = data.partition(b"\n")
    try:
        probe = msgspec.json.decode(first, type=_Probe)
    except (msgspec.DecodeError, msgspec.ValidationError):
        probe = None
    if probe is None or probe.format != EXPORT_FORMAT:
        items = read_items(data, name)
        try:
            plan = plan_messages(items.values)
        except ImportInputError as exc:
            if exc.item is None:
                raise
            line = items.line_of(exc.item)
            raise input_error(name, line, str(exc), item=exc.item) from None
        return _nonempty(plan, name), None
    return _plan_export(probe, first, rest, name, codec)


def _plan_log(
    data: bytes,
    name: str,
    what: str,
    planner: Callable[[Sequence[Record]], Plan],
) -> Plan:
    """The plan of another agent's JSON-lines log, its bad line named."""
    records = read_records(data, name, what)
    try:
        plan = planner(records)
    except ImportInputError as exc:
        raise input_error(name, exc.line or 1, str(exc)) from None
    return _nonempty(plan, name)


def _nonempty(plan: Plan, name: str) -> Plan:
    if not plan.steps:
        skipped = ", ".join(f"{n} {what}" for what, n in sorted(plan.skipped.items()))
        raise input_error(
            name,
            1,
            "the file holds no conversation to import"
            + (f" (skipped {skipped})" if skipped else ""),
        )
    return plan


def _plan_export(
    probe: _Probe, first: bytes, rest: bytes, name: str, codec: EventCodec
) -> tuple[Plan, SessionMeta]:
    if probe.version > EXPORT_VERSION:
        raise input_error(
            name,
            1,
            f"this export has format version {probe.version}; this turnkeep reads "
            f"up to {EXPORT_VERSION}: upgrade turnkeep to import it",
        )
    try:
        header = _header_decoder.decode(first)
    except msgspec.ValidationError as exc:
        raise input_error(name, 1, f"the export's header is invalid: {exc}") from None
    numbered = [
        (number, line)
        for number, line in enumerate(rest.split(b"\n"), start=2)
        if line.strip()
    ]
    lines = [line for _, line in numbered]
    body = b"".join(line + b"\n" for line in lines)
    if len(lines) != header.events:
        raise input_error(
            name,
            1,
            f"the export of {header.meta.id!r} is incomplete or has lines added: "
            f"its header says {header.events} events, the file holds "
            f"{len(lines)}; export it again",
        )
    if hashlib.sha256(body).hexdigest() != header.sha256:
        raise input_error(
            name,
            1,
            f"the export of {header.meta.id!r} was changed after it was written: "
            f"its {len(lines)} events do not match the checksum in its header; "
            "export it again",
        )
    try:
        events = codec.decode_log(lines, session_id=header.meta.id)
    except (EventDecodeError, SessionCorruptError) as exc:
        offset = exc.offset if isinstance(exc, SessionCorruptError) else None
        line = numbered[offset][0] if offset is not None else 2
        raise input_error(
            name,
            line,
            f"the export of {header.meta.id!r} holds an event this turnkeep "
            f"cannot read: {exc}",
        ) from None
    plan = Plan(format=EXPORT_FORMAT)
    for event in events:
        step: Step = (type(event), event.data)
        if isinstance(event, UserMessage):
            # Imported words are context from outside, whoever wrote them.
            step = (UserMessage, UserMessageData(text=event.data.text, untrusted=True))
        plan.steps.append(step)
        plan.times.append(event.time)
    _close_open_turn(plan, events)
    return plan, header.meta


def _close_open_turn(plan: Plan, events: Sequence[SessionEvent]) -> None:
    """End an export's open turn, its calls answered `interrupted`.

    Left open, resuming the imported session would recover it as a crash
    and run its unanswered `safe` calls again: calls whose arguments the
    export's author chose, run on this machine. An import runs nothing.
    """
    unfinished = open_turn(events)
    if unfinished is None:
        return
    for call in unfinished.unanswered:
        plan.steps.append(
            (
                ToolResult,
                ToolResultData(
                    call_id=call.data.call_id,
                    output=NO_RESULT_OUTPUT,
                    status="interrupted",
                ),
            )
        )
        plan.times.append(None)
        plan.interrupted.append(call.data.call_id)
    plan.steps.append(
        (
            TurnEnd,
            TurnEndData(
                turn=unfinished.turn,
                status="interrupted",
                error="[imported] the export ended inside this turn",
            ),
        )
    )
    plan.times.append(None)
    plan.closed_turn = True


def register(group: click.Group) -> None:
    """Add this module's commands to the `turnkeep` group."""
    group.add_command(export)
    group.add_command(import_, name="import")
