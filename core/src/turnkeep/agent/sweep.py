"""Recovery from inside a program: settle the sessions a crash left open.

A service calls `recover_interrupted(host)` when it starts (and on a
timer). It looks at the stored sessions whose summary says a turn is
running (`status == "active"`), page by page; those a live owner holds
(`turnkeep.listing.active_holds`, one batch per page) are left alone
unread. It reads each other log without taking it, and for a log that ends
inside a turn takes the session over the safe way: it asks for the writer
role without stealing it, so an owner that came back meanwhile (or that a
backend without `held` cannot see) is refused and left alone. It then
recovers exactly as `AgentLoop.resume` does — every unsafe call without a
result is recorded as *interrupted, outcome unknown* and never run again;
a safe call is run again only when its tool is passed in — closes the turn
as interrupted, and releases the session, which stays resumable.

`run_recovery` runs the sweep on a timer (a service's `[serve]
recover_every`). Several processes may sweep one store at once: the claim
each asks for serialises them per session, so one recovers it and the
others find it held or already clean; none reports that as a failure. What
a sweep did is on the audit trail: each recovery (recorded by the loop),
and each session it could not settle (`recovery`, `why: sweep failed`); a
sweep that found nothing to do records nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from datetime import timedelta
from typing import Final, Literal, NoReturn, TypeAlias

import attrs

from turnkeep.agent.auditnotes import note_by
from turnkeep.agent.loop import AgentLoop
from turnkeep.agent.models import ModelInfo, ModelOutput, ModelRequest
from turnkeep.agent.recovery import RecoveryReport, open_turn
from turnkeep.agent.tools import Tool
from turnkeep.config import parse_duration
from turnkeep.errors import (
    ModelError,
    SessionLockedError,
    SessionNotFoundError,
    TurnkeepError,
)
from turnkeep.host import Host
from turnkeep.listfilter import ListFilter
from turnkeep.listing import active_holds, list_where

__all__ = [
    "SWEEP_AGENT_ID",
    "SweepAction",
    "SweepResult",
    "recover_interrupted",
    "run_recovery",
]

_log: Final = logging.getLogger("turnkeep.recovery")

SWEEP_AGENT_ID: Final = "turnkeep-recovery"
"""The agent id recovery runs under (recorded nowhere in the log)."""

SweepAction: TypeAlias = Literal["recovered", "clean", "held", "failed"]
"""What the sweep did with a session: settled a cut-off turn; found it ended
cleanly (only read); left it alone because its owner is alive; could not."""

_HELD: Final = "a live owner holds it (its turn is still running)"
_RUNNING: Final = ListFilter(statuses=("active",))


@attrs.frozen
class SweepResult:
    """What the sweep did with one session.

    Attributes:
        session_id: the session.
        action: see `SweepAction`.
        report: recovery's report (for `recovered`).
        error: why it failed (for `failed`) or who holds it (for `held`).
    """

    session_id: str
    action: SweepAction
    report: RecoveryReport | None = None
    error: str | None = None


class _NoModel:
    """Recovery here closes cut-off turns; it never asks a model."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelOutput]:
        """Refuse: the sweep does not call models."""
        raise ModelError("recovery of interrupted sessions does not call models")
        yield  # pragma: no cover - makes this an async generator

    def describe(self) -> ModelInfo:
        """No model: recovery only."""
        return ModelInfo(name="none", provider="turnkeep-recovery")


async def recover_interrupted(
    host: Host,
    *,
    session_ids: Iterable[str] | None = None,
    tools: Iterable[Tool] = (),
    page_size: int = 100,
) -> list[SweepResult]:
    """Settle every stored session a crash left inside a turn.

    Args:
        host: a started host with a persistence backend.
        session_ids: the sessions to look at (default: every stored session
            whose summary says a turn is running).
        tools: tools whose `safe` calls may be run again; without them every
            call left without a result is recorded as interrupted.
        page_size: how many summaries to read per `list` call.

    Returns:
        One result per session looked at, in the order looked at. A session
        live in this host is skipped (it is driven here).

    Raises:
        PersistenceNotConfiguredError: the host has no backend.
    """
    backend = host.require_persistence()
    tools = list(tools)
    results: list[SweepResult] = []
    if session_ids is None:
        candidates: list[str] = []
        async for session_id, held in _running_turns(host, page_size):
            if _live(host, session_id):
                continue
            if held:
                results.append(SweepResult(session_id, "held", error=_HELD))
            else:
                candidates.append(session_id)
    else:
        candidates = [i for i in session_ids if not _live(host, i)]
    for session_id in candidates:
        try:
            loaded = await backend.load(session_id)
            events = host.codec.decode_log(loaded.events, session_id=session_id)
            if open_turn(events) is None:
                results.append(SweepResult(session_id, "clean"))
                continue
            results.append(await _recover(host, session_id, tools))
        except SessionNotFoundError as exc:
            if session_ids is None:
                continue  # deleted since it was listed
            results.append(SweepResult(session_id, "failed", error=str(exc)))
        except TurnkeepError as exc:
            results.append(SweepResult(session_id, "failed", error=str(exc)))
    for failed in (r for r in results if r.action == "failed"):
        reason = f"the recovery sweep could not settle it: {failed.error}"
        await note_by(host, "recovery", failed.session_id, reason, _SWEEP_FAILED)
    return results


_SWEEP_FAILED: Final[dict[str, str | int]] = {"why": "sweep failed"}


async def run_recovery(
    host: Host,
    every: timedelta | str,
    *,
    tools: Iterable[Tool] = (),
    lock: asyncio.Lock | None = None,
    on_results: Callable[[list[SweepResult]], object] | None = None,
) -> NoReturn:
    """Run `recover_interrupted` now and then every `every`, until cancelled.

    Run it as a task and cancel it at shutdown. A sweep that fails as a
    whole (the store unreachable) is logged on the `turnkeep.recovery`
    logger and the next runs on time. With `lock`, a tick that finds it
    taken (a sweep asked for over HTTP is running) waits for it, then
    sweeps. `on_results` receives each finished sweep's results.

    Raises:
        ConfigurationError: `every` is not a duration longer than zero.
    """
    interval = parse_duration(every).total_seconds()
    tools = list(tools)
    while True:
        try:
            if lock is None:
                results = await recover_interrupted(host, tools=tools)
            else:
                async with lock:
                    results = await recover_interrupted(host, tools=tools)
        except TurnkeepError as exc:
            _log.warning("recovery sweep failed: %s", exc)
        else:
            _log_results(results)
            if on_results is not None:
                on_results(results)
        await asyncio.sleep(interval)


def _log_results(results: list[SweepResult]) -> None:
    recovered = [r.session_id for r in results if r.action == "recovered"]
    if recovered:
        _log.info("recovery: settled %d session(s): %s", len(recovered), recovered)
    for result in results:
        if result.action == "failed":
            _log.warning("recovery: %r: %s", result.session_id, result.error)


async def _recover(host: Host, session_id: str, tools: list[Tool]) -> SweepResult:
    try:
        # No steal: an owner that is alive keeps its session.
        # The sweep is not the session's agent: its context differs by
        # design, and recovery that asks no model records none. A changed
        # world is recorded, not refused: the session must still be settled.
        loop = await AgentLoop.resume(
            SWEEP_AGENT_ID,
            session_id,
            host=host,
            model=_NoModel(),
            tools=tools,
            context="override",
            drift="record",
        )
    except SessionLockedError as exc:
        return SweepResult(session_id, "held", error=str(exc))
    report = loop.recovery
    closed = await loop.close()
    if closed is not None and not closed.saved:
        return SweepResult(session_id, "failed", report=report, error=closed.reason)
    if report is None or not report.recovered:
        return SweepResult(session_id, "clean")  # finished by its owner meanwhile
    return SweepResult(session_id, "recovered", report=report)


async def _running_turns(host: Host, page_size: int) -> AsyncIterator[tuple[str, bool]]:
    """Each stored `active` session, and whether a live owner is known to hold it."""
    backend = host.require_persistence()
    cursor: str | None = None
    while True:
        # Only stored `active` sessions: in the backend's index, not a
        # walk through every session of the store.
        page = await list_where(backend, limit=page_size, cursor=cursor, where=_RUNNING)
        holds = await active_holds(backend, page.items) or {}
        for meta in page.items:
            if meta.summary.status == "active":  # changed since it was paged
                yield meta.id, holds.get(meta.id, False)
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def _live(host: Host, session_id: str) -> bool:
    return any(s.id == session_id for s in host.sessions.list())
