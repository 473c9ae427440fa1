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
loopback only, see `turnkeep.serve.run`); a weak token is refused at start
(`turnkeep.serve.tokens`).

Budgets are per client: the token when one was given, otherwise the
client's address (`turnkeep.serve.clients`, which believes forwarded
headers from trusted proxies only). A request without a valid credential
spends its address's budget before it is refused. A wrong bearer token or
sign-in counts as a failure of its address (`turnkeep.serve.budgets`):
after a few, the address waits, longer after each further failure, before
any credential it presents is even looked at. A spent budget is `429` with
`Retry-After`.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from typing import Final

import attrs
from starlette.requests import Request

from turnkeep.serve.budgets import Budgets, Failures
from turnkeep.serve.clients import Clients
from turnkeep.serve.problems import Problem
from turnkeep.serve.tokens import check_token

__all__ = ["COOKIE", "CSRF_HEADER", "Guard"]

COOKIE: Final = "turnkeep_token"
"""The cookie that carries the token for the web page's reads."""

CSRF_HEADER: Final = "X-Turnkeep-CSRF"
"""The header a cookie-carried write must add: the page's anti-forgery token."""


def _retry(wait: float) -> dict[str, str]:
    return {"Retry-After": str(max(1, math.ceil(wait)))}


@attrs.define(eq=False)
class Guard:
    """The token check and the budgets, asked by every endpoint first.

    Raises:
        ConfigurationError: `token` is too weak (`check_token`).
    """

    token: str | None = attrs.field(validator=lambda _i, _a, v: check_token(v))
    open_reads: bool
    budgets: Budgets
    failures: Failures = attrs.field(factory=Failures)
    clients: Clients = attrs.field(factory=Clients)
    _secret: bytes = attrs.field(
        init=False, factory=lambda: secrets.token_bytes(32), repr=False
    )

    def check(self, request: Request, *, write: bool) -> str:
        """Admit `request` or raise; returns the client key its budgets use.

        Raises:
            Problem: 401 (no or wrong token), 403 (writes without a
                configured token; a cookie write without the right
                anti-forgery header), 429 (request budget spent, or the
                address failed to authenticate too often).
        """
        address = self.clients.address(request)
        authed = self._authenticated(request, write=write)
        key = self._key(address, authed)
        wait = self.budgets.take(key)
        if wait is not None:
            raise Problem(
                429,
                "rate-limited",
                "too many requests from this client; retry later",
                headers=_retry(wait),
            )
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
        return key

    def _key(self, address: str, authed: bool) -> str:
        if authed and self.token is not None:
            digest = hashlib.sha256(self.token.encode()).hexdigest()[:16]
            return f"token:{digest}"
        return f"addr:{address}"

    def address_key(self, request: Request) -> str:
        """The budget key of `request`'s address (a request without credential)."""
        return f"addr:{self.clients.address(request)}"

    def attempt(self, request: Request) -> str:
        """Let `request` present a credential, or refuse: its address.

        Raises:
            Problem: 429 while its address waits after failed attempts.
        """
        address = self.clients.address(request)
        wait = self.failures.wait(address)
        if wait is not None:
            raise Problem(
                429,
                "rate-limited",
                "too many failed sign-ins from this address; retry later",
                headers=_retry(wait),
            )
        return address

    def accepts(self, presented: str) -> bool:
        """Whether `presented` is the token (constant time)."""
        if self.token is None:
            return False
        return hmac.compare_digest(presented.encode(), self.token.encode())

    def sign_in(self, request: Request, presented: str) -> bool:
        """Check a credential presented by `request`, counting a failure.

        Raises:
            Problem: 429 while its address waits (see `attempt`).
        """
        address = self.attempt(request)
        if self.accepts(presented):
            self.failures.succeeded(address)
            return True
        self.failures.failed(address)
        return False

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
            # Another scheme is a failed attempt too ("" is never the token).
            presented = value.strip() if scheme.lower() == "bearer" else ""
            if not self.sign_in(request, presented):
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
