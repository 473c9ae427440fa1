"""turnkeep-jsonl: turnkeep's file backend, one append-only log per session.

Each session is a JSON-lines log (a header line, then one line per event,
each with a checksum, and a commit line closing every flush) beside a small
summary sidecar, in a private store directory (`docs/formats/jsonl.md`).
Flushes are fsynced before they are acknowledged, a torn tail left by a
crash is cut on the next write and kept aside, damage inside acknowledged
data makes the session unloadable with the byte offset, one process writes a
session at a time, and a takeover fences the old writer.

This module is the plugin: it contributes the backend under the name `jsonl`
(entry point `jsonl` in the group `turnkeep`), configured by `JsonlConfig`
(`[backends.jsonl]` or `TURNKEEP_JSONL__PATH=...`).
"""

from __future__ import annotations

from collections.abc import Callable

from turnkeep.hookspecs import hookimpl

from .backend import JsonlPersistence
from .config import JsonlConfig, default_path
from .fileops import FileOps, OsFileOps

__all__ = [
    "FileOps",
    "JsonlConfig",
    "JsonlPersistence",
    "OsFileOps",
    "default_path",
    "register_persistence",
]


@hookimpl
def register_persistence(register: Callable[..., None]) -> None:
    """Contribute the `jsonl` backend."""
    register("jsonl", JsonlPersistence.from_config, JsonlConfig)
