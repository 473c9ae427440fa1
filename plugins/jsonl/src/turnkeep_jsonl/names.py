"""File and directory names of the store, derived from untrusted ids (R13).

Owns the mapping from a session id to its file stem and from a working
directory to its group directory, and the suffixes of every file kind. The
id mapping is injective and safe on case-insensitive file systems: lowercase
unpadded base32 of the id's UTF-8 (only `[a-z2-7]`), or, when that would be
too long for one path component, the SHA-256 of the id in hex. The two forms
carry different prefixes, so they never meet. The original id is kept in the
log's header and compared on load, which also guards the hashed form.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Final

__all__ = [
    "AUDIT_LOG",
    "AUDIT_SUFFIX",
    "CANCEL_SUFFIX",
    "CATALOG",
    "CATALOG_LOCK",
    "GROUP_PREFIX",
    "LOCKS_DIR",
    "LOCK_SUFFIX",
    "LOG_SUFFIX",
    "QUARANTINE_DIR",
    "QUARANTINE_SUFFIX",
    "SIDECAR_SUFFIX",
    "group_name",
    "is_session_log",
    "quarantine_name",
    "session_name",
    "temp_name",
]

LOG_SUFFIX: Final = ".jsonl"
SIDECAR_SUFFIX: Final = ".meta"
CANCEL_SUFFIX: Final = ".cancel"
AUDIT_SUFFIX: Final = ".audit"
LOCK_SUFFIX: Final = ".lock"
QUARANTINE_SUFFIX: Final = ".broken"
TEMP_SUFFIX: Final = ".tmp"
GROUP_PREFIX: Final = "g-"
LOCKS_DIR: Final = "locks"
QUARANTINE_DIR: Final = "quarantine"
CATALOG: Final = "catalog.jsonl"
CATALOG_LOCK: Final = "catalog.lock"
AUDIT_LOG: Final = "audit.jsonl"

_MAX_ENCODED: Final = 180
"""Longest base32 stem; longer ids are hashed so every derived name (stem plus
suffixes, temporary and quarantine decorations) stays under NAME_MAX (255)."""

_STEM: Final = re.compile(r"(s-[a-z2-7]+|h-[0-9a-f]{64})")


def session_name(session_id: str) -> str:
    """The file stem of a session (the caller validated the id)."""
    raw = session_id.encode("utf-8")
    encoded = base64.b32encode(raw).decode("ascii").rstrip("=").lower()
    if len(encoded) <= _MAX_ENCODED:
        return "s-" + encoded
    return "h-" + hashlib.sha256(raw).hexdigest()


def is_session_log(filename: str) -> str | None:
    """The stem if `filename` is a session log's name, else `None`."""
    if not filename.endswith(LOG_SUFFIX):
        return None
    stem = filename[: -len(LOG_SUFFIX)]
    return stem if _STEM.fullmatch(stem) else None


def group_name(cwd: str | None) -> str:
    """The group directory of sessions started in `cwd`.

    A readable slug of the directory's last component plus a hash of the
    whole path; only a grouping, so it needs no injectivity (sessions are
    found by their own names), just safety: `[a-z0-9-]` only.
    """
    if cwd is None:
        return GROUP_PREFIX + "none"
    last = cwd.rstrip("/").rsplit("/", 1)[-1].lower()
    slug = re.sub(r"[^a-z0-9]+", "-", last).strip("-")[:24] or "root"
    digest = hashlib.sha256(cwd.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{GROUP_PREFIX}{slug}-{digest}"


def temp_name(stem: str, suffix: str, token: str) -> str:
    """A temporary name for a file that will be renamed to `stem + suffix`.

    Dot-prefixed so directory scans skip it; the token makes it unpredictable.
    """
    return f".{stem}.{token}{suffix}{TEMP_SUFFIX}"


def quarantine_name(stem: str, offset: int, token: str) -> str:
    """The name of a quarantine file keeping a log's cut tail from `offset`."""
    return f"{stem}.{offset}.{token}{QUARANTINE_SUFFIX}"
