"""Listing and managing stored sessions: `ls`, `title`, `rm`, `fork`.

`ls` reads summaries only (the backend's paged `list`, filtered by status
and update time where the backend keeps its index), never logs; a
session whose summary says a turn is running but that no live process
holds (it crashed mid-turn) is shown `interrupted` (`turnkeep.listing`:
one liveness probe per page, for its running sessions only). `title`
changes a summary without touching the log. `rm` refuses a session another
live process holds unless `--force` (which fences that process). `fork`
copies a stored session's first events into a new session whose header
names its parent and fork point.
"""

from __future__ import annotations

import click
import msgspec
from rich.table import Table
from rich.text import Text

from turnkeep.agent.recovery import open_turn
from turnkeep.auditing import delete_recorded
from turnkeep.cli.output import (
    clean_id,
    confirm,
    console,
    emit_json,
    format_size,
    format_time,
    shorten,
)
from turnkeep.cli.runtime import about, common_options, execute, fail, open_store
from turnkeep.clock import now_ms
from turnkeep.errors import (
    SessionCorruptError,
    SessionNotFoundError,
    UnsupportedFormatError,
)
from turnkeep.ids import new_session_id, validate_session_id
from turnkeep.listfilter import ListFilter, parse_statuses, parse_time
from turnkeep.listing import list_sessions
from turnkeep.meta import (
    ForkPoint,
    SessionHeader,
    SessionMeta,
    SessionStatus,
    SessionSummary,
)
from turnkeep.packs import expand_all
from turnkeep.persistence import SessionPersistence

__all__ = ["SessionRow", "register", "row"]


class SessionRow(msgspec.Struct, frozen=True, kw_only=True):
    """One session as `ls --json` prints it."""

    id: str
    title: str | None
    first_prompt: str | None
    status: SessionStatus
    events: int
    turns: int
    size: int
    updated_at: int
    created_at: int
    cwd: str | None
    parent: ForkPoint | None
    format_version: int


def row(meta: SessionMeta) -> SessionRow:
    """The JSON row of a session's metadata."""
    header, summary = meta.header, meta.summary
    return SessionRow(
        id=header.id,
        title=summary.title,
        first_prompt=summary.first_prompt,
        status=summary.status,
        events=summary.event_count,
        turns=summary.turns,
        size=summary.size,
        updated_at=summary.updated_at,
        created_at=header.created_at,
        cwd=header.cwd,
        parent=header.parent,
        format_version=header.format_version,
    )


class _Page(msgspec.Struct, frozen=True, kw_only=True):
    sessions: list[SessionRow]
    next_cursor: str | None


@click.command(
    "ls",
    epilog="\b\nExamples:\n"
    "  turnkeep ls\n"
    "  turnkeep ls --limit 50 --json\n"
    "  turnkeep ls --cursor <cursor printed by the previous page>\n"
    "  turnkeep ls --status interrupted,failed\n"
    "  turnkeep ls --updated-after 2026-12-01 --updated-before 2026-12-01T18:00\n"
    "  turnkeep --store sqlite:./sessions.db ls --all",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 10_000),
    default=20,
    show_default=True,
    help="Sessions per page.",
)
@click.option("--cursor", help="Continue after the page that printed this cursor.")
@click.option("--all", "every", is_flag=True, help="Print every page.")
@click.option(
    "--status",
    "status",
    metavar="STATUS[,STATUS...]",
    help="Only sessions of these statuses (active, idle, interrupted, failed, closed).",
)
@click.option(
    "--updated-after",
    metavar="TIME",
    help="Only sessions updated after TIME (ISO 8601, local time unless it has an "
    "offset; or epoch milliseconds).",
)
@click.option(
    "--updated-before", metavar="TIME", help="Only sessions updated before TIME."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@common_options
def ls(
    limit: int,
    cursor: str | None,
    every: bool,
    status: str | None,
    updated_after: str | None,
    updated_before: str | None,
    as_json: bool,
) -> None:
    """List stored sessions, newest first (summaries only; logs are not read).

    Each row: id, title (or first prompt), last update, completed turns,
    status, and the size of the stored events. A session whose turn was
    cut off by a crash (no live process holds it) shows as interrupted.
    Filters are applied by the store; pass the same ones with --cursor.
    """

    async def body() -> int:
        where = ListFilter(
            statuses=None if status is None else parse_statuses(status),
            updated_after=None if updated_after is None else parse_time(updated_after),
            updated_before=None
            if updated_before is None
            else parse_time(updated_before),
        )
        async with open_store() as store:
            metas: list[SessionMeta] = []
            page = await list_sessions(
                store.backend, limit=limit, cursor=cursor, where=where
            )
            metas.extend(page.items)
            while every and page.next_cursor is not None:
                page = await list_sessions(
                    store.backend, limit=limit, cursor=page.next_cursor, where=where
                )
                metas.extend(page.items)
        if as_json:
            emit_json(
                _Page(sessions=[row(m) for m in metas], next_cursor=page.next_cursor)
            )
            return 0
        _print_table(metas, filtered=not where.is_empty)
        if page.next_cursor is not None:
            click.echo(f"more: turnkeep ls --cursor {page.next_cursor}", err=True)
        return 0

    execute(body)


def _print_table(metas: list[SessionMeta], *, filtered: bool = False) -> None:
    out = console()
    if not metas:
        out.print("no sessions match" if filtered else "no sessions stored")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name, justify in (
        ("ID", "left"),
        ("TITLE", "left"),
        ("UPDATED", "left"),
        ("TURNS", "right"),
        ("STATUS", "left"),
        ("SIZE", "right"),
    ):
        # One line per session, however narrow the terminal: the title
        # gives way (cut with an ellipsis), the other columns never wrap.
        # (The title column stays shrinkable; its text never wraps.)
        table.add_column(
            name,
            justify=justify,  # pyright: ignore[reportArgumentType]
            no_wrap=name != "TITLE",
        )
    for meta in metas:
        summary = meta.summary
        title = summary.title or summary.first_prompt or ""
        table.add_row(
            Text(clean_id(meta.id)),
            Text(shorten(title, 60), no_wrap=True, overflow="ellipsis"),
            format_time(summary.updated_at),
            str(summary.turns),
            summary.status,
            format_size(summary.size),
        )
    out.print(table)


@click.command(
    "title",
    epilog="\b\nExamples:\n"
    "  turnkeep title 01jx... 'Plan the trip'\n"
    "  turnkeep title 01jx... ''        # clear the title",
)
@click.argument("session_id", metavar="ID")
@click.argument("text")
@common_options
def title(session_id: str, text: str) -> None:
    """Set a session's title (the log is not touched)."""

    async def body() -> int:
        async with open_store() as store:
            with about(session_id):
                loaded = await store.backend.load(validate_session_id(session_id))
                new = store.host.redact_text(text) if text else None
                summary = msgspec.structs.replace(
                    loaded.meta.summary, title=new, updated_at=now_ms()
                )
                await store.backend.update(session_id, summary)
        shown = shorten(new, 80) if new else "(none)"
        click.echo(f"{clean_id(session_id)}: title {shown}")
        return 0

    execute(body)


@click.command(
    "rm",
    epilog=(
        "\b\nExamples:\n  turnkeep rm 01jx...\n  turnkeep rm --yes 01jx... 01jy...\n"
        "  turnkeep rm --force 01jx...   # even while another process holds it"
    ),
)
@click.argument("session_ids", metavar="ID...", nargs=-1, required=True)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--force",
    is_flag=True,
    help=(
        "Delete even a session another live process holds; that process is "
        "told its session was deleted at its next write."
    ),
)
@common_options
def rm(session_ids: tuple[str, ...], yes: bool, force: bool) -> None:
    """Delete stored sessions (asks first unless --yes).

    A session that another live process holds is refused (nothing is
    deleted) unless --force.
    """

    async def body() -> int:
        async with open_store() as store:
            backend = store.backend
            for session_id in session_ids:
                with about(session_id):
                    await _remove(backend, session_id, yes=yes, force=force)
        return 0

    execute(body)


async def _remove(
    backend: SessionPersistence, session_id: str, *, yes: bool, force: bool
) -> None:
    validate_session_id(session_id)
    if not await backend.has(session_id):
        raise SessionNotFoundError(f"no stored session {session_id!r}")
    what = await _describe(backend, session_id)
    held = " It may be held by another process, which loses it." if force else ""
    await confirm(
        f"Delete session {clean_id(session_id)} ({what})? This cannot be undone.{held}",
        yes=yes,
        nothing_done="nothing was deleted",
    )
    # The backend refuses a session another live process holds (unless
    # forced); a damaged or newer session, which nobody can drive, goes as is.
    why = "`turnkeep rm --force`" if force else "`turnkeep rm`"
    await delete_recorded(backend, session_id, why, force=force)
    click.echo(f"deleted {clean_id(session_id)}")


async def _describe(backend: SessionPersistence, session_id: str) -> str:
    try:
        loaded = await backend.load(session_id)
    except (SessionCorruptError, UnsupportedFormatError) as exc:
        return f"unreadable: {type(exc).__name__}"
    summary = loaded.meta.summary
    label = f"{len(expand_all(loaded.events))} events"
    if summary.title:
        label += f", {shorten(summary.title, 40)!r}"
    return label


@click.command(
    "fork",
    epilog="\b\nExamples:\n"
    "  turnkeep fork 01jx...                 # the whole log\n"
    "  turnkeep fork 01jx... --at 12 --id retry-from-12",
)
@click.argument("session_id", metavar="ID")
@click.option(
    "--at",
    "at_seq",
    type=click.IntRange(1),
    metavar="SEQ",
    help="Keep events 0..SEQ-1 (default: all of them).",
)
@click.option("--id", "new_id", metavar="NEW", help="The new session's id.")
@click.option("--title", "new_title", help="The new session's title.")
@common_options
def fork(
    session_id: str, at_seq: int | None, new_id: str | None, new_title: str | None
) -> None:
    """Start a new stored session from the first events of a stored one."""

    async def body() -> int:
        async with open_store() as store:
            host, backend = store.host, store.backend
            with about(session_id):
                loaded = await backend.load(validate_session_id(session_id))
                events = host.codec.decode_log(loaded.events, session_id=session_id)
            at = len(events) if at_seq is None else at_seq
            if not 1 <= at <= len(events):
                fail(
                    f"cannot fork {session_id!r} at seq {at}: its log has "
                    f"{len(events)} events (choose --at between 1 and {len(events)})"
                )
            target = validate_session_id(new_id or new_session_id())
            if await backend.has(target):
                fail(f"session {target!r} already exists; choose another --id")
            created = now_ms()
            source = loaded.meta
            header = SessionHeader(
                id=target,
                created_at=created,
                cwd=source.header.cwd,
                parent=ForkPoint(session_id=session_id, seq=at),
            )
            seed = events[:at]
            status: SessionStatus = "interrupted" if open_turn(seed) else "idle"
            summary = SessionSummary(
                updated_at=created,
                title=host.redact_text(new_title)
                if new_title
                else source.summary.title,
                first_prompt=source.summary.first_prompt,
                status=status,
            )
            with about(target):
                host.sessions.create(
                    target, seed=seed, meta=SessionMeta(header=header, summary=summary)
                )
                await host.sessions.close(target)
        click.echo(target)
        click.echo(
            f"forked {clean_id(session_id)} at seq {at} into {clean_id(target)}",
            err=True,
        )
        return 0

    execute(body)


def register(group: click.Group) -> None:
    """Add this module's commands to the `turnkeep` group."""
    for command in (ls, title, rm, fork):
        group.add_command(command)
