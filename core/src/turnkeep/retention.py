"""Retention: removing whole stored sessions older than a policy allows.

Owns `prune` (one pass of a `RetentionPolicy` over a host's store) and
`run_retention` (the same on a timer, for a long-running service); the
`turnkeep prune` command is built on `find_prunable` and `remove`. Consumed
by services and the CLI; it uses only the persistence protocol, so it works
on every backend.

A pass pages through `list` (summaries only, never a log) and picks the
sessions last updated before the cut-off whose summary status the policy
names. `"interrupted"` is the summary's own status `interrupted` (a turn a
crash cut off, settled by recovery); a session whose summary still says
`active` is picked only by `"any"`. Each picked session goes through the
backend's `delete`, never forced: a session another live process holds is
refused by the backend and reported as skipped (`held`), and one that is
open in this host is not even tried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Final, Literal, NoReturn, TypeAlias

import msgspec

from turnkeep.auditing import delete_recorded
from turnkeep.config import RetentionPolicy, parse_duration
from turnkeep.errors import SessionHeldError, SessionNotFoundError, TurnkeepError
from turnkeep.host import Host
from turnkeep.meta import SessionMeta, SessionStatus

__all__ = [
    "PruneItem",
    "PruneOutcome",
    "PruneReport",
    "find_prunable",
    "matches",
    "prune",
    "remove",
    "run_retention",
]

PruneOutcome: TypeAlias = Literal["deleted", "would-delete", "held", "gone", "failed"]
"""What became of a picked session: deleted; picked by a dry run; skipped
because a live owner holds it; already gone; the backend failed."""

ENDED: Final[frozenset[SessionStatus]] = frozenset({"idle", "failed", "closed"})
"""Summary statuses of a session whose last turn ended (`"ended"`)."""

_log = logging.getLogger("turnkeep.retention")


class PruneItem(msgspec.Struct, frozen=True, kw_only=True):
    """One session a retention pass picked, and what became of it.

    Attributes:
        session_id: the session.
        title: its title (or first prompt), as listed.
        status: its summary status, as listed.
        updated_at: its last update (epoch milliseconds).
        age_ms: how long before the pass it was last updated.
        outcome: see `PruneOutcome`.
        error: why it was skipped or failed.
    """

    session_id: str
    title: str | None
    status: SessionStatus
    updated_at: int
    age_ms: int
    outcome: PruneOutcome = "would-delete"
    error: str | None = None


class PruneReport(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one retention pass.

    Attributes:
        cutoff: sessions last updated before this (epoch ms) were picked.
        status: the policy's status selection.
        dry_run: nothing was deleted.
        items: every picked session, oldest last (the listing's order).
    """

    cutoff: int
    status: str
    dry_run: bool
    items: list[PruneItem]

    @property
    def deleted(self) -> list[PruneItem]:
        """The sessions this pass deleted."""
        return [i for i in self.items if i.outcome == "deleted"]

    @property
    def skipped(self) -> list[PruneItem]:
        """The sessions it left because a live owner holds them."""
        return [i for i in self.items if i.outcome == "held"]

    @property
    def failed(self) -> list[PruneItem]:
        """The sessions the backend failed to delete."""
        return [i for i in self.items if i.outcome == "failed"]


def matches(policy: RetentionPolicy, meta: SessionMeta, cutoff: int) -> bool:
    """Whether `policy` removes this session (last updated before `cutoff`)."""
    summary = meta.summary
    if summary.updated_at >= cutoff:
        return False
    if policy.status == "any":
        return True
    if policy.status == "interrupted":
        return summary.status == "interrupted"
    return summary.status in ENDED


async def find_prunable(
    host: Host, policy: RetentionPolicy, *, now: int | None = None, page_size: int = 100
) -> PruneReport:
    """The sessions `policy` removes, found page by page; deletes nothing.

    A session open in this host is reported `held` (it is driven here).

    Raises:
        PersistenceNotConfiguredError: the host has no backend.
        ValueError: `page_size` is not positive.
    """
    if page_size <= 0:
        raise ValueError("page_size must be positive")
    backend = host.require_persistence()
    now = host.clock() if now is None else now
    cutoff = now - int(policy.older_than / timedelta(milliseconds=1))
    live = {s.id for s in host.sessions.list()}
    items: list[PruneItem] = []
    cursor: str | None = None
    while True:
        page = await backend.list(limit=page_size, cursor=cursor)
        for meta in page.items:
            if matches(policy, meta, cutoff):
                items.append(_item(meta, now, held=meta.id in live))
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    return PruneReport(cutoff=cutoff, status=policy.status, dry_run=True, items=items)


def _item(meta: SessionMeta, now: int, *, held: bool) -> PruneItem:
    summary = meta.summary
    return PruneItem(
        session_id=meta.id,
        title=summary.title or summary.first_prompt,
        status=summary.status,
        updated_at=summary.updated_at,
        age_ms=now - summary.updated_at,
        outcome="held" if held else "would-delete",
        error="open in this process" if held else None,
    )


async def remove(host: Host, found: PruneReport) -> PruneReport:
    """Delete the sessions `found` picked (never forced); report each outcome.

    Raises:
        PersistenceNotConfiguredError: the host has no backend.
    """
    backend = host.require_persistence()
    live = {s.id for s in host.sessions.list()}
    done: list[PruneItem] = []
    for item in found.items:
        if item.outcome != "would-delete" or item.session_id in live:
            outcome = "held" if item.outcome == "would-delete" else item.outcome
            done.append(msgspec.structs.replace(item, outcome=outcome))
            continue
        try:
            await delete_recorded(
                backend,
                item.session_id,
                f"retention: {item.status}, last updated {item.age_ms // 1000} s "
                "before the pass",
            )
        except SessionHeldError as exc:
            done.append(msgspec.structs.replace(item, outcome="held", error=str(exc)))
        except SessionNotFoundError:
            done.append(msgspec.structs.replace(item, outcome="gone"))
        except TurnkeepError as exc:
            done.append(msgspec.structs.replace(item, outcome="failed", error=str(exc)))
        else:
            done.append(msgspec.structs.replace(item, outcome="deleted"))
    return msgspec.structs.replace(found, dry_run=False, items=done)


async def prune(
    host: Host,
    policy: RetentionPolicy,
    *,
    dry_run: bool = False,
    now: int | None = None,
    page_size: int = 100,
) -> PruneReport:
    """Apply `policy` once: delete every stored session it picks.

    Args:
        host: a started host with a persistence backend.
        policy: which sessions to remove.
        dry_run: only report what would be removed.
        now: the time to measure ages from (default: the host's clock).
        page_size: summaries read per `list` call.

    Raises:
        PersistenceNotConfiguredError: the host has no backend.
        TurnkeepError: listing failed (a failed delete is reported instead).
    """
    found = await find_prunable(host, policy, now=now, page_size=page_size)
    return found if dry_run else await remove(host, found)


async def run_retention(
    host: Host,
    policy: RetentionPolicy,
    every: timedelta | str = timedelta(hours=1),
    *,
    on_report: Callable[[PruneReport], object] | None = None,
) -> NoReturn:
    """Apply `policy` now and then every `every`, until cancelled.

    Run it as a task (`asyncio.create_task(run_retention(host, policy))`)
    and cancel it at shutdown. A pass that fails (the store is unreachable)
    is logged on the `turnkeep.retention` logger and the next pass runs on
    time; `on_report` receives each finished pass's report.

    Raises:
        ConfigurationError: `every` is not a duration longer than zero.
    """
    interval = parse_duration(every).total_seconds()
    while True:
        try:
            report = await prune(host, policy)
        except TurnkeepError as exc:
            _log.warning("retention pass failed: %s", exc)
        else:
            _log_report(report)
            if on_report is not None:
                on_report(report)
        await asyncio.sleep(interval)


def _log_report(report: PruneReport) -> None:
    if report.items:
        _log.info(
            "retention: %d deleted, %d held, %d failed",
            len(report.deleted),
            len(report.skipped),
            len(report.failed),
        )
    for item in report.failed:
        _log.warning("retention: could not delete %r: %s", item.session_id, item.error)
