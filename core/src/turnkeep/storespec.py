"""Store specs: `jsonl:PATH`, `sqlite:PATH`, `postgres:DSN`, or a backend name.

Owns the parsing of the short text that names a store (the command's
`--store`, and libraries that open a store by name, such as the Agents SDK
session) and the configuration overrides that select it: its backend's
plugin, plus the installed plugins that contribute event types (entry-point
group `turnkeep.event_types`), so a reader decodes every event it stores.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs

from turnkeep.backends import ENTRY_POINT_GROUP

__all__ = [
    "EVENT_TYPES_GROUP",
    "StoreSpec",
    "event_type_plugins",
    "parse_spec",
    "redact_dsn",
]

EVENT_TYPES_GROUP: Final = "turnkeep.event_types"
"""The entry-point group naming plugins (by their `turnkeep` entry-point name)
that contribute event types: loaded with every store a spec selects."""

_NAME: Final = re.compile(r"[a-z][a-z0-9_-]*")


def event_type_plugins() -> list[str]:
    """The installed `turnkeep` plugins that declare event types, sorted.

    A name listed in `turnkeep.event_types` but without a `turnkeep` entry
    point is left out (nothing could load it).
    """
    declared = {
        ep.name for ep in importlib.metadata.entry_points(group=EVENT_TYPES_GROUP)
    }
    plugins = {
        ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    }
    return sorted(declared & plugins)


@attrs.frozen
class StoreSpec:
    """A backend chosen by name, with its location.

    Attributes:
        backend: the backend's name (its entry point and configuration key).
        options: options for `[backends.<backend>]` that override the
            configured ones (`path`, or `dsn` and `schema`).
    """

    backend: str
    options: dict[str, str] = attrs.field(factory=dict[str, str])

    def overrides(self) -> dict[str, Any]:
        """Configuration overrides selecting this backend.

        Loads its plugin and the event-type plugins only (the memory backend
        is built in), so another backend's plugin cannot stand in the way.
        """
        readers = [n for n in event_type_plugins() if n != self.backend]
        wanted = readers if self.backend == "memory" else [self.backend, *readers]
        plugins: object = wanted or "none"
        values: dict[str, Any] = {"persistence": self.backend, "plugins": plugins}
        if self.options:
            values["backends"] = {self.backend: dict(self.options)}
        return values

    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """A hashable identity of the store (backend and options)."""
        return self.backend, tuple(sorted(self.options.items()))

    def describe(self) -> str:
        """The spec for messages (a DSN's password masked)."""
        if "dsn" in self.options:
            return f"{self.backend}:{redact_dsn(self.options['dsn'])}"
        if "path" in self.options:
            return f"{self.backend}:{self.options['path']}"
        return self.backend


def parse_spec(text: str) -> StoreSpec:
    """Parse `NAME[:TARGET]`.

    `TARGET` is the backend's `path` (made absolute), or for `postgres` its
    `dsn`; a `schema` parameter in the DSN (`?schema=x` in a URI, `schema=x`
    in a key/value string) is turnkeep's and becomes the `schema` option.

    Raises:
        ValueError: the spec is malformed.
    """
    name, sep, target = text.partition(":")
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"{text!r} is not a store spec; expected NAME:TARGET such as "
            "jsonl:./sessions, sqlite:./s.db or postgres:postgresql://host/db"
        )
    if not sep:
        return StoreSpec(name)
    if not target:
        raise ValueError(f"store spec {text!r} names no location after the colon")
    if name == "postgres":
        dsn, schema = _split_schema(target)
        found = {"dsn": dsn} | ({"schema": schema} if schema else {})
        return StoreSpec(name, found)
    return StoreSpec(name, {"path": str(Path(target).expanduser().absolute())})


def _split_schema(dsn: str) -> tuple[str, str | None]:
    if "://" in dsn:
        parts = urlsplit(dsn)
        query = parse_qsl(parts.query, keep_blank_values=True)
        schema = next((v for k, v in query if k == "schema"), None)
        rest = urlencode([(k, v) for k, v in query if k != "schema"])
        return urlunsplit(parts._replace(query=rest)), schema
    match = re.search(r"(?:^|\s)schema\s*=\s*(\S+)", dsn)
    if match is None:
        return dsn, None
    return (dsn[: match.start()] + dsn[match.end() :]).strip(), match.group(1)


def redact_dsn(dsn: str) -> str:
    """A DSN with its password masked, for printing."""
    masked = re.sub(r"(://[^/:@\s]*:)[^@/\s]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", masked)
