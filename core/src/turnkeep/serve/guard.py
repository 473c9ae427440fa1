"""Who may ask what, and how much: the bearer token and the budgets.

With a token configured, writes (`POST`) need `Authorization: Bearer
<token>`, and reads need it too unless the service runs with open reads.
The web page cannot set headers on its requests, so reads also accept the
token from the `turnkeep_token` cookie that `POST /login` sets (HttpOnly,
SameSite=Strict). A write accepts the cookie only together with the
anti-forgery header `X-Turnkeep-CSRF`: an HMAC of the cookie's value
under a secret this process drew at start, which the server embeds in the
pages it renders for a signed-in reader. Another site can make a browser
send the cookie but cannot read the page, so it cannot send the header;
a cookie write without it (or with a wrong one) is `403 csrf-mismatch`.
Tokens are compared in constant time (`hmac.compare_digest`). Without a
token, writes are refused and reads are open (the service then binds
loopback only, see `turnkeep.serve.run`).

Budgets are per client: the token when one was given, otherwise the
client's address. Each client has a token bucket of requests (a sustained
rate and a burst) and a number of open SSE streams; all streams together
are capped too. A spent budget is `429` with `Retry-After`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from typing import Final

import attrs
from starlette.requests import Request

from turnkeep.serve.problems import Problem

__all__ = ["COOKIE", "CSRF_HEADER", "Budgets", "Guard"]

COOKIE: Final = "turnkeep_token"
"""The cookie that carries the token for the web page's reads."""

CSRF_HEADER: Final = "X-Turnkeep-CSRF"
"""The header a cookie-carried write must add: the page's anti-forgery token."""

_PRUNE_AT: Final = 4096
"""Buckets kept before the full (idle) ones are forgotten."""


@attrs.define(eq=False)
class Budgets:
    """Request buckets and stream counts per client key."""

    rate: float
    burst: int
    streams_per_client: int
    max_streams: int
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, tuple[float, float]] = attrs.field(
        init=False, factory=dict[str, tuple[float, float]]
    )
    _streams: dict[str, int] = attrs.field(init=False, factory=dict[str, int])

    def take(self, key: str) -> float | None:
        """Spend one request of `key`'s budget; `None` if granted, else the wait."""
        now = self.clock()
        tokens, then = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - then) * self.rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate
        self._buckets[key] = (tokens - 1.0, now)
        if len(self._buckets) > _PRUNE_AT:
            self._prune(now)
        return None

    def _prune(self, now: float) -> None:
        # A bucket that has refilled is the same as no bucket.
        full = [
            k
            for k, (tokens, then) in self._buckets.items()
            if tokens + (now - then) * self.rate >= self.burst
        ]
        for key in full:
            del self._buckets[key]

    def open_stream(self, key: str) -> bool:
        """Count a new stream for `key`, unless a limit is reached."""
        if self.open_streams >= self.max_streams:
            return False
        if self._streams.get(key, 0) >= self.streams_per_client:
            return False
        self._streams[key] = self._streams.get(key, 0) + 1
        return True

    def close_stream(self, key: str) -> None:
        """Count a stream of `key` as closed."""
        left = self._streams.get(key, 0) - 1
        if left > 0:
            self._streams[key] = left
        else:
            self._streams.pop(key, None)

    @property
    def open_streams(self) -> int:
        """Streams open now, over all clients."""
        return sum(self._streams.values())


@attrs.define(eq=False)
class Guard:
    """The token check and the budgets, asked by every endpoint first."""

    token: str | None
    open_reads: bool
    budgets: Budgets
    _secret: bytes = attrs.field(
        init=False, factory=lambda: secrets.token_bytes(32), repr=False
    )

    def check(self, request: Request, *, write: bool) -> str:
        """Admit `request` or raise; returns the client key its budgets use.

        Raises:
            Problem: 401 (no or wrong token), 403 (writes without a
                configured token; a cookie write without the right
                anti-forgery header), 429 (request budget spent).
        """
        authed = self._authenticated(request, write=write)
        if write and self.token is None:
            raise Problem(
                403,
                "writes-disabled",
                "this service has no token configured, so it accepts no writes; "
                "set TURNKEEP_SERVE__TOKEN and restart it",
            )
        if not authed and (write or (self.token is not None and not self.open_reads)):
            raise Problem(
                401,
                "unauthorized",
                "a valid bearer token is required (Authorization: Bearer <token>)",
                headers={"WWW-Authenticate": 'Bearer realm="turnkeep"'},
            )
        key = self.key(request, authed)
        wait = self.budgets.take(key)
        if wait is not None:
            raise Problem(
                429,
                "rate-limited",
                "too many requests from this client; retry later",
                headers={"Retry-After": str(max(1, round(wait + 0.5)))},
            )
        return key

    def key(self, request: Request, authed: bool) -> str:
        """The client's budget key: its token, or its address."""
        if authed and self.token is not None:
            digest = hashlib.sha256(self.token.encode()).hexdigest()[:16]
            return f"token:{digest}"
        host = request.client.host if request.client is not None else "?"
        return f"addr:{host}"

    def accepts(self, presented: str) -> bool:
        """Whether `presented` is the token (constant time)."""
        if self.token is None:
            return False
        return hmac.compare_digest(presented.encode(), self.token.encode())

    def csrf_token(self, request: Request) -> str | None:
        """The anti-forgery token for a reader signed in by cookie, else `None`."""
        cookie = request.cookies.get(COOKIE)
        if cookie is None or not self.accepts(cookie):
            return None
        return self._csrf_of(cookie)

    def _csrf_of(self, cookie: str) -> str:
        return hmac.new(self._secret, cookie.encode(), hashlib.sha256).hexdigest()

    def _authenticated(self, request: Request, *, write: bool) -> bool:
        if self.token is None:
            return False  # nothing to check against: reads open, writes refused
        header = request.headers.get("authorization")
        if header is not None:
            scheme, _, value = header.partition(" ")
            if scheme.lower() != "bearer" or not self.accepts(value.strip()):
                raise Problem(
                    401,
                    "unauthorized",
                    "the bearer token is not valid",
                    headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
                )
            return True
        cookie = request.cookies.get(COOKIE)
        if cookie is None or not self.accepts(cookie):
            return False
        if not write:
            return True
        presented = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(presented.encode(), self._csrf_of(cookie).encode()):
            raise Problem(
                403,
                "csrf-mismatch",
                f"a write signed in by cookie needs the page's {CSRF_HEADER} "
                "header; reload the page and try again",
            )
        return True
