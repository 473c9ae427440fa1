"""The browser's sign-in: a signed, short-lived session, never the token.

`POST /login` with the right token sets a cookie that holds a session of
its own: `<id>.<expires>.<mac>`, a random id, its expiry (epoch seconds)
and an HMAC-SHA256 of both under a key derived from the token. The cookie
therefore grants reads for its lifetime (`[serve] login_lifetime`, 12 hours
by default) and nothing after; it never reveals the token, and rotating the
token (a restart with another) invalidates every cookie. Browsers do not
scope cookies by port, so the name is unique to the service:
`turnkeep_<port>`, or `turnkeep_<name>` with `[serve] name`.

The anti-forgery token a cookie write must send (`X-Turnkeep-CSRF`) is an
HMAC of the session's id under another key derived from the token, so
every instance that shares the token (behind one load balancer) accepts
the others' cookies and forms, and one session's token is worth nothing
for another.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable
from typing import Final

import attrs

__all__ = ["SignIn", "cookie_name"]

_MAX_VALUE: Final = 128
_VALUE: Final = re.compile(r"([A-Za-z0-9_-]{22})\.(\d{1,12})\.([A-Za-z0-9_-]{43})")


def cookie_name(name: str | None, port: int) -> str:
    """The sign-in cookie's name: unique to the service's name or port."""
    return f"turnkeep_{name if name is not None else port}"


def _derive(token: str, purpose: bytes) -> bytes:
    return hmac.new(
        token.encode(), b"turnkeep-serve " + purpose, hashlib.sha256
    ).digest()


def _mac(key: bytes, message: str) -> str:
    digest = hmac.new(key, message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@attrs.define(eq=False)
class SignIn:
    """Issues and checks sign-in cookies for one token.

    Attributes:
        token: the service's token (the keys derive from it).
        lifetime: seconds a cookie is valid after sign-in.
        name: the cookie's name (`cookie_name`).
        clock: the wall clock (epoch seconds): expiries outlive processes.
    """

    token: str = attrs.field(repr=False)
    lifetime: int
    name: str
    clock: Callable[[], float] = time.time
    _cookie_key: bytes = attrs.field(init=False, repr=False)
    _csrf_key: bytes = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._cookie_key = _derive(self.token, b"sign-in cookie v1")
        self._csrf_key = _derive(self.token, b"anti-forgery v1")

    def issue(self) -> str:
        """A new session's cookie value."""
        session = secrets.token_urlsafe(16)
        expires = int(self.clock()) + self.lifetime
        body = f"{session}.{expires}"
        return f"{body}.{_mac(self._cookie_key, body)}"

    def session_of(self, value: str | None) -> str | None:
        """The session id `value` carries, if it is ours and unexpired."""
        if value is None or len(value) > _MAX_VALUE:
            return None
        found = _VALUE.fullmatch(value)
        if found is None:
            return None
        session, expires, mac = found.groups()
        expected = _mac(self._cookie_key, f"{session}.{expires}")
        if not hmac.compare_digest(mac.encode(), expected.encode()):
            return None
        if int(expires) <= self.clock():
            return None
        return session

    def csrf_of(self, session: str) -> str:
        """The anti-forgery token of `session`."""
        return hmac.new(self._csrf_key, session.encode(), hashlib.sha256).hexdigest()
