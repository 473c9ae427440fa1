"""Assembling the service: routes, error handlers, the shared tails.

`create_app(host)` builds the ASGI application over a started host (the
caller owns the host: it starts it before and closes it after). While the
application runs, a small plugin on the host turns this process's own
`session_committed` calls into an immediate look by the tails, so a
session written in the same process is followed without waiting for the
next poll; sessions written elsewhere are polled. The timers the
configuration asks for (`turnkeep.serve.ticks`: the recovery sweep,
retention) run while the application does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Route

from turnkeep.config import ServeConfig
from turnkeep.errors import TurnkeepError
from turnkeep.hookspecs import hookimpl
from turnkeep.host import Host
from turnkeep.serve.api import Api
from turnkeep.serve.budgets import Budgets
from turnkeep.serve.clients import Clients, parse_networks
from turnkeep.serve.follow import Tails
from turnkeep.serve.guard import Guard
from turnkeep.serve.page import Pages
from turnkeep.serve.problems import (
    CatchBugs,
    Problem,
    on_http,
    on_problem,
    on_turnkeep_error,
)
from turnkeep.serve.signin import SignIn, cookie_name
from turnkeep.serve.ticks import Timers, check_timers
from turnkeep.session import Session

__all__ = ["create_app"]


class _Wakeup:
    """Pokes the tails when this process commits (`session_committed`)."""

    def __init__(self, tails: Tails, loop: asyncio.AbstractEventLoop) -> None:
        self._tails = tails
        self._loop = loop

    @hookimpl
    def session_committed(
        self, session: Session, first_seq: int, last_seq: int
    ) -> None:
        """Wake the reader of `session`, if one follows it."""
        self._loop.call_soon_threadsafe(self._tails.poke, session.id)


def create_app(
    host: Host,
    config: ServeConfig | None = None,
    *,
    poll_interval: float = 0.1,
    heartbeat: float = 15.0,
    queue_size: int = 1024,
) -> Starlette:
    """The service over `host` (started, with a persistence backend).

    Args:
        host: a started host; the application reads its backend.
        config: tokens and bounds (default: `host.config.serve`).
        poll_interval: seconds between looks at a followed session.
        heartbeat: seconds between SSE heartbeats (comment lines).
        queue_size: committed events a stream client may fall behind by
            before it is dropped.

    Raises:
        PersistenceNotConfiguredError: the host has no backend.
        ConfigurationError: the token is too weak to resist guessing
            (`turnkeep.serve.tokens`), a trusted proxy is no address, or
            `prune_every` is set without a `[retention]` policy.
    """
    config = config if config is not None else host.config.serve
    backend = host.require_persistence()
    check_timers(host, config)
    tails = Tails(backend, interval=poll_interval, queue_size=queue_size)
    guard = Guard(
        token=config.token,
        open_reads=config.open_reads,
        budgets=Budgets(
            rate=float(config.requests_per_second),
            burst=config.burst,
            streams_per_client=config.streams_per_client,
            max_streams=config.max_streams,
        ),
        signin=None
        if config.token is None
        else SignIn(
            token=config.token,
            lifetime=int(config.login_lifetime.total_seconds()),
            name=cookie_name(config.name, config.port),
        ),
        clients=Clients(parse_networks(config.trusted_proxies)),
    )
    api = Api(host=host, config=config, guard=guard, tails=tails, heartbeat=heartbeat)
    pages = Pages(api)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncGenerator[None]:
        wakeup = _Wakeup(tails, asyncio.get_running_loop())
        host.register(wakeup, name="turnkeep-serve-wakeup")
        timers = Timers()
        timers.start(host, config, api.sweeping)
        try:
            yield
        finally:
            await timers.stop()
            await tails.aclose()
            await host.remove(wakeup)

    routes = [
        Route("/sessions", api.sessions, methods=["GET"]),
        Route("/sessions/{session_id}", api.session, methods=["GET"]),
        Route("/sessions/{session_id}/events", api.events, methods=["GET"]),
        Route("/sessions/{session_id}/stream", api.stream, methods=["GET"]),
        Route("/sessions/{session_id}/history", api.history, methods=["GET"]),
        Route("/sessions/{session_id}/audit", api.audit, methods=["GET"]),
        Route("/sessions/{session_id}/cancel", api.cancel, methods=["POST"]),
        Route("/recover", api.recover, methods=["POST"]),
        Route("/", pages.index, methods=["GET"]),
        Route("/view/{session_id}", pages.view, methods=["GET"]),
        Route("/static/{name}", pages.static_file, methods=["GET"]),
        Route("/login", pages.login_form, methods=["GET"]),
        Route("/login", pages.login, methods=["POST"]),
    ]
    app = Starlette(
        routes=routes,
        # Expected refusals are answered by handlers for their own types, never
        # by a handler for `Exception`: Starlette re-raises whatever that one
        # answers, so the server would log a crash and drop the connection.
        exception_handlers={
            HTTPException: on_http,
            Problem: on_problem,
            TurnkeepError: on_turnkeep_error,
        },
        middleware=[Middleware(CatchBugs)],
        lifespan=lifespan,
    )
    app.state.api = api
    return app
