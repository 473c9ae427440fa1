"""Session ids in URLs: the plain form, and the encoded one any id can take.

A session id is untrusted text: it may hold `/`, be `.` or `..`, or hold
characters a URL must escape. Starlette routes on the decoded path, so an
id with `/` (even sent as `%2F`) matches no route, and browsers resolve `.`
and `..` segments before they send a request. So an id that is not plain
(letters, digits, `_`, `-`, and `.` after the first character) is named in
a URL by `~` and the unpadded base64url of its UTF-8 bytes: `a/b` is
`~YS9i`. A path segment that starts with `~` is always the encoded form
(an id that itself starts with `~` is not plain); any other segment is the
id itself. The pages link every session by `url_id`.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Final

__all__ = ["ENCODED", "decode_segment", "url_id"]

ENCODED: Final = "~"
"""The first character of an encoded id's path segment."""

_PLAIN: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def url_id(session_id: str) -> str:
    """The path segment that names `session_id` in this service's URLs."""
    if _PLAIN.fullmatch(session_id):
        return session_id
    encoded = base64.urlsafe_b64encode(session_id.encode("utf-8")).rstrip(b"=")
    return ENCODED + encoded.decode("ascii")


def decode_segment(segment: str) -> str | None:
    """The id a path segment names; `None` for a malformed encoded form."""
    if not segment.startswith(ENCODED):
        return segment
    body = segment[len(ENCODED) :]
    try:
        raw = base64.b64decode(
            body + "=" * (-len(body) % 4), altchars=b"-_", validate=True
        )
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
