"""Configuration of the `jsonl` backend: `[backends.jsonl]` / `TURNKEEP_JSONL__*`.

Owns `JsonlConfig`, the attrs class the host structures the backend's
options into, and the default store location (the platform's user data
directory, via `platformdirs`).
"""

from __future__ import annotations

from pathlib import Path

import attrs
import platformdirs

from turnkeep.backendkit import positive
from turnkeep.codec import DEFAULT_MAX_EVENT_BYTES

from .follow import FOLLOW_MODES

__all__ = ["JsonlConfig", "default_path"]


def default_path() -> Path:
    """The default store directory: `<user data dir>/turnkeep/sessions`."""
    return Path(platformdirs.user_data_dir("turnkeep", appauthor=False)) / "sessions"


@attrs.frozen
class JsonlConfig:
    """Options of the `jsonl` backend.

    Attributes:
        path: the store directory (created 0700 if missing). Default: the
            user data directory, e.g. `~/.local/share/turnkeep/sessions`.
        max_event_bytes: the largest stored event accepted; must be at least
            the host's `max_event_bytes` (it also bounds what `load` reads
            into memory for one line).
        threads: worker threads running the blocking file I/O.
        follow: how `wait_for_commit` learns of a commit: `notify` (the
            default: inotify on Linux, else polling) or `poll` (the log's
            `stat` every few milliseconds; e.g. for a file system whose
            changes inotify does not report).
    """

    path: Path | None = None
    max_event_bytes: int = attrs.field(
        default=DEFAULT_MAX_EVENT_BYTES, validator=positive
    )
    threads: int = attrs.field(default=8, validator=positive)
    follow: str = attrs.field(
        default="notify", validator=attrs.validators.in_(FOLLOW_MODES)
    )
