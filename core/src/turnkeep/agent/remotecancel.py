"""A running turn acts on cancel requests recorded by other processes.

`turnkeep cancel` and `turnkeep serve` record a request in the store
(`turnkeep.cancelrequest`); the process that runs the session's turn is
the one that can end it. `watch` arms one timer per running turn (none
when no turn runs, none for a backend without cancel requests). A turn
still running when it fires, `POLL_SECONDS` after admission, gets one
small task that asks the backend's cheap probe (`cancel_requested`: a side
file, a row; never the log) then and every `POLL_SECONDS` until the turn
ends. A turn that ends sooner asks the store nothing: most turns cost no
probe at all, where a probe at admission would cost one trip to the
backend's thread per turn.

Which requests count: one recorded after the turn was admitted, by its
`requested_at` against the admission time (both epoch milliseconds; a
request in the admission's own millisecond counts), and numbered above
any request this process already saw for the session, so a request
recorded while no turn ran, or one an earlier turn acted on, never cancels
the next turn. Requester and owner on different machines (a shared
PostgreSQL) compare their clocks: keep them in step (NTP), or a request
made within their skew of a turn's start may be taken for an older one.

A request that counts cancels the turn exactly as `AgentLoop.cancel` does
(`turnkeep.agent.turns.request_cancel`): a model call or a tool in flight
is interrupted at once (a safe tool is recorded as interrupted, an unsafe
one as interrupted with its outcome unknown), a flush is let finish and
the turn stops at its next step; the turn ends `cancelled`. A request is
therefore acted on within about `POLL_SECONDS` wherever the turn is. A
failing probe is logged and tried again at the next poll; it never fails
the turn.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Final

import attrs

from turnkeep.agent.turns import Running, request_cancel
from turnkeep.cancelrequest import (
    CancelRequest,
    CancelRequests,
    cancel_requests,
    has_cancel_requests,
)
from turnkeep.clock import now_ms
from turnkeep.errors import (
    PersistenceNotConfiguredError,
    SessionNotFoundError,
    TurnkeepError,
)
from turnkeep.host import Host
from turnkeep.session import Session

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
    watcher = _Watcher(cancel_requests(backend), running, interval, now_ms())
    watcher.timer = asyncio.get_running_loop().call_later(interval, watcher.start)
    task.add_done_callback(watcher.stop)


_seen: weakref.WeakKeyDictionary[Session, int] = weakref.WeakKeyDictionary()
"""Per live session, the highest request number this process has seen."""


@attrs.define(eq=False)
class _Watcher:
    """One turn's timer, then its polling task."""

    requests: CancelRequests
    running: Running
    interval: float
    admitted_ms: int
    timer: asyncio.TimerHandle | None = None
    task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.timer = None
        self.task = asyncio.get_running_loop().create_task(
            self._poll(), name=f"turnkeep cancel watch {self.running.session.id!r}"
        )

    def stop(self, _: object = None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.task is not None:
            self.task.cancel()

    async def _poll(self) -> None:
        session = self.running.session
        while True:
            seen = _seen.get(session, 0)
            found = await _probe(self.requests, session.id, seen)
            if found is not None:  # numbered above `seen`: the probe's contract
                _seen[session] = found.number
                if found.requested_at >= self.admitted_ms:
                    log.info(
                        "turnkeep: cancelling the turn of %r at request %d (%s)",
                        session.id,
                        found.number,
                        found.reason or "no reason given",
                    )
                    request_cancel(self.running)
                    return
            await asyncio.sleep(self.interval)


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
