"""Who may ask what, and how much: the bearer token and the budgets.

With a token configured, writes (`POST`) need `Authorization: Bearer
<token>`, and reads need it too unless the service runs with open reads.
The web page cannot set headers on its requests, so reads also accept the
sign-in cookie that `POST /login` sets (HttpOnly, SameSite=Strict): a
signed, short-lived session derived from the token, never the token itself
(`turnkeep.serve.signin`). A write accepts the cookie only together with
the anti-forgery header `X-Turnkeep-CSRF`, which the server embeds in the
pages it renders for a signed-in reader. Another site can make a browser
send the cookie but cannot read the page, so it cannot send the header;
a cookie write without it (or with a wrong one) is `403 csrf-mismatch`.
Tokens are compared in constant time (`hmac.compare_digest`). Without a
token, writes are refused and reads are open (the service then binds
loopback only, see `turnkeep.serve.run`); a weak token is refused at start
(`turnkeep.serve.tokens`).

Budgets are per client: a signed-in browser's session, a bearer token
from one address, or else the client's address (`turnkeep.serve.clients`,
which believes forwarded headers from trusted proxies only), so readers
who share the token do not share one pool. A request without a valid
credential spends its address's budget before it is refused. A wrong
bearer token or sign-in counts as a failure of its address
(`turnkeep.serve.budgets`): after a few, the address waits, longer after
each further failure, before any credential it presents is even looked
at. A spent budget is `429` with `Retry-After`.
"""

from __future__ import annotations

import hmac
import math
from typing import Final

import attrs
from starlette.requests import Request

from turnkeep.serve.budgets import Budgets, Failures
from turnkeep.serve.clients import Clients
from turnkeep.serve.problems import Problem
from turnkeep.serve.signin import SignIn
from turnkeep.serve.tokens import check_token

__all__ = ["CSRF_HEADER", "Guard"]

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

    token: str | None = attrs.field(
        validator=lambda _i, _a, v: check_token(v), repr=False
    )
    open_reads: bool
    budgets: Budgets
    signin: SignIn | None = None
    failures: Failures = attrs.field(factory=Failures)
    clients: Clients = attrs.field(factory=Clients)

    def check(self, request: Request, *, write: bool) -> str:
        """Admit `request` or raise; returns the client key its budgets use.

        Raises:
            Problem: 401 (no or wrong token), 403 (writes without a
                configured token; a cookie write without the right
                anti-forgery header), 429 (request budget spent, or the
                address failed to authenticate too often).
        """
        address = self.clients.address(request)
        who = self._authenticated(request, write=write)
        key = f"{who}@{address}" if who is not None else f"addr:{address}"
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
        if who is None and (write or (self.token is not None and not self.open_reads)):
            raise Problem(
                401,
                "unauthorized",
                "a valid bearer token is required (Authorization: Bearer <token>)",
                headers={"WWW-Authenticate": 'Bearer realm="turnkeep"'},
            )
        return key

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

    def session(self, request: Request) -> str | None:
        """The sign-in session `request`'s cookie carries, if it is valid."""
        if self.signin is None:
            return None
        return self.signin.session_of(request.cookies.get(self.signin.name))

    def csrf_token(self, request: Request) -> str | None:
        """The anti-forgery token for a reader signed in by cookie, else `None`."""
        session = self.session(request)
        if session is None or self.signin is None:
            return None
        return self.signin.csrf_of(session)

    def _authenticated(self, request: Request, *, write: bool) -> str | None:
        """Who `request` is (`token:...`, `session:...`), `None`: anonymous."""
        if self.token is None:
            return None  # nothing to check against: reads open, writes refused
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
            return "token"
        session = self.session(request)
        if session is None:
            return None
        if write:
            presented = request.headers.get(CSRF_HEADER, "")
            expected = self.csrf_token(request) or ""
            if not hmac.compare_digest(presented.encode(), expected.encode()):
                raise Problem(
                    403,
                    "csrf-mismatch",
                    f"a write signed in by cookie needs the page's {CSRF_HEADER} "
                    "header; reload the page and try again",
                )
        return f"session:{session}"
