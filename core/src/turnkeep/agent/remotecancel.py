"""A running turn acts on cancel requests recorded by other processes.

`turnkeep cancel` and `turnkeep serve` record a request in the store
(`turnkeep.cancelrequest`); the process that runs the session's turn is
the one that can end it. `watch` starts one small task per running turn
(none when no turn runs, none for a backend without cancel requests): it
takes the number of the session's latest request when the turn is
admitted, so an older request never cancels it, then asks the backend's
cheap probe (`cancel_requested`: a side file, a row; never the log) every
`POLL_SECONDS` until the turn ends. A newer request cancels the turn
exactly as `AgentLoop.cancel` does (`turnkeep.agent.turns.request_cancel`):
a model call or a tool in flight is interrupted at once (a safe tool is
recorded as interrupted, an unsafe one as interrupted with its outcome
unknown), a flush is let finish and the turn stops at its next step; the
turn ends `cancelled`. A request is therefore acted on within about
`POLL_SECONDS` wherever the turn is. A failing probe is logged and tried
again at the next poll; it never fails the turn.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from turnkeep.agent.turns import Running, request_cancel
from turnkeep.cancelrequest import (
    CancelRequest,
    CancelRequests,
    cancel_requests,
    has_cancel_requests,
)
from turnkeep.errors import (
    PersistenceNotConfiguredError,
    SessionNotFoundError,
    TurnkeepError,
)
from turnkeep.host import Host

__all__ = ["POLL_SECONDS", "watch"]

POLL_SECONDS: Final = 0.2
"""How often a running turn asks whether another process asked to cancel it."""

log = logging.getLogger("turnkeep.agent")


def watch(host: Host, running: Running, *, interval: float = POLL_SECONDS) -> None:
    """Watch for cancel requests while `running`'s task runs (see the module)."""
    task = running.task
    if task is None or task.done():
        return
    try:
        backend = host.require_persistence()
    except PersistenceNotConfiguredError:
        return  # nothing stored: no other process can reach this session
    if not has_cancel_requests(backend):
        return
    requests = cancel_requests(backend)
    watcher = asyncio.get_running_loop().create_task(
        _watch(requests, running, interval),
        name=f"turnkeep cancel watch {running.session.id!r}",
    )
    task.add_done_callback(lambda _: watcher.cancel())


async def _watch(requests: CancelRequests, running: Running, interval: float) -> None:
    session_id = running.session.id
    latest = await _probe(requests, session_id, 0)
    after = 0 if latest is None else latest.number
    while True:
        await asyncio.sleep(interval)
        found = await _probe(requests, session_id, after)
        if found is not None:
            log.info(
                "turnkeep: cancelling the turn of %r at request %d (%s)",
                session_id,
                found.number,
                found.reason or "no reason given",
            )
            request_cancel(running)
            return


async def _probe(
    requests: CancelRequests, session_id: str, after: int
) -> CancelRequest | None:
    try:
        return await requests.cancel_requested(session_id, after)
    except SessionNotFoundError:
        return None  # not stored yet: no request can exist for it
    except TurnkeepError as exc:
        log.warning(
            "turnkeep: could not look for cancel requests of %r: %s", session_id, exc
        )
        return None
