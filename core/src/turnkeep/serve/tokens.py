"""What the service's token must be, and how to make one.

A token guards every write and, unless reads are open, every read, and it
is the one secret a browser's sign-in rests on. One a person can type
(`a`, a space, a word) is found by guessing, however slowly failed guesses
are let through, so the service refuses to start with one: a token has at
least 22 characters (`secrets.token_urlsafe(16)`, 128 random bits, is that
long) of letters, digits and `-._~+/=` (what a bearer token may hold),
with at least 8 different ones. `new_token()` makes one
(`turnkeep serve --new-token` prints it).
"""

from __future__ import annotations

import re
import secrets
from typing import Final

from turnkeep.errors import ConfigurationError

__all__ = ["MIN_TOKEN_LENGTH", "check_token", "new_token"]

MIN_TOKEN_LENGTH: Final = 22
"""Characters a token has at least: `secrets.token_urlsafe(16)`'s length."""

_MIN_DISTINCT: Final = 8
_ALLOWED: Final = re.compile(r"[A-Za-z0-9._~+/=-]*")


def new_token() -> str:
    """A strong token: 256 random bits, URL-safe (43 characters)."""
    return secrets.token_urlsafe(32)


def check_token(token: str | None) -> None:
    """Refuse a token too weak to resist guessing (`None`: no token, fine).

    Raises:
        ConfigurationError: `token` is shorter than 22 characters, holds a
            character other than letters, digits and `-._~+/=`, or fewer
            than 8 different ones. The message never repeats the token.
    """
    if token is None:
        return
    why = None
    if len(token) < MIN_TOKEN_LENGTH:
        why = f"it has {len(token)} characters, fewer than {MIN_TOKEN_LENGTH}"
    elif not _ALLOWED.fullmatch(token):
        why = "it holds characters other than letters, digits and -._~+/="
    elif len(set(token)) < _MIN_DISTINCT:
        why = f"it repeats fewer than {_MIN_DISTINCT} different characters"
    if why is not None:
        raise ConfigurationError(
            f"the service's token (TURNKEEP_SERVE__TOKEN or [serve] token) is too "
            f"weak to resist guessing: {why}; make a strong one with "
            "`turnkeep serve --new-token` and set it"
        )
