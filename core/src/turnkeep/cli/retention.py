"""Removing old sessions: `turnkeep prune`.

The command is `turnkeep.retention` with a person in the loop: it finds the
sessions the policy picks (paging through summaries, never reading a log),
prints them (id, title, age, status), asks, and deletes each through the
backend, never forced, so a session another live process holds is skipped
and said so. The policy comes from the flags, or from `[retention]` in
turnkeep's configuration when the flags leave it open.
"""

from __future__ import annotations

from datetime import timedelta

import click
from rich.table import Table
from rich.text import Text

from turnkeep.cli.output import clean, clean_id, confirm, console, emit_json, shorten
from turnkeep.cli.runtime import (
    EXIT_PROBLEMS,
    common_options,
    execute,
    one_line,
    open_store,
)
from turnkeep.config import RetentionPolicy, RetentionStatus, parse_duration
from turnkeep.errors import ConfigurationError
from turnkeep.retention import PruneItem, PruneReport, find_prunable, remove

__all__ = ["format_age", "register"]


def _duration(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc)) from exc


def format_age(ms: int) -> str:
    """An age for people: `41d 3h`, `5h 12m`, `12m`, `40s`."""
    seconds = max(ms, 0) // 1000
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    return f"{minutes}m" if minutes else f"{secs}s"


def _policy(
    configured: RetentionPolicy | None,
    older_than: timedelta | None,
    status: RetentionStatus | None,
) -> RetentionPolicy:
    if older_than is not None:
        default: RetentionStatus = "ended" if configured is None else configured.status
        return RetentionPolicy(older_than=older_than, status=status or default)
    if configured is None:
        raise click.UsageError(
            "say which sessions to remove: --older-than 30d, or set "
            '[retention] older_than = "30d" in turnkeep\'s configuration '
            "(docs/configuration.md)"
        )
    return RetentionPolicy(
        older_than=configured.older_than, status=status or configured.status
    )


@click.command(
    "prune",
    epilog="\b\nExamples:\n"
    "  turnkeep prune --older-than 30d --dry-run\n"
    "  turnkeep prune --older-than 12h --status interrupted --yes\n"
    "  turnkeep prune            # the [retention] policy of the configuration\n"
    "\nExit status 1 when a session could not be deleted (held ones are "
    "skipped, not failures).",
)
@click.option(
    "--older-than",
    metavar="DURATION",
    callback=_duration,
    help="Remove sessions last updated longer ago than this: 30d, 12h, 90m, "
    "2w (default: [retention] older_than).",
)
@click.option(
    "--status",
    type=click.Choice(["ended", "interrupted", "any"]),
    help="ended: the last turn ended (idle, failed, closed); interrupted: a "
    "crash cut a turn off and recovery closed it; any: every status "
    "(default: [retention] status, else ended).",
)
@click.option("--dry-run", is_flag=True, help="Only print what would be removed.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@common_options
def prune(
    older_than: timedelta | None,
    status: RetentionStatus | None,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Delete whole sessions older than a retention policy allows.

    Lists what it would remove (id, title, age, status) and asks first
    unless --yes. A session another live process holds is never removed:
    it is reported as skipped. Reads summaries only, a page at a time.
    """

    async def body() -> int:
        async with open_store() as store:
            policy = _policy(store.host.config.retention, older_than, status)
            found = await find_prunable(store.host, policy)
            picked = [i for i in found.items if i.outcome == "would-delete"]
            if not as_json:
                _print_found(found, policy, dry_run=dry_run)
            if dry_run or not picked:
                if as_json:
                    emit_json(found)
                return 0
            await confirm(
                f"Delete these {len(picked)} session(s)? This cannot be undone.",
                yes=yes,
                nothing_done="nothing was deleted",
            )
            done = await remove(store.host, found)
        if as_json:
            emit_json(done)
        else:
            _print_done(done)
        return EXIT_PROBLEMS if done.failed else 0

    execute(body)


def _print_found(found: PruneReport, policy: RetentionPolicy, *, dry_run: bool) -> None:
    what = f"{policy.status} sessions not updated for {_span(policy.older_than)}"
    if not found.items:
        click.echo(f"nothing to prune: no {what}")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("ID", "TITLE", "AGE", "STATUS", ""):
        table.add_column(name, no_wrap=name != "TITLE")
    for item in found.items:
        table.add_row(
            Text(clean_id(item.session_id)),
            Text(shorten(item.title or "", 50), no_wrap=True, overflow="ellipsis"),
            format_age(item.age_ms),
            item.status,
            "skipped: held" if item.outcome == "held" else "",
        )
    console().print(table)
    verb = "would be" if dry_run else "to be"
    count = sum(1 for i in found.items if i.outcome == "would-delete")
    click.echo(f"{count} of {len(found.items)} {what} {verb} deleted", err=True)


def _span(value: timedelta) -> str:
    return format_age(int(value / timedelta(milliseconds=1)))


def _print_done(done: PruneReport) -> None:
    for item in done.items:
        click.echo(_line(item))
    click.echo(
        f"{len(done.deleted)} deleted, {len(done.skipped)} skipped (held), "
        f"{len(done.failed)} failed"
    )


def _line(item: PruneItem) -> str:
    sid = clean_id(item.session_id)
    if item.outcome == "deleted":
        return f"deleted  {sid}"
    if item.outcome == "held":
        return f"skipped  {sid}: held by another live process"
    if item.outcome == "gone":
        return f"gone     {sid}: deleted by someone else meanwhile"
    return f"FAILED   {sid}: {one_line(clean(item.error or 'unknown error'))}"


def register(group: click.Group) -> None:
    """Add this module's commands to the `turnkeep` group."""
    group.add_command(prune)
