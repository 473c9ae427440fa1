"""Session ids: validation of untrusted ids and generation of new ones.

A session id is any text a caller chooses, so it is untrusted: it may hold
`../`, slashes, reserved names or odd Unicode. turnkeep never changes an id;
it refuses only what no backend could store safely (empty, NUL, not valid
UTF-8, longer than `MAX_SESSION_ID_BYTES` encoded) and leaves the mapping to
file names or keys to backends, which must make it injective.
"""

from __future__ import annotations

import secrets
from typing import Final

from turnkeep.clock import now_ms
from turnkeep.errors import InvalidSessionIdError

__all__ = ["MAX_SESSION_ID_BYTES", "new_session_id", "validate_session_id"]

MAX_SESSION_ID_BYTES: Final = 256
"""The longest session id accepted, in UTF-8 bytes."""

_CROCKFORD: Final = "0123456789abcdefghjkmnpqrstvwxyz"


def validate_session_id(session_id: object) -> str:
    """Return `session_id` unchanged if it is a storable id.

    Raises:
        InvalidSessionIdError: not a `str`, empty, contains NUL, is not valid
            UTF-8 (lone surrogates), or is over `MAX_SESSION_ID_BYTES`.
    """
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(
            f"a session id must be text, not {type(session_id).__name__}"
        )
    if not session_id:
        raise InvalidSessionIdError("a session id must not be empty")
    if "\x00" in session_id:
        raise InvalidSessionIdError(f"session id {session_id!r} contains NUL")
    try:
        size = len(session_id.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidSessionIdError(
            f"session id {session_id!r} is not valid Unicode text"
        ) from exc
    if size > MAX_SESSION_ID_BYTES:
        raise InvalidSessionIdError(
            f"session id is {size} bytes; the limit is {MAX_SESSION_ID_BYTES}"
        )
    return session_id


def new_session_id() -> str:
    """Return a fresh id that sorts by creation time (26 lowercase chars).

    48 bits of milliseconds then 80 random bits, in Crockford base32.
    """
    value = (now_ms() & ((1 << 48) - 1)) << 80 | secrets.randbits(80)
    chars: list[str] = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))
